"""The terminal and suspended conditions beside the phase (`Complete`, `Failed`,
`Suspended`, as a Job's), so that `kubectl wait --for=condition=Complete tp/x` works: the
sequence of each through a run that succeeds, one that fails, and a suspend and resume,
with the real operator against the emulator (Job status written as the Job controller
would)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.harness import Cluster, OperatorProcess, small_plan

pytestmark = pytest.mark.asyncio

LIFECYCLE = ("Complete", "Failed", "Suspended")


def _spec(**job: Any) -> dict[str, Any]:
    return small_plan(job.pop("name"), **job)


def lifecycle(cluster: Cluster, name: str) -> dict[str, tuple[str, str]]:
    """(status, reason) of each lifecycle condition the plan has."""
    conditions = cluster.plan(name).get("status", {}).get("conditions", [])
    return {c["type"]: (c["status"], c["reason"]) for c in conditions if c["type"] in LIFECYCLE}


def wait_condition(cluster: Cluster, name: str, kind: str, status: str) -> Any:
    """What `kubectl wait --for=condition=KIND=STATUS` waits for."""
    return cluster.wait_for(
        lambda: lifecycle(cluster, name).get(kind, ("", ""))[0] == status,
        f"{name}: condition {kind}={status} (now {lifecycle(cluster, name)})",
    )


async def _launched(cluster: Cluster, name: str, **job: Any) -> str:
    await cluster.apply_plan(_spec(name=name, **job))
    await cluster.wait_for(
        lambda: bool(cluster.plan(name).get("status", {}).get("jobName")), "the launch"
    )
    return str(cluster.plan(name)["status"]["jobName"])


async def test_a_run_that_succeeds(operator: OperatorProcess, cluster: Cluster) -> None:
    job = await _launched(cluster, "wins")
    assert lifecycle(cluster, "wins") == {}
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-25T00:00:00Z"})
    await cluster.wait_for_phase("wins", "Running")
    assert lifecycle(cluster, "wins") == {}
    await cluster.complete_job(job, "2026-11-25T01:00:00Z")
    await wait_condition(cluster, "wins", "Complete", "True")
    assert cluster.plan("wins")["status"]["phase"] == "Succeeded"
    assert set(lifecycle(cluster, "wins")) == {"Complete"}
    (complete,) = [
        c for c in cluster.plan("wins")["status"]["conditions"] if c["type"] == "Complete"
    ]
    assert complete["lastTransitionTime"]
    assert complete["message"]
    assert complete["observedGeneration"] == 1


async def test_a_run_that_fails(operator: OperatorProcess, cluster: Cluster) -> None:
    job = await _launched(cluster, "loses")
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-25T00:00:00Z"})
    await cluster.wait_for_phase("loses", "Running")
    await cluster.write_job_status(
        job,
        {
            "active": 0,
            "failed": 4,
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
    await wait_condition(cluster, "loses", "Failed", "True")
    assert cluster.plan("loses")["status"]["phase"] == "Failed"
    assert set(lifecycle(cluster, "loses")) == {"Failed"}


async def test_suspend_and_resume(operator: OperatorProcess, cluster: Cluster) -> None:
    await _launched(cluster, "pauses")
    await cluster.patch_plan_spec("pauses", {"job": {"suspend": True}})
    await wait_condition(cluster, "pauses", "Suspended", "True")
    assert cluster.plan("pauses")["status"]["phase"] == "Suspended"
    await cluster.patch_plan_spec("pauses", {"job": {"suspend": False}})
    await wait_condition(cluster, "pauses", "Suspended", "False")
    assert lifecycle(cluster, "pauses") == {"Suspended": ("False", "Resumed")}
    assert cluster.plan("pauses")["status"]["phase"] == "Launching"


async def test_a_plan_created_suspended(operator: OperatorProcess, cluster: Cluster) -> None:
    await _launched(cluster, "held", suspend=True)
    await wait_condition(cluster, "held", "Suspended", "True")
    assert cluster.plan("held")["status"]["phase"] == "Suspended"
    assert lifecycle(cluster, "held") == {"Suspended": ("True", "JobSuspended")}
