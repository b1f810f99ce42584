"""What the ETA engine reads and returns (pure).

`PlanFacts` are the plan's numbers the engine needs; `Observation` is one look at the
running job (a metrics scrape plus the failure count); `EtaState` is what the engine
carries from one revision to the next; `Estimate` is its answer. Times are tz-aware
datetimes at the edges and float seconds inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from trainplan.eta.failures import CostStats, Episode, Evidence, FailureBlocks
from trainplan.eta.speed import SpeedStats


@dataclass(frozen=True, slots=True)
class PlanFacts:
    """The plan's figures the ETA starts from."""

    total_steps: int
    planned_step_seconds: float
    gpus: int
    checkpoint_interval_steps: int
    restart_seconds: float
    interruptions_per_gpu_hour: float
    planned_mfu: float
    planned_duration_seconds: float
    deadline_seconds: float | None = None
    """The objective's deadline, counted from the run's start."""
    tokens_per_step: float | None = None
    """Tokens in one optimizer step at the full batch; with it, progress and speed are
    counted in tokens when the observations carry them (steps of a batch-size ramp-up
    are smaller)."""
    checkpoint_seconds: float = 0.0
    """Seconds to write one checkpoint, every `checkpoint_interval_steps` steps."""

    @property
    def work_per_step(self) -> float:
        """Units of work in one full step: tokens when known, else 1 (steps)."""
        return self.tokens_per_step if self.tokens_per_step else 1.0

    @property
    def total_work(self) -> float:
        return self.total_steps * self.work_per_step

    @property
    def planned_seconds_per_work(self) -> float:
        """The planned wall-clock per unit of work, checkpoint writes included."""
        per_step = self.planned_step_seconds
        if self.checkpoint_interval_steps > 0:
            per_step += self.checkpoint_seconds / self.checkpoint_interval_steps
        return per_step / self.work_per_step


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at the run. `step` is None when no metrics could be read."""

    time: datetime
    step: int | None
    tokens: int | None = None
    last_step_time: datetime | None = None
    failures: int = 0
    """Distinct failures seen so far (restarts, evictions, OOM kills), cumulative."""
    checkpoint_step: int | None = None
    started_at: datetime | None = None
    """When the run started (the Job's start time); the first observation if unknown."""


@dataclass(frozen=True, slots=True)
class EtaState:
    """What the engine remembers between revisions (bounded in size)."""

    started_at: float | None = None
    """When the run started (seconds since the epoch)."""
    observed_since: float | None = None
    """The first observation: failures are counted from here."""
    last_time: float | None = None
    """The latest observation (the engine's clock never goes back)."""
    last_step: int | None = None
    """The latest step seen in the metrics (kept across observations without them)."""
    last_work: float | None = None
    peak_step: int = 0
    """The highest step seen: after a failure, the step to regain."""
    peak_work: float = 0.0
    anchor_time: float | None = None
    """When the latest step change happened: the reporter's last-step time, else the
    first observation that saw it. Intervals and episodes are timed from anchors."""
    anchor_work: float | None = None
    last_progress_time: float | None = None
    """When the step count last moved (an anchor), None before the first step."""
    segment_start_step: int | None = None
    """The step the current segment (start or resume) began at; its first
    `WARMUP_STEPS` steps measure no speed."""
    missing: int = 0
    """Observations without metrics in a row."""
    speed: SpeedStats = field(default_factory=SpeedStats)
    full_batch_seen: bool = False
    """An interval of full-size steps was measured: the smaller steps of a batch-size
    ramp-up no longer price the work."""
    failures: int = 0
    """Failures reported by the observations (Kubernetes or the local supervisor)."""
    inferred_failures: int = 0
    """Resumes (the step going back, or lost time across a gap in the metrics) that no
    reported failure explained."""
    interruptions: int = 0
    """Episodes of lost time so far, the open one included (however many failures each)."""
    episode: Episode | None = None
    """The interruption in progress."""
    costs: CostStats = field(default_factory=CostStats)
    """Log costs of the closed ordinary interruptions, each counted by its share of
    being one (`Interruptions.major_share`)."""
    major_costs: CostStats = field(default_factory=CostStats)
    """Log costs of the closed major outages, each counted by its share of being one."""
    restart_costs_seconds: tuple[float, ...] = ()
    """The latest closed episodes' costs (bounded)."""
    lost_seconds: float = 0.0
    """Measured cost of every closed interruption (restart, outage and redone work)."""
    downtime_seconds: float = 0.0
    """Wall-clock of every closed interruption, its redone work included."""
    exposure_seconds: float = 0.0
    """Time the run was up since the first observation: the failure rate's exposure."""
    evidence: Evidence = field(default_factory=Evidence)
    """Interruptions, exposure and costs weighed by age: what the laws are fitted to."""
    blocks: FailureBlocks = field(default_factory=FailureBlocks)
    """Interruptions per day of running: how much their rate wanders."""
    seconds_per_work: float | None = None
    """The speed the last revision priced the work at (the next one judges by it)."""
    major_seconds: float | None = None
    """The last revision's threshold of a major outage."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """The revised ETA and the figures behind it."""

    time: datetime
    step: int
    total_steps: int
    progress_ratio: float
    step_seconds: float
    """Blended wall-clock seconds per step used for the remaining steps."""
    measured_step_seconds: float | None
    measured_weight: float
    """0: the plan alone; 1: the measurements alone."""
    remaining_seconds: float
    """Median remaining wall-clock time, expected failures included."""
    earliest_seconds: float
    """10th percentile of the remaining time."""
    latest_seconds: float
    """90th percentile of the remaining time."""
    failure_rate_per_hour: float
    expected_failures_remaining: float
    failure_cost_seconds: float
    measured_mfu: float | None
    gpu_hours_used: float
    gpu_hours_projected: float
    stalled: bool
    seconds_since_progress: float
    deadline_at_risk: bool
    metrics_available: bool
    inferred_failures: int = 0
    """Resumes seen in the metrics that no reported failure explained."""
    lost_seconds: float = 0.0
    """Wall-clock seconds the interruptions so far cost (restart plus redone work), the
    one in progress included."""
    notes: tuple[str, ...] = field(default=())
    interruptions: int = 0
    """Interruptions so far: episodes of lost time, however many failures each."""
    outage_seconds: float = 0.0
    """How long the interruption in progress has lasted (0: none)."""
    outage_remaining_seconds: float = 0.0
    """Its expected rest, included in `remaining_seconds`."""
    waiting_for_first_step: bool = False
    """No step has completed yet: the estimate is the plan's."""
    work_done: float = 0.0
    """Tokens (or steps) done, in the unit of `PlanFacts.work_per_step`."""
