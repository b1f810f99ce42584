"""The ETA engine against the worst observations the monitor lets through: every count
in [0, 2**53), last-step times anywhere in 2000-2100, any failure count. No sequence may
make `revise` raise, and its estimate always makes a status the CRD accepts."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.crd_schema import committed_crd, validator_for
from trainplan.controller.progress import progress_update
from trainplan.eta import EtaState, Observation, PlanFacts, revise
from trainplan.monitor import FailureLedger
from trainplan.monitor.metrics import COUNT_MAX, TIMESTAMP_RANGE_SECONDS

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
FACTS = PlanFacts(
    total_steps=1000,
    planned_step_seconds=1.0,
    gpus=8,
    checkpoint_interval_steps=100,
    restart_seconds=30.0,
    interruptions_per_gpu_hour=1e-4,
    planned_mfu=0.4,
    planned_duration_seconds=1000.0,
    deadline_seconds=2000.0,
)
VALIDATOR = validator_for(committed_crd("trainingplans"), "status")


def test_a_failure_seen_before_any_exposure_does_not_raise() -> None:
    # Two looks at the same instant, the second with a failure: no time up, one failure
    # (the negative binomial's log(1 - p) with p = 1 was a math domain error).
    state = EtaState()
    estimate, state = revise(FACTS, state, Observation(time=NOW, step=None, failures=0))
    estimate, state = revise(FACTS, state, Observation(time=NOW, step=None, failures=1))
    assert estimate.latest_seconds > 0


_COUNTS = st.one_of(
    st.none(), st.sampled_from([0, 1, COUNT_MAX - 1]), st.integers(0, COUNT_MAX - 1)
)
_TIMES = st.one_of(
    st.none(),
    st.sampled_from(TIMESTAMP_RANGE_SECONDS),
    st.floats(*TIMESTAMP_RANGE_SECONDS),
)
_LOOKS = st.tuples(st.floats(0, 1e6), _COUNTS, _COUNTS, _TIMES, st.integers(0, 10**9), _COUNTS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokens_per_step=st.sampled_from([None, 1.0, 4e6]),
    looks=st.lists(_LOOKS, min_size=1, max_size=8),
    started=_TIMES,
)
def test_no_observation_within_the_monitor_bounds_breaks_the_estimate(
    tokens_per_step: float | None,
    looks: list[tuple[float, int | None, int | None, float | None, int, int | None]],
    started: float | None,
) -> None:
    facts = replace(FACTS, tokens_per_step=tokens_per_step)
    state, time = EtaState(), NOW
    for seconds, step, tokens, last_step, failures, checkpoint in looks:
        time += timedelta(seconds=seconds)
        observation = Observation(
            time=time,
            step=step,
            tokens=tokens,
            last_step_time=None if last_step is None else datetime.fromtimestamp(last_step, UTC),
            failures=failures,
            checkpoint_step=checkpoint,
            started_at=None if started is None else datetime.fromtimestamp(started, UTC),
        )
        estimate, state = revise(facts, state, observation)
    update = progress_update(
        estimate,
        FailureLedger(),
        {},
        tokens=observation.tokens,
        last_step_time=observation.last_step_time,
        metrics_error=None,
        generation=1,
        now=time,
    )
    json.dumps(update.status, allow_nan=False)
    assert list(VALIDATOR.iter_errors(update.status)) == []
