"""What the ETA engine reads and returns (pure).

`PlanFacts` are the plan's numbers the engine needs; `Observation` is one look at the
running job (a metrics scrape plus the failure count); `EtaState` is what the engine
carries from one revision to the next; `Estimate` is its answer. Times are tz-aware
datetimes at the edges and float seconds inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


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
class Interval:
    """Progress between two observations of the same run segment."""

    seconds: float
    steps: int

    @property
    def step_seconds(self) -> float:
        return self.seconds / self.steps


@dataclass(frozen=True, slots=True)
class EtaState:
    """What the engine remembers between revisions (bounded in size)."""

    started_at: float | None = None
    last_time: float | None = None
    last_step: int | None = None
    peak_step: int = 0
    """The highest step seen: after a failure, the step to regain."""
    last_progress_time: float | None = None
    """When the step count last moved (or the run started)."""
    segment_intervals: int = 0
    """Intervals seen since the current segment (start or restart) began."""
    segment_start_step: int | None = None
    """The step the current segment started from (None: not yet seen)."""
    intervals: tuple[Interval, ...] = ()
    failures: int = 0
    """Failures reported by the observations (Kubernetes or the local supervisor)."""
    inferred_failures: int = 0
    """Resumes (the step going back) that no reported failure explained."""
    failure_started_at: float | None = None
    """When the latest failure was seen, until steps move again (its restart cost)."""
    restart_costs_seconds: tuple[float, ...] = ()
    lost_seconds: float = 0.0
    """Measured cost of every failure so far (restart plus redone work)."""
    exposure_seconds: float = 0.0
    """Run time over which failures could happen (since start)."""


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
    """Wall-clock seconds the failures so far cost (restart plus redone work)."""
    notes: tuple[str, ...] = field(default=())
