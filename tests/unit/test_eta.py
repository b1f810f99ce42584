"""The ETA engine on synthetic traces: constant, drifting, warm-up, repeated failures,
stall, missing data; scored against the true end and against naive extrapolation."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from trainplan.eta import (
    EtaState,
    Observation,
    PlanFacts,
    StallPolicy,
    naive_remaining_seconds,
    revise,
)
from trainplan.eta.failures import Evidence, interruption_laws

T0 = datetime(2026, 11, 22, tzinfo=UTC)
HOURS = 3600.0
FACTS = PlanFacts(
    total_steps=1000,
    planned_step_seconds=1.0,
    gpus=8,
    checkpoint_interval_steps=50,
    restart_seconds=30.0,
    interruptions_per_gpu_hour=0.0,
    planned_mfu=0.5,
    planned_duration_seconds=1000.0,
)


@dataclass(frozen=True)
class Trace:
    """Observations of a simulated run and when it really ended."""

    observations: list[Observation]
    end_seconds: float


def simulate(
    step_seconds: Callable[[int], float],
    *,
    total_steps: int = 1000,
    scrape_seconds: float = 10.0,
    failures_at_steps: tuple[int, ...] = (),
    restart_seconds: float = 30.0,
    checkpoint_interval: int = 50,
    missing: Callable[[float], bool] = lambda _: False,
) -> Trace:
    """A run whose step k takes step_seconds(k); at each failure step it loses the work
    since the last checkpoint, restarts after restart_seconds and resumes."""
    events: list[tuple[float, int, int]] = []  # (time, step, failures)
    time, step, failures = 0.0, 0, 0
    pending = list(failures_at_steps)
    while step < total_steps:
        if pending and step == pending[0]:
            pending.pop(0)
            failures += 1
            time += restart_seconds
            step = step // checkpoint_interval * checkpoint_interval
            events.append((time, step, failures))
            continue
        time += step_seconds(step)
        step += 1
        events.append((time, step, failures))
    end = time
    observations = []
    scrape, index, last = scrape_seconds, 0, (0.0, 0, 0)
    while scrape <= end + scrape_seconds:
        while index < len(events) and events[index][0] <= scrape:
            last = events[index]
            index += 1
        at = T0 + timedelta(seconds=scrape)
        observations.append(
            Observation(
                time=at,
                step=None if missing(scrape) else last[1],
                failures=last[2],
                last_step_time=T0 + timedelta(seconds=last[0]),
                started_at=T0,
            )
        )
        if last[1] >= total_steps:
            break
        scrape += scrape_seconds
    return Trace(observations, end)


def run_engine(facts: PlanFacts, trace: Trace) -> list[tuple[float, float, float, float]]:
    """(elapsed, progress, error of the engine, error of naive) per observation."""
    state = EtaState()
    rows = []
    for observation in trace.observations:
        estimate, state = revise(facts, state, observation)
        elapsed = (observation.time - T0).total_seconds()
        actual = trace.end_seconds - elapsed
        if actual <= 0 or estimate.progress_ratio <= 0:
            continue
        naive = naive_remaining_seconds(elapsed, estimate.progress_ratio)
        assert naive is not None
        rows.append(
            (
                elapsed,
                estimate.progress_ratio,
                abs(elapsed + estimate.remaining_seconds - trace.end_seconds) / trace.end_seconds,
                abs(elapsed + naive - trace.end_seconds) / trace.end_seconds,
            )
        )
    return rows


def error_at(rows: list[tuple[float, float, float, float]], progress: float) -> tuple[float, float]:
    """The engine's and naive's error of total duration at the first row past `progress`."""
    row = next(r for r in rows if r[1] >= progress)
    return row[2], row[3]


def mean_errors(
    rows: list[tuple[float, float, float, float]], low: float = 0.1, high: float = 0.9
) -> tuple[float, float]:
    """Mean error of the engine and of naive over every revision between two progresses."""
    window = [r for r in rows if low <= r[1] <= high]
    return (
        sum(r[2] for r in window) / len(window),
        sum(r[3] for r in window) / len(window),
    )


def test_constant_speed_with_a_wrong_plan_converges() -> None:
    facts = replace(FACTS, planned_step_seconds=1.3)
    rows = run_engine(facts, simulate(lambda _: 1.0))
    for progress, bound in ((0.25, 0.03), (0.5, 0.02), (0.75, 0.01)):
        engine, _ = error_at(rows, progress)
        assert engine < bound, (progress, engine)


def test_warm_up_is_not_taken_for_the_speed() -> None:
    trace = simulate(lambda k: 30.0 if k < 3 else 1.0)
    rows = run_engine(FACTS, trace)
    engine, naive = error_at(rows, 0.1)
    assert engine < 0.02
    assert engine < naive


def test_drifting_speed_is_tracked_better_than_naive() -> None:
    # The run slows by 60% from start to end: no estimate sees that early, but the
    # engine's recent-window speed follows it where the run-average does not.
    trace = simulate(lambda k: 1.0 + 0.6 * k / 1000)
    rows = run_engine(FACTS, trace)
    engine, naive = mean_errors(rows)
    assert engine < naive
    for progress in (0.5, 0.75, 0.9):
        at_engine, at_naive = error_at(rows, progress)
        assert at_engine < at_naive, (progress, at_engine, at_naive)
    # The window is twice the time left (a straggler hour must not move a week's estimate
    # by much), so a steady drift is followed with some lag.
    assert error_at(rows, 0.75)[0] < 0.05


def test_repeated_failures_are_priced() -> None:
    # A prior rate in line with the trace: four failures in about 1,300 s on 8 GPUs.
    facts = replace(FACTS, interruptions_per_gpu_hour=4 / (1300 * 8) * 3600)
    trace = simulate(lambda _: 1.0, failures_at_steps=(120, 330, 540, 760))
    rows = run_engine(facts, trace)
    # The prior weighs two interruptions, so each one seen moves the rate for a while:
    # early on the estimate follows the run more than the plan.
    for progress, bound in ((0.25, 0.12), (0.5, 0.07), (0.75, 0.03)):
        engine, _ = error_at(rows, progress)
        assert engine < bound, (progress, engine)
    engine, naive = mean_errors(rows)
    assert engine < naive


def test_failure_cost_is_measured_from_the_run() -> None:
    trace = simulate(lambda _: 1.0, failures_at_steps=(120,), restart_seconds=60.0)
    state = EtaState()
    estimate = None
    for observation in trace.observations:
        estimate, state = revise(FACTS, state, observation)
    assert estimate is not None
    assert len(state.restart_costs_seconds) == 1
    # 60 s restart plus the 20 steps redone since the checkpoint at 100, at 1 s each.
    assert state.restart_costs_seconds[0] == pytest.approx(80.0, abs=10.0)
    assert estimate.lost_seconds == state.restart_costs_seconds[0]
    assert state.failures == 1


def test_percentiles_bracket_the_median_and_narrow_with_evidence() -> None:
    trace = simulate(lambda k: 1.0 + 0.1 * math.sin(k))
    state = EtaState()
    spreads = []
    for observation in trace.observations[:60]:
        estimate, state = revise(FACTS, state, observation)
        assert estimate.earliest_seconds <= estimate.remaining_seconds <= estimate.latest_seconds
        spreads.append(
            (estimate.latest_seconds - estimate.earliest_seconds)
            / max(estimate.remaining_seconds, 1e-9)
        )
    assert spreads[-1] < spreads[0]


def test_the_plan_decides_before_any_measurement() -> None:
    estimate, _ = revise(FACTS, EtaState(), Observation(time=T0, step=0, started_at=T0))
    assert estimate.measured_step_seconds is None
    assert estimate.measured_weight == 0.0
    assert estimate.remaining_seconds == pytest.approx(1000.0, rel=0.01)
    assert estimate.notes


def test_stall_is_flagged_and_cleared() -> None:
    policy = StallPolicy(factor=5.0, min_seconds=20.0)
    state = EtaState()
    flags = []
    for second, step in [(10, 10), (20, 20), (30, 30), (40, 30), (60, 30), (90, 30), (100, 40)]:
        estimate, state = revise(
            FACTS,
            state,
            Observation(time=T0 + timedelta(seconds=second), step=step, started_at=T0),
            policy,
        )
        flags.append(estimate.stalled)
    # 20 s without a step is a stall here (5 step times of 1 s are less than the minimum).
    assert flags == [False, False, False, False, True, True, False]


def test_missing_metrics_keep_the_last_step_and_say_so() -> None:
    trace = simulate(lambda _: 1.0, missing=lambda t: 300 <= t < 400)
    state = EtaState()
    seen_missing = False
    for observation in trace.observations:
        estimate, state = revise(FACTS, state, observation)
        if observation.step is None:
            seen_missing = True
            assert not estimate.metrics_available
            assert estimate.step > 0
            assert estimate.notes
    assert seen_missing
    rows = run_engine(FACTS, trace)
    assert error_at(rows, 0.75)[0] < 0.02


def test_deadline_at_risk_and_gpu_hours() -> None:
    facts = replace(FACTS, deadline_seconds=900.0)
    trace = simulate(lambda _: 1.0)
    state = EtaState()
    estimate = None
    for observation in trace.observations[:30]:
        estimate, state = revise(facts, state, observation)
    assert estimate is not None
    assert estimate.deadline_at_risk
    elapsed = (estimate.time - T0).total_seconds()
    assert estimate.gpu_hours_used == pytest.approx(8 * elapsed / 3600)
    assert estimate.gpu_hours_projected == pytest.approx(
        estimate.gpu_hours_used + 8 * estimate.remaining_seconds / 3600
    )
    relaxed, _ = revise(replace(facts, deadline_seconds=2000.0), state, trace.observations[30])
    assert not relaxed.deadline_at_risk


def test_measured_mfu_scales_with_the_step_time() -> None:
    trace = simulate(lambda _: 2.0)
    state = EtaState()
    estimate = None
    for observation in trace.observations[:40]:
        estimate, state = revise(FACTS, state, observation)
    assert estimate is not None
    assert estimate.measured_mfu == pytest.approx(0.25, rel=0.02)


def test_finished_run_has_nothing_left() -> None:
    trace = simulate(lambda _: 1.0, total_steps=100)
    facts = replace(FACTS, total_steps=100)
    state = EtaState()
    estimate = None
    for observation in trace.observations:
        estimate, state = revise(facts, state, observation)
    assert estimate is not None
    assert estimate.progress_ratio == 1.0
    assert (estimate.remaining_seconds, estimate.earliest_seconds) == (0.0, 0.0)
    assert not estimate.stalled


def test_a_resume_nobody_reported_counts_as_a_failure() -> None:
    state = EtaState()
    for second, step in [(10, 10), (20, 20), (30, 30), (40, 20), (50, 30), (60, 40)]:
        _, state = revise(
            FACTS, state, Observation(time=T0 + timedelta(seconds=second), step=step, started_at=T0)
        )
    assert (state.failures, state.inferred_failures) == (0, 1)
    assert len(state.restart_costs_seconds) == 1


def test_a_grossly_wrong_plan_drops_out() -> None:
    # Planned for an A100, measured on a CPU: 17 times slower.
    facts = replace(FACTS, planned_step_seconds=1.0 / 17)
    trace = simulate(lambda _: 1.0)
    state = EtaState()
    estimate = None
    for observation in trace.observations[:20]:
        estimate, state = revise(facts, state, observation)
    assert estimate is not None
    assert estimate.step_seconds == pytest.approx(1.0, rel=0.02)
    assert estimate.measured_weight > 0.99


def test_a_cost_between_a_restart_and_an_outage_is_partly_each() -> None:
    laws = interruption_laws(
        prior_per_second=10 / 86400.0,
        prior_cost_seconds=1800.0,
        max_prior_seconds=30 * 86400.0,
        evidence=Evidence(),
    )
    costs = [0.5 * HOURS, 2 * HOURS, 8 * HOURS, 20 * HOURS, 72 * HOURS]
    shares = [laws.major_share(cost) for cost in costs]
    # None below an hour, almost all of a three-day outage, in between more the longer
    # it was.
    assert shares[0] == 0.0
    assert shares[-1] > 0.99
    assert shares == sorted(shares)
    assert 0.0 < shares[2] < 1.0
