"""The operator's Prometheus metrics (DESIGN.md, "From the operator"): a collector that
renders each plan's latest snapshot at scrape time, and the server that exposes it.

Snapshots are built from the status the operator writes (`snapshot_from_status`, pure),
so the metrics and `kubectl get tp` never disagree; the deadline is the status's
`startTime` plus the spec's `objective.deadline`, the instant the `DeadlineAtRisk`
condition compares the estimate with.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.registry import Collector

from trainplan.api import Phase, parse_duration_seconds
from trainplan.controller.budgets import BudgetSummary
from trainplan.runtime.schema import (
    BUDGET_GPU_HOURS,
    PLAN_DEADLINE_TIMESTAMP_SECONDS,
    PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS,
    PLAN_ETA_SECONDS,
    PLAN_FAILURES_TOTAL,
    PLAN_GPU_HOURS,
    PLAN_GPUS,
    PLAN_INFO,
    PLAN_LOST_SECONDS,
    PLAN_MFU,
    PLAN_PHASE,
    PLAN_PROGRESS_RATIO,
    PLAN_STEP_SECONDS,
)

_PHASES = tuple(phase.value for phase in Phase)


@dataclass(frozen=True, slots=True)
class PlanSnapshot:
    """One plan's figures, as its status holds them."""

    gpu_type: str = ""
    layout: str = ""
    phase: str = ""
    gpus: int | None = None
    progress_ratio: float | None = None
    eta_seconds: float | None = None
    completion_timestamp_seconds: float | None = None
    planned_step_seconds: float | None = None
    measured_step_seconds: float | None = None
    planned_mfu: float | None = None
    measured_mfu: float | None = None
    failures_by_reason: tuple[tuple[str, int], ...] = ()
    gpu_hours_used: float | None = None
    gpu_hours_projected: float | None = None
    deadline_timestamp_seconds: float | None = None
    lost_seconds: float | None = None


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
    )


@dataclass(eq=False)
class OperatorMetrics(Collector):
    """The latest snapshot of each plan, rendered on every scrape. Thread-safe; compared
    by identity (a registry keys its collectors)."""

    _plans: dict[tuple[str, str], PlanSnapshot] = field(default_factory=dict)
    _budgets: dict[tuple[str, str], BudgetSummary] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_budget(self, namespace: str, name: str, summary: BudgetSummary) -> None:
        with self._lock:
            self._budgets[(namespace, name)] = summary

    def forget_budget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._budgets.pop((namespace, name), None)

    def record(self, namespace: str, name: str, snapshot: PlanSnapshot) -> None:
        with self._lock:
            self._plans[(namespace, name)] = snapshot

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._plans.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            plans = dict(self._plans)
            budgets = dict(self._budgets)
        labels = ["namespace", "plan"]
        info = InfoMetricFamily(PLAN_INFO.name.removesuffix("_info"), PLAN_INFO.help, labels=labels)
        phase = StateSetMetricFamily(PLAN_PHASE.name, PLAN_PHASE.help, labels=labels)
        gauges = {
            spec.name: GaugeMetricFamily(spec.name, spec.help, labels=labels)
            for spec in (
                PLAN_GPUS,
                PLAN_PROGRESS_RATIO,
                PLAN_ETA_SECONDS,
                PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS,
                PLAN_DEADLINE_TIMESTAMP_SECONDS,
                PLAN_LOST_SECONDS,
            )
        }
        step = GaugeMetricFamily(
            PLAN_STEP_SECONDS.name, PLAN_STEP_SECONDS.help, labels=[*labels, "source"]
        )
        mfu = GaugeMetricFamily(PLAN_MFU.name, PLAN_MFU.help, labels=[*labels, "source"])
        failures = CounterMetricFamily(
            PLAN_FAILURES_TOTAL.name.removesuffix("_total"),
            PLAN_FAILURES_TOTAL.help,
            labels=[*labels, "reason"],
        )
        hours = GaugeMetricFamily(
            PLAN_GPU_HOURS.name, PLAN_GPU_HOURS.help, labels=[*labels, "kind"]
        )
        for (namespace, name), snap in sorted(plans.items()):
            key = [namespace, name]
            info.add_metric(key, {"gpu_type": snap.gpu_type, "layout": snap.layout})
            if snap.phase:
                phase.add_metric(key, {p: p == snap.phase for p in _PHASES})
            for spec_name, value in (
                (PLAN_GPUS.name, snap.gpus),
                (PLAN_PROGRESS_RATIO.name, snap.progress_ratio),
                (PLAN_ETA_SECONDS.name, snap.eta_seconds),
                (
                    PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS.name,
                    snap.completion_timestamp_seconds,
                ),
                (PLAN_DEADLINE_TIMESTAMP_SECONDS.name, snap.deadline_timestamp_seconds),
                (PLAN_LOST_SECONDS.name, snap.lost_seconds),
            ):
                if value is not None:
                    gauges[spec_name].add_metric(key, float(value))
            for source, value in (
                ("planned", snap.planned_step_seconds),
                ("measured", snap.measured_step_seconds),
            ):
                if value is not None:
                    step.add_metric([*key, source], float(value))
            for source, value in (("planned", snap.planned_mfu), ("measured", snap.measured_mfu)):
                if value is not None:
                    mfu.add_metric([*key, source], float(value))
            for reason, count in snap.failures_by_reason:
                failures.add_metric([*key, reason], float(count))
            for kind, value in (
                ("used", snap.gpu_hours_used),
                ("projected", snap.gpu_hours_projected),
            ):
                if value is not None:
                    hours.add_metric([*key, kind], float(value))
        yield info
        yield phase
        yield from gauges.values()
        yield step
        yield mfu
        yield failures
        yield hours
        yield _budget_family(budgets)


def _budget_family(budgets: Mapping[tuple[str, str], BudgetSummary]) -> Metric:
    family = GaugeMetricFamily(
        BUDGET_GPU_HOURS.name, BUDGET_GPU_HOURS.help, labels=list(BUDGET_GPU_HOURS.labels)
    )
    for (namespace, name), summary in sorted(budgets.items()):
        for kind, value in (
            ("limit", summary.limit_gpu_hours),
            ("used", summary.used_gpu_hours),
            ("committed", summary.committed_gpu_hours),
            ("remaining", summary.remaining_gpu_hours),
        ):
            family.add_metric([namespace, name, kind], value)
    return family


def serve_metrics(metrics: OperatorMetrics, port: int, address: str = "0.0.0.0") -> tuple[Any, int]:
    """Serve `metrics` on `address:port` (0: any free port); returns (server, port)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(metrics)
    server, _ = start_http_server(port, addr=address, registry=registry)
    return server, int(server.server_address[1])
