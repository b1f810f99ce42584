"""`trainplan operator` as a real process: it logs in with a kubeconfig (Kopf's own
login), serves its liveness endpoint, launches a plan and stops cleanly on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.integration.harness import JOBS, Cluster, OperatorCommand

pytestmark = pytest.mark.asyncio


async def test_operator_command_runs_against_a_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    operator = OperatorCommand(cluster, tmp_path)
    try:
        await operator.start()
        name = await cluster.apply_plan(
            {
                "apiVersion": "trainplan.dev/v1alpha1",
                "kind": "TrainingPlan",
                "metadata": {"name": "from-the-cli"},
                "spec": {
                    "model": {"preset": "pythia-1b"},
                    "data": {"tokens": 1e9},
                    "batch": {"globalBatchSize": 64},
                    "objective": {"gpus": 8},
                    "job": {"image": "registry.example/train:1.0"},
                },
            }
        )
        await cluster.wait_for_phase(name, "Launching")
        assert len(cluster.objects(JOBS)) == 1
        requests = cluster.emulator[aiohttp.hdrs.METH_GET]
        assert any(r.headers.get("Authorization") == "Bearer test-token" for r in requests)
    finally:
        code = await operator.stop()
    assert code == 0, operator.log()
