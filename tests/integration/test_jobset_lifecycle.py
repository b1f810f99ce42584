"""Integration (issue 14, item 1): a JobSet plan follows its JobSet's status as the
JobSet controller writes it (the fixtures of `tests/data/jobset_statuses.yaml`, shaped by
JobSet v0.12.0's CRD): Launching -> Running -> Restarting -> Running -> Succeeded, with
its start and completion times, its restart counted as a failure, and its GPUBudget
interval opened at the start and closed at the end. The real Kopf operator against
kmock. The ETA timer runs once an hour here: it writes the plan's conditions from the
status it read before its reads of pods and metrics, onto the version its live body has
by then, so a child write in between can be undone (reported beside issue 14)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.integration.harness import JOBSETS, Cluster, OperatorProcess
from tests.integration.lookups import condition
from tests.jobset_statuses import CREATED, jobset_status
from trainplan.api import TrainingPlanSpec
from trainplan.controller import OperatorConfig
from trainplan.planner import Catalog, plan

pytestmark = pytest.mark.asyncio

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0", "launcher": "JobSet"},
}


@pytest_asyncio.fixture()
async def jobset_operator(cluster: Cluster, catalog: Catalog) -> AsyncIterator[OperatorProcess]:
    """The operator with budget revisions every 0.2 s and the ETA timer once an hour."""
    config = OperatorConfig(
        metrics_port=0,
        metrics_address="127.0.0.1",
        eta_interval_seconds=3600.0,
        budget_interval_seconds=0.2,
    )
    process = OperatorProcess(cluster, catalog, config)
    await process.start()
    yield process
    await process.stop()


async def test_a_jobset_plan_follows_its_jobset_to_the_end(
    jobset_operator: OperatorProcess, cluster: Cluster, catalog: Catalog
) -> None:
    needs = plan(TrainingPlanSpec.model_validate(SPEC), catalog).gpu_hours
    await cluster.apply_budget("team-a", {"gpuHours": needs * 10, "period": "7d"})
    name = await cluster.apply_plan(
        {
            "apiVersion": "trainplan.dev/v1alpha1",
            "kind": "TrainingPlan",
            "metadata": {"name": "js-run"},
            "spec": SPEC,
        }
    )
    launched = await cluster.wait_for_phase(name, "Launching")
    jobset = launched["status"]["jobName"]
    assert list(cluster.objects(JOBSETS)) == [jobset]
    await cluster.stamp_jobset_creation(jobset, CREATED)

    def status() -> dict[str, Any]:
        found: dict[str, Any] = cluster.plan(name).get("status", {})
        return found

    def ledger() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = cluster.budget("team-a")["status"]["ledger"]
        return found

    # Created, no pods yet: still Launching, started at its creation (a Job's startTime).
    await cluster.write_jobset_status(jobset, jobset_status("launching"))
    await cluster.wait_for(lambda: status().get("startTime") == CREATED, "the start time")
    assert status()["phase"] == "Launching"

    # Its pods ready: Running; the budget's interval opens at the start.
    await cluster.write_jobset_status(jobset, jobset_status("running"))
    await cluster.wait_for_phase(name, "Running")
    await cluster.wait_for(lambda: bool(ledger()[0].get("intervals")), "an open interval")
    (interval,) = ledger()[0]["intervals"]
    assert interval["start"].startswith("2026-11-22T00:00:00")
    assert "end" not in interval

    # Its Job failed and the failure policy recreates it: Restarting, one failure.
    await cluster.write_jobset_status(jobset, jobset_status("restart_decided"))
    await cluster.wait_for_phase(name, "Restarting")
    progressing = condition(cluster.plan(name), "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "JobSetRestarting")
    assert progressing["message"].startswith("restart 1: applying RestartJobSet")
    await cluster.wait_for(
        lambda: (status().get("failures") or {}).get("count") == 1, "one failure counted"
    )
    await cluster.write_jobset_status(jobset, jobset_status("restart_in_progress"))

    # The recreated Job's pods ready: Running again, the same interval still open.
    await cluster.write_jobset_status(jobset, jobset_status("running_after_restart"))
    await cluster.wait_for_phase(name, "Running")

    # Completed: Succeeded at the Completed condition's time; the interval closes there.
    await cluster.write_jobset_status(jobset, jobset_status("completed"))
    ended = await cluster.wait_for_phase(name, "Succeeded")
    done = ended["status"]
    assert done["startTime"] == CREATED
    assert done["completionTime"] == "2026-11-22T01:00:00Z"
    assert condition(ended, "Complete")["status"] == "True"
    assert (done.get("failures") or {}).get("count") == 1
    await cluster.wait_for(lambda: ledger()[0]["finished"], "the budget entry finished")
    budget = cluster.budget("team-a")["status"]
    (interval,) = budget["ledger"][0]["intervals"]
    assert interval["start"].startswith("2026-11-22T00:00:00")
    assert interval["end"].startswith("2026-11-22T01:00:00")
    assert budget["usedGPUHours"] == pytest.approx(8.0, abs=1e-3)  # 8 GPUs for one hour
    assert budget["activePlans"] == []
