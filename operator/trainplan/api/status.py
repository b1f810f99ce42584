"""The TrainingPlan status: phase, conditions, the plan, progress and the live ETA.

The progress and ETA names follow Kubeflow Trainer's `trainerStatus`. Times must carry a
time zone; naive datetimes are rejected.

Pure: pydantic and the standard library only; no I/O, no clock.
"""

from enum import StrEnum
from typing import Final, Literal, Self

from pydantic import AwareDatetime, Field, model_validator

from trainplan.api.base import ApiModel
from trainplan.api.plan import Plan


class Phase(StrEnum):
    """Where a TrainingPlan is in its life."""

    PENDING = "Pending"
    PLANNED = "Planned"
    REJECTED = "Rejected"
    LAUNCHING = "Launching"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


ACTIVE_PHASES: Final = (Phase.LAUNCHING, Phase.RUNNING, Phase.RESTARTING)
"""The phases of a launched plan that is not done: its ETA is revised."""
FINISHED_PHASES: Final = (Phase.SUCCEEDED, Phase.FAILED)
"""The phases of a run that ended: it is never launched again."""


class ConditionType(StrEnum):
    """The condition types trainplan writes."""

    PLANNED = "Planned"
    LAUNCHED = "Launched"
    PROGRESSING = "Progressing"
    DEADLINE_AT_RISK = "DeadlineAtRisk"
    STALLED = "Stalled"
    BUDGET_EXCEEDED = "BudgetExceeded"
    METRICS_AVAILABLE = "MetricsAvailable"
    COMPLETE = "Complete"
    """The run succeeded (terminal), as a Job's `Complete` (`kubectl wait` reads it)."""
    FAILED = "Failed"
    """The run failed (terminal), as a Job's `Failed`."""
    SUSPENDED = "Suspended"
    """True while the run is suspended (`job.suspend`); False once it resumed."""
    ADMITTED = "Admitted"
    """Kueue's admission of a queued plan's Workload (ClusterQueue and flavors)."""


CONDITION_TYPE_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
"""metav1.Condition's type: a qualified name (k8s.io/apimachinery, pkg/apis/meta/v1/types.go)."""
CONDITION_TYPE_MAX_LENGTH: Final = 316
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""metav1.Condition's reason: CamelCase, a letter first (the same source)."""
CONDITION_REASON_MAX_LENGTH: Final = 1024
CONDITION_MESSAGE_MAX_LENGTH: Final = 32768
MAX_CONDITIONS: Final = 32
"""Most conditions one status holds (trainplan writes fewer than ten types)."""


class Condition(ApiModel):
    """A standard Kubernetes condition, with metav1.Condition's bounds."""

    type: str = Field(
        min_length=1,
        max_length=CONDITION_TYPE_MAX_LENGTH,
        pattern=CONDITION_TYPE_PATTERN,
        description="Condition type, e.g. Planned, Progressing.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=CONDITION_REASON_MAX_LENGTH,
        pattern=CONDITION_REASON_PATTERN,
        description="CamelCase reason for the last transition.",
    )
    message: str = Field(
        "", max_length=CONDITION_MESSAGE_MAX_LENGTH, description="Human-readable details."
    )
    last_transition_time: AwareDatetime = Field(
        description="When the status last changed (with a time zone)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was set from."
    )


class Progress(ApiModel):
    """Training progress as measured in the pods."""

    step: int = Field(0, ge=0, description="Last completed optimizer step.")
    total_steps: int | None = Field(None, ge=1, description="Optimizer steps in the run.")
    tokens: float | None = Field(None, ge=0, description="Tokens trained on so far.")
    measured_step_seconds: float | None = Field(
        None, ge=0, description="Measured seconds per optimizer step."
    )
    measured_mfu: float | None = Field(
        None, ge=0, alias="measuredMFU", description="Measured model FLOPs utilisation."
    )
    measured_checkpoint_seconds: float | None = Field(
        None,
        ge=0,
        le=1.0e7,
        description="Mean seconds the training loop spent writing a checkpoint.",
    )
    last_step_time: AwareDatetime | None = Field(None, description="When the last step completed.")


class CompletionRange(ApiModel):
    """The likely completion window: 10th and 90th percentile."""

    earliest: AwareDatetime = Field(description="10th percentile of the completion time.")
    latest: AwareDatetime = Field(description="90th percentile of the completion time.")

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.earliest > self.latest:
            raise ValueError("earliest must not be after latest")
        return self


class FailureSummary(ApiModel):
    """Interruptions seen so far."""

    count: int = Field(0, ge=0, description="Interruptions so far.")
    last_reason: str | None = Field(None, description="Reason of the last interruption.")
    last_time: AwareDatetime | None = Field(None, description="When the last one happened.")
    lost_seconds: float = Field(0.0, ge=0, description="Training seconds lost to interruptions.")


class GPUHours(ApiModel):
    """GPU-hours used so far and projected for the whole run."""

    used: float = Field(0.0, ge=0, description="GPU-hours used so far.")
    projected: float | None = Field(None, ge=0, description="GPU-hours projected at completion.")


class GPUUsage(ApiModel):
    """The GPUs as their nodes report them (NVML, local rank 0 of every node)."""

    reporting_gpus: int = Field(0, ge=0, alias="reportingGPUs", description="GPUs reporting.")
    utilization_ratio: float | None = Field(
        None, ge=0, le=1, description="Mean utilisation over the reporting GPUs (0..1)."
    )
    memory_used_bytes: float | None = Field(
        None, ge=0, description="Memory used on the fullest GPU, in bytes."
    )
    memory_total_bytes: float | None = Field(
        None, ge=0, description="Memory of that GPU, in bytes."
    )
    power_watts: float | None = Field(None, ge=0, description="Power of all reporting GPUs.")


class TrainingPlanStatus(ApiModel):
    """The status the operator writes on a TrainingPlan."""

    phase: Phase | None = Field(None, description="Lifecycle phase.")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation last acted upon."
    )
    conditions: tuple[Condition, ...] = Field(
        (), max_length=MAX_CONDITIONS, description="Standard conditions."
    )
    plan: Plan | None = Field(None, description="The plan in force.")
    gpus: int | None = Field(None, ge=1, description="GPUs of the plan in force (printer column).")
    layout: str | None = Field(
        None, description="The plan's layout in short, e.g. 'TP8 PP2 DP128' (printer column)."
    )
    job_name: str | None = Field(None, description="Name of the training Job or JobSet.")
    start_time: AwareDatetime | None = Field(None, description="When training started.")
    completion_time: AwareDatetime | None = Field(None, description="When training ended.")
    progress: Progress | None = Field(None, description="Measured progress.")
    progress_percentage: int | None = Field(
        None, ge=0, le=100, description="Percent of the steps done (0..100)."
    )
    estimated_remaining_seconds: int | None = Field(
        None, ge=0, description="Estimated seconds to completion, failures included."
    )
    estimated_completion_time: AwareDatetime | None = Field(
        None, description="Estimated completion time."
    )
    estimated_completion_range: CompletionRange | None = Field(
        None, description="10th to 90th percentile of the completion time."
    )
    failures: FailureSummary | None = Field(None, description="Interruptions so far.")
    gpu_hours: GPUHours | None = Field(None, description="GPU-hours used and projected.")
    gpu_usage: GPUUsage | None = Field(None, description="The GPUs' utilisation, memory and power.")
    last_updated_time: AwareDatetime | None = Field(
        None, description="When this status was last revised."
    )

    def condition(self, condition_type: str) -> Condition | None:
        """The condition of this type, or None."""
        return next((c for c in self.conditions if c.type == condition_type), None)
