"""The plan series of a local run, served for a local Prometheus: the operator's own
collector (`trainplan.monitor.exposition`) with `namespace="local"`, so the same Grafana
dashboard and alert expressions work against a local run (which has no budget series).
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from trainplan.api import Plan
from trainplan.eta import Estimate
from trainplan.monitor.exposition import PlanMetrics, PlanSnapshot

RESTART_REASON = "restart"
"""The `reason` label of a local run's failures (a torchrun or worker restart)."""


def local_snapshot(
    plan: Plan,
    estimate: Estimate,
    *,
    failures: int,
    planned_step_seconds: float,
    planned_mfu: float | None,
    revised_seconds: float,
) -> PlanSnapshot:
    """The plan series of one revision of a local run (times in Unix seconds). A local
    run plans for its process count, so it has no deadline series."""
    measured_mfu = estimate.measured_mfu
    if measured_mfu is not None and not math.isfinite(measured_mfu):
        measured_mfu = None
    return PlanSnapshot(
        gpu_type=plan.gpu_type,
        layout=plan.layout.summary,
        phase="Running",
        gpus=plan.gpus,
        progress_ratio=estimate.progress_ratio,
        eta_seconds=estimate.remaining_seconds,
        completion_timestamp_seconds=revised_seconds + estimate.remaining_seconds,
        planned_step_seconds=planned_step_seconds,
        measured_step_seconds=estimate.measured_step_seconds,
        planned_mfu=planned_mfu,
        measured_mfu=measured_mfu,
        failures_by_reason=((RESTART_REASON, failures),),
        gpu_hours_used=estimate.gpu_hours_used,
        gpu_hours_projected=estimate.gpu_hours_projected,
        lost_seconds=estimate.lost_seconds,
    )


class MetricsServer:
    """`/metrics` of a local run's plan series on `address:port` (port 0: any free port)."""

    def __init__(self, metrics: PlanMetrics, port: int, address: str = "0.0.0.0") -> None:
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
