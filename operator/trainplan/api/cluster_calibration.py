"""The ClusterCalibration resource: what a cluster's finished runs measured, and the
corrections they support for the next plans (`trainplan.planner.cluster_fit`).

Cluster-scoped, one per GPU type (or per hardware profile a team names). Every figure is
bounded: records come from pods' metrics and are input, not trusted values.

Pure: pydantic and the standard library only; no I/O.
"""

from typing import Final, Literal

from pydantic import AwareDatetime, Field

from trainplan.api.base import ApiModel
from trainplan.api.constants import API_VERSION, CLUSTER_CALIBRATION_KIND
from trainplan.api.plan import PercentileRange
from trainplan.api.resources import ObjectMeta
from trainplan.api.status import MAX_CONDITIONS, Condition

MAX_RECORDS: Final = 1000
"""Most run records one ClusterCalibration holds (older ones are dropped from the list)."""
_SECONDS_MAX: Final = 1.0e7
"""About 116 days: a bound on any measured step, restart or checkpoint time."""
_GPU_HOURS_MAX: Final = 1.0e12
_INTERRUPTIONS_MAX: Final = 10_000_000
_NAME_MAX_LENGTH: Final = 253
_PLAN_REFERENCE_MAX_LENGTH: Final = 2 * _NAME_MAX_LENGTH + 1
_LAYOUT_MAX_LENGTH: Final = 200
_FOLDED_RUNS_MAX: Final = 1_000_000_000
_BYTES_MAX: Final = 1.0e15
"""A checkpoint's bytes (a petabyte), and a write rate in bytes per second."""
_FOLDED_LOG_RATIO_MAX: Final = 1.0e11
"""Folded runs times the largest log ratio of bounded step times (ln 1e7 / 1e-7 < 40)."""
_FOLDED_SQUARES_MAX: Final = 1.0e13
"""Folded runs times the largest squared residual (80^2), rounded up; a bound written as a
plain number (Helm renders 1e16 and above as a string)."""


class CalibrationRecord(ApiModel):
    """One finished run: what its plan said and what it measured once steady."""

    plan: str = Field(
        min_length=1,
        max_length=_PLAN_REFERENCE_MAX_LENGTH,
        description="The TrainingPlan, namespace/name.",
    )
    finished: AwareDatetime = Field(description="When the run ended.")
    gpus: int = Field(ge=1, le=1_000_000, description="GPUs the run held.")
    layout: str = Field(
        "", max_length=_LAYOUT_MAX_LENGTH, description="The layout, e.g. TP2 PP1 DP64 ZeRO-1."
    )
    planned_step_seconds: float = Field(
        gt=0,
        le=_SECONDS_MAX,
        description=(
            "The catalog's step time for the run's layout: the plan's step time divided by"
            " the ClusterCalibration factor it was corrected by, if any."
        ),
    )
    measured_step_seconds: float = Field(
        gt=0,
        le=_SECONDS_MAX,
        description=(
            "The run's steady step time: the measured one less its checkpoint writes per step."
        ),
    )
    gpu_hours: float = Field(
        ge=0,
        le=_GPU_HOURS_MAX,
        alias="gpuHours",
        description="GPU-hours the run held its GPUs.",
    )
    interruptions: int = Field(
        0, ge=0, le=_INTERRUPTIONS_MAX, description="Interruptions (restarts) of the run."
    )
    planned_gpu_hours: float | None = Field(
        None,
        gt=0,
        le=_GPU_HOURS_MAX,
        alias="plannedGPUHours",
        description=(
            "The catalog's failure-free GPU-hours for the run: the plan's, less its expected"
            " interruptions' cost, divided by the step-time and whole-run factors of the"
            " ClusterCalibration it was corrected by, if any."
        ),
    )
    lost_gpu_hours: float = Field(
        0.0,
        ge=0,
        le=_GPU_HOURS_MAX,
        alias="lostGPUHours",
        description="GPU-hours the run lost to interruptions (restarts and redone steps).",
    )
    restart_seconds: float | None = Field(
        None,
        ge=0,
        le=_SECONDS_MAX,
        description=(
            "Mean seconds from an interruption to training again: the time lost per"
            " interruption less half a checkpoint interval of redone steps."
        ),
    )
    checkpoint_seconds: float | None = Field(
        None, ge=0, le=_SECONDS_MAX, description="Mean seconds to write a checkpoint."
    )
    checkpoint_bytes: float | None = Field(
        None,
        gt=0,
        le=_BYTES_MAX,
        description="Bytes each checkpoint wrote (weights and optimizer state, as planned).",
    )


class LogRatioTotals(ApiModel):
    """Folded runs' evidence on one log ratio, as the sums the fit needs."""

    runs: int = Field(0, ge=0, le=_FOLDED_RUNS_MAX, description="Runs folded.")
    weight_sum: float = Field(
        0.0, ge=0, le=_FOLDED_RUNS_MAX, description="Sum of their outlier weights (0 to 1 each)."
    )
    weighted_log_ratio_sum: float = Field(
        0.0,
        ge=-_FOLDED_LOG_RATIO_MAX,
        le=_FOLDED_LOG_RATIO_MAX,
        description="Sum of weight x log ratio.",
    )
    squares: float = Field(
        0.0,
        ge=0,
        le=_FOLDED_SQUARES_MAX,
        description="Sum of squared weighted residuals of the log ratio about their mean.",
    )


