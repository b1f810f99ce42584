"""A finished run's record in the ClusterCalibration its plan names.

`finished_run_record` and `status_with_record` are pure: what a succeeded plan's status
says it planned and measured, and the ClusterCalibration status with that record added
(records beyond `spec.maxRecords` folded into `status.folded`, the fit's figures and a `Calibrated`
condition recomputed from the records). `record_finished_run` reads the resource and
writes that status onto the version it read, reading again after a concurrent write
(`KubernetesApi.update_status`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

import kopf
from pydantic import ValidationError

from trainplan.api import (
    API_VERSION,
    CLUSTER_CALIBRATION_KIND,
    CalibrationRecord,
    ClusterCalibration,
    ClusterCalibrationStatus,
    Plan,
    TrainingPlanStatus,
    format_count,
    format_duration,
)
from trainplan.cluster import StatusKeptChangingError
from trainplan.controller.conditions import make_condition, merge_conditions
from trainplan.controller.context import ControllerContext
from trainplan.monitor.exposition import CalibrationFigures
from trainplan.planner import Calibration
from trainplan.planner.cluster_fit import (
    ClusterFit,
    cluster_evidence,
    failure_free_gpu_hours,
    fold,
    folded_evidence,
    folded_records,
    run_records,
)

RECORD_MIN_STEPS: Final = 20
"""Steps a run must have completed before its measured step time counts: the ETA's
measured step time is a median over recent steps, and fewer say little about steady state."""
CALIBRATED: Final = "Calibrated"
"""The ClusterCalibration condition saying how many runs its corrections rest on."""
_WRITE_ATTEMPTS: Final = 5

_log = logging.getLogger(__name__)


def measured_restart_seconds(
    lost_seconds_per_interruption: float, work_seconds: float
) -> float | None:
    """The restart cost R a run measured. The ETA counts each interruption's cost as the
    time from the interruption until the run regains the step it had reached, which the
    planner's reliability model prices as R + W / 2 (W the work between checkpoints, of
    which half is redone on average: `planner.reliability`, after Young 1974 and Daly
    2006), so R = cost - W / 2. None when the cost is within the half interval: the
    redone work's spread (0 to W) then hides R, and a 0 would be no measurement."""
    restart = lost_seconds_per_interruption - work_seconds / 2.0
    return min(restart, 1.0e7) if restart > 0 else None


def steady_step_seconds(
    measured_step_seconds: float, checkpoint_seconds: float, interval_steps: int
) -> float:
    """The steady step time of a run whose measured step time averages its checkpoint
    writes in (the ETA's speed is over wall time between steps): less the checkpoint time
    per step, as the planner adds it on its own (`planner.reliability`)."""
    steady = measured_step_seconds - checkpoint_seconds / max(1, interval_steps)
    return steady if steady > 0 else measured_step_seconds


def finished_run_record(
    namespace: str, name: str, status_document: Mapping[str, Any], now: datetime
) -> CalibrationRecord | None:
    """What a succeeded plan planned and measured, or None when its status lacks a steady
    measured step time (fewer than `RECORD_MIN_STEPS` steps) or is not valid."""
    try:
        status = TrainingPlanStatus.model_validate(dict(status_document))
    except ValidationError:
        return None
    plan: Plan | None = status.plan
    progress = status.progress
    if plan is None or progress is None or progress.measured_step_seconds is None:
        return None
    if progress.step < RECORD_MIN_STEPS:
        return None
    factor = plan.calibration.step_seconds_factor if plan.calibration is not None else 1.0
    whole_run = plan.calibration.whole_run_factor if plan.calibration is not None else 1.0
    failures = status.failures
    interruptions = failures.count if failures is not None else 0
    checkpoint_seconds = (
        progress.measured_checkpoint_seconds
        if progress.measured_checkpoint_seconds is not None
        else plan.reliability.checkpoint_seconds
    )
    measured_step = steady_step_seconds(
        progress.measured_step_seconds,
        checkpoint_seconds,
        plan.reliability.checkpoint_interval_steps,
    )
    restart_seconds = None
    if failures is not None and interruptions > 0 and failures.lost_seconds > 0:
        restart_seconds = measured_restart_seconds(
            failures.lost_seconds / interruptions,
            plan.reliability.checkpoint_interval_steps * measured_step,
        )
    failure_free = failure_free_gpu_hours(plan)
    planned_gpu_hours = failure_free / (factor * whole_run) if failure_free > 0 else None
    lost_seconds = failures.lost_seconds if failures is not None else 0.0
    lost_gpu_hours = min(lost_seconds * plan.gpus / 3600.0, 1.0e12)
    try:
        return CalibrationRecord(
            plan=f"{namespace}/{name}",
            finished=status.completion_time or now,
            gpus=plan.gpus,
            layout=plan.layout.summary[:200],
            planned_step_seconds=plan.step_seconds / factor,
            measured_step_seconds=measured_step,
            gpu_hours=status.gpu_hours.used if status.gpu_hours is not None else 0.0,
            interruptions=interruptions,
            restart_seconds=restart_seconds,
            checkpoint_seconds=progress.measured_checkpoint_seconds,
            checkpoint_bytes=plan.reliability.checkpoint_bytes or None,
            planned_gpu_hours=planned_gpu_hours,
            lost_gpu_hours=lost_gpu_hours,
        )
    except ValidationError:
        return None


