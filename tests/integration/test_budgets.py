"""GPU budgets in the reconcile path, against kmock: plans over budget are rejected
with the numbers, Warn admits with BudgetExceeded, Downsize launches a smaller plan,
concurrent plans cannot share one remainder, the ledger follows the plan's phases, and
malformed or missing budgets are reported; a budget charging p90 rejects a plan that fits
at p50. Two findings of the security review: a pod reporting its last step does not free
its plan's commitment, and a rejected plan that is fixed launches with its budget entry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from tests.integration.harness import JOBS, Cluster, OperatorProcess, TrainingPod, budget_series
from tests.integration.lookups import condition, events
from trainplan.api import TrainingPlanSpec
from trainplan.controller import OperatorConfig
from trainplan.planner import Catalog, plan

pytestmark = pytest.mark.asyncio

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0"},
}


def _plan(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": {**SPEC, **spec},
    }


@pytest.fixture(scope="module")
def needs(catalog: Catalog) -> float:
    """GPU-hours the test plan is projected to use."""
    return plan(TrainingPlanSpec.model_validate(SPEC), catalog).gpu_hours


async def test_over_budget_is_rejected_with_the_numbers(
    budget_operator: OperatorProcess, cluster: Cluster, needs: float
) -> None:
    await cluster.apply_budget("team-a", {"gpuHours": needs * 0.5, "period": "30d"})
    name = await cluster.apply_plan(_plan("too-big"))
    rejected = await cluster.wait_for_phase(name, "Rejected")
    planned = condition(rejected, "Planned")
    assert planned["reason"] == "OverBudget"
    assert f"needs {needs:,.0f} GPU-hours at p50 (the estimate); team-a has" in planned["message"]
    assert "left in the last 30d" in planned["message"]
    assert cluster.objects(JOBS) == {}
    await cluster.wait_for(lambda: bool(events(cluster, "OverBudget")), "an OverBudget event")


async def test_a_budget_charging_p90_rejects_a_plan_that_fits_at_p50(
    budget_operator: OperatorProcess, cluster: Cluster, catalog: Catalog, needs: float
) -> None:
    p90 = needs * catalog.calibration.gpu_hours_ratio_p90
    allowance = (needs + p90) / 2
    await cluster.apply_budget(
        "team-a", {"gpuHours": allowance, "period": "30d", "chargeConfidence": 0.9}
    )
    name = await cluster.apply_plan(_plan("cautious"))
    rejected = await cluster.wait_for_phase(name, "Rejected")
    assert condition(rejected, "Planned")["message"] == (
        f"GPUBudget team-a: needs {p90:,.0f} GPU-hours at p90 (estimate {needs:,.0f});"
        f" team-a has {allowance:,.0f} of {allowance:,.0f} left in the last 30d"
    )
    assert cluster.objects(JOBS) == {}


async def test_admitted_plan_is_accounted_through_its_life(
    budget_operator: OperatorProcess, cluster: Cluster, needs: float
) -> None:
    await cluster.apply_budget("team-a", {"gpuHours": needs * 10, "period": "7d"})
    name = await cluster.apply_plan(_plan("fits"))
    launched = await cluster.wait_for_phase(name, "Launching")
    exceeded = condition(launched, "BudgetExceeded")
    assert exceeded["status"] == "False"
    assert exceeded["message"] == (
        f"admitted by GPUBudget team-a, charged {needs:,.0f} GPU-hours at p50 (the estimate)"
    )
    budget = cluster.budget("team-a")
    ledger = budget["status"]["ledger"]
    assert [(u["name"], u["gpus"], u["finished"]) for u in ledger] == [("fits", 8, False)]
    assert ledger[0]["chargedConfidence"] == 0.5
    assert budget["status"]["committedGPUHours"] == pytest.approx(needs, abs=1e-3)
    assert budget["status"]["activePlans"] == ["fits"]
    assert budget["status"]["gpusInUse"] == 8

    # The pods run: an interval opens at the Job's start; time counts as used.
    job = launched["status"]["jobName"]
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    await cluster.wait_for_phase(name, "Running")
    await cluster.wait_for(
        lambda: bool(cluster.budget("team-a")["status"]["ledger"][0].get("intervals")),
        "an open interval",
    )
    interval = cluster.budget("team-a")["status"]["ledger"][0]["intervals"][0]
    assert interval["start"].startswith("2026-11-22T00:00:00")
    assert "end" not in interval
    await cluster.wait_for(
        lambda: cluster.budget("team-a")["status"]["usedGPUHours"] > 0, "used GPU-hours"
    )

    # The Job completes: the interval closes at its completion, nothing stays committed.
    await cluster.complete_job(job, "2026-11-22T01:00:00Z")
    await cluster.wait_for_phase(name, "Succeeded")
    await cluster.wait_for(
        lambda: cluster.budget("team-a")["status"]["ledger"][0]["finished"], "the plan finished"
    )
    status = cluster.budget("team-a")["status"]
    assert status["ledger"][0]["intervals"][0]["end"].startswith("2026-11-22T01:00:00")
    assert status["usedGPUHours"] == pytest.approx(8.0, abs=1e-3)  # 8 GPUs for one hour
    assert status["committedGPUHours"] == 0
    assert status["activePlans"] == []
    assert status["remainingGPUHours"] == pytest.approx(needs * 10 - 8.0, abs=1e-3)

    # The operator metrics carry the budget. They are recorded just after the status write
    # that the test has seen, so they may lag it for a moment (figures computed while the
    # interval was open count the wall clock since its start): wait for them to agree.
    await cluster.wait_for(
        lambda: (
            budget_series(budget_operator.metrics_port).get("used") == pytest.approx(8.0, abs=1e-3)
        ),
        "the metrics to show the finished plan's 8 GPU-hours",
    )
    series = budget_series(budget_operator.metrics_port)
    assert series["limit"] == pytest.approx(needs * 10)
    assert series["used"] == pytest.approx(8.0, abs=1e-3)
    assert set(series) == {"limit", "used", "committed", "remaining"}


async def test_two_plans_at_once_cannot_share_one_remainder(
    budget_operator: OperatorProcess, cluster: Cluster, needs: float
) -> None:
    await cluster.apply_budget("team-a", {"gpuHours": needs * 1.5, "period": "30d"})
    names = await asyncio.gather(
        cluster.apply_plan(_plan("first")), cluster.apply_plan(_plan("second"))
    )
    await cluster.wait_for(
        lambda: all(
            cluster.plan(n).get("status", {}).get("phase") in ("Launching", "Rejected")
            for n in names
        ),
        "both plans decided",
    )
    phases = sorted(cluster.plan(n)["status"]["phase"] for n in names)
    assert phases == ["Launching", "Rejected"]
    assert len(cluster.objects(JOBS)) == 1
    ledger = cluster.budget("team-a")["status"]["ledger"]
    assert len(ledger) == 1


async def test_warn_admits_with_budget_exceeded(
    budget_operator: OperatorProcess, cluster: Cluster, needs: float
) -> None:
    await cluster.apply_budget(
        "team-a", {"gpuHours": needs * 0.5, "period": "30d", "enforcement": "Warn"}
    )
    name = await cluster.apply_plan(_plan("warned"))
    launched = await cluster.wait_for_phase(name, "Launching")
    exceeded = condition(launched, "BudgetExceeded")
    assert exceeded["status"] == "True"
    assert "needs" in exceeded["message"]
    await cluster.wait_for(lambda: bool(events(cluster, "BudgetWarning")), "a warning event")


async def test_downsize_launches_under_the_gpu_ceiling(
    budget_operator: OperatorProcess, cluster: Cluster, needs: float
) -> None:
    await cluster.apply_budget(
        "team-a",
        {"gpuHours": needs * 10, "period": "30d", "maxGPUs": 4, "enforcement": "Downsize"},
    )
    name = await cluster.apply_plan(_plan("downsized"))
    launched = await cluster.wait_for_phase(name, "Launching")
    assert launched["status"]["gpus"] == 4
    assert cluster.budget("team-a")["status"]["ledger"][0]["gpus"] == 4
    await cluster.wait_for(
        lambda: any(
            "downsized to 4 GPUs" in e["message"] for e in events(cluster, "BudgetWarning")
        ),
        "the downsizing warning",
    )


async def test_malformed_and_missing_budgets_are_reported(
    budget_operator: OperatorProcess, cluster: Cluster
) -> None:
    await cluster.apply_budget("broken", {"gpuHours": -5, "period": "30d"})
    await cluster.wait_for(
        lambda: condition(cluster.budget("broken"), "Valid").get("status") == "False",
        "Valid=False on the malformed budget",
    )
    assert "gpuHours" in condition(cluster.budget("broken"), "Valid")["message"]
    name = await cluster.apply_plan(_plan("on-broken", budgetRef="broken"))
    rejected = await cluster.wait_for_phase(name, "Rejected")
    assert condition(rejected, "Planned")["reason"] == "InvalidBudget"

    missing = await cluster.apply_plan(_plan("on-missing", budgetRef="nowhere"))
    rejected = await cluster.wait_for_phase(missing, "Rejected")
    planned = condition(rejected, "Planned")
    assert planned["reason"] == "BudgetNotFound"
    assert "'nowhere' not found" in planned["message"]


# --- security review: finding 2 -----------------------------------------------------------


async def _running_pod(cluster: Cluster, plan_name: str, job: str) -> None:
    """The Job's rank-0 pod, running on 127.0.0.1 (where the test's metrics are served)."""
    await cluster.create_rank0_pod(plan_name, job, {"phase": "Running", "podIP": "127.0.0.1"})


def _entry(cluster: Cluster, name: str) -> dict[str, Any]:
    ledger = cluster.budget("team-a").get("status", {}).get("ledger", [])
    return next((entry for entry in ledger if entry["name"] == name), {})


async def test_a_pod_reporting_its_last_step_does_not_free_the_budget(
    budget_operator: OperatorProcess, cluster: Cluster, pod: TrainingPod, needs: float
) -> None:
    """The pod reports step == totalSteps while its Job stays active: the ETA projects
    the GPU-hours used so far, yet the plan keeps committing what it was admitted with,
    and a second plan that would take the budget past its limit is rejected."""
    await cluster.apply_budget("team-a", {"gpuHours": needs * 1.5, "period": "30d"})
    job_spec = {**SPEC["job"], "metricsPort": pod.port}
    name = await cluster.apply_plan(_plan("reporter", job=job_spec))
    job = (await cluster.wait_for_phase(name, "Launching"))["status"]["jobName"]
    await _running_pod(cluster, name, job)
    started = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await cluster.write_job_status(job, {"active": 1, "startTime": started})
    status = (await cluster.wait_for_phase(name, "Running"))["status"]
    pod.tokens_per_step = status["plan"]["tokensPerStep"]
    pod.step = status["plan"]["totalSteps"]

    # The projection collapses to what was used, and the ledger carries it in.
    await cluster.wait_for(
        lambda: _entry(cluster, name).get("projectedGPUHours", needs) < needs * 0.05,
        "the reported end in the ledger's projection",
    )
    entry = _entry(cluster, name)
    assert entry["admittedGPUHours"] == pytest.approx(needs)
    assert not entry["finished"]
    assert cluster.budget("team-a")["status"]["committedGPUHours"] > needs * 0.9

    second = await cluster.apply_plan(_plan("second"))
    rejected = await cluster.wait_for_phase(second, "Rejected")
    assert condition(rejected, "Planned")["reason"] == "OverBudget"
    assert list(cluster.objects(JOBS)) == [job]
    assert cluster.plan(name)["status"]["phase"] == "Running"
    assert [e["name"] for e in cluster.budget("team-a")["status"]["ledger"]] == [name]


# --- security review: finding 6 -----------------------------------------------------------


@pytest_asyncio.fixture()
async def racing_budget_operator(
    cluster: Cluster, catalog: Catalog
) -> AsyncIterator[OperatorProcess]:
    """Budgets revised every 50 ms: a revision falls between a plan's admission and the
    status that says so."""
    config = OperatorConfig(
        metrics_port=0,
        metrics_address="127.0.0.1",
        eta_interval_seconds=0.2,
        budget_interval_seconds=0.05,
    )
    process = OperatorProcess(cluster, catalog, config)
    await process.start()
    yield process
    await process.stop()


FIXED_PLANS = 5


async def test_a_rejected_plan_that_is_fixed_launches_with_its_budget_entry(
    racing_budget_operator: OperatorProcess, cluster: Cluster, needs: float
) -> None:
    await cluster.apply_budget("team-a", {"gpuHours": needs * 4 * FIXED_PLANS, "period": "30d"})
    names = []
    for index in range(FIXED_PLANS):
        name = await cluster.apply_plan(_plan(f"fixed-{index}", parallelism={"tensor": 5}))
        rejected = await cluster.wait_for_phase(name, "Rejected")
        assert condition(rejected, "Planned")["reason"] == "InvalidSpec"
        await cluster.patch_plan_spec(name, {"parallelism": {"tensor": 1}})
        await cluster.wait_for_phase(name, "Launching")
        names.append(name)
    await asyncio.sleep(0.5)  # ten more revisions of the budget

    lost = [n for n in names if not _entry(cluster, n) or _entry(cluster, n)["finished"]]
    assert lost == [], f"launched without a live budget entry: {lost}"
    status = cluster.budget("team-a")["status"]
    assert status["activePlans"] == sorted(names)
    admitted = sum(cluster.plan(n)["status"]["plan"]["gpuHours"] for n in names)
    assert status["committedGPUHours"] >= admitted - 1e-2  # the ETA may project a bit more
    assert all(cluster.plan(n)["status"]["phase"] == "Launching" for n in names)
