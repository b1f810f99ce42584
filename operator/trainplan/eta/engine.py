"""The ETA engine: observations in, estimate out; pure, the clock comes with each
observation.

Work. Progress is counted in tokens when the plan knows its tokens per step and the
observations carry tokens (the steps of a batch-size ramp-up are smaller), else in
steps. The remaining work is the total less the most work ever reached; redoing lost
work is part of the interruption that lost it.

Anchors. Every interval and every interruption is timed from step changes (the
reporter's last-step time, else the first observation that saw the new step), never
from when the engine happened to look, so a step longer than the revision interval is
measured whole and the estimate does not depend on the revision interval.

Speed (`trainplan.eta.speed`). Clean intervals (same run segment, past its first
`WARMUP_STEPS` steps, no interruption in between) feed multi-scale sums; the remaining
work is priced at the scale of its own horizon. The measured speed is blended with the
planned one by precision on a log scale, the plan's uncertainty being `PLAN_LOG_SD`
(the planner's out-of-sample error) or, when the measurements contradict the plan by
more, the squared log-ratio between them; so the plan decides at first, the
measurements take over as they accumulate, and a grossly wrong plan drops out.

Interruptions (`trainplan.eta.failures`). Episodes of lost time, one per outage however
many failures it shows, with a Gamma-Poisson rate and a log-normal cost learned from
the run. An interruption in progress adds its expected rest.

Remaining time (`trainplan.eta.distribution`). Interruptions strike while the run is
up, so the work W is exposed to them for W (the rate's exposure leaves episodes out,
and a failure inside one joins it): the remaining time is the work, plus the
compound-Poisson sum of the interruptions over W (the rate's posterior uncertainty
included), plus the rest of an outage in progress, in expectation W (1 + rate x mean
cost) + rest; its 10th, 50th and 90th percentiles are computed from that law.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from trainplan.eta.distribution import Cumulants, LogNormal, Part, percentiles
from trainplan.eta.failures import Episode, Interruptions, interruption_laws
from trainplan.eta.model import Estimate, EtaState, Observation, PlanFacts
from trainplan.eta.speed import (
    SpeedStats,
    add_interval,
    long_run_seconds_per_work,
    projected_speed,
)

PLAN_LOG_SD = 0.20
"""Relative uncertainty of the planned step time (log scale): the planner's error on
published runs it was not fitted to (BENCHMARKS.md)."""
DRIFT_LOG_SD = 0.02
"""Floor on the projected speed's uncertainty (log scale): a settled run's speed still
moves with its surroundings. Llama 3 405B's throughput varied by 1-2% with the time of
day, mid-day heat slowing the GPUs' clocks (arXiv 2407.21783, section 3.3.4); the floor
is the top of that range. Over a horizon of days a daily swing averages out, so there
the floor stands for slower drifts no run measures in advance."""
HIDDEN_STALL_SHARE = 0.75
"""An interval without a gap in the metrics that lost more than this share of its time
held a stall the observations did not see."""
WARMUP_STEPS = 5
"""Steps left out at the start of every run segment (compilation, loading, autotuning)."""
FULL_BATCH_SHARE = 0.95
"""Steps of at least this share of the planned tokens per step are full-size."""
TOKENS_SLACK_SHARE = 1.05
"""A token count above this share of the steps' full batches is another unit (per
sequence padding, a count per rank summed twice): progress is then counted in steps."""
RECENT_COSTS = 40
"""Closed interruptions whose costs the state lists (all of them feed the cost law)."""
PRIOR_MIN_EXPOSURE_SECONDS = 86400.0
"""The failure-rate prior may weigh up to one run's duration, at least one day."""


@dataclass(frozen=True, slots=True)
class StallPolicy:
    """No completed step for `factor` step times (at least `min_seconds`) is a stall."""

    factor: float = 5.0
    min_seconds: float = 120.0
    first_step_seconds: float = 1800.0
    """Before the first step (loading data, a checkpoint, compiling), a stall takes this
    long at least."""

    def limit_seconds(self, step_seconds: float) -> float:
        return max(self.factor * step_seconds, self.min_seconds)


