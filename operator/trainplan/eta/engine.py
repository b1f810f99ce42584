"""The ETA engine: observations in, estimate out; pure, the clock comes with each
observation.

Step time. Each pair of consecutive observations of the same run segment gives an
interval (seconds, steps); intervals within the first `WARMUP_STEPS` steps of each
segment (compilation, data and checkpoint loading) and any interval that spans a restart
are left out.
The measured step time is the ratio estimator sum(seconds) / sum(steps) over the most
recent intervals, so periodic checkpoint writes are averaged in; its uncertainty comes
from the dispersion of the interval rates (median absolute deviation). It is blended
with the planned step time by precision in log space, the plan's uncertainty being
`PLAN_LOG_SD` (the planner's out-of-sample error, BENCHMARKS.md) or, when the measurements
contradict the plan by more, the squared log-ratio between them; so the plan decides at
first, the measurements take over as they accumulate, and a grossly wrong plan drops out.

Failures. Interruptions are a Poisson process whose rate has a Gamma prior with the
plan's rate (fleet data) as mean and, as its weight, one run's expected duration at the
current step time, at least a day (conjugate update:
rate = (alpha0 + failures) / (beta0 + exposure); Gelman et al., Bayesian Data Analysis,
section 2.6). Each failure costs its measured time to regain the step reached before it
(restart plus redone work), averaged with the plan's restart plus half a checkpoint
interval as one prior observation.

Remaining time. T solves T = W + rate x T x cost for the remaining work W = steps left x
step time; its variance adds the step-time uncertainty, the Poisson count of failures and
the rate's posterior variance; the 10th, 50th and 90th percentiles are those of the
log-normal with that mean and variance.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from datetime import datetime

from trainplan.eta.model import Estimate, EtaState, Interval, Observation, PlanFacts

PLAN_LOG_SD = 0.10
"""Relative uncertainty of the planned step time (log scale)."""
DRIFT_LOG_SD = 0.02
"""Floor on the measured step time's uncertainty: the speed may still drift."""
WARMUP_STEPS = 5
"""Steps left out at the start of every run segment (compilation, loading, autotuning)."""
WINDOW_INTERVALS = 40
"""Recent intervals the measured step time is taken over."""
PRIOR_MIN_EXPOSURE_SECONDS = 86400.0
"""The failure-rate prior (fleet data) weighs at least one day of exposure."""
Z90 = 1.2815515655446004
"""Standard normal quantile of 0.9."""


@dataclass(frozen=True, slots=True)
class StallPolicy:
    """No completed step for `factor` step times (at least `min_seconds`) is a stall."""

    factor: float = 5.0
    min_seconds: float = 120.0


def _seconds(time: datetime) -> float:
    return time.timestamp()


def _failure_start(state: EtaState, now: float) -> float:
    """A failure is seen late (when its restart reports); it began after the last
    observed progress."""
    if state.failure_started_at is not None:
        return state.failure_started_at
    return state.last_progress_time if state.last_progress_time is not None else now


def _observe(state: EtaState, observation: Observation) -> EtaState:
    """Fold one observation into the state: intervals, segments, failures, costs."""
    now = _seconds(observation.time)
    started = state.started_at
    if started is None:
        started = _seconds(observation.started_at) if observation.started_at else now
    state = replace(state, started_at=started, exposure_seconds=max(0.0, now - started))
    if observation.failures > state.failures:
        # A new failure: the segment ends; its cost runs until the step count regains
        # the step reached before it.
        state = replace(
            state,
            failures=observation.failures,
            failure_started_at=_failure_start(state, now),
            segment_intervals=0,
            segment_start_step=None,
        )
    step = observation.step
    if step is None:
        return replace(state, last_time=None)  # an interval cannot span missing data
    last_step, last_time = state.last_step, state.last_time
    if last_step is None or last_time is None:
        return replace(
            state,
            last_time=now,
            last_step=step,
            last_progress_time=state.last_progress_time or now,
        )
    if step < last_step:
        # Resumed from a checkpoint: a new segment starts here. A resume that no reported
        # failure explains (torchrun restarting workers inside a pod) counts as one.
        if state.failure_started_at is None:
            state = replace(
                state,
                failure_started_at=_failure_start(state, now),
                inferred_failures=state.inferred_failures + 1,
            )
        return replace(
            state,
            last_time=now,
            last_step=step,
            segment_intervals=0,
            segment_start_step=step,
            peak_step=max(state.peak_step, last_step),
        )
    if step == last_step:
        return replace(state, last_time=now)
    progressed = replace(state, last_progress_time=now, last_time=now, last_step=step)
    peak = max(state.peak_step, step)
    if state.failure_started_at is not None and step >= state.peak_step:
        cost = now - state.failure_started_at
        progressed = replace(
            progressed,
            failure_started_at=None,
            restart_costs_seconds=(*state.restart_costs_seconds, cost)[-WINDOW_INTERVALS:],
            lost_seconds=state.lost_seconds + cost,
            segment_intervals=0,
        )
    segment = progressed.segment_intervals + 1
    segment_start = state.segment_start_step if state.segment_start_step is not None else last_step
    progressed = replace(
        progressed, segment_intervals=segment, peak_step=peak, segment_start_step=segment_start
    )
    warm = last_step >= segment_start + WARMUP_STEPS
    if warm and state.failure_started_at is None:
        interval = Interval(seconds=now - last_time, steps=step - last_step)
        progressed = replace(progressed, intervals=(*state.intervals, interval)[-WINDOW_INTERVALS:])
    return progressed


