"""One revision never fails on what a pod or the status holds: a time it cannot read is
no time, and figures the ETA engine cannot fold cost the round its metrics only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trainplan.controller import revision
from trainplan.controller.revision import revise_guarded, status_time
from trainplan.eta import Estimate, EtaState, Observation, PlanFacts, StallPolicy, revise

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
FACTS = PlanFacts(
    total_steps=100,
    planned_step_seconds=1.0,
    gpus=8,
    checkpoint_interval_steps=10,
    restart_seconds=30,
    interruptions_per_gpu_hour=0.0,
    planned_mfu=0.5,
    planned_duration_seconds=100,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-22T00:00:00Z", datetime(2026, 11, 22, tzinfo=UTC)),
        ("2026-11-22T00:00:00", datetime(2026, 11, 22, tzinfo=UTC)),  # no zone: UTC
        ("not a time", None),
        ("", None),
        (None, None),
        (1_700_000_000, None),
        ({"nested": 1}, None),
    ],
)
def test_a_status_time_is_read_or_ignored(value: object, expected: datetime | None) -> None:
    assert status_time(value) == expected


def test_figures_the_engine_cannot_fold_cost_the_round_its_metrics_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def picky(
        facts: PlanFacts, state: EtaState, observation: Observation, stall: StallPolicy
    ) -> tuple[Estimate, EtaState]:
        if observation.step is not None:
            raise OverflowError("math range error: 1e308")
        return revise(facts, state, observation, stall)

    monkeypatch.setattr(revision, "revise", picky)
    hostile = Observation(time=NOW, step=7, tokens=9, last_step_time=NOW, started_at=NOW)
    estimate, state, reason = revise_guarded(FACTS, EtaState(), hostile, StallPolicy())
    assert reason == "the metrics could not be used in the estimate (OverflowError)"
    assert not estimate.metrics_available
    assert state.last_time == NOW.timestamp()


def test_a_state_the_engine_cannot_continue_starts_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    later = NOW + timedelta(seconds=30)
    _, poisoned = revise(FACTS, EtaState(), Observation(time=NOW, step=3, started_at=NOW))

    def fresh_only(
        facts: PlanFacts, state: EtaState, observation: Observation, stall: StallPolicy
    ) -> tuple[Estimate, EtaState]:
        if state != EtaState():
            raise ValueError("math domain error")
        return revise(facts, state, observation, stall)

    monkeypatch.setattr(revision, "revise", fresh_only)
    estimate, state, reason = revise_guarded(
        FACTS, poisoned, Observation(time=later, step=4), StallPolicy()
    )
    assert reason == "the metrics could not be used in the estimate (ValueError)"
    assert state.observed_since == later.timestamp()
    assert estimate.remaining_seconds > 0


def test_an_observation_the_engine_folds_is_left_as_is() -> None:
    observation = Observation(time=NOW, step=3, started_at=NOW)
    estimate, state, reason = revise_guarded(FACTS, EtaState(), observation, StallPolicy())
    assert reason is None
    assert (estimate, state) == revise(FACTS, EtaState(), observation, StallPolicy())