def work_of(facts: PlanFacts, step: int, tokens: int | None) -> float:
    """An observation's progress in the plan's unit of work (tokens or steps)."""
    if facts.tokens_per_step and tokens is not None and (tokens > 0 or step == 0):
        full_batches = (max(step, 0) + 1) * facts.tokens_per_step
        if tokens <= TOKENS_SLACK_SHARE * full_batches:
            return float(tokens)
    return step * facts.work_per_step


@dataclass(frozen=True, slots=True)
class Pricing:
    """The speed the remaining work is priced at, and where it came from."""

    seconds_per_work: float
    log_variance: float
    measured_seconds_per_work: float | None
    measured_weight: float


def price(facts: PlanFacts, state: EtaState) -> Pricing:
    """Precision-weighted blend of the planned and the measured speed on a log scale."""
    planned = facts.planned_seconds_per_work
    plan_variance = PLAN_LOG_SD**2
    remaining_work = max(0.0, facts.total_work - state.peak_work)
    long_run = long_run_seconds_per_work(state.speed) or planned
    measured = projected_speed(
        state.speed,
        remaining_work * long_run,
        fallback_dispersion=plan_variance,
        drift_floor=DRIFT_LOG_SD,
    )
    if measured is None or planned <= 0:
        if measured is not None:
            return Pricing(measured.seconds_per_work, measured.log_variance, None, 1.0)
        return Pricing(planned, plan_variance, None, 0.0)
    seconds, variance = measured.seconds_per_work, measured.log_variance
    # A plan that the measurements contradict by more than its stated uncertainty is
    # trusted only as far as its discrepancy allows (the prior's variance grows to the
    # squared log-ratio), so a grossly wrong plan (another GPU, another machine) drops out.
    plan_variance = max(plan_variance, math.log(seconds / planned) ** 2)
    weight = plan_variance / (plan_variance + variance)
    log_blend = (1 - weight) * math.log(planned) + weight * math.log(seconds)
    blend_variance = 1.0 / (1.0 / plan_variance + 1.0 / variance)
    return Pricing(math.exp(log_blend), blend_variance, seconds, weight)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one observation is judged by, from the state before it."""

    seconds_per_work: float
    """The speed new work is credited at inside an interruption."""
    stall_seconds: float
    """Lost time below this is not an interruption (unless it was a failure)."""
    major_seconds: float
    """A pause without failure lasting more than this is a major outage, not pace."""
    major_share: Callable[[float], float]
    """The probability that an interruption of this cost (seconds) was a major outage."""


def _open_episode(state: EtaState, now: float, cause: str) -> EtaState:
    """An interruption begins at the last progress before it (or now, before any); a
    sign of trouble during one already open joins it."""
    episode = state.episode
    if episode is None:
        start = state.anchor_time if state.anchor_time is not None else now
        episode = Episode(started_at=min(start, now), peak_work=state.peak_work, cause=cause)
        state = replace(
            state,
            interruptions=state.interruptions + 1,
            evidence=replace(state.evidence, interruptions=state.evidence.interruptions + 1),
        )
    if cause == "reported":
        episode = replace(episode, reported=True)
    elif cause == "resumed":
        episode = replace(episode, resumed=True, resumed_at=now)
    return replace(state, episode=episode)


def _restart_during(state: EtaState, now: float, limits: Limits) -> EtaState:
    """The step went back while lost work was being redone: a second restart. The first
    interruption ends at the last progress before it, charged with the redoing still
    left; the second begins there and owes only the rest."""
    episode = state.episode
    assert episode is not None and state.anchor_time is not None
    anchor_work = state.anchor_work if state.anchor_work is not None else episode.peak_work
    redo_left = max(0.0, episode.peak_work - anchor_work)
    wall = state.anchor_time - episode.started_at
    cost = wall + (redo_left - episode.credit_work) * limits.seconds_per_work
    closed = _close_episode(state, cost, wall, replace(limits, stall_seconds=0.0))
    second = Episode(
        started_at=state.anchor_time,
        peak_work=episode.peak_work,
        cause="resumed",
        resumed=True,
        resumed_at=now,
        credit_work=redo_left,
    )
    return replace(
        closed,
        episode=second,
        interruptions=closed.interruptions + 1,
        evidence=replace(closed.evidence, interruptions=closed.evidence.interruptions + 1),
    )


def _close_episode(
    state: EtaState, cost_seconds: float, wall_seconds: float, limits: Limits
) -> EtaState:
    """The run regained its work: the episode's cost is measured (an ordinary
    interruption or a major outage), or, when nothing but lost time marked it and it lost
    less than the stall limit, it is forgotten."""
    episode = state.episode
    assert episode is not None
    if not episode.is_failure and cost_seconds < limits.stall_seconds:
        evidence = state.evidence
        return replace(
            state,
            episode=None,
            interruptions=max(0, state.interruptions - 1),
            evidence=replace(evidence, interruptions=max(0.0, evidence.interruptions - 1)),
        )
    cost = max(0.0, cost_seconds)
    major = limits.major_share(cost)
    evidence = state.evidence
    state = replace(
        state,
        costs=state.costs.add(cost, 1.0 - major),
        major_costs=state.major_costs.add(cost, major),
        evidence=replace(
            evidence,
            costs=evidence.costs.add(cost, 1.0 - major),
            major_costs=evidence.major_costs.add(cost, major),
        ),
    )
    # A restart nobody reported: the step went back, or the metrics went silent and time
    # was lost (a restart from a checkpoint just written regains its step at once).
    unexplained = (episode.resumed or episode.cause == "silent") and not episode.reported
    return replace(
        state,
        episode=None,
        restart_costs_seconds=(*state.restart_costs_seconds, cost)[-RECENT_COSTS:],
        lost_seconds=state.lost_seconds + cost,
        downtime_seconds=state.downtime_seconds + max(0.0, wall_seconds),
        inferred_failures=state.inferred_failures + (1 if unexplained else 0),
    )


def _paused(state: EtaState, seconds: float, work: float, *, opened: bool = True) -> EtaState:
    """A pause without any sign of failure (an evaluation, a slow checkpoint, a hang that
    passed, shorter than a major outage) is part of the run's pace, not an interruption:
    it joins the speed, and the episode (if one was opened) is forgotten."""
    if opened:
        state = replace(
            state,
            episode=None,
            interruptions=max(0, state.interruptions - 1),
            evidence=replace(
                state.evidence, interruptions=max(0.0, state.evidence.interruptions - 1)
            ),
        )
    if work > 0 and seconds > 0:
        state = replace(state, speed=add_interval(state.speed, seconds, work))
    return state


def _anchor_time(observation: Observation, now: float, previous: float | None) -> float:
    """When the step seen now was reached: the reporter's last-step time when it is
    plausible (after the previous anchor, not in the future), else now."""
    if observation.last_step_time is not None:
        reported = observation.last_step_time.timestamp()
        if reported <= now and (previous is None or reported > previous):
            return reported
    return now


def _progress(
    facts: PlanFacts,
    state: EtaState,
    observation: Observation,
    now: float,
    limits: Limits,
) -> EtaState:
    """Fold an observation that carries metrics into the state."""
    assert observation.step is not None
    step = observation.step
    work = work_of(facts, step, observation.tokens)
    peak_step, peak_work = max(state.peak_step, step), max(state.peak_work, work)
    last_step, last_work, last_anchor = state.last_step, state.last_work, state.anchor_time
    if last_step is None or last_anchor is None or last_work is None:
        return replace(
            state,
            last_step=step,
            last_work=work,
            anchor_time=_anchor_time(observation, now, None),
            anchor_work=work,
            segment_start_step=step,
            missing=0,
            peak_step=peak_step,
            peak_work=peak_work,
        )
    if step < last_step or work < last_work:
        # Resumed from a checkpoint (seen even across observations without metrics): a
        # new segment begins; the interruption lasts until the lost work is regained.
        episode = state.episode
        progressed_since = (
            episode is not None
            and episode.resumed_at is not None
            and state.last_progress_time is not None
            and state.last_progress_time > episode.resumed_at
        )
        if progressed_since:
            state = _restart_during(state, now, limits)
        else:
            state = _open_episode(state, now, "resumed")
        return replace(
            state,
            last_step=step,
            last_work=work,
            anchor_time=now,
            anchor_work=work,
            segment_start_step=step,
            missing=0,
        )
    if step == last_step and work == last_work:
        return state
    anchor = _anchor_time(observation, now, last_anchor)
    seconds = anchor - last_anchor
    done = work - (state.anchor_work if state.anchor_work is not None else work)
    progressed = replace(
        state,
        last_step=step,
        last_work=work,
        anchor_time=anchor,
        anchor_work=work,
        last_progress_time=anchor,
        missing=0,
        peak_step=peak_step,
        peak_work=peak_work,
    )
    episode = state.episode
    if episode is not None:
        if work < episode.peak_work:
            return progressed  # still redoing lost work
        wall = anchor - episode.started_at
        redone = work - episode.peak_work + episode.credit_work
        cost = wall - redone * limits.seconds_per_work
        if episode.cause == "stall" and not episode.is_failure and cost <= limits.major_seconds:
            return _paused(progressed, wall, work - episode.peak_work)
        return _close_episode(progressed, cost, wall, limits)
    if seconds <= 0 or done <= 0 or state.last_progress_time is None:
        # A repeated or backward timestamp measures nothing; nor does the first step
        # (start-up is not an interruption, nor the speed).
        return progressed
    excess = seconds - done * limits.seconds_per_work
    # Without a gap in the metrics, a slow interval is a stall only when it did less than
    # a quarter of its work: a slowdown spread over a long interval (a slow node, a
    # checkpoint written at half speed) is speed, not an interruption.
    threshold = limits.stall_seconds
    if not state.missing:
        threshold = max(threshold, HIDDEN_STALL_SHARE * seconds)
    if excess > threshold:
        # Time lost without a step going back: an outage hidden in a gap in the metrics
        # (a restart that regained its step before the metrics returned), or a stall that
        # passed unseen between two observations.
        if not state.missing and excess <= limits.major_seconds:
            return _paused(progressed, seconds, done, opened=False)
        hidden = "resumed" if state.missing else "stall"
        opened = _open_episode(replace(progressed, anchor_time=last_anchor), now, hidden)
        return _close_episode(replace(opened, anchor_time=anchor), excess, excess, limits)
    segment_start = state.segment_start_step if state.segment_start_step is not None else 0
    if last_step < segment_start + WARMUP_STEPS:
        return progressed
    full = _full_batch(facts, done, step - last_step)
    if full and not state.full_batch_seen:
        # The ramp-up is over: its smaller, less efficient steps priced the work so far.
        return replace(
            progressed, speed=add_interval(SpeedStats(), seconds, done), full_batch_seen=True
        )
    if full or not state.full_batch_seen:
        progressed = replace(progressed, speed=add_interval(state.speed, seconds, done))
    return progressed


def _full_batch(facts: PlanFacts, work: float, steps: int) -> bool:
    """Whether an interval's steps were of the full batch (always, counting steps)."""
    if not facts.tokens_per_step or steps <= 0:
        return True
    return work / steps >= FULL_BATCH_SHARE * facts.tokens_per_step


