"""The plan series as the operator and the local backend expose them (DESIGN.md, "From
the operator"): each plan's latest snapshot and each budget's figures, rendered by one
prometheus-client collector at scrape time, and the server that exposes it. Both the
operator (`controller.metrics`, from the status it writes) and `trainplan run --local`
(from its own revisions) fill it, so their series are the same."""

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

from trainplan.api import Phase
from trainplan.runtime.schema import (
    BUDGET_GPU_HOURS,
    CALIBRATION_RUNS,
    CALIBRATION_STEP_SECONDS_FACTOR,
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
    """One plan's figures: from its status (operator) or its revisions (local run)."""

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
    calibration: str = ""
    """The ClusterCalibration that corrected the plan, empty for none."""


@dataclass(frozen=True, slots=True)
class BudgetFigures:
    """One GPUBudget's GPU-hours."""

    limit_gpu_hours: float
    used_gpu_hours: float
    committed_gpu_hours: float
    remaining_gpu_hours: float
    computed_at: datetime | None = None
    """When the figures were computed (the writer's clock): figures computed before the
    ones kept are stale and are not recorded (`record_budget`)."""


@dataclass(frozen=True, slots=True)
class CalibrationFigures:
    """What a ClusterCalibration's records support, as last read or written."""

    gpu_type: str
    step_seconds_factor: float
    runs: int


@dataclass(eq=False)
class PlanMetrics(Collector):
    """The latest snapshot of each plan (and figures of each budget), rendered on every
    scrape. Thread-safe; compared by identity (a registry keys its collectors)."""

    _plans: dict[tuple[str, str], PlanSnapshot] = field(default_factory=dict)
    _budgets: dict[tuple[str, str], BudgetFigures] = field(default_factory=dict)
    _calibrations: dict[str, CalibrationFigures] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_calibration(self, name: str, figures: CalibrationFigures) -> None:
        with self._lock:
            self._calibrations[name] = figures

    def record_budget(self, namespace: str, name: str, figures: BudgetFigures) -> None:
        """Keep a budget's figures, unless those kept were computed later: two revisions
        of one budget may finish out of order (a timer's and a plan's), and the later
        status write is the one that stands."""
        with self._lock:
            kept = self._budgets.get((namespace, name))
            if (
                kept is not None
                and kept.computed_at is not None
                and figures.computed_at is not None
                and figures.computed_at < kept.computed_at
            ):
                return
            self._budgets[(namespace, name)] = figures

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
            calibrations = dict(self._calibrations)
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
            info.add_metric(
                key,
                {"gpu_type": snap.gpu_type, "layout": snap.layout, "calibration": snap.calibration},
            )
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
        yield from _calibration_families(calibrations)


def _calibration_families(calibrations: Mapping[str, CalibrationFigures]) -> Iterator[Metric]:
    labels = list(CALIBRATION_RUNS.labels)
    factor = GaugeMetricFamily(
        CALIBRATION_STEP_SECONDS_FACTOR.name, CALIBRATION_STEP_SECONDS_FACTOR.help, labels=labels
    )
    runs = GaugeMetricFamily(CALIBRATION_RUNS.name, CALIBRATION_RUNS.help, labels=labels)
    for name, figures in sorted(calibrations.items()):
        factor.add_metric([name, figures.gpu_type], figures.step_seconds_factor)
        runs.add_metric([name, figures.gpu_type], float(figures.runs))
    yield factor
    yield runs


def _budget_family(budgets: Mapping[tuple[str, str], BudgetFigures]) -> Metric:
    family = GaugeMetricFamily(
        BUDGET_GPU_HOURS.name, BUDGET_GPU_HOURS.help, labels=list(BUDGET_GPU_HOURS.labels)
    )
    for (namespace, name), figures in sorted(budgets.items()):
        for kind, value in (
            ("limit", figures.limit_gpu_hours),
            ("used", figures.used_gpu_hours),
            ("committed", figures.committed_gpu_hours),
            ("remaining", figures.remaining_gpu_hours),
        ):
            family.add_metric([namespace, name, kind], value)
    return family


def serve_metrics(metrics: PlanMetrics, port: int, address: str = "0.0.0.0") -> tuple[Any, int]:
    """Serve `metrics` on `address:port` (0: any free port); returns (server, port)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(metrics)
    server, _ = start_http_server(port, addr=address, registry=registry)
    return server, int(server.server_address[1])
