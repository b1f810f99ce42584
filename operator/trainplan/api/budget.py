"""The GPUBudget spec and status: a namespace's GPU-hour allowance and its use.

Pure: pydantic only; no I/O.
"""

from typing import Literal

from pydantic import Field

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


class GPUBudgetStatus(ApiModel):
    """GPU-hours used and committed within the current period."""

    used_gpu_hours: float | None = Field(
        None, ge=0, alias="usedGPUHours", description="GPU-hours used in the period."
    )
    committed_gpu_hours: float | None = Field(
        None,
        ge=0,
        alias="committedGPUHours",
        description="Projected remainder of the admitted plans.",
    )
    remaining_gpu_hours: float | None = Field(
        None,
        alias="remainingGPUHours",
        description="Allowance minus used and committed; negative when over budget.",
    )
    active_plans: tuple[str, ...] = Field((), description="Admitted plans that are not done.")
    conditions: tuple[Condition, ...] = Field((), description="Standard conditions.")