def _observe(
    facts: PlanFacts,
    state: EtaState,
    observation: Observation,
    limits: Limits,
) -> EtaState:
    """Fold one observation into the state: anchors, speed, interruptions, exposure."""
    before = state
    observed = observation.time.timestamp()
    now = observed if state.last_time is None else max(observed, state.last_time)
    first = state.observed_since is None
    started = state.started_at
    if started is None:
        started = observation.started_at.timestamp() if observation.started_at else now
    state = replace(
        state,
        started_at=started,
        observed_since=now if state.observed_since is None else state.observed_since,
        last_time=now,
    )
    if first:
        state = replace(state, failures=observation.failures)  # history, not news
    elif observation.failures > state.failures:
        state = _open_episode(replace(state, failures=observation.failures), now, "reported")
    elif observation.failures < state.failures:
        state = replace(state, failures=observation.failures)  # the count was reset
    if observation.step is None:
        state = replace(state, missing=state.missing + 1)
    else:
        state = _progress(facts, state, observation, now, limits)
    if (
        state.episode is None
        and state.last_progress_time is not None
        and state.anchor_time is not None
        and state.peak_work < facts.total_work
        and now - state.anchor_time > limits.stall_seconds
        and state.missing != 1  # one missed scrape is not yet a silence
    ):
        state = _open_episode(state, now, "silent" if state.missing else "stall")
    down = state.downtime_seconds
    if state.episode is not None:
        down += now - state.episode.started_at
    since = state.observed_since if state.observed_since is not None else now
    exposure = max(0.0, now - since - down)
    more = exposure - before.exposure_seconds
    return replace(
        state,
        exposure_seconds=exposure,
        evidence=state.evidence.aged(more),
        blocks=state.blocks.add(state.interruptions - before.interruptions, more),
    )


