"""`trainplan plan --calibration NAME`: the ClusterCalibration is read from kmock's
emulator through a kubeconfig (KUBECONFIG), and the plan is the one its file gives; a
missing, forbidden or invalid resource is one line and exit 2.

The command runs in-process (click's CliRunner) on a worker thread, so that the test's
event loop goes on serving the emulator while the command makes its own request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import kmock
import pytest
import yaml
from click.testing import CliRunner, Result

from tests.integration.harness import (
    CLUSTER_CALIBRATIONS,
    Cluster,
    small_plan,
    write_kubeconfig,
)
from trainplan.cli.main import main

pytestmark = pytest.mark.asyncio


@attrs.frozen
class ForbiddenError(kmock.KubernetesError):
    """What the API server answers a user without RBAC for the request, with a message
    far longer than any line should be."""

    status: int = 403
    reason: str = "Forbidden"
    message: str = (
        'clustercalibrations.trainplan.dev "a100-slow" is forbidden: User "tester" cannot'
        ' get resource "clustercalibrations"\n' + "x" * 20_000
    )


def calibration(name: str, factor: float, **record: Any) -> dict[str, Any]:
    """A ClusterCalibration of three A100 runs `factor` times the catalog's step time."""
    records = [
        {
            "plan": f"team-a/run-{index}",
            "finished": "2026-11-20T10:00:00Z",
            "gpus": 8,
            "plannedStepSeconds": 2.0,
            "measuredStepSeconds": 2.0 * factor,
            "gpuHours": 500.0,
            "interruptions": 1,
            **record,
        }
        for index in range(3)
    ]
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "ClusterCalibration",
        "metadata": {"name": name},
        "spec": {"gpuType": "A100-SXM4-80GB"},
        "status": {"records": records},
    }


async def plan(kubeconfig: Path, *args: str) -> Result:
    """`trainplan plan ARGS` with KUBECONFIG set, off the event loop."""
    env = {"KUBECONFIG": str(kubeconfig), "COLUMNS": "200", "NO_COLOR": "1"}
    return await asyncio.to_thread(CliRunner().invoke, main, ["plan", *args], env=env)


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


async def test_a_name_plans_as_the_file_of_the_same_resource(
    cluster: Cluster, tmp_path: Path
) -> None:
    await cluster.create_cluster_calibration(calibration("a100-slow", 1.3))
    stored = cluster.objects(CLUSTER_CALIBRATIONS, None)["a100-slow"]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster, token="planner-token")
    spec_file = write(tmp_path / "plan.yaml", small_plan("by-name"))
    calibration_file = write(tmp_path / "a100-slow.yaml", stored)

    by_name = await plan(kubeconfig, "-o", "json", "--calibration", "a100-slow", str(spec_file))
    by_file = await plan(
        kubeconfig, "-o", "json", "--calibration", str(calibration_file), str(spec_file)
    )
    plain = await plan(kubeconfig, "-o", "json", str(spec_file))

    assert by_name.exit_code == 0, by_name.stderr
    assert by_name.stdout == by_file.stdout
    corrected = json.loads(by_name.stdout)
    assert corrected["calibration"]["name"] == "a100-slow"
    assert corrected["calibration"]["runs"] == 3
    assert corrected["stepSeconds"] > json.loads(plain.stdout)["stepSeconds"]
    requests = cluster.emulator[aiohttp.hdrs.METH_GET]
    assert any(r.headers.get("Authorization") == "Bearer planner-token" for r in requests)

    # The tables match as well; a spec naming another calibration is refused by name too.
    tables = [
        await plan(kubeconfig, "--calibration", value, str(spec_file))
        for value in ("a100-slow", str(calibration_file))
    ]
    assert tables[0].exit_code == 0
    assert tables[0].stdout == tables[1].stdout
    other = small_plan("other")
    other["spec"]["hardware"] = {"calibration": "h100-east"}
    refused = await plan(
        kubeconfig, "--calibration", "a100-slow", str(write(tmp_path / "other.yaml", other))
    )
    assert refused.exit_code == 2
    assert "hardware.calibration" in refused.stderr
    assert "'h100-east'" in refused.stderr


async def test_a_missing_name_says_so_in_one_line(cluster: Cluster, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster)
    spec_file = write(tmp_path / "plan.yaml", small_plan("orphan"))

    result = await plan(kubeconfig, "--calibration", "nowhere", str(spec_file))

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"ClusterCalibration nowhere: not found in the cluster at {cluster.url}, and no file"
        " of that name exists either\n"
    )


async def test_a_forbidden_read_names_the_permission_and_cuts_the_servers_words(
    cluster: Cluster, tmp_path: Path
) -> None:
    await cluster.create_cluster_calibration(calibration("a100-slow", 1.3))
    fault = (
        cluster.emulator[kmock.action.FETCH, kmock.resource(CLUSTER_CALIBRATIONS)]
        << ForbiddenError()
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster)
    spec_file = write(tmp_path / "plan.yaml", small_plan("forbidden"))

    result = await plan(kubeconfig, "--calibration", "a100-slow", str(spec_file))

    assert len(fault) == 1
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"ClusterCalibration a100-slow: the API server at {cluster.url}")
    assert "(403 Forbidden)" in line
    assert "`get` clustercalibrations.trainplan.dev" in line
    assert 'User "tester" cannot get' in line
    assert len(line) < 600
    assert "x" * 300 not in line


async def test_an_invalid_resource_in_the_cluster_gives_its_problems(
    cluster: Cluster, tmp_path: Path
) -> None:
    await cluster.create_cluster_calibration(calibration("broken", 1.3, gpuHours=-5))
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster)
    spec_file = write(tmp_path / "plan.yaml", small_plan("broken"))

    result = await plan(kubeconfig, "--calibration", "broken", str(spec_file))

    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines
    assert all(line.startswith("ClusterCalibration broken: status.records[") for line in lines)
    assert "ClusterCalibration broken: status.records[0].gpuHours" in lines[0]