def status_with_record(
    document: Mapping[str, Any], record: CalibrationRecord, prior: Calibration, now: datetime
) -> dict[str, Any] | None:
    """The ClusterCalibration status with `record` added, or None when it already holds a
    record of the same plan and end (a repeated event) or the resource is not valid."""
    try:
        resource = ClusterCalibration.model_validate(dict(document))
    except ValidationError:
        return None
    current = resource.status.records if resource.status is not None else ()
    if any(r.plan == record.plan and r.finished == record.finished for r in current):
        return None
    everything = (*current, record)
    records = everything[-resource.spec.max_records :]
    status = resource.status or ClusterCalibrationStatus()
    # Records beyond maxRecords are folded into the sums the fit keeps, with the weights
    # they had among all the records.
    every_run = run_records(
        resource.model_copy(
            update={
                "spec": resource.spec.model_copy(update={"max_records": len(everything)}),
                "status": status.model_copy(update={"records": everything}),
            }
        )
    )
    dropped = len(everything) - len(records)
    folded = fold(folded_evidence(resource), every_run[:dropped], every_run)
    updated = resource.model_copy(
        update={
            "status": status.model_copy(
                update={"records": records, "folded": folded_records(folded)}
            )
        }
    )
    fit = cluster_evidence(updated, prior).fit
    message = calibration_summary(fit, folded.runs)
    previous = [c.to_document() for c in (resource.status.conditions if resource.status else ())]
    condition = make_condition(
        CALIBRATED,
        "True",
        "Fitted",
        message,
        now=now,
        generation=resource.metadata.generation,
    )
    written: dict[str, Any] = {
        "records": [r.to_document() for r in records],
        "runs": fit.runs,
        "stepSecondsFactor": fit.step_seconds_factor,
        "stepSecondsRatioRange": {
            "p10": fit.step_seconds_ratio_p10,
            "p90": fit.step_seconds_ratio_p90,
        },
        "interruptionsPerGPUHour": fit.interruptions_per_gpu_hour,
        "wholeRunFactor": fit.whole_run_factor,
        "restartSeconds": fit.restart_seconds,
        "checkpointSeconds": fit.checkpoint_seconds,
        "checkpointBytesPerSecond": fit.checkpoint_bytes_per_second,
        "conditions": merge_conditions(previous, [condition]),
    }
    if fit.gpu_hours_ratio_p10 is not None and fit.gpu_hours_ratio_p90 is not None:
        written["gpuHoursRatioRange"] = {
            "p10": fit.gpu_hours_ratio_p10,
            "p90": fit.gpu_hours_ratio_p90,
        }
    kept_folded = folded_records(folded)
    if kept_folded is not None:
        written["folded"] = kept_folded.to_document()
    return written