@dataclass(frozen=True, slots=True)
class Remaining:
    """The remaining time's mean and its 10th, 50th and 90th percentiles, in seconds."""

    mean: float
    median: float
    p10: float
    p90: float
    expected_interruptions: float


def remaining_distribution(
    work_seconds: float,
    work_log_variance: float,
    interruptions: Interruptions,
    outage_rest: Cumulants | None = None,
) -> Remaining:
    """Work plus the interruptions it meets plus the rest of an outage in progress."""
    rest = outage_rest or Cumulants()
    if work_seconds <= 0 and rest.mean <= 0:
        return Remaining(0.0, 0.0, 0.0, 0.0, 0.0)
    # Interruptions come while the run is up (the rate's exposure leaves the episodes
    # out, and one that strikes inside an episode joins it): over the work itself.
    work = (
        LogNormal(math.log(work_seconds), math.sqrt(work_log_variance))
        if work_seconds > 0
        else None
    )
    exposed = work.cumulants.mean if work is not None else 0.0
    known = Part(1.0, rest, work)
    parts = [known.plus(lost) for lost in interruptions.over(exposed)]
    found = percentiles(parts)
    return Remaining(
        mean=sum(part.weight * part.mean for part in parts),
        median=found.p50,
        p10=found.p10,
        p90=found.p90,
        expected_interruptions=interruptions.rate_per_second * exposed,
    )


