"""The GPUBudget spec and status: a namespace's GPU-hour allowance and its use.

Pure: pydantic only; no I/O.
"""

from enum import StrEnum
from typing import Final, Literal

from pydantic import AwareDatetime, Field

from trainplan.api.base import ApiModel
from trainplan.api.durations import Duration
from trainplan.api.status import Condition


class GPUBudgetSpec(ApiModel):
    """An allowance of GPU-hours per rolling period, and how it is enforced."""

    gpu_hours: float = Field(gt=0, alias="gpuHours", description="GPU-hours allowed per period.")
    period: Duration = Field("30d", description="Rolling window, e.g. 30d.")
    max_gpus: int | None = Field(
        None, ge=1, alias="maxGPUs", description="Ceiling on GPUs in use at once."
    )
    enforcement: Literal["Reject", "Downsize", "Warn"] = Field(
        "Reject",
        description="Over budget: Reject the plan, Downsize it to fit, or Warn and admit it.",
    )
    charge_confidence: float = Field(
        0.5,
        ge=0.5,
        le=0.95,
        alias="chargeConfidence",
        description=(
            "The least quantile of its GPU-hours a plan is charged at, 0.5 (default: the"
            " estimate) to 0.95; a plan's objective.confidence may raise it. 0.9 charges"
            " the 90th percentile of its GPU-hours range."
        ),
    )


NEARLY_EXHAUSTED_RATIO: Final = 0.8
"""Used over the allowance at which a budget is nearly exhausted (condition, Event, alert)."""


class BudgetConditionType(StrEnum):
    """The GPUBudget's condition types."""

    VALID = "Valid"
    """The spec is valid and the figures are current."""
    NEARLY_EXHAUSTED = "NearlyExhausted"
    """At least 80% of the allowance used in the window."""
    EXHAUSTED = "Exhausted"
    """The whole allowance used in the window (reason Exhausted), or used and committed
    over it (reason Overcommitted)."""


class UsageInterval(ApiModel):
    """A stretch of time a plan held its GPUs (its Job's pods running or restarting)."""

    start: AwareDatetime = Field(description="When the plan's pods started holding GPUs.")
    end: AwareDatetime | None = Field(None, description="When they let go; none while running.")


class PlanUsage(ApiModel):
    """One admitted plan's entry in the budget's ledger. Kept after the plan is deleted,
    until its last interval leaves the window, so no spent GPU-hour is forgotten."""

    name: str = Field(description="The TrainingPlan's name.")
    uid: str | None = Field(None, description="The TrainingPlan's uid.")
    gpus: int = Field(ge=1, description="GPUs the plan holds while running.")
    projected_gpu_hours: float = Field(
        ge=0, alias="projectedGPUHours", description="GPU-hours the whole run is projected to use."
    )
    admitted_gpu_hours: float | None = Field(
        None,
        ge=0,
        alias="admittedGPUHours",
        description=(
            "GPU-hours the plan was admitted with: it commits at least these until it"
            " used them, whatever its projection says (absent in entries written before"
            " this field: the projection then, recorded at the next revision)."
        ),
    )
    charged_confidence: float | None = Field(
        None,
        ge=0.5,
        le=0.95,
        alias="chargedConfidence",
        description=(
            "The quantile of its GPU-hours admittedGPUHours is: the larger of the budget's"
            " chargeConfidence and the plan's objective.confidence; 0.5 (the estimate) for"
            " a plan taken in after it launched, and read as 0.5 in entries written before"
            " this field."
        ),
    )
    admitted_time: AwareDatetime = Field(description="When the plan was admitted.")
    intervals: tuple[UsageInterval, ...] = Field((), description="When it held its GPUs.")
    finished: bool = Field(False, description="The plan ended (or was deleted).")


class GPUBudgetStatus(ApiModel):
    """GPU-hours used and committed within the current period."""

    used_gpu_hours: float | None = Field(
        None, ge=0, alias="usedGPUHours", description="GPU-hours used in the period."
    )
    committed_gpu_hours: float | None = Field(
        None,
        ge=0,
        alias="committedGPUHours",
        description=(
            "What the admitted plans still commit: each the larger of its projected and"
            " admitted GPU-hours (charged at its chargedConfidence quantile) less what it"
            " used (while its pods run past that, at least its GPUs for an hour)."
        ),
    )
    remaining_gpu_hours: float | None = Field(
        None,
        alias="remainingGPUHours",
        description="Allowance minus used and committed; negative when over budget.",
    )
    active_plans: tuple[str, ...] = Field((), description="Admitted plans that are not done.")
    gpus_in_use: int | None = Field(
        None, ge=0, alias="gpusInUse", description="GPUs held by the admitted plans now."
    )
    ledger: tuple[PlanUsage, ...] = Field(
        (), description="Every admitted plan whose use still counts in the window."
    )
    last_updated_time: AwareDatetime | None = Field(
        None, description="When this status was last revised."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation last acted upon."
    )
    conditions: tuple[Condition, ...] = Field((), description="Standard conditions.")
