"""Integration: a TrainingPlan naming a ClusterCalibration is planned with the cluster's
records (the real Kopf operator against kmock); a missing one rejects the plan."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.harness import JOBS, Cluster, OperatorProcess, small_plan

pytestmark = pytest.mark.asyncio


def calibration(name: str, factor: float) -> dict[str, Any]:
    records = [
        {
            "plan": f"team-a/run-{index}",
            "finished": "2026-11-20T10:00:00Z",
            "gpus": 8,
            "plannedStepSeconds": 2.0,
            "measuredStepSeconds": 2.0 * factor,
            "gpuHours": 500.0,
            "interruptions": 1,
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


def calibrated_plan(name: str, calibration_name: str) -> dict[str, Any]:
    document = small_plan(name)
    document["spec"]["hardware"] = {"calibration": calibration_name}
    return document


async def test_a_plan_naming_a_calibration_is_corrected_by_it(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    await cluster.create_cluster_calibration(calibration("a100-slow", 1.3))
    plain = await cluster.apply_plan(small_plan("plain"))
    named = await cluster.apply_plan(calibrated_plan("named", "a100-slow"))
    opted_out = await cluster.apply_plan(calibrated_plan("opted-out", "none"))
    plans = {
        name: (await cluster.wait_for_phase(name, "Launching"))["status"]["plan"]
        for name in (plain, named, opted_out)
    }
    assert plans[named]["calibration"]["name"] == "a100-slow"
    assert plans[named]["calibration"]["runs"] == 3
    factor = plans[named]["calibration"]["stepSecondsFactor"]
    assert 1.2 < factor < 1.3
    assert plans[named]["stepSeconds"] == pytest.approx(plans[plain]["stepSeconds"] * factor)
    assert "calibration" not in plans[plain]
    assert plans[opted_out] == plans[plain]
    assert len(cluster.objects(JOBS)) == 3


async def test_a_missing_calibration_rejects_the_plan(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    name = await cluster.apply_plan(calibrated_plan("orphan", "nowhere"))
    resource = await cluster.wait_for_phase(name, "Rejected")
    planned = {c["type"]: c for c in resource["status"]["conditions"]}["Planned"]
    assert (
        "spec.hardware.calibration: ClusterCalibration 'nowhere' not found" in (planned["message"])
    )
    assert cluster.objects(JOBS) == {}


async def test_a_finished_run_adds_its_record(operator: OperatorProcess, cluster: Cluster) -> None:
    await cluster.create_cluster_calibration(calibration("a100-east", 1.3))
    name = await cluster.apply_plan(calibrated_plan("learns", "a100-east"))
    launched = await cluster.wait_for_phase(name, "Launching")
    planned = launched["status"]["plan"]
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-25T00:00:00Z"})
    await cluster.wait_for_phase(name, "Running")
    measured = planned["stepSeconds"] * 1.1  # steady, as the ETA loop measured it
    interval = planned["reliability"]["checkpointIntervalSteps"]
    steady = measured - 30.0 / interval  # less the 30 s checkpoints it averages in
    redone_seconds = interval * steady / 2
    lost_seconds = 2 * (redone_seconds + 400.0)  # two interruptions of 400 s and redone work
    await cluster.write_plan_status(
        name,
        {
            "progress": {
                "step": 400,
                "measuredStepSeconds": measured,
                "measuredCheckpointSeconds": 30.0,
            },
            "failures": {"count": 2, "lostSeconds": lost_seconds},
            "gpuHours": {"used": 12.5},
        },
    )
    await cluster.complete_job(job, "2026-11-25T01:00:00Z")
    await cluster.wait_for_phase(name, "Succeeded")
    await cluster.wait_for(
        lambda: (
            len(cluster.cluster_calibration("a100-east").get("status", {}).get("records", [])) == 4
        ),
        "the run's record",
    )
    status = cluster.cluster_calibration("a100-east")["status"]
    record = status["records"][-1]
    assert record["plan"] == "default/learns"
    assert record["measuredStepSeconds"] == pytest.approx(steady)
    # The catalog's step time: the plan's, divided by the factor that corrected it.
    factor = planned["calibration"]["stepSecondsFactor"]
    assert record["plannedStepSeconds"] == pytest.approx(planned["stepSeconds"] / factor)
    assert record["interruptions"] == 2
    assert record["gpuHours"] == 12.5
    assert record["restartSeconds"] == pytest.approx(400.0)
    assert record["checkpointSeconds"] == 30.0
    assert record["checkpointBytes"] == planned["reliability"]["checkpointBytes"] > 0
    # The only record with both: its bytes over 30 s are the cluster's write rate.
    assert status["checkpointBytesPerSecond"] == pytest.approx(record["checkpointBytes"] / 30.0)
    assert status["runs"] == 4
    (condition,) = status["conditions"]
    assert condition["type"] == "Calibrated"
    assert condition["message"].startswith("4 runs; step time x ")


async def test_a_plan_naming_none_uses_its_gpu_types_default_and_records_into_it(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    """A ClusterCalibration marked `default` corrects the plans of its GPU type that name
    none (not those naming `none`, nor those of another GPU type), and their records go
    to it."""
    other_gpu = calibration("h100-default", 2.0)
    other_gpu["spec"] = {"gpuType": "H100-SXM5-80GB", "default": True}
    not_default = calibration("a100-other", 2.0)
    default = calibration("a100-default", 1.3)
    default["spec"]["default"] = True
    for resource in (other_gpu, not_default, default):
        await cluster.create_cluster_calibration(resource)
    unnamed = await cluster.apply_plan(small_plan("unnamed"))
    opted_out = await cluster.apply_plan(calibrated_plan("out", "none"))
    launched = await cluster.wait_for_phase(unnamed, "Launching")
    planned = launched["status"]["plan"]
    assert planned["calibration"]["name"] == "a100-default"
    assert 1.2 < planned["calibration"]["stepSecondsFactor"] < 1.3
    out = (await cluster.wait_for_phase(opted_out, "Launching"))["status"]["plan"]
    assert "calibration" not in out
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-25T00:00:00Z"})
    await cluster.wait_for_phase(unnamed, "Running")
    await cluster.write_plan_status(
        unnamed,
        {"progress": {"step": 400, "measuredStepSeconds": planned["stepSeconds"]}},
    )
    await cluster.complete_job(job, "2026-11-25T01:00:00Z")
    await cluster.wait_for_phase(unnamed, "Succeeded")
    await cluster.wait_for(
        lambda: (
            len(cluster.cluster_calibration("a100-default").get("status", {}).get("records", []))
            == 4
        ),
        "the run's record in the default",
    )
    assert len(cluster.cluster_calibration("a100-other")["status"]["records"]) == 3
