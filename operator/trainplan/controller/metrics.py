"""The operator's Prometheus metrics: the plan series (`trainplan.monitor.exposition`)
filled from the status the operator writes (`snapshot_from_status`, pure), so the
metrics and `kubectl get tp` never disagree; and a budget's figures."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainplan.api import parse_duration_seconds
from trainplan.controller.budgets import BudgetSummary
from trainplan.monitor.exposition import BudgetFigures, PlanMetrics, PlanSnapshot, serve_metrics

OperatorMetrics = PlanMetrics
"""The operator's collector: every plan it handles and every budget."""


def budget_figures(summary: BudgetSummary, computed_at: datetime | None = None) -> BudgetFigures:
    """A budget's figures for the metrics, computed at `computed_at`."""
    return BudgetFigures(
        limit_gpu_hours=summary.limit_gpu_hours,
        used_gpu_hours=summary.used_gpu_hours,
        committed_gpu_hours=summary.committed_gpu_hours,
        remaining_gpu_hours=summary.remaining_gpu_hours,
        computed_at=computed_at,
    )


def _deadline_timestamp(status: Mapping[str, Any], spec: Mapping[str, Any]) -> float | None:
    """`startTime` plus `objective.deadline`; None without either (or an unreadable one)."""
    deadline = (spec.get("objective") or {}).get("deadline")
    start = status.get("startTime")
    if not deadline or not start:
        return None
    try:
        return datetime.fromisoformat(str(start)).timestamp() + parse_duration_seconds(
            str(deadline)
        )
    except ValueError:
        return None


def snapshot_from_status(
    status: Mapping[str, Any], spec: Mapping[str, Any] | None = None
) -> PlanSnapshot:
    """The metrics of a TrainingPlan status (as stored, camelCase); `spec` (the
    resource's) gives the deadline."""
    plan = status.get("plan") or {}
    progress = status.get("progress") or {}
    failures = status.get("failures") or {}
    gpu_hours = status.get("gpuHours") or {}
    completion = status.get("estimatedCompletionTime")
    count = int(failures.get("count", 0) or 0)
    reason = str(failures.get("lastReason") or "unknown")
    progress_ratio = None
    if status.get("progressPercentage") is not None and progress.get("totalSteps"):
        progress_ratio = float(progress.get("step", 0)) / float(progress["totalSteps"])
    return PlanSnapshot(
        gpu_type=str(plan.get("gpuType", "")),
        layout=str(status.get("layout", "")),
        phase=str(status.get("phase", "")),
        gpus=status.get("gpus"),
        progress_ratio=progress_ratio,
        eta_seconds=status.get("estimatedRemainingSeconds"),
        completion_timestamp_seconds=datetime.fromisoformat(completion).timestamp()
        if completion
        else None,
        planned_step_seconds=plan.get("stepSeconds"),
        measured_step_seconds=progress.get("measuredStepSeconds"),
        planned_mfu=plan.get("mfu"),
        measured_mfu=progress.get("measuredMFU"),
        failures_by_reason=((reason, count),) if count else (),
        gpu_hours_used=gpu_hours.get("used"),
        gpu_hours_projected=gpu_hours.get("projected") or plan.get("gpuHours"),
        deadline_timestamp_seconds=_deadline_timestamp(status, spec or {}),
        lost_seconds=failures.get("lostSeconds"),
        calibration=str((plan.get("calibration") or {}).get("name", "")),
    )


__all__ = [
    "OperatorMetrics",
    "PlanSnapshot",
    "budget_figures",
    "serve_metrics",
    "snapshot_from_status",
]