@dataclass(frozen=True, slots=True)
class StepTimeEstimate:
    """The step time the remaining work is priced at, and where it came from."""

    seconds: float
    log_variance: float
    measured_seconds: float | None
    measured_weight: float


def measured_step_time(intervals: tuple[Interval, ...]) -> tuple[float, float] | None:
    """Ratio estimate of seconds per step and its log variance, or None without data."""
    steps = sum(i.steps for i in intervals)
    if steps == 0:
        return None
    mean = sum(i.seconds for i in intervals) / steps
    rates = [i.step_seconds for i in intervals]
    if len(rates) >= 3:
        median = statistics.median(rates)
        mad = statistics.median(abs(r - median) for r in rates)
        relative_sd = 1.4826 * mad / median if median > 0 else 0.0
    else:
        relative_sd = PLAN_LOG_SD
    variance = relative_sd**2 / max(1, len(rates)) + DRIFT_LOG_SD**2
    return mean, variance


def blended_step_time(facts: PlanFacts, intervals: tuple[Interval, ...]) -> StepTimeEstimate:
    """Precision-weighted blend of plan and measurement in log space."""
    plan_variance = PLAN_LOG_SD**2
    measured = measured_step_time(intervals)
    if measured is None:
        return StepTimeEstimate(facts.planned_step_seconds, plan_variance, None, 0.0)
    seconds, variance = measured
    # A plan that the measurements contradict by more than its stated uncertainty is
    # trusted only as far as its discrepancy allows (the prior's variance grows to the
    # squared log-ratio), so a grossly wrong plan (another GPU, another machine) drops out.
    plan_variance = max(plan_variance, math.log(seconds / facts.planned_step_seconds) ** 2)
    weight = plan_variance / (plan_variance + variance)
    log_blend = (1 - weight) * math.log(facts.planned_step_seconds) + weight * math.log(seconds)
    blend_variance = 1.0 / (1.0 / plan_variance + 1.0 / variance)
    return StepTimeEstimate(math.exp(log_blend), blend_variance, seconds, weight)


@dataclass(frozen=True, slots=True)
class FailureModel:
    """Posterior interruption rate (per second) and the cost of one failure."""

    rate_per_second: float
    rate_variance: float
    cost_seconds: float


def failure_model(facts: PlanFacts, state: EtaState, step_seconds: float) -> FailureModel:
    """Gamma-Poisson posterior of the rate (prior weight: one run at `step_seconds`, at
    least `PRIOR_MIN_EXPOSURE_SECONDS`); failure cost blended with the plan's."""
    prior_rate = facts.interruptions_per_gpu_hour * facts.gpus / 3600.0
    beta0 = max(
        facts.planned_duration_seconds,
        facts.total_steps * step_seconds,
        PRIOR_MIN_EXPOSURE_SECONDS,
    )
    alpha0 = prior_rate * beta0
    beta = beta0 + state.exposure_seconds
    alpha = alpha0 + state.failures + state.inferred_failures
    planned_cost = facts.restart_seconds + facts.checkpoint_interval_steps * step_seconds / 2.0
    costs = state.restart_costs_seconds
    cost = (planned_cost + sum(costs)) / (1 + len(costs))
    return FailureModel(alpha / beta, alpha / beta**2, cost)