def _interruptions(facts: PlanFacts, state: EtaState, seconds_per_work: float) -> Interruptions:
    step_seconds = seconds_per_work * facts.work_per_step
    return interruption_laws(
        prior_per_second=facts.interruptions_per_gpu_hour * facts.gpus / 3600.0,
        prior_cost_seconds=facts.restart_seconds
        + facts.checkpoint_interval_steps * step_seconds / 2.0,
        max_prior_seconds=max(
            facts.planned_duration_seconds,
            facts.total_work * seconds_per_work,
            PRIOR_MIN_EXPOSURE_SECONDS,
        ),
        evidence=state.evidence,
        blocks=state.blocks,
    )


def revise(
    facts: PlanFacts,
    state: EtaState,
    observation: Observation,
    stall: StallPolicy = StallPolicy(),
) -> tuple[Estimate, EtaState]:
    """Fold `observation` into `state` and estimate the time to completion."""
    # The state has not changed since the last revision priced the work: judge this
    # observation by that revision's speed and thresholds.
    if state.seconds_per_work is None or state.major_seconds is None:
        speed = price(facts, state).seconds_per_work
        major = _interruptions(facts, state, speed).major_above_seconds
    else:
        speed, major = state.seconds_per_work, state.major_seconds
    before = state
    limits = Limits(
        seconds_per_work=speed,
        stall_seconds=stall.limit_seconds(speed * facts.work_per_step),
        major_seconds=major,
        # The laws are priced only when an interruption closes.
        major_share=lambda cost: _interruptions(facts, before, speed).major_share(cost),
    )
    state = _observe(facts, state, observation, limits)
    now = state.last_time if state.last_time is not None else observation.time.timestamp()
    pricing = price(facts, state)
    step_seconds = pricing.seconds_per_work * facts.work_per_step
    remaining_work = max(0.0, facts.total_work - state.peak_work)
    laws = _interruptions(facts, state, pricing.seconds_per_work)
    episode = state.episode
    outage = now - episode.started_at if episode is not None else 0.0
    rest = laws.residual(outage) if episode is not None else Cumulants()
    if remaining_work <= 0:
        remaining = Remaining(0.0, 0.0, 0.0, 0.0, 0.0)
        rest = Cumulants()
    else:
        remaining = remaining_distribution(
            remaining_work * pricing.seconds_per_work, pricing.log_variance, laws, rest
        )

    last_progress = state.anchor_time if state.anchor_time is not None else now
    if observation.last_step_time is not None:
        last_progress = max(last_progress, min(now, observation.last_step_time.timestamp()))
    since_progress = max(0.0, now - last_progress)
    waiting = state.peak_work <= 0
    limit = stall.limit_seconds(step_seconds)
    if waiting:
        limit = max(limit, stall.first_step_seconds)
    stalled = remaining_work > 0 and since_progress > limit

    started = state.started_at if state.started_at is not None else now
    deadline_at_risk = (
        facts.deadline_seconds is not None
        and remaining_work > 0
        and now + remaining.median > started + facts.deadline_seconds
    )
    measured = pricing.measured_seconds_per_work
    measured_step = measured * facts.work_per_step if measured is not None else None
    measured_mfu = (
        facts.planned_mfu * facts.planned_step_seconds / measured_step if measured_step else None
    )
    used_hours = facts.gpus * max(0.0, now - started) / 3600.0
    step = state.last_step if state.last_step is not None else 0
    work = state.last_work if state.last_work is not None else 0.0
    notes = []
    if waiting:
        notes.append("waiting for the first step: the plan's estimate")
    if observation.step is None:
        notes.append("no metrics: the estimate uses the last known step and the plan")
    if measured is None and not waiting:
        notes.append("no measured step time yet: planned step time used")
    if episode is not None:
        notes.append(f"interrupted ({episode.cause}) for {outage:.0f} s")
    total = facts.total_work
    estimate = Estimate(
        time=observation.time,
        step=step,
        total_steps=facts.total_steps,
        progress_ratio=min(1.0, max(0.0, work / total)) if total else 1.0,
        step_seconds=step_seconds,
        measured_step_seconds=measured_step,
        measured_weight=pricing.measured_weight,
        remaining_seconds=remaining.median,
        earliest_seconds=remaining.p10,
        latest_seconds=remaining.p90,
        failure_rate_per_hour=laws.rate_per_second * 3600.0,
        expected_failures_remaining=remaining.expected_interruptions,
        failure_cost_seconds=laws.mean_cost_seconds,
        measured_mfu=measured_mfu,
        gpu_hours_used=used_hours,
        gpu_hours_projected=used_hours + facts.gpus * remaining.median / 3600.0,
        stalled=stalled,
        seconds_since_progress=since_progress,
        deadline_at_risk=deadline_at_risk,
        metrics_available=observation.step is not None,
        inferred_failures=state.inferred_failures
        + (1 if episode is not None and episode.resumed and not episode.reported else 0),
        lost_seconds=state.lost_seconds + outage,
        notes=tuple(notes),
        interruptions=state.interruptions,
        outage_seconds=outage,
        outage_remaining_seconds=rest.mean,
        waiting_for_first_step=waiting,
        work_done=work,
    )
    state = replace(
        state,
        seconds_per_work=pricing.seconds_per_work,
        major_seconds=laws.major_above_seconds,
    )
    return estimate, state


def naive_remaining_seconds(elapsed_seconds: float, progress_ratio: float) -> float | None:
    """The baseline the engine is judged against: elapsed / progress x (1 - progress)."""
    if progress_ratio <= 0:
        return None
    return elapsed_seconds / progress_ratio * (1.0 - progress_ratio)
