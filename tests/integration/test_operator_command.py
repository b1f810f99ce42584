"""`trainplan operator` as a real process: it logs in with a kubeconfig (Kopf's own
login), serves its liveness endpoint, launches a plan and stops cleanly on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.integration.harness import JOBS, Cluster, OperatorCommand, small_plan

pytestmark = pytest.mark.asyncio


async def test_operator_command_runs_against_a_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    operator = OperatorCommand(cluster, tmp_path)
    try:
        await operator.start()
        name = await cluster.apply_plan(small_plan("from-the-cli"))
        await cluster.wait_for_phase(name, "Launching")
        assert len(cluster.objects(JOBS)) == 1
        requests = cluster.emulator[aiohttp.hdrs.METH_GET]
        assert any(r.headers.get("Authorization") == "Bearer test-token" for r in requests)
    finally:
        code = await operator.stop()
    assert code == 0, operator.log()