class FoldedRecords(ApiModel):
    """Records dropped beyond `spec.maxRecords`, kept as the sums the fit needs (written by
    the operator; every figure bounded)."""

    step_seconds: LogRatioTotals = Field(
        default_factory=LogRatioTotals, description="ln(measured / planned step time)."
    )
    whole_run: LogRatioTotals | None = Field(
        None, description="The whole-run log ratio, of the runs that recorded planned GPU-hours."
    )
    gpu_hours: float = Field(
        0.0, ge=0, le=_GPU_HOURS_MAX, alias="gpuHours", description="Their GPU-hours."
    )
    interruptions: int = Field(0, ge=0, le=_INTERRUPTIONS_MAX, description="Their interruptions.")
    restart_seconds: float | None = Field(
        None, ge=0, le=_SECONDS_MAX, description="Mean restart seconds of those measuring it."
    )
    restart_runs: int = Field(0, ge=0, le=_FOLDED_RUNS_MAX, description="Runs measuring it.")
    checkpoint_seconds: float | None = Field(
        None, ge=0, le=_SECONDS_MAX, description="Mean checkpoint seconds of those measuring it."
    )
    checkpoint_runs: int = Field(0, ge=0, le=_FOLDED_RUNS_MAX, description="Runs measuring it.")
    checkpoint_bytes_per_second: float | None = Field(
        None,
        gt=0,
        le=_BYTES_MAX,
        description="Mean checkpoint write rate (bytes per second) of those measuring it.",
    )
    checkpoint_rate_runs: int = Field(
        0, ge=0, le=_FOLDED_RUNS_MAX, description="Runs measuring the write rate."
    )


class ClusterCalibrationSpec(ApiModel):
    """Which GPUs the records describe and how many to keep."""

    gpu_type: str = Field(
        min_length=1, max_length=_NAME_MAX_LENGTH, description="Catalog GPU name."
    )
    default: bool = Field(
        False,
        description=(
            "Plans of this GPU type that name no calibration (hardware.calibration unset)"
            " are corrected by this one and add their records to it; with several such"
            " of one GPU type, the first by name."
        ),
    )
    max_records: int = Field(
        100,
        ge=1,
        le=MAX_RECORDS,
        description="Records kept; older ones are folded into status.folded.",
    )


class ClusterCalibrationStatus(ApiModel):
    """The records and the corrections fitted to them."""

    records: tuple[CalibrationRecord, ...] = Field(
        (), max_length=MAX_RECORDS, description="Finished runs, oldest first."
    )
    folded: FoldedRecords | None = Field(
        None, description="Records dropped beyond maxRecords, kept as sums the fit uses."
    )
    runs: int = Field(0, ge=0, description="Records the corrections rest on, folded ones too.")
    step_seconds_factor: float | None = Field(
        None, gt=0, description="Measured / planned step time the plans are corrected by."
    )
    step_seconds_ratio_range: PercentileRange | None = Field(
        None, description="10-90% of a new run's measured / corrected step time."
    )
    whole_run_factor: float | None = Field(
        None,
        gt=0,
        description="Measured / planned duration beyond the step time the plans are corrected by.",
    )
    gpu_hours_ratio_range: PercentileRange | None = Field(
        None,
        alias="gpuHoursRatioRange",
        description="10-90% of a new run's measured / corrected GPU-hours.",
    )
    interruptions_per_gpu_hour: float | None = Field(
        None,
        ge=0,
        alias="interruptionsPerGPUHour",
        description="The fitted interruption rate (posterior mean).",
    )
    restart_seconds: float | None = Field(
        None, ge=0, description="The fitted restart cost (median of the records)."
    )
    checkpoint_seconds: float | None = Field(
        None, ge=0, description="The fitted checkpoint cost (median of the records)."
    )
    checkpoint_bytes_per_second: float | None = Field(
        None,
        gt=0,
        le=_BYTES_MAX,
        description=(
            "The fitted checkpoint write rate (median of the records' bytes over seconds):"
            " plans that set no reliability.checkpointSeconds write their checkpoint at it."
        ),
    )
    conditions: tuple[Condition, ...] = Field(
        (), max_length=MAX_CONDITIONS, description="Standard conditions."
    )


class ClusterCalibration(ApiModel):
    """A whole ClusterCalibration resource."""

    api_version: Literal["trainplan.dev/v1alpha1"] = Field(
        API_VERSION, description="trainplan.dev/v1alpha1."
    )
    kind: Literal["ClusterCalibration"] = Field(
        CLUSTER_CALIBRATION_KIND, description="ClusterCalibration."
    )
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: ClusterCalibrationSpec = Field(description="The GPU type and the records kept.")
    status: ClusterCalibrationStatus | None = Field(
        None, description="Records and corrections, written by the operator."
    )
