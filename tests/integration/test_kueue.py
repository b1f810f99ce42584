"""A queued plan (job.queueName) is paused and resumed the way Kueue expects: through its
Workload's `spec.active`, never its Job's `spec.suspend`, which Kueue owns (it suspends
an unadmitted job and unsuspends an admitted one: kubernetes-sigs/kueue,
pkg/controller/jobframework/reconciler.go). The emulator runs no Kueue: the test makes
the Workload and admits the Job as Kueue would, with Workloads and statuses that
validate against Kueue's Workload CRD (tests/kueue_workloads.py,
tests/contract/test_kueue_workload_schema.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests import kueue_workloads
from tests.integration.harness import JOBS, WORKLOADS, Cluster, OperatorProcess, small_plan

pytestmark = pytest.mark.asyncio

WORKLOADS_URL = "/apis/kueue.x-k8s.io/v1beta1/namespaces/default/workloads"


def _queued(name: str, **job: Any) -> dict[str, Any]:
    return small_plan(name, queueName="team-a", **job)


async def _kueue_admits(cluster: Cluster, job_name: str) -> str:
    """What Kueue does for a new queued Job: the Workload Kueue v0.14.8 makes for it
    (`tests.kueue_workloads.workload`: labelled with the Job's uid, owned by it, its pod
    template in pod set `main`), and on admission the Job unsuspended. Returns the
    Workload's name."""
    uid = cluster.objects(JOBS)[job_name]["metadata"].get("uid")
    if uid is None:  # the emulator assigns no uids: give the Job the API server's
        uid = f"uid-of-{job_name}"
        code, answer = await cluster._call(
            "PATCH",
            f"/apis/batch/v1/namespaces/default/jobs/{job_name}",
            {"metadata": {"uid": uid}},
        )
        assert code == 200, answer
    made = kueue_workloads.workload(cluster.objects(JOBS)[job_name])
    assert kueue_workloads.upstream_errors(made) == []
    code, answer = await cluster._call("POST", WORKLOADS_URL, made)
    assert code in (200, 201), answer
    code, answer = await cluster._call(
        "PATCH", f"/apis/batch/v1/namespaces/default/jobs/{job_name}", {"spec": {"suspend": False}}
    )
    assert code == 200, answer
    return str(made["metadata"]["name"])


async def test_a_queued_plan_is_paused_and_resumed_through_its_workload(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    await cluster.apply_plan(_queued("queued"))
    await cluster.wait_for(
        lambda: bool(cluster.plan("queued").get("status", {}).get("jobName")), "the launch"
    )
    job_name = cluster.plan("queued")["status"]["jobName"]
    job = cluster.objects(JOBS)[job_name]
    assert job["spec"]["suspend"] is True  # created suspended, for Kueue to admit
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    workload = await _kueue_admits(cluster, job_name)

    await cluster.patch_plan_spec("queued", {"job": {"suspend": True}})
    await cluster.wait_for(
        lambda: cluster.objects(WORKLOADS)[workload]["spec"]["active"] is False,
        "the Workload to be deactivated",
    )
    assert kueue_workloads.upstream_errors(cluster.objects(WORKLOADS)[workload]) == []
    await cluster.wait_for_phase("queued", "Suspended")
    # The Job's suspend is Kueue's to set (it suspends the evicted job): not touched here.
    assert cluster.objects(JOBS)[job_name]["spec"]["suspend"] is False

    await cluster.patch_plan_spec("queued", {"job": {"suspend": False}})
    await cluster.wait_for(
        lambda: cluster.objects(WORKLOADS)[workload]["spec"]["active"] is True,
        "the Workload to be active again",
    )
    await cluster.wait_for_phase("queued", "Launching")
    assert cluster.objects(JOBS)[job_name]["spec"]["suspend"] is False


async def test_priority_class_and_topology_reach_kueue(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    await cluster.apply_plan(
        _queued("ranked", priorityClass="high", topology={"required": "cloud.example/block"})
    )
    await cluster.wait_for(
        lambda: bool(cluster.plan("ranked").get("status", {}).get("jobName")), "the launch"
    )
    job = cluster.objects(JOBS)[cluster.plan("ranked")["status"]["jobName"]]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == "cloud.example/block"


def _admitted(cluster: Cluster, name: str) -> tuple[str, str, str]:
    conditions = cluster.plan(name).get("status", {}).get("conditions", [])
    found = next((c for c in conditions if c["type"] == "Admitted"), None)
    return ("", "", "") if found is None else (found["status"], found["reason"], found["message"])


async def _workload_status(cluster: Cluster, name: str, status: dict[str, Any]) -> None:
    assert kueue_workloads.upstream_errors({"status": status}) == []
    code, answer = await cluster._call(
        "PATCH", f"{WORKLOADS_URL}/{name}/status", {"status": status}
    )
    assert code == 200, answer


async def test_kueues_admission_is_the_plans_admitted_condition(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    await cluster.apply_plan(_queued("admitted"))
    await cluster.wait_for(
        lambda: bool(cluster.plan("admitted").get("status", {}).get("jobName")), "the launch"
    )
    job_name = cluster.plan("admitted")["status"]["jobName"]
    workload = await _kueue_admits(cluster, job_name)
    await _workload_status(cluster, workload, kueue_workloads.workload_status("pending"))
    await cluster.wait_for(
        lambda: "insufficient quota" in _admitted(cluster, "admitted")[2], "Kueue's message"
    )
    assert _admitted(cluster, "admitted")[:2] == ("False", "Pending")

    await _workload_status(cluster, workload, kueue_workloads.workload_status("admitted"))
    await cluster.wait_for(lambda: _admitted(cluster, "admitted")[0] == "True", "Admitted=True")
    assert _admitted(cluster, "admitted") == (
        "True",
        "Admitted",
        "admitted by ClusterQueue gpu-cluster-queue on a100-80gb",
    )

    await _workload_status(cluster, workload, kueue_workloads.workload_status("evicted"))
    await cluster.wait_for(
        lambda: _admitted(cluster, "admitted")[:2] == ("False", "Evicted"), "Admitted=False"
    )
