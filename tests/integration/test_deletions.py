"""Deletions, against kmock (issue 13, findings 7 and 10): a plan deleted and applied
again at once waits for its predecessor's objects instead of being rejected for good; a
Job deleted by hand ends its run Failed and its budget stops charging; a plan that is
being deleted is not marked Failed when the garbage collector deletes its Job.

The emulator runs no garbage collector: the tests delete dependents as it would."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock
import pytest

from tests.integration.harness import (
    JOBS,
    SERVICES,
    TRAINING_PLANS,
    Cluster,
    OperatorProcess,
)
from tests.integration.lookups import condition, events
from trainplan.planner import Catalog

pytestmark = pytest.mark.asyncio

PLANS_URL = "/apis/trainplan.dev/v1alpha1/namespaces/default/trainingplans"
JOBS_URL = "/apis/batch/v1/namespaces/default/jobs"
SERVICES_URL = "/api/v1/namespaces/default/services"
SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0"},
}


def _plan(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": dict(SPEC),
    }


def _owner_uids(obj: dict[str, Any]) -> list[str]:
    return [o["uid"] for o in obj["metadata"].get("ownerReferences", [])]


async def _delete(cluster: Cluster, path: str) -> None:
    code, answer = await cluster._call("DELETE", path)
    assert code in (200, 202), answer


async def _launch(cluster: Cluster, name: str) -> dict[str, Any]:
    """Apply a plan and wait until it holds its Kopf finalizer (the ETA timer runs)."""
    await cluster.apply_plan(_plan(name))
    await cluster.wait_for_phase(name, "Launching")
    await cluster.wait_for(
        lambda: bool(cluster.plan(name)["metadata"].get("finalizers")), "the Kopf finalizer"
    )
    return cluster.plan(name)


async def test_a_plan_deleted_and_applied_again_waits_for_the_previous_objects(
    budget_operator: OperatorProcess, cluster: Cluster
) -> None:
    old = await _launch(cluster, "again")
    old_uid, job = old["metadata"]["uid"], old["status"]["jobName"]
    (service,) = cluster.objects(SERVICES)

    # `kubectl delete tp again`: the plan has a finalizer, so it gets a deletionTimestamp
    # and goes once the operator releases it; its Job and Service stay, awaiting the GC.
    await _delete(cluster, f"{PLANS_URL}/again")
    await cluster.wait_for(lambda: cluster.plan("again") == {}, "the old plan to go")
    assert _owner_uids(cluster.objects(JOBS)[job]) == [old_uid]

    # `kubectl apply -f again.yaml` at once: the same name, a new uid.
    await cluster.apply_plan(_plan("again"))
    new_uid = cluster.plan("again")["metadata"]["uid"]
    assert new_uid != old_uid
    await cluster.wait_for(
        lambda: cluster.plan("again").get("status", {}).get("phase") in ("Pending", "Rejected"),
        "the new plan to be judged",
    )
    waiting = cluster.plan("again")["status"]
    assert waiting["phase"] == "Pending", waiting  # not Rejected (NameConflict) for good
    assert condition(cluster.plan("again"), "Launched")["reason"] == "WaitingForDeletion"
    message = condition(cluster.plan("again"), "Launched")["message"]
    assert f"waiting for Job default/{job} to be deleted" in message
    assert f"previous TrainingPlan again (uid {old_uid}), which no longer exists" in message
    await cluster.wait_for(
        lambda: bool(events(cluster, "WaitingForDeletion")), "a WaitingForDeletion event"
    )
    await asyncio.sleep(1.0)  # a retry or two: still waiting, never rejected
    assert cluster.plan("again")["status"]["phase"] == "Pending"
    assert not events(cluster, "NameConflict")

    # The garbage collector deletes the old plan's Job and Service.
    await _delete(cluster, f"{JOBS_URL}/{job}")
    await _delete(cluster, f"{SERVICES_URL}/{service}")
    launched = await cluster.wait_for_phase("again", "Launching")
    assert condition(launched, "Launched")["reason"] == "JobCreated"
    jobs = cluster.objects(JOBS)
    assert list(jobs) == [job]
    assert _owner_uids(jobs[job]) == [new_uid]
    assert [_owner_uids(s) for s in cluster.objects(SERVICES).values()] == [[new_uid]]
    await asyncio.sleep(0.5)  # the old Job's DELETED event did not end the new run
    assert cluster.plan("again")["status"]["phase"] == "Launching"


async def test_a_name_held_by_someone_else_is_still_a_conflict(
    budget_operator: OperatorProcess, cluster: Cluster
) -> None:
    code, answer = await cluster._call(
        "POST",
        SERVICES_URL,
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken"}, "spec": {}},
    )
    assert code in (200, 201), answer
    await cluster.apply_plan(_plan("taken"))
    rejected = await cluster.wait_for_phase("taken", "Rejected")
    planned = condition(rejected, "Planned")
    assert planned["reason"] == "NameConflict"
    assert "Service default/taken exists and is controlled by nothing" in planned["message"]
    assert cluster.objects(JOBS) == {}


async def test_a_job_deleted_by_hand_fails_the_run_and_stops_its_budget(
    budget_operator: OperatorProcess, cluster: Cluster, catalog: Catalog
) -> None:
    await cluster.apply_budget("team-a", {"gpuHours": 1e6, "period": "30d"})
    launched = await _launch(cluster, "by-hand")
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    await cluster.wait_for_phase("by-hand", "Running")
    await cluster.wait_for(
        lambda: bool(cluster.budget("team-a")["status"]["ledger"][0].get("intervals")),
        "an open interval in the budget",
    )

    await _delete(cluster, f"{JOBS_URL}/{job}")  # `kubectl delete job by-hand`
    failed = await cluster.wait_for_phase("by-hand", "Failed")
    progressing = condition(failed, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "JobDeleted")
    assert f"the Job {job} was deleted outside the operator" in progressing["message"]
    assert "apply it again" in progressing["message"]
    assert failed["status"]["completionTime"]
    await cluster.wait_for(lambda: bool(events(cluster, "JobDeleted")), "a JobDeleted event")
    await cluster.wait_for(
        lambda: cluster.budget("team-a")["status"]["ledger"][0]["finished"],
        "the budget's entry to finish",
    )
    budget = cluster.budget("team-a")["status"]
    (interval,) = budget["ledger"][0]["intervals"]
    assert "end" in interval
    assert budget["activePlans"] == []

    # Failed is terminal: a restarted operator's resume handler launches nothing again.
    await budget_operator.stop()
    again = OperatorProcess(cluster, catalog, budget_operator.config)
    await again.start()
    try:
        await asyncio.sleep(1.5)
        assert cluster.plan("by-hand")["status"]["phase"] == "Failed"
        assert cluster.objects(JOBS) == {}
    finally:
        await again.stop()


async def test_a_plan_being_deleted_is_not_failed_by_its_jobs_deletion(
    budget_operator: OperatorProcess, cluster: Cluster
) -> None:
    launched = await _launch(cluster, "going")
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    await cluster.wait_for_phase("going", "Running")

    # `kubectl delete tp going --cascade=foreground`: the plan keeps a deletionTimestamp
    # and the foregroundDeletion finalizer while the garbage collector deletes its Job.
    finalizers = [*cluster.plan("going")["metadata"]["finalizers"], "foregroundDeletion"]
    code, answer = await cluster._call(
        "PATCH", f"{PLANS_URL}/going", {"metadata": {"finalizers": finalizers}}
    )
    assert code == 200, answer
    await _delete(cluster, f"{PLANS_URL}/going")
    await cluster.wait_for(
        lambda: cluster.plan("going")["metadata"].get("finalizers") == ["foregroundDeletion"],
        "the operator to release the plan",
    )
    fetches = cluster.emulator[kmock.action.FETCH, kmock.resource(TRAINING_PLANS)]
    fetched_before = len(fetches)
    await _delete(cluster, f"{JOBS_URL}/{job}")
    await cluster.wait_for(lambda: len(fetches) > fetched_before, "the Job's deletion handled")
    await asyncio.sleep(0.5)
    status = cluster.plan("going")["status"]
    assert status["phase"] == "Running"
    assert condition(cluster.plan("going"), "Progressing").get("reason") != "JobDeleted"
    assert not events(cluster, "JobDeleted")

    code, answer = await cluster._call(
        "PATCH", f"{PLANS_URL}/going", {"metadata": {"finalizers": []}}
    )
    assert code == 200, answer
    await cluster.wait_for(lambda: cluster.plan("going") == {}, "the plan to go")


async def test_a_job_deleted_while_the_operator_was_away_fails_the_run(
    budget_operator: OperatorProcess, cluster: Cluster, catalog: Catalog
) -> None:
    """The deletion happens while no operator watches: at start-up the launched plan's
    Job is gone, so the run ended (Failed, JobDeleted) and nothing is created again."""
    await cluster.apply_budget("team-a", {"gpuHours": 1e6, "period": "30d"})
    launched = await _launch(cluster, "away")
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    await cluster.wait_for_phase("away", "Running")
    await cluster.wait_for(
        lambda: bool(cluster.budget("team-a")["status"]["ledger"][0].get("intervals")),
        "an open interval in the budget",
    )
    await budget_operator.stop()
    await _delete(cluster, f"{JOBS_URL}/{job}")  # by hand, or a TTL, meanwhile

    again = OperatorProcess(cluster, catalog, budget_operator.config)
    await again.start()
    try:
        failed = await cluster.wait_for_phase("away", "Failed")
        progressing = condition(failed, "Progressing")
        assert (progressing["status"], progressing["reason"]) == ("False", "JobDeleted")
        assert "while the operator was not running" in progressing["message"]
        assert failed["status"]["completionTime"]
        await cluster.wait_for(
            lambda: cluster.budget("team-a")["status"]["ledger"][0]["finished"],
            "the budget's entry to finish",
        )
        await asyncio.sleep(1.0)  # the resume handler and a budget round are done
        assert cluster.objects(JOBS) == {}
        assert cluster.plan("away")["status"]["phase"] == "Failed"
    finally:
        await again.stop()