def calibration_summary(fit: ClusterFit, folded_runs: int) -> str:
    """The fit in words, for the `Calibrated` condition (what `kubectl describe` shows)."""
    parts = [
        f"{format_count(fit.runs, 'run')}"
        + (f" ({folded_runs} folded from older records)" if folded_runs else ""),
        f"step time x {fit.step_seconds_factor:.3f} of the catalog's, a new run within"
        f" x {fit.step_seconds_ratio_p10:.2f}-{fit.step_seconds_ratio_p90:.2f} of that"
        " (10-90%)",
        f"{fit.interruptions_per_gpu_hour:.3g} interruptions per GPU-hour",
    ]
    if fit.whole_run_runs and fit.gpu_hours_ratio_p10 and fit.gpu_hours_ratio_p90:
        parts.append(
            f"whole runs x {fit.whole_run_factor:.3f} of the plans' beyond their step time"
            f" ({fit.whole_run_runs} measured), GPU-hours within x"
            f" {fit.gpu_hours_ratio_p10:.2f}-{fit.gpu_hours_ratio_p90:.2f} (10-90%)"
        )
    if fit.restart_seconds is not None:
        parts.append(f"restarts take {format_duration(fit.restart_seconds)}")
    if fit.checkpoint_seconds is not None:
        parts.append(f"checkpoints take {format_duration(fit.checkpoint_seconds)}")
    if fit.checkpoint_bytes_per_second is not None:
        parts.append(
            f"checkpoints write at {fit.checkpoint_bytes_per_second / 1e9:.3g} GB/s"
            " (plans without checkpointSeconds use it)"
        )
    if fit.down_weighted:
        parts.append(f"{format_count(fit.down_weighted, 'outlier run')} down-weighted")
    return "; ".join(parts)


def note_calibration(context: ControllerContext, plan_document: Any) -> None:
    """Export the figures of the ClusterCalibration a plan was corrected by (its
    `status.plan.calibration`), if any."""
    if not isinstance(plan_document, Mapping):
        return
    used = plan_document.get("calibration")
    if not isinstance(used, Mapping):
        return
    context.metrics.record_calibration(
        str(used.get("name", "")),
        CalibrationFigures(
            gpu_type=str(plan_document.get("gpuType", "")),
            step_seconds_factor=float(used.get("stepSecondsFactor", 1.0)),
            runs=int(used.get("runs", 0)),
        ),
    )


def recorded_calibration(plan_document: Mapping[str, Any]) -> str | None:
    """The ClusterCalibration a finished plan's record goes to: the one its spec names,
    or, naming none, the one its plan was made with (its GPU type's default); None for
    `none` or when there is neither."""
    spec = plan_document.get("spec")
    hardware = spec.get("hardware") if isinstance(spec, Mapping) else None
    named = hardware.get("calibration") if isinstance(hardware, Mapping) else None
    if named is not None:
        return named if isinstance(named, str) and named != "none" else None
    status = plan_document.get("status")
    planned = status.get("plan") if isinstance(status, Mapping) else None
    used = planned.get("calibration") if isinstance(planned, Mapping) else None
    name = used.get("name") if isinstance(used, Mapping) else None
    return name if isinstance(name, str) and name else None


async def record_finished_run(context: ControllerContext, plan_document: Mapping[str, Any]) -> None:
    """Add a succeeded plan's record to the ClusterCalibration its spec names or, naming
    none, to its GPU type's default that planned it (`status.plan.calibration`), if any."""
    name = recorded_calibration(plan_document)
    if name is None:
        return
    meta = plan_document.get("metadata") or {}
    now = context.clock()
    record = finished_run_record(
        meta.get("namespace") or "default",
        meta.get("name") or "",
        plan_document.get("status") or {},
        now,
    )
    if record is None:
        _log.info(
            "%s/%s: no steady step time measured; not recorded",
            meta.get("namespace"),
            meta.get("name"),
        )
        return

    async def with_record(document: dict[str, Any]) -> dict[str, Any] | None:
        # Up to `MAX_RECORDS` records to validate and refit: off the event loop.
        return await asyncio.to_thread(
            status_with_record, document, record, context.catalog.calibration, now
        )

    try:
        written = await context.api().update_status(
            API_VERSION, CLUSTER_CALIBRATION_KIND, "", name, with_record, attempts=_WRITE_ATTEMPTS
        )
    except StatusKeptChangingError as error:
        raise kopf.TemporaryError(str(error), delay=1) from error
    if written is None:
        return
    document, status = written
    context.metrics.record_calibration(
        name,
        CalibrationFigures(
            gpu_type=str((document.get("spec") or {}).get("gpuType", "")),
            step_seconds_factor=float(status["stepSecondsFactor"]),
            runs=int(status["runs"]),
        ),
    )
