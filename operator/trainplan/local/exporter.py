"""The operator's plan series for a local run, served for a local Prometheus.

The same names and labels as the operator's (`trainplan.runtime.schema`, `PLAN_*`), with
`namespace="local"`, so the Grafana dashboard works against a local run too (a local run
has no deadline, phase or budget series). The collector renders the latest estimate at
scrape time; thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainplan.local.launch import LOCAL_NAMESPACE
from trainplan.runtime.schema import (
    PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS,
    PLAN_ETA_SECONDS,
    PLAN_FAILURES_TOTAL,
    PLAN_GPU_HOURS,
    PLAN_GPUS,
    PLAN_LOST_SECONDS,
    PLAN_MFU,
    PLAN_PROGRESS_RATIO,
    PLAN_STEP_SECONDS,
)

RESTART_REASON = "restart"
"""The `reason` label of a local run's failures (a torchrun or worker restart)."""


@dataclass(frozen=True, slots=True)
class LocalSnapshot:
    """The figures of one revision."""

    gpus: int
    progress_ratio: float
    eta_seconds: float
    completion_timestamp_seconds: float
    planned_step_seconds: float
    measured_step_seconds: float | None
    failures: int
    planned_mfu: float | None = None
    measured_mfu: float | None = None
    gpu_hours_used: float | None = None
    gpu_hours_projected: float | None = None
    lost_seconds: float | None = None


class LocalMetrics(Collector):
    """The latest snapshot of one local plan."""

    def __init__(self, plan: str) -> None:
        self.plan = plan
        self._snapshot: LocalSnapshot | None = None
        self._lock = threading.Lock()

    def record(self, snapshot: LocalSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = self._snapshot
        labels = ["namespace", "plan"]
        key = [LOCAL_NAMESPACE, self.plan]
        gauges = {
            spec.name: GaugeMetricFamily(spec.name, spec.help, labels=labels)
            for spec in (
                PLAN_GPUS,
                PLAN_PROGRESS_RATIO,
                PLAN_ETA_SECONDS,
                PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS,
                PLAN_LOST_SECONDS,
            )
        }
        step = GaugeMetricFamily(
            PLAN_STEP_SECONDS.name, PLAN_STEP_SECONDS.help, labels=[*labels, "source"]
        )
        mfu = GaugeMetricFamily(PLAN_MFU.name, PLAN_MFU.help, labels=[*labels, "source"])
        hours = GaugeMetricFamily(
            PLAN_GPU_HOURS.name, PLAN_GPU_HOURS.help, labels=[*labels, "kind"]
        )
        failures = CounterMetricFamily(
            PLAN_FAILURES_TOTAL.name.removesuffix("_total"),
            PLAN_FAILURES_TOTAL.help,
            labels=[*labels, "reason"],
        )
        if snap is not None:
            gauges[PLAN_GPUS.name].add_metric(key, float(snap.gpus))
            gauges[PLAN_PROGRESS_RATIO.name].add_metric(key, snap.progress_ratio)
            gauges[PLAN_ETA_SECONDS.name].add_metric(key, snap.eta_seconds)
            gauges[PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS.name].add_metric(
                key, snap.completion_timestamp_seconds
            )
            step.add_metric([*key, "planned"], snap.planned_step_seconds)
            if snap.measured_step_seconds is not None:
                step.add_metric([*key, "measured"], snap.measured_step_seconds)
            failures.add_metric([*key, RESTART_REASON], float(snap.failures))
            if snap.lost_seconds is not None:
                gauges[PLAN_LOST_SECONDS.name].add_metric(key, snap.lost_seconds)
            for source, value in (("planned", snap.planned_mfu), ("measured", snap.measured_mfu)):
                if value is not None:
                    mfu.add_metric([*key, source], value)
            for kind, value in (
                ("used", snap.gpu_hours_used),
                ("projected", snap.gpu_hours_projected),
            ):
                if value is not None:
                    hours.add_metric([*key, kind], value)
        yield from gauges.values()
        yield step
        yield mfu
        yield hours
        yield failures


class MetricsServer:
    """`/metrics` of a `LocalMetrics` on `address:port` (port 0: any free port)."""

    def __init__(self, metrics: LocalMetrics, port: int, address: str = "0.0.0.0") -> None:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(metrics)
        server, thread = start_http_server(port, addr=address, registry=registry)
        self._server: Any = server
        self._thread = thread
        self.port = int(server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
