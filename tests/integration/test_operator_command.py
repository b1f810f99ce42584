"""`trainplan operator` as a real process: it logs in with a kubeconfig (Kopf's own
login), serves its liveness endpoint, launches a plan and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.integration.harness import JOBS, Cluster

pytestmark = pytest.mark.asyncio


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": server}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}],
                "current-context": "kmock",
            }
        )
    )
    return path


async def _healthy(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def test_operator_command_runs_against_a_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "trainplan"
    liveness = f"http://127.0.0.1:{_free_port()}/healthz"
    log = (tmp_path / "operator.log").open("w")
    process = await asyncio.create_subprocess_exec(
        str(script),
        "operator",
        "--liveness",
        liveness,
        env={
            "KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig", cluster.url)),
            "PATH": str(script.parent),
            "HOME": str(tmp_path),
        },
        stdout=log,
        stderr=log,
    )
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while not await _healthy(liveness):
            assert process.returncode is None, (tmp_path / "operator.log").read_text()
            assert asyncio.get_running_loop().time() < deadline, "no liveness endpoint"
            await asyncio.sleep(0.2)
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
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
        log.close()
    assert code == 0, (tmp_path / "operator.log").read_text()
