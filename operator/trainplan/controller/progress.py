"""From an ETA estimate to the TrainingPlan's progress status, conditions and the
transitions worth an Event (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from trainplan.api import ConditionType, format_duration
from trainplan.controller.conditions import make_condition, merge_conditions
from trainplan.eta import Estimate
from trainplan.monitor import FailureLedger, GpuUsage


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """The status patch of one ETA revision and the Events it calls for."""

    status: dict[str, Any]
    events: tuple[tuple[str, str, str], ...]
    """(type Normal|Warning, reason, message) for each transition."""


HORIZON_SECONDS = 1000 * 365.25 * 86400.0
"""Remaining times are written up to this (1,000 years), so every completion time is a
date an API server and `datetime` accept."""
FLOAT_MAX = 1e300
"""Status numbers are finite, at most this (JSON has no NaN or infinity)."""


LATEST_TIME = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
"""No time written is later (`datetime`'s own limit, and RFC 3339's four-digit year)."""


def _iso(time: datetime) -> str:
    return time.isoformat()


def _after(now: datetime, seconds: float) -> datetime:
    """`now` plus a remaining time, no later than LATEST_TIME."""
    try:
        return min(LATEST_TIME, now + timedelta(seconds=seconds))
    except OverflowError:
        return LATEST_TIME


def _seconds(value: float) -> float:
    """A remaining time as written: finite, within 0 and HORIZON_SECONDS."""
    return min(HORIZON_SECONDS, max(0.0, value)) if math.isfinite(value) else HORIZON_SECONDS


def _amount(value: float) -> float:
    """A non-negative status number: finite, at most FLOAT_MAX (NaN reads as 0)."""
    return min(FLOAT_MAX, max(0.0, value)) if not math.isnan(value) else 0.0


def _known_amount(value: Any) -> float | None:
    """A non-negative number the status held (it is input: anything else is None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _was_true(current: Mapping[str, Any], condition_type: str) -> bool:
    for condition in current.get("conditions", []) or []:
        if condition.get("type") == condition_type:
            return bool(condition.get("status") == "True")
    return False


def gpu_usage_status(gpus: GpuUsage) -> dict[str, Any]:
    """`status.gpuUsage`: the fields that are known."""
    fields = {
        "reportingGPUs": gpus.reporting_gpus,
        "utilizationRatio": gpus.utilization_ratio,
        "memoryUsedBytes": gpus.memory_used_bytes,
        "memoryTotalBytes": gpus.memory_total_bytes,
        "powerWatts": gpus.power_watts,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _stalled_condition(
    estimate: Estimate, *, now: datetime, generation: int | None
) -> dict[str, Any]:
    if estimate.stalled:
        waited = format_duration(_seconds(estimate.seconds_since_progress))
        message = (
            f"no step completed yet after {waited}"
            if estimate.waiting_for_first_step
            else f"no step completed for {waited}"
        )
        return make_condition(
            ConditionType.STALLED, "True", "NoProgress", message, now=now, generation=generation
        )
    if estimate.waiting_for_first_step:
        return make_condition(
            ConditionType.STALLED,
            "False",
            "WaitingForFirstStep",
            "waiting for the first step; the estimate is the plan's",
            now=now,
            generation=generation,
        )
    return make_condition(
        ConditionType.STALLED,
        "False",
        "Progressing",
        "steps are completing",
        now=now,
        generation=generation,
    )


def progress_update(
    estimate: Estimate,
    ledger: FailureLedger,
    current: Mapping[str, Any],
    *,
    tokens: int | None,
    last_step_time: datetime | None,
    metrics_error: str | None,
    gpus: GpuUsage | None = None,
    dropped_series: tuple[str, ...] = (),
    checkpoint_seconds: float | None = None,
    generation: int | None,
    now: datetime,
) -> ProgressUpdate:
    """The status fields of DESIGN.md for this revision, in one patch. `checkpoint_seconds`
    is the pods' mean checkpoint time; without it (no checkpoint since the last restart),
    the status keeps the one it had."""
    remaining = _seconds(estimate.remaining_seconds)
    earliest, latest = sorted(
        (_seconds(estimate.earliest_seconds), _seconds(estimate.latest_seconds))
    )
    progress: dict[str, Any] = {
        "step": max(0, estimate.step),
        "totalSteps": max(1, estimate.total_steps),  # the CRD's minimum
    }
    if tokens is not None and tokens >= 0:
        progress["tokens"] = tokens
    if estimate.measured_step_seconds is not None:
        progress["measuredStepSeconds"] = _amount(estimate.measured_step_seconds)
    if estimate.measured_mfu is not None and math.isfinite(estimate.measured_mfu):
        progress["measuredMFU"] = _amount(estimate.measured_mfu)
    if last_step_time is not None:
        progress["lastStepTime"] = _iso(last_step_time)
    if checkpoint_seconds is None:
        checkpoint_seconds = _known_amount(
            (current.get("progress") or {}).get("measuredCheckpointSeconds")
        )
    if checkpoint_seconds is not None and math.isfinite(checkpoint_seconds):
        progress["measuredCheckpointSeconds"] = min(_amount(checkpoint_seconds), 1.0e7)
    failures: dict[str, Any] = {
        "count": ledger.count + estimate.inferred_failures,
        "lostSeconds": _amount(estimate.lost_seconds),
    }
    if ledger.last is not None:
        failures["lastReason"] = ledger.last.reason
        if ledger.last.time:
            failures["lastTime"] = ledger.last.time
    elif (current.get("failures") or {}).get("lastReason"):
        failures["lastReason"] = current["failures"]["lastReason"]
    updates = [
        make_condition(
            ConditionType.METRICS_AVAILABLE,
            "False" if metrics_error else "True",
            "ScrapeFailed" if metrics_error else "Scraped",
            metrics_error
            or "training metrics read"
            + (f"; out of bounds, ignored: {', '.join(dropped_series)}" if dropped_series else ""),
            now=now,
            generation=generation,
        ),
        make_condition(
            ConditionType.DEADLINE_AT_RISK,
            "True" if estimate.deadline_at_risk else "False",
            "PastDeadline" if estimate.deadline_at_risk else "OnTime",
            f"median completion in {format_duration(remaining)}"
            + (
                ""
                if estimate.remaining_seconds < HORIZON_SECONDS
                else " or more (the horizon of the status)"
            )
            + (" passes the deadline" if estimate.deadline_at_risk else ""),
            now=now,
            generation=generation,
        ),
        _stalled_condition(estimate, now=now, generation=generation),
    ]
    status: dict[str, Any] = {
        "progress": progress,
        "progressPercentage": min(100, max(0, int(_amount(estimate.progress_ratio) * 100))),
        "estimatedRemainingSeconds": round(remaining),
        "estimatedCompletionTime": _iso(_after(now, remaining)),
        "estimatedCompletionRange": {
            "earliest": _iso(_after(now, earliest)),
            "latest": _iso(_after(now, latest)),
        },
        "failures": failures,
        "gpuHours": {
            "used": _amount(estimate.gpu_hours_used),
            "projected": _amount(estimate.gpu_hours_projected),
        },
        "conditions": merge_conditions(current.get("conditions"), updates),
        "lastUpdatedTime": _iso(now),
    }
    if gpus is not None:
        status["gpuUsage"] = gpu_usage_status(gpus)
    events: list[tuple[str, str, str]] = []
    if estimate.deadline_at_risk and not _was_true(current, ConditionType.DEADLINE_AT_RISK):
        events.append(("Warning", "DeadlineAtRisk", updates[1]["message"]))
    if estimate.stalled and not _was_true(current, ConditionType.STALLED):
        events.append(("Warning", "Stalled", updates[2]["message"]))
    previous_count = int((current.get("failures") or {}).get("count", 0) or 0)
    if failures["count"] > previous_count:
        reason = failures.get("lastReason", "unknown")
        events.append(("Warning", "Restarted", f"failure {failures['count']} ({reason}); resuming"))
    return ProgressUpdate(status, tuple(events))