def remaining_distribution(
    work_seconds: float, work_log_variance: float, failures: FailureModel
) -> tuple[float, float, float, float]:
    """(mean, median, p10, p90) of the remaining time: work plus failures it meets."""
    load = failures.rate_per_second * failures.cost_seconds
    load = min(load, 0.9)  # a run that fails faster than it works: cap, still finite
    mean = work_seconds / (1.0 - load)
    expected_failures = failures.rate_per_second * mean
    variance = (
        work_seconds**2 * (math.exp(work_log_variance) - 1.0)
        + failures.cost_seconds**2 * expected_failures
        + failures.cost_seconds**2 * mean**2 * failures.rate_variance
    )
    if mean <= 0:
        return 0.0, 0.0, 0.0, 0.0
    sigma2 = math.log1p(variance / mean**2)
    mu = math.log(mean) - sigma2 / 2
    sigma = math.sqrt(sigma2)
    return mean, math.exp(mu), math.exp(mu - Z90 * sigma), math.exp(mu + Z90 * sigma)


def revise(
    facts: PlanFacts,
    state: EtaState,
    observation: Observation,
    stall: StallPolicy = StallPolicy(),
) -> tuple[Estimate, EtaState]:
    """Fold `observation` into `state` and estimate the time to completion."""
    state = _observe(state, observation)
    now = _seconds(observation.time)
    step = state.last_step if state.last_step is not None else 0
    if observation.step is None and state.peak_step > step:
        step = state.peak_step
    remaining_steps = max(0, facts.total_steps - step)
    step_time = blended_step_time(facts, state.intervals)
    failures = failure_model(facts, state, step_time.seconds)
    work = remaining_steps * step_time.seconds
    mean, median, p10, p90 = remaining_distribution(work, step_time.log_variance, failures)
    if remaining_steps == 0:
        mean = median = p10 = p90 = 0.0

    last_progress = state.last_progress_time if state.last_progress_time is not None else now
    if observation.last_step_time is not None:
        last_progress = max(last_progress, _seconds(observation.last_step_time))
    since_progress = max(0.0, now - last_progress)
    stall_after = max(stall.factor * step_time.seconds, stall.min_seconds)
    stalled = remaining_steps > 0 and since_progress > stall_after

    started = state.started_at if state.started_at is not None else now
    deadline_at_risk = (
        facts.deadline_seconds is not None
        and remaining_steps > 0
        and now + median > started + facts.deadline_seconds
    )
    measured = step_time.measured_seconds
    measured_mfu = facts.planned_mfu * facts.planned_step_seconds / measured if measured else None
    used_hours = facts.gpus * max(0.0, now - started) / 3600.0
    notes = []
    if observation.step is None:
        notes.append("no metrics: the estimate uses the last known step and the plan")
    if measured is None:
        notes.append("no measured step time yet: planned step time used")
    estimate = Estimate(
        time=observation.time,
        step=step,
        total_steps=facts.total_steps,
        progress_ratio=min(1.0, step / facts.total_steps) if facts.total_steps else 1.0,
        step_seconds=step_time.seconds,
        measured_step_seconds=measured,
        measured_weight=step_time.measured_weight,
        remaining_seconds=median,
        earliest_seconds=p10,
        latest_seconds=p90,
        failure_rate_per_hour=failures.rate_per_second * 3600.0,
        expected_failures_remaining=failures.rate_per_second * mean,
        failure_cost_seconds=failures.cost_seconds,
        measured_mfu=measured_mfu,
        gpu_hours_used=used_hours,
        gpu_hours_projected=used_hours + facts.gpus * median / 3600.0,
        stalled=stalled,
        seconds_since_progress=since_progress,
        deadline_at_risk=deadline_at_risk,
        metrics_available=observation.step is not None,
        inferred_failures=state.inferred_failures,
        lost_seconds=state.lost_seconds,
        notes=tuple(notes),
    )
    return estimate, state


def naive_remaining_seconds(elapsed_seconds: float, progress_ratio: float) -> float | None:
    """The baseline the engine is judged against: elapsed / progress x (1 - progress)."""
    if progress_ratio <= 0:
        return None
    return elapsed_seconds / progress_ratio * (1.0 - progress_ratio)
