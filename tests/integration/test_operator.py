"""Integration: apply -> plan -> Job + Service -> status; bad input -> Rejected; restart
-> no duplicates; Job status -> plan phase. The real Kopf operator against kmock."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from tests.integration.harness import (
    JOBS,
    SERVICES,
    Cluster,
    OperatorProcess,
)
from trainplan.api import TrainingPlanSpec
from trainplan.launcher import PlanRef, render_for
from trainplan.planner import Catalog, plan

pytestmark = pytest.mark.asyncio

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return document


def container(job: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = job["spec"]["template"]["spec"]["containers"]
    return containers[0]


async def test_apply_creates_job_and_service_with_the_plan(
    operator: OperatorProcess, cluster: Cluster, catalog: Catalog
) -> None:
    document = example("llama2-7b-deadline")
    name = await cluster.apply_plan(document)
    resource = await cluster.wait_for_phase(name, "Launching")

    expected = plan(TrainingPlanSpec.model_validate(document["spec"]), catalog).to_document()
    status = resource["status"]
    assert status["plan"] == expected
    assert status["gpus"] == expected["gpus"]
    assert status["layout"].startswith(f"TP{expected['layout']['tensor']} ")
    assert status["observedGeneration"] == 1
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Planned"]["status"] == "True"
    assert conditions["Launched"]["status"] == "True"

    jobs = cluster.objects(JOBS)
    services = cluster.objects(SERVICES)
    assert list(jobs) == [status["jobName"]]
    assert len(services) == 1
    job = jobs[status["jobName"]]
    nodes = expected["nodes"]
    assert job["spec"]["completions"] == nodes
    assert job["spec"]["parallelism"] == nodes
    assert job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    limits = container(job)["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) == expected["gpusPerNode"]
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    env = {e["name"]: e.get("value") for e in container(job)["env"]}
    assert env["TRAINPLAN_TENSOR_PARALLEL"] == str(expected["layout"]["tensor"])
    assert env["TRAINPLAN_DATA_PARALLEL"] == str(expected["layout"]["data"])
    assert env["TRAINPLAN_GLOBAL_BATCH_SIZE"] == str(expected["layout"]["globalBatchSize"])
    assert env["TRAINPLAN_TOTAL_STEPS"] == str(expected["totalSteps"])
    for obj in (job, *services.values()):
        owners = obj["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"], o["uid"], o["controller"]) for o in owners] == [
            ("TrainingPlan", name, resource["metadata"]["uid"], True)
        ]
    service = next(iter(services.values()))
    assert service["spec"]["clusterIP"] == "None"
    assert pod["subdomain"] == service["metadata"]["name"]


BAD_SPECS: dict[str, tuple[dict[str, Any], str]] = {
    "unknown-field": ({"foo": 1}, "foo"),
    "tokens-and-samples": ({"data": {"tokens": 1e9, "samples": 10}}, "exactly one"),
    "gpus-and-deadline": ({"objective": {"gpus": 8, "deadline": "3d"}}, "deadline"),
    "bad-duration": ({"objective": {"deadline": "3x"}}, "duration"),
    "unknown-preset": ({"model": {"preset": "llam2-7b"}}, "llama2-7b"),
    "unknown-gpu": ({"hardware": {"gpuType": "A100-80G"}}, "A100-SXM4-80GB"),
    "bf16-on-v100": ({"hardware": {"gpuType": "V100-SXM2-32GB"}}, "fp16"),
    "tensor-not-dividing-heads": ({"parallelism": {"tensor": 5}}, "spec.parallelism.tensor"),
    "negative-batch": ({"batch": {"globalBatchSize": -4}}, "globalBatchSize"),
    "no-objective": ({"objective": {}}, "objective"),
    "does-not-fit": (
        {
            "model": {"preset": "llama2-70b"},
            "hardware": {"gpuType": "A100-SXM4-40GB"},
            "objective": {"gpus": 8},
        },
        "A100-SXM4-40GB has 40.0 GiB",
    ),
    "deadline-missed": ({"objective": {"deadline": "2d", "maxGPUs": 64}}, "deadline"),
    "no-image": ({"job": {"image": None}}, "image"),
}


def _broken(name: str, change: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"preset": "llama2-7b"},
        "data": {"tokens": 1.0e10},
        "batch": {"globalBatchSize": 64},
        "hardware": {"gpuType": "A100-SXM4-80GB"},
        "objective": {"gpus": 16},
        "job": {"image": "registry.example/train:1.0"},
    }
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            merged = {**spec[key], **value}
            spec[key] = {k: v for k, v in merged.items() if v is not None}
            if key == "objective" and not value:
                spec[key] = {}
        else:
            spec[key] = value
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_bad_plans_are_rejected_and_create_nothing(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    for name, (change, _) in BAD_SPECS.items():
        await cluster.apply_plan(_broken(name, change))
    for name, (_, needle) in BAD_SPECS.items():
        resource = await cluster.wait_for_phase(name, "Rejected")
        planned = {c["type"]: c for c in resource["status"]["conditions"]}["Planned"]
        assert planned["status"] == "False"
        assert needle in planned["message"], (name, planned["message"])
        assert "plan" not in resource["status"] or resource["status"]["plan"] is None
    assert cluster.objects(JOBS) == {}
    assert cluster.objects(SERVICES) == {}
    # The operator keeps serving: a good plan after the bad ones launches.
    good = await cluster.apply_plan(_broken("good-after-bad", {}))
    await cluster.wait_for_phase(good, "Launching")
    assert operator.running
    assert len(cluster.objects(JOBS)) == 1


async def test_rejected_plan_fixed_before_launch_is_replanned(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    name = await cluster.apply_plan(_broken("fix-me", {"parallelism": {"tensor": 5}}))
    await cluster.wait_for_phase(name, "Rejected")
    await cluster.patch_plan_spec(name, {"parallelism": {"tensor": 2}})
    resource = await cluster.wait_for_phase(name, "Launching")
    assert resource["status"]["plan"]["layout"]["tensor"] == 2
    assert resource["status"]["observedGeneration"] == 2
    assert len(cluster.objects(JOBS)) == 1


async def test_restart_mid_way_creates_no_duplicates(cluster: Cluster, catalog: Catalog) -> None:
    first = OperatorProcess(cluster, catalog)
    await first.start()
    name = await cluster.apply_plan(_broken("restarted", {}))
    await cluster.wait_for_phase(name, "Launching")
    await first.stop()
    job_before = copy.deepcopy(cluster.objects(JOBS))

    # A plan applied while the operator is down, whose Service was already created
    # before a crash (the operator had got half-way):
    second_name = await cluster.apply_plan(_broken("half-done", {}))
    uid = cluster.plan(second_name)["metadata"]["uid"]
    half = _broken("half-done", {})
    spec = TrainingPlanSpec.model_validate(half["spec"])
    result = plan(spec, catalog)
    service = next(
        o
        for o in render_for(PlanRef(second_name, "default", uid), spec, result, catalog)
        if o["kind"] == "Service"
    )
    code, _ = await cluster._call("POST", "/api/v1/namespaces/default/services", service)
    assert code in (200, 201)

    second = OperatorProcess(cluster, catalog)
    await second.start()
    await cluster.wait_for_phase(second_name, "Launching")
    resumed = await cluster.wait_for_phase(name, "Launching")
    await second.stop()

    jobs = cluster.objects(JOBS)
    assert sorted(jobs) == sorted(
        [resumed["status"]["jobName"], cluster.plan(second_name)["status"]["jobName"]]
    )
    assert jobs[resumed["status"]["jobName"]] == job_before[resumed["status"]["jobName"]]
    assert len(cluster.objects(SERVICES)) == 2


async def test_a_running_plan_survives_an_operator_restart(
    cluster: Cluster, catalog: Catalog
) -> None:
    """After a restart the operator neither plans a launched plan again nor rewrites its
    status: a Running plan stays Running with the plan it was launched with."""
    first = OperatorProcess(cluster, catalog)
    await first.start()
    name = await cluster.apply_plan(_broken("long-running", {}))
    launched = await cluster.wait_for_phase(name, "Launching")
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 2, "startTime": "2026-11-22T00:00:00Z"})
    before = await cluster.wait_for_phase(name, "Running")
    await first.stop()

    fetches = cluster.emulator[kmock.action.FETCH, kmock.resource(JOBS)]
    fetched_before = len(fetches)
    second = OperatorProcess(cluster, catalog)
    await second.start()
    try:
        # The resume handler reads the Job (create-or-adopt); a status write, had there
        # been one, follows within milliseconds.
        await cluster.wait_for(lambda: len(fetches) > fetched_before, "the resume handler")
        await asyncio.sleep(1.0)
        after = cluster.plan(name)["status"]
        assert after["phase"] == "Running"
        assert after["plan"] == before["status"]["plan"]
        planning = ("Planned", "Launched")  # the ETA timer revises the others meanwhile
        assert [c for c in after["conditions"] if c["type"] in planning] == [
            c for c in before["status"]["conditions"] if c["type"] in planning
        ]
        assert list(cluster.objects(JOBS)) == [job]
    finally:
        await second.stop()


async def test_job_status_drives_the_phase(operator: OperatorProcess, cluster: Cluster) -> None:
    name = await cluster.apply_plan(_broken("lifecycle", {}))
    resource = await cluster.wait_for_phase(name, "Launching")
    job = resource["status"]["jobName"]
    nodes = resource["status"]["plan"]["nodes"]

    await cluster.write_job_status(job, {"active": nodes, "startTime": "2026-11-22T00:00:00Z"})
    running = await cluster.wait_for_phase(name, "Running")
    assert running["status"]["startTime"] == "2026-11-22T00:00:00Z"

    await cluster.write_job_status(job, {"active": 0, "failed": 1})
    restarting = await cluster.wait_for_phase(name, "Restarting")
    assert restarting["status"]["failures"]["count"] == 1

    await cluster.write_job_status(job, {"active": nodes, "failed": 1})
    await cluster.wait_for_phase(name, "Running")

    await cluster.write_job_status(
        job,
        {
            "active": 0,
            "succeeded": nodes,
            "completionTime": "2026-11-23T00:00:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    done = await cluster.wait_for_phase(name, "Succeeded")
    assert done["status"]["completionTime"] == "2026-11-23T00:00:00Z"
    await cluster.wait_for(
        lambda: any(
            e.get("reason") == "Succeeded" and e["involvedObject"]["name"] == name
            for e in cluster.objects("v1/events").values()
        ),
        "a Succeeded event",
    )

    failing = await cluster.apply_plan(_broken("failing", {}))
    failed_job = (await cluster.wait_for_phase(failing, "Launching"))["status"]["jobName"]
    await cluster.write_job_status(
        failed_job,
        {
            "active": 0,
            "failed": 11,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ],
        },
    )
    failed = await cluster.wait_for_phase(failing, "Failed")
    progressing = {c["type"]: c for c in failed["status"]["conditions"]}["Progressing"]
    assert progressing["reason"] == "BackoffLimitExceeded"


async def test_suspend_and_resume(operator: OperatorProcess, cluster: Cluster) -> None:
    name = await cluster.apply_plan(_broken("pausable", {}))
    job = (await cluster.wait_for_phase(name, "Launching"))["status"]["jobName"]
    await cluster.patch_plan_spec(name, {"job": {"suspend": True}})
    await cluster.wait_for_phase(name, "Suspended")
    assert cluster.objects(JOBS)[job]["spec"]["suspend"] is True
    await cluster.patch_plan_spec(name, {"job": {"suspend": False}})
    await cluster.wait_for(
        lambda: cluster.objects(JOBS)[job]["spec"]["suspend"] is False, "the Job to resume"
    )
    await cluster.wait_for(
        lambda: cluster.plan(name)["status"]["phase"] in ("Launching", "Running"),
        "the plan to leave Suspended",
    )
    assert cluster.plan(name)["status"]["observedGeneration"] == 3


async def test_changes_after_launch_are_reported_not_applied(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    name = await cluster.apply_plan(_broken("settled", {}))
    before = await cluster.wait_for_phase(name, "Launching")
    await cluster.patch_plan_spec(name, {"objective": {"gpus": 32}})
    await cluster.wait_for(
        lambda: any(
            c["reason"] == "SpecChangedAfterLaunch"
            for c in cluster.plan(name)["status"]["conditions"]
        ),
        "the change to be reported",
    )
    after = cluster.plan(name)["status"]
    planned = next(c for c in after["conditions"] if c["type"] == "Planned")
    assert "spec.objective.gpus" in planned["message"]
    assert after["plan"] == before["status"]["plan"]
    assert len(cluster.objects(JOBS)) == 1


async def test_operator_serves_plan_metrics(operator: OperatorProcess, cluster: Cluster) -> None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    name = await cluster.apply_plan(_broken("metered", {}))
    await cluster.wait_for_phase(name, "Launching")
    port = operator.metrics_port
    assert port is not None

    def scrape() -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.labels.get("plan") == name
            and sample.labels.get("trainplan_plan_phase") in (None, "Launching")
        }

    await cluster.wait_for(lambda: "trainplan_plan_gpus" in scrape(), "the plan's metrics")
    samples = scrape()
    assert samples["trainplan_plan_gpus"] == 16
    assert samples["trainplan_plan_phase"] == 1
    assert "trainplan_plan_info" in samples


async def test_a_finished_run_is_never_launched_again(cluster: Cluster, catalog: Catalog) -> None:
    first = OperatorProcess(cluster, catalog)
    await first.start()
    name = await cluster.apply_plan(_broken("finished", {}))
    launched = await cluster.wait_for_phase(name, "Launching")
    job = launched["status"]["jobName"]
    nodes = launched["status"]["plan"]["nodes"]
    await cluster.write_job_status(
        job,
        {
            "active": 0,
            "succeeded": nodes,
            "completionTime": "2026-11-23T00:00:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    await cluster.wait_for_phase(name, "Succeeded")
    await first.stop()
    # The Job is cleaned up (by hand or a TTL) while the operator is down.
    code, _ = await cluster._call("DELETE", f"/apis/batch/v1/namespaces/default/jobs/{job}")
    assert code in (200, 202)
    assert cluster.objects(JOBS) == {}

    second = OperatorProcess(cluster, catalog)
    await second.start()
    try:
        await asyncio.sleep(2.0)  # the resume handlers run within this
        assert cluster.plan(name)["status"]["phase"] == "Succeeded"
        assert cluster.objects(JOBS) == {}
    finally:
        await second.stop()


async def test_deleted_plans_leave_no_series_on_metrics(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    """A Rejected plan holds no finalizer, so the API server deletes it at once and no
    deletion handler runs: its watch event still drops its series from /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    port = operator.metrics_port
    assert port is not None

    def plans_on_metrics() -> set[str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
        return {
            sample.labels["plan"]
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if "plan" in sample.labels
        }

    names = [
        await cluster.apply_plan(_broken(f"churn-{index}", {"parallelism": {"tensor": 5}}))
        for index in range(5)
    ]
    for name in names:
        await cluster.wait_for_phase(name, "Rejected")
    await cluster.wait_for(lambda: set(names) <= plans_on_metrics(), "the plans' series")
    for name in names:
        code, _ = await cluster._call(
            "DELETE", f"/apis/trainplan.dev/v1alpha1/namespaces/default/trainingplans/{name}"
        )
        assert code in (200, 202)
    await cluster.wait_for(
        lambda: not set(names) & plans_on_metrics(), "the deleted plans' series to go"
    )


@pytest.mark.parametrize("job_cleaned_up", [True, False])
async def test_a_spec_edit_after_the_run_ended_keeps_its_phase(
    operator: OperatorProcess, cluster: Cluster, job_cleaned_up: bool
) -> None:
    """Setting job.suspend on a Succeeded plan (its Job cleaned up, or kept) neither
    makes it Suspended nor fails on a missing Job: the edit is observed and reported."""
    name = await cluster.apply_plan(_broken("ended-edit", {}))
    launched = await cluster.wait_for_phase(name, "Launching")
    job = launched["status"]["jobName"]
    await cluster.write_job_status(
        job,
        {
            "active": 0,
            "succeeded": launched["status"]["plan"]["nodes"],
            "completionTime": "2026-11-23T00:00:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    )
    await cluster.wait_for_phase(name, "Succeeded")
    if job_cleaned_up:
        code, _ = await cluster._call("DELETE", f"/apis/batch/v1/namespaces/default/jobs/{job}")
        assert code in (200, 202)
    await cluster.patch_plan_spec(name, {"job": {"suspend": True}})
    await cluster.wait_for(
        lambda: cluster.plan(name)["status"].get("observedGeneration") == 2,
        "the edit to be observed",
    )
    assert cluster.plan(name)["status"]["phase"] == "Succeeded"
    jobs = cluster.objects(JOBS)
    assert list(jobs) == ([] if job_cleaned_up else [job])
    if not job_cleaned_up:
        assert not jobs[job]["spec"].get("suspend")  # an ended Job is left as it is
