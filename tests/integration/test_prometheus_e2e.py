"""End to end with a real Prometheus server (Debian's package, on 127.0.0.1): it scrapes
the operator's metrics while the ETA loop revises a running plan, and a training pod's
endpoint; PromQL on the operator's ETA series returns data, and the monitor's Prometheus
mode reads the training series back through it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.harness import Cluster, OperatorProcess, TrainingPod, small_plan
from tests.integration.prometheus_server import PrometheusServer, prometheus_binary
from trainplan.monitor import query_prometheus

pytestmark = pytest.mark.asyncio

PLAN = "watched"


async def _eventually(prometheus: PrometheusServer, promql: str) -> list[dict[str, Any]]:
    """Poll an instant query until it returns a sample (bounded: 30 s)."""
    for _ in range(150):
        result = await asyncio.to_thread(prometheus.query, promql)
        if result:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"no data for {promql}")


async def test_prometheus_sees_the_eta_and_the_training_series(
    fast_operator: OperatorProcess, cluster: Cluster, pod: TrainingPod, tmp_path: Path
) -> None:
    prometheus_binary()  # skip by hand / fail in CI when the package is missing
    prometheus = await asyncio.to_thread(
        PrometheusServer,
        tmp_path,
        {
            "operator": f"127.0.0.1:{fast_operator.metrics_port}",
            "training": f"127.0.0.1:{pod.port}",
        },
        {"training": {"namespace": "default", "plan": PLAN}},
    )
    try:
        await cluster.apply_plan(small_plan(PLAN, metricsPort=pod.port))
        job = (await cluster.wait_for_phase(PLAN, "Launching"))["status"]["jobName"]
        code, _ = await cluster._call(
            "POST",
            "/api/v1/namespaces/default/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job}-0-x",
                    "namespace": "default",
                    "uid": "p",
                    "labels": {"trainplan.dev/plan": PLAN},
                    "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
                },
                "status": {"phase": "Running", "podIP": "127.0.0.1"},
            },
        )
        assert code in (200, 201)
        await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
        pod.step = 100
        total = cluster.plan(PLAN)["status"]["plan"]["totalSteps"]

        eta = await _eventually(prometheus, f'trainplan_plan_eta_seconds{{plan="{PLAN}"}} > 0')
        assert eta[0]["metric"]["namespace"] == "default"
        ratio = await _eventually(prometheus, f'trainplan_plan_progress_ratio{{plan="{PLAN}"}} > 0')
        assert float(ratio[0]["value"][1]) == pytest.approx(100 / total)

        await _eventually(prometheus, f'trainplan_train_step{{plan="{PLAN}"}} == 100')
        async with aiohttp.ClientSession() as session:
            metrics = await query_prometheus(
                session, prometheus.url, f'namespace="default",plan="{PLAN}"'
            )
        assert (metrics.step, metrics.tokens) == (100, 100_000)
    finally:
        await asyncio.to_thread(prometheus.stop)
