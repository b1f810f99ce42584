"""Simulated training runs for backtesting the ETA: a run is simulated step by step
(step-time noise, checkpoints, evaluations, a batch-size ramp-up, slowdowns, failures
with restarts, hangs and major outages, rollbacks to the last checkpoint, job time
limits, and events scheduled from a public chronicle), then observed the way the
operator observes it: a scrape every `scrape_seconds` that sees the step, the tokens
and the failures Kubernetes reported, or no metrics while the reporter is down.

Deterministic for a seed. Used by `benchmarks.eta_real_scale`, `benchmarks.eta_chronicles`
and the ETA tests.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from trainplan.eta import PlanFacts
from trainplan.eta.backtest import TraceRow
from trainplan.eta.distribution import lognormal_cumulants
from trainplan.planner.reliability import estimate_reliability

EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
"""Simulated runs start here unless their regime says otherwise."""
HANG_LOG_SD = 1.0
"""Spread of the log length of a hang before someone restarts the job."""


@dataclass(frozen=True, slots=True)
class Failures:
    """The random interruptions of a run."""

    per_hour: float = 0.0
    """Interruptions per hour of running."""
    restart_median_seconds: float = 600.0
    """From the failure to training again (detection, rescheduling, loading)."""
    restart_log_sd: float = 0.5
    long_share: float = 0.0
    """Share of interruptions that last much longer (the job waits for spare hosts)."""
    long_median_hours: float = 12.0
    long_log_sd: float = 1.0
    hang_share: float = 0.0
    """Share that first hang (metrics up, no step) until someone restarts the job."""
    hang_median_seconds: float = 3600.0
    reported_share: float = 1.0
    """Share Kubernetes sees (a pod failure); the rest restart inside the pod."""
    pods_per_failure: int = 1
    """Failures Kubernetes reports for one interruption (every pod of the job fails)."""
    report_delay_seconds: float = 45.0
    major_per_day: float = 0.0
    """Major outages per day of wall-clock, whatever the job's size (a cluster, storage or
    network incident); one that comes while the run is down joins that outage."""
    major_median_hours: float = 8.0
    major_log_sd: float = 1.0
    weekly_log_sd: float = 0.0
    """Each week of wall-clock the rate is multiplied by a fresh exp(N(0, sd^2) - sd^2/2)
    (mean 1): a cluster has good and bad weeks (OPT-175B: 40+ restarts in the 16 days to
    3 December, 27_percent_update.md:6, then a few a week once spare hosts were kept,
    56_percent_update.md:8)."""

    @property
    def mean_restart_seconds(self) -> float:
        """Mean time from an ordinary interruption to training again: the restart, a
        wait for spare hosts now and then, a hang first now and then (each log-normal,
        mean median x exp(sd^2 / 2))."""
        restart = lognormal_cumulants(self.restart_median_seconds, self.restart_log_sd)
        wait = lognormal_cumulants(3600.0 * self.long_median_hours, self.long_log_sd)
        hang = lognormal_cumulants(self.hang_median_seconds, HANG_LOG_SD)
        return restart.mean + self.long_share * wait.mean + self.hang_share * hang.mean


@dataclass(frozen=True, slots=True)
class Slowdowns:
    """Temporary slowdowns (a straggler, a slow node, a noisy neighbour)."""

    per_hour: float = 0.0
    factor: float = 1.5
    median_hours: float = 2.0
    log_sd: float = 0.7


@dataclass(frozen=True, slots=True)
class Scheduled:
    """An event of a chronicle, at a step (the first step at or past it)."""

    at_step: int
    down_seconds: float = 0.0
    """Time without training (restart, outage, pause), metrics down."""
    rollback_steps: int | None = None
    """Steps lost: None rolls back to the last checkpoint."""
    hang_seconds: float = 0.0
    """Before the restart, the job hangs this long with its metrics up."""
    reported: bool = True
    slow_factor: float = 1.0
    slow_steps: int = 0
    """A slowdown of `slow_factor` for `slow_steps` steps instead of a restart."""
    source: str = ""
    """Where the event is told (file:line), or how it was inferred."""


@dataclass(frozen=True, slots=True)
class Rampup:
    """A batch-size ramp-up in Megatron-LM's form (`--rampup-batch-size START INCREMENT
    SAMPLES`): the batch grows from `start` by `increment` sequences every SAMPLES /
    ((full - start) / increment) consumed samples."""

    start: int
    increment: int
    samples: int
    full: int

    def batch(self, consumed_samples: int) -> int:
        if consumed_samples >= self.samples:
            return self.full
        steps = (self.full - self.start) // self.increment
        per_increment = self.samples / steps
        return min(self.full, self.start + self.increment * int(consumed_samples / per_increment))


@dataclass(frozen=True, slots=True)
class Regime:
    """A kind of run."""

    name: str
    total_steps: int
    """Steps of the full batch: the run trains on total_steps x tokens_per_step tokens
    (more, smaller steps with a batch-size ramp-up)."""
    step_seconds: float
    """At the full batch."""
    tokens_per_step: int
    gpus: int
    step_log_sd: float = 0.03
    checkpoint_interval_steps: int = 500
    checkpoint_schedule: tuple[tuple[int, int], ...] = ()
    """(from step, interval) changes of the checkpoint interval."""
    checkpoint_seconds: float = 60.0
    eval_interval_steps: int = 0
    eval_seconds: float = 0.0
    rampup: Rampup | None = None
    fixed_step_fraction: float = 0.0
    """Share of the full step's time that does not shrink with the batch (pipeline fill)."""
    warmup_steps: int = 3
    warmup_factor: float = 2.0
    startup_seconds: float = 300.0
    job_limit_seconds: float = 0.0
    """A job ends after this long (a scheduler's time limit) and the next resumes from the
    checkpoint it saved on the way out; 0: no limit."""
    turnover_seconds: float = 300.0
    failures: Failures = field(default_factory=Failures)
    slowdowns: Slowdowns = field(default_factory=Slowdowns)
    scheduled: tuple[Scheduled, ...] = ()
    scrape_miss_share: float = 0.002
    plan_step_seconds: float | None = None
    """The planned step time; None: the true one times `plan_step_factor`."""
    plan_step_factor: float = 1.0
    plan_rate_per_gpu_hour: float | None = None
    """The plan's failure rate; None: the true rate."""
    plan_restart_seconds: float | None = None
    """The plan's restart time; None: the true mean (`Failures.mean_restart_seconds`), as
    a team that has run on the cluster before would state it."""
    scrape_seconds: float = 30.0
    diurnal_amplitude: float = 0.0
    """The step time swings by this share over a day (Llama 3 405B: "a diurnal 1-2%
    throughput variation", arXiv 2407.21783, section 3.3.4)."""
    epoch: datetime = EPOCH
    description: str = ""

    def checkpoint_interval(self, step: int) -> int:
        interval = self.checkpoint_interval_steps
        for start, value in self.checkpoint_schedule:
            if step >= start:
                interval = value
        return interval


@dataclass(frozen=True, slots=True)
class SimulatedRun:
    """A run's scrapes, its real end and the plan's figures."""

    regime: Regime
    seed: int
    rows: tuple[TraceRow, ...]
    end_seconds: float
    facts: PlanFacts
    interruptions: int
    reached: tuple[tuple[int, float], ...]
    """(step, seconds since the start) when the run first reached each watched step."""


class _Tokens:
    """Cumulative tokens after each step (the ramp-up makes early steps smaller)."""

    def __init__(self, regime: Regime) -> None:
        self.regime = regime
        self.cumulative = [0]
        self.sizes: list[float] = []
        """Each step's batch as a share of the full batch."""

    def _grow(self, step: int) -> None:
        regime = self.regime
        while len(self.cumulative) <= step:
            ramp = regime.rampup
            if ramp is None:
                share = 1.0
            else:
                sequence = regime.tokens_per_step / ramp.full
                share = ramp.batch(int(self.cumulative[-1] / sequence)) / ramp.full
            self.sizes.append(share)
            self.cumulative.append(self.cumulative[-1] + round(regime.tokens_per_step * share))

    def after(self, step: int) -> int:
        self._grow(step)
        return self.cumulative[step]

    def share(self, step: int) -> float:
        """The batch of step `step + 1` as a share of the full batch."""
        self._grow(step + 1)
        return self.sizes[step]


def plan_facts_for(regime: Regime) -> PlanFacts:
    """What the plan of this run says, from the planner's reliability model."""
    failures = regime.failures
    true_rate = failures.per_hour / regime.gpus
    rate = regime.plan_rate_per_gpu_hour if regime.plan_rate_per_gpu_hour is not None else true_rate
    restart = (
        regime.plan_restart_seconds
        if regime.plan_restart_seconds is not None
        else failures.mean_restart_seconds
    )
    step_seconds = regime.plan_step_seconds or regime.step_seconds * regime.plan_step_factor
    interval = regime.checkpoint_interval(regime.total_steps)
    reliability = estimate_reliability(
        compute_seconds=regime.total_steps * step_seconds,
        step_seconds=step_seconds,
        total_steps=regime.total_steps,
        gpus=regime.gpus,
        interruptions_per_gpu_hour=rate,
        checkpoint_seconds=regime.checkpoint_seconds,
        restart_seconds=restart,
        checkpoint_interval_steps=interval,
    )
    return PlanFacts(
        total_steps=regime.total_steps,
        planned_step_seconds=step_seconds,
        gpus=regime.gpus,
        checkpoint_interval_steps=interval,
        restart_seconds=restart,
        interruptions_per_gpu_hour=rate,
        planned_mfu=0.4,
        planned_duration_seconds=reliability.duration_seconds,
        tokens_per_step=float(regime.tokens_per_step),
        checkpoint_seconds=regime.checkpoint_seconds,
    )


class _Simulation:
    """The true timeline of one run."""

    def __init__(self, regime: Regime, seed: int, watch: tuple[int, ...] = ()) -> None:
        self.regime = regime
        self.random = random.Random(seed)
        self.tokens = _Tokens(regime)
        self.changes: list[tuple[float, int]] = [(0.0, 0)]
        """(time, step) at every step change, resumes included."""
        self.down: list[tuple[float, float]] = []
        """(start, end) of every span without metrics."""
        self.reports: list[tuple[float, int]] = [(0.0, 0)]
        """(time, cumulative failures reported)."""
        self.interruptions = 0
        self.watch = sorted(watch)
        self.weeks: list[float] = []
        self.reached: list[tuple[int, float]] = []

    def _lognormal(self, median: float, log_sd: float) -> float:
        return median * math.exp(self.random.gauss(0.0, log_sd))

    def _after(self, now: float, per_second: float) -> float:
        return now + self.random.expovariate(per_second) if per_second > 0 else math.inf

    def _next_failure(self, now: float) -> float:
        """The next ordinary failure, its rate changing from week to week (thinning of
        a Poisson process with the highest weekly rate; Lewis and Shedler, 1979)."""
        failures = self.regime.failures
        base = failures.per_hour / 3600.0
        if base <= 0:
            return math.inf
        if failures.weekly_log_sd <= 0:
            return now + self.random.expovariate(base)
        top = base * math.exp(4 * failures.weekly_log_sd)
        at = now
        for _ in range(100_000):
            at += self.random.expovariate(top)
            if self.random.random() * top <= base * self._week_factor(at):
                return at
        return math.inf

    def _week_factor(self, at: float) -> float:
        week = int(at // (7 * 86400.0))
        while len(self.weeks) <= week:
            sd = self.regime.failures.weekly_log_sd
            self.weeks.append(min(math.exp(4 * sd), math.exp(self.random.gauss(-sd * sd / 2, sd))))
        return self.weeks[week]

    def _step_seconds(self, step: int, now: float) -> float:
        regime = self.regime
        fixed = regime.fixed_step_fraction
        size = fixed + (1.0 - fixed) * self.tokens.share(step)
        seconds = regime.step_seconds * size * math.exp(self.random.gauss(0.0, regime.step_log_sd))
        if regime.diurnal_amplitude:
            seconds *= 1.0 + regime.diurnal_amplitude * math.sin(2 * math.pi * now / 86400.0)
        done = step + 1
        if done % regime.checkpoint_interval(step) == 0:
            seconds += regime.checkpoint_seconds
        if regime.eval_interval_steps and done % regime.eval_interval_steps == 0:
            seconds += regime.eval_seconds
        return seconds

    def _interrupt(
        self, at: float, *, hang: float, down: float, rollback_to: int, reported: bool
    ) -> float:
        """Hang, then lose the metrics until the resume; returns the resume time."""
        failures = self.regime.failures
        self.interruptions += 1
        stop = at + hang
        resume = stop + down
        self.down.append((stop, resume))
        if reported:
            count = self.reports[-1][1] + failures.pods_per_failure
            self.reports.append((stop + failures.report_delay_seconds, count))
        self.changes.append((resume, rollback_to))
        return resume

    def run(self) -> float:
        regime, failures = self.regime, self.regime.failures
        now = regime.startup_seconds
        step, checkpoint, since_resume, job_start = 0, 0, 0, now
        next_failure = self._next_failure(now)
        next_major = self._after(now, failures.major_per_day / 86400.0)
        next_slowdown = self._after(now, regime.slowdowns.per_hour / 3600.0)
        slow_until, slow_factor = -1.0, 1.0
        scheduled = sorted(regime.scheduled, key=lambda event: event.at_step)
        scheduled_slow_left, scheduled_factor = 0, 1.0
        total = regime.total_steps * regime.tokens_per_step
        watch = list(self.watch)

        def resumed(at: float, to: int) -> None:
            nonlocal now, step, since_resume, job_start, next_failure, checkpoint
            now, step, since_resume, job_start = at, to, 0, at
            checkpoint = min(checkpoint, step)
            next_failure = self._next_failure(now)

        while self.tokens.after(step) < total:
            if scheduled and step >= scheduled[0].at_step:
                event = scheduled.pop(0)
                if event.slow_steps:
                    scheduled_slow_left, scheduled_factor = event.slow_steps, event.slow_factor
                    continue
                target = checkpoint if event.rollback_steps is None else step - event.rollback_steps
                target = max(0, target)
                resumed(
                    self._interrupt(
                        now,
                        hang=event.hang_seconds,
                        down=event.down_seconds,
                        rollback_to=target,
                        reported=event.reported,
                    ),
                    target,
                )
                continue
            if regime.job_limit_seconds and now - job_start >= regime.job_limit_seconds:
                # The job saves on its way out; the next one resumes from that step.
                checkpoint = step
                resumed(
                    self._interrupt(
                        now, hang=0.0, down=regime.turnover_seconds, rollback_to=step, reported=True
                    ),
                    step,
                )
                continue
            if now >= next_slowdown:
                slowdowns = regime.slowdowns
                slow_until = now + 3600.0 * self._lognormal(
                    slowdowns.median_hours, slowdowns.log_sd
                )
                slow_factor = slowdowns.factor
                next_slowdown = self._after(slow_until, slowdowns.per_hour / 3600.0)
            seconds = self._step_seconds(step, now)
            if since_resume < regime.warmup_steps:
                seconds *= regime.warmup_factor
            if now < slow_until:
                seconds *= slow_factor
            if scheduled_slow_left > 0:
                seconds *= scheduled_factor
                scheduled_slow_left -= 1
            if now + seconds > min(next_failure, next_major):
                major = next_major < next_failure
                at = min(next_failure, next_major)
                hang = 0.0
                if major:
                    down = 3600.0 * self._lognormal(
                        failures.major_median_hours, failures.major_log_sd
                    )
                    next_major = self._after(at + down, failures.major_per_day / 86400.0)
                    reported = True
                    if at < now:
                        # It came while the run was down: it joins that outage, and the
                        # run resumes when both are over.
                        down -= now - at
                        at = now
                        if down <= 0:
                            continue
                else:
                    if self.random.random() < failures.hang_share:
                        hang = self._lognormal(failures.hang_median_seconds, HANG_LOG_SD)
                    down = self._lognormal(failures.restart_median_seconds, failures.restart_log_sd)
                    if self.random.random() < failures.long_share:
                        down += 3600.0 * self._lognormal(
                            failures.long_median_hours, failures.long_log_sd
                        )
                    reported = self.random.random() < failures.reported_share
                resumed(
                    self._interrupt(
                        at, hang=hang, down=down, rollback_to=checkpoint, reported=reported
                    ),
                    checkpoint,
                )
                continue
            now += seconds
            step += 1
            since_resume += 1
            self.changes.append((now, step))
            if step % regime.checkpoint_interval(step - 1) == 0:
                checkpoint = step
            while watch and step >= watch[0]:
                self.reached.append((watch.pop(0), now))
        return now

    def rows(self, end: float) -> list[TraceRow]:
        regime = self.regime
        times = [time for time, _ in self.changes]
        report_times = [time for time, _ in self.reports]
        down = sorted(self.down)
        rows = []
        scrape = regime.scrape_seconds
        count = math.ceil(end / scrape) + 1
        down_index = 0
        total = regime.total_steps * regime.tokens_per_step
        for index in range(1, count + 1):
            at = index * scrape
            while down_index < len(down) and down[down_index][1] <= at:
                down_index += 1
            metrics_down = down_index < len(down) and down[down_index][0] <= at
            failures = self.reports[bisect.bisect_right(report_times, at) - 1][1]
            step: int | None = self.changes[bisect.bisect_right(times, at) - 1][1]
            if metrics_down or self.random.random() < regime.scrape_miss_share:
                step = None
            rows.append(
                TraceRow(
                    time=regime.epoch + timedelta(seconds=at),
                    step=step,
                    failures=failures,
                    tokens=None if step is None else self.tokens.after(step),
                )
            )
            if step is not None and self.tokens.after(step) >= total:
                break
        return rows


def simulate(regime: Regime, seed: int = 0, watch: tuple[int, ...] = ()) -> SimulatedRun:
    """One run of `regime` and its scrapes; `watch`: steps whose first reach is noted."""
    simulation = _Simulation(regime, seed, watch)
    end = simulation.run()
    rows = simulation.rows(end)
    return SimulatedRun(
        regime=regime,
        seed=seed,
        rows=tuple(rows),
        end_seconds=end,
        facts=plan_facts_for(regime),
        interruptions=simulation.interruptions,
        reached=tuple(simulation.reached),
    )
