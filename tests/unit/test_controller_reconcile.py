"""The controller's pure decisions: conditions, launch or reject, child Job -> phase."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainplan.api import Phase
from trainplan.cluster import resource_path
from trainplan.controller.conditions import make_condition, merge_conditions
from trainplan.controller.reconcile import (
    JOB_DELETED,
    WAITING_FOR_DELETION,
    child_gone_on_resume,
    child_state,
    child_status_patch,
    decide_launch,
    deletion_retry_seconds,
    finished,
    kueue_admission,
    lifecycle_conditions,
    plan_child_state,
    waiting_for_deletion,
    waits_already_reported,
)
from trainplan.planner import Catalog

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def test_condition_keeps_transition_time_while_status_holds() -> None:
    first = make_condition("Planned", "True", "Planned", "a", now=NOW, generation=1)
    later = make_condition(
        "Planned", "True", "Planned", "b", now=NOW + timedelta(hours=1), generation=2
    )
    merged = merge_conditions([first], [later])
    assert merged == [{**later, "lastTransitionTime": first["lastTransitionTime"]}]


def test_condition_transition_time_moves_when_status_changes() -> None:
    first = make_condition("Planned", "True", "Planned", "a", now=NOW, generation=1)
    flipped = make_condition(
        "Planned", "False", "Infeasible", "b", now=NOW + timedelta(hours=1), generation=2
    )
    assert merge_conditions([first], [flipped]) == [flipped]


def test_conditions_of_other_types_are_kept() -> None:
    launched = make_condition("Launched", "True", "JobCreated", "x", now=NOW, generation=1)
    planned = make_condition("Planned", "True", "Planned", "y", now=NOW, generation=1)
    assert merge_conditions([launched], [planned]) == [launched, planned]


def _spec(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())["spec"]
    return spec


def _decide(spec: dict[str, Any], catalog: Catalog, previous: dict[str, Any] | None = None) -> Any:
    return decide_launch(
        name="p",
        namespace="ns",
        uid="u-1",
        generation=3,
        spec_document=spec,
        previous_status=previous or {},
        catalog=catalog,
        now=NOW,
    )


def test_launch_decision_for_an_example(catalog: Catalog) -> None:
    decision = _decide(_spec("llama2-7b-deadline"), catalog)
    assert decision.accepted
    kinds = [obj["kind"] for obj in decision.objects]
    assert "Job" in kinds
    assert "Service" in kinds
    status = decision.status
    assert status["phase"] == Phase.LAUNCHING.value
    assert status["observedGeneration"] == 3
    assert (
        status["jobName"]
        == next(o for o in decision.objects if o["kind"] == "Job")["metadata"]["name"]
    )
    assert status["gpus"] == status["plan"]["gpus"]
    assert status["layout"] == "TP1 PP1 DP256"
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {"Planned": "True", "Launched": "True"}


def test_suspended_spec_launches_suspended(catalog: Catalog) -> None:
    spec = _spec("llama2-7b-deadline")
    spec["job"]["suspend"] = True
    decision = _decide(spec, catalog)
    assert decision.status["phase"] == Phase.SUSPENDED.value
    launched = next(c for c in decision.status["conditions"] if c["type"] == "Launched")
    assert (launched["status"], launched["reason"]) == ("False", "Suspended")


@pytest.mark.parametrize(
    ("change", "reason", "needle"),
    [
        ({"foo": 1}, "InvalidSpec", "spec.foo"),
        ({"data": {"tokens": 1e9, "samples": 3}}, "InvalidSpec", "spec.data"),
        ({"model": {"preset": "nope"}}, "InvalidSpec", "spec.model.preset"),
        ({"parallelism": {"tensor": 3}}, "InvalidSpec", "spec.parallelism.tensor"),
        ({"objective": {"deadline": "1d", "maxGPUs": 16}}, "Infeasible", "deadline"),
    ],
)
def test_rejections_list_the_problem_and_create_nothing(
    catalog: Catalog, change: dict[str, Any], reason: str, needle: str
) -> None:
    spec = {**_spec("llama2-7b-deadline"), **change}
    decision = _decide(spec, catalog, previous={"plan": {"gpus": 8}, "gpus": 8, "layout": "x"})
    assert not decision.accepted
    assert decision.objects == ()
    status = decision.status
    assert status["phase"] == Phase.REJECTED.value
    planned = status["conditions"][0]
    assert (planned["type"], planned["status"], planned["reason"]) == ("Planned", "False", reason)
    assert needle in planned["message"]
    # A previous plan is removed by merge-patch nulls.
    assert (status["plan"], status["gpus"], status["layout"]) == (None, None, None)


def _job(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "spec": {}, "status": status}


@pytest.mark.parametrize(
    ("job", "phase"),
    [
        (_job(), Phase.LAUNCHING),
        (_job(active=4), Phase.RUNNING),
        (_job(active=0, failed=1), Phase.RESTARTING),
        (_job(active=4, failed=1), Phase.RUNNING),
        (_job(conditions=[{"type": "Complete", "status": "True"}]), Phase.SUCCEEDED),
        (_job(conditions=[{"type": "Completed", "status": "True"}]), Phase.SUCCEEDED),
        (_job(failed=3, conditions=[{"type": "Failed", "status": "True"}]), Phase.FAILED),
        (_job(conditions=[{"type": "Suspended", "status": "True"}]), Phase.SUSPENDED),
        (_job(conditions=[{"type": "Failed", "status": "False"}], active=2), Phase.RUNNING),
    ],
)
def test_child_state_phase(job: dict[str, Any], phase: Phase) -> None:
    assert child_state(job).phase is phase


def test_suspended_job_spec_means_suspended() -> None:
    job = {"metadata": {"name": "j"}, "spec": {"suspend": True}, "status": {}}
    assert child_state(job).phase is Phase.SUSPENDED


def test_failed_condition_reason_is_carried() -> None:
    job = _job(
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "limit",
            }
        ]
    )
    state = child_state(job)
    assert (state.reason, state.message) == ("BackoffLimitExceeded", "limit")


def test_child_patch_is_none_when_nothing_changes() -> None:
    state = child_state(_job(active=2, startTime="2026-11-22T00:00:00Z"))
    current = {"phase": "Running", "startTime": "2026-11-22T00:00:00Z"}
    assert child_status_patch(state, current, generation=1, now=NOW) is None


def test_child_patch_carries_phase_times_failures_and_progressing() -> None:
    state = child_state(_job(active=0, failed=2, startTime="2026-11-22T00:00:00Z"))
    patch = child_status_patch(state, {"phase": "Running"}, generation=4, now=NOW)
    assert patch is not None
    assert patch["phase"] == "Restarting"
    assert patch["startTime"] == "2026-11-22T00:00:00Z"
    assert patch["failures"]["count"] == 2
    progressing = patch["conditions"][0]
    assert (progressing["type"], progressing["status"], progressing["observedGeneration"]) == (
        "Progressing",
        "True",
        4,
    )


def _owned_job(uid: str | None = "u-1", **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j"}
    if uid is not None:
        owner = {"kind": "TrainingPlan", "name": "p", "uid": uid, "controller": True}
        meta["ownerReferences"] = [owner]
    return {"kind": "Job", "metadata": meta, "spec": {}, "status": status}


def _plan(phase: str = "Running", deleting: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "uid": "u-1", "generation": 2}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T11:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "jobName": "j", **status}}


RUNNING_JOB = {"active": 2, "startTime": "2026-11-22T00:00:00Z"}


@pytest.mark.parametrize("phase", ["Launching", "Running", "Restarting", "Suspended"])
def test_a_job_deleted_while_its_run_is_on_ends_it_failed(phase: str) -> None:
    plan = _plan(phase, startTime="2026-11-22T00:00:00Z")
    state = plan_child_state(_owned_job(**RUNNING_JOB), plan, deleted=True, now=NOW)
    assert state is not None
    assert (state.phase, state.reason) == (Phase.FAILED, JOB_DELETED)
    assert "Job j was deleted outside the operator" in state.message
    assert "apply it again" in state.message
    patch = child_status_patch(state, plan["status"], generation=2, now=NOW)
    assert patch is not None
    assert patch["phase"] == "Failed"
    assert patch["completionTime"] == NOW.isoformat()
    assert finished(patch)  # terminal: the resume handler never launches it again
    progressing = patch["conditions"][0]
    assert (progressing["type"], progressing["status"], progressing["reason"]) == (
        "Progressing",
        "False",
        JOB_DELETED,
    )


def test_a_deleted_job_that_had_ended_carries_its_end() -> None:
    done = _owned_job(
        completionTime="2026-11-23T00:00:00Z",
        conditions=[{"type": "Complete", "status": "True"}],
    )
    state = plan_child_state(done, _plan("Running"), deleted=True, now=NOW)
    assert state is not None
    assert (state.phase, state.completion_time) == (Phase.SUCCEEDED, "2026-11-23T00:00:00Z")


@pytest.mark.parametrize(
    ("job", "plan"),
    [
        (_owned_job(**RUNNING_JOB), _plan("Running", deleting=True)),  # the plan goes: GC
        (_owned_job(**RUNNING_JOB), _plan("Succeeded")),  # cleaned up after the end
        (_owned_job(**RUNNING_JOB), _plan("Failed")),
        (_owned_job(**RUNNING_JOB), _plan("Pending")),
        (_owned_job("u-0", **RUNNING_JOB), _plan("Running")),  # the previous plan's Job
        (_owned_job(None, **RUNNING_JOB), _plan("Running")),  # nobody's Job of that name
        (_owned_job(**RUNNING_JOB), _plan("Running", jobName="other")),
    ],
)
def test_a_deleted_job_that_is_not_the_live_runs_says_nothing(
    job: dict[str, Any], plan: dict[str, Any]
) -> None:
    assert plan_child_state(job, plan, deleted=True, now=NOW) is None


def test_only_the_plans_own_job_carries_its_state() -> None:
    running = plan_child_state(
        _owned_job(**RUNNING_JOB), _plan("Launching"), deleted=False, now=NOW
    )
    assert running is not None
    assert running.phase is Phase.RUNNING
    previous = _owned_job("u-0", **RUNNING_JOB)  # the Job of a plan deleted before this one
    assert plan_child_state(previous, _plan("Launching"), deleted=False, now=NOW) is None


def test_waiting_for_deletion_says_what_it_waits_for() -> None:
    waits = ["waiting for Job ns/j to be deleted: it is being deleted"]
    status = waiting_for_deletion(waits, generation=1, previous_status={}, now=NOW)
    assert status["phase"] == Phase.PENDING.value
    assert status["observedGeneration"] == 1
    (launched,) = status["conditions"]
    assert (launched["type"], launched["status"], launched["reason"]) == (
        "Launched",
        "False",
        WAITING_FOR_DELETION,
    )
    assert launched["message"] == waits[0]
    assert "plan" not in status
    assert "jobName" not in status
    assert waits_already_reported(waits, status)
    assert not waits_already_reported(["another"], status)
    assert not waits_already_reported(waits, {})


def test_the_wait_for_deletions_backs_off(catalog: Catalog) -> None:
    waits = ["waiting for Job ns/j to be deleted: it is being deleted"]
    status = waiting_for_deletion(waits, generation=1, previous_status={}, now=NOW)
    assert deletion_retry_seconds({}, NOW) == 3.0
    assert deletion_retry_seconds(status, NOW) == 3.0
    assert deletion_retry_seconds(status, NOW + timedelta(seconds=10)) == 10.0
    assert deletion_retry_seconds(status, NOW + timedelta(hours=1)) == 60.0
    # Still waiting (for fewer objects): the wait began when it first waited.
    later = waiting_for_deletion(
        ["x"], generation=1, previous_status=status, now=NOW + timedelta(seconds=20)
    )
    assert deletion_retry_seconds(later, NOW + timedelta(seconds=20)) == 20.0
    launched = _decide(_spec("llama2-7b-deadline"), catalog).status
    assert deletion_retry_seconds(launched, NOW + timedelta(hours=1)) == 3.0
    naive = {"conditions": [{**status["conditions"][0], "lastTransitionTime": "2026-11-22"}]}
    assert deletion_retry_seconds(naive, NOW) == 3.0


def test_resource_paths() -> None:
    job = resource_path("batch/v1", "Job")
    assert job.item("ns", "j", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    service = resource_path("v1", "Service")
    assert service.collection("ns") == "/api/v1/namespaces/ns/services"
    plans = resource_path("trainplan.dev/v1alpha1", "TrainingPlan")
    assert plans.item("ns", "p") == "/apis/trainplan.dev/v1alpha1/namespaces/ns/trainingplans/p"
    with pytest.raises(KeyError, match="known"):
        resource_path("v1", "Secret")


def _launched(phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u-1"},
        "status": {"phase": phase, "jobName": "p", **status},
    }


@pytest.mark.parametrize("phase", ["Launching", "Running", "Restarting", "Suspended"])
def test_a_launched_run_whose_job_is_gone_at_start_up_ended(phase: str) -> None:
    state = child_gone_on_resume(
        _launched(phase, startTime="2026-11-22T00:00:00Z", failures={"count": 3}), "Job", NOW
    )
    assert state is not None
    assert (state.phase, state.reason) == (Phase.FAILED, JOB_DELETED)
    assert "while the operator was not running" in state.message
    assert (state.start_time, state.completion_time) == ("2026-11-22T00:00:00Z", NOW.isoformat())
    assert state.failed_pods == 3


@pytest.mark.parametrize(
    "plan",
    [
        _launched("Succeeded"),
        _launched("Failed"),
        _launched("Rejected"),
        {
            "metadata": {"name": "p", "deletionTimestamp": "2026-11-22T00:00:00Z"},
            **{"status": {"phase": "Running", "jobName": "p"}},
        },
        {"metadata": {"name": "p"}, "status": {"phase": "Running"}},
    ],
)
def test_nothing_ends_for_a_plan_that_ended_is_going_or_never_launched(
    plan: dict[str, Any],
) -> None:
    assert child_gone_on_resume(plan, "JobSet", NOW) is None


def test_status_figures_from_the_plan_are_bounded_input() -> None:
    state = child_gone_on_resume(
        _launched("Running", startTime=7, failures={"count": "many"}), "Job", NOW
    )
    assert state is not None
    assert (state.start_time, state.failed_pods) == (None, 0)


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        (Phase.SUCCEEDED, ("Complete", "True")),
        (Phase.FAILED, ("Failed", "True")),
        (Phase.SUSPENDED, ("Suspended", "True")),
    ],
)
def test_lifecycle_conditions_of_the_terminal_and_suspended_phases(
    phase: Phase, expected: tuple[str, str]
) -> None:
    (condition,) = lifecycle_conditions(phase, "Why", "what", {}, generation=2, now=NOW)
    assert (condition["type"], condition["status"]) == expected
    assert (condition["reason"], condition["message"]) == ("Why", "what")
    assert condition["observedGeneration"] == 2


def test_a_resumed_run_says_so_once_and_other_phases_set_nothing() -> None:
    suspended = {"conditions": [{"type": "Suspended", "status": "True"}]}
    (resumed,) = lifecycle_conditions(Phase.RUNNING, "R", "m", suspended, generation=1, now=NOW)
    assert (resumed["type"], resumed["status"], resumed["reason"]) == (
        "Suspended",
        "False",
        "Resumed",
    )
    for phase in (Phase.LAUNCHING, Phase.RUNNING, Phase.RESTARTING):
        assert lifecycle_conditions(phase, "R", "m", {}, generation=1, now=NOW) == []


def test_a_job_that_completes_sets_complete_beside_the_phase() -> None:
    job = {
        "status": {
            "succeeded": 1,
            "completionTime": "2026-11-22T12:00:00Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        }
    }
    patch = child_status_patch(child_state(job), {"phase": "Running"}, generation=1, now=NOW)
    assert patch is not None
    kinds = {c["type"]: c["status"] for c in patch["conditions"]}
    assert kinds == {"Progressing": "False", "Complete": "True"}


def _workload(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions), **status}}


def _admitted_of(patch: dict[str, Any] | None) -> dict[str, Any]:
    assert patch is not None
    return next(c for c in patch["conditions"] if c["type"] == "Admitted")


def test_kueue_admission_follows_the_workloads_conditions() -> None:
    pending = _workload({"type": "QuotaReserved", "status": "False", "message": "no quota"})
    condition = _admitted_of(kueue_admission(pending, {}, generation=1, now=NOW))
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Pending",
        "no quota",
    )
    reserved = _workload({"type": "QuotaReserved", "status": "True"})
    assert _admitted_of(kueue_admission(reserved, {}, generation=1, now=NOW))["reason"] == (
        "QuotaReserved"
    )
    admitted = _workload(
        {"type": "QuotaReserved", "status": "True"},
        {"type": "Admitted", "status": "True"},
        admission={
            "clusterQueue": "cq",
            "podSetAssignments": [{"flavors": {"nvidia.com/gpu": "h100", "cpu": "default"}}],
        },
    )
    condition = _admitted_of(kueue_admission(admitted, {}, generation=1, now=NOW))
    assert (condition["status"], condition["message"]) == (
        "True",
        "admitted by ClusterQueue cq on default, h100",
    )
    evicted = _workload(
        {"type": "Admitted", "status": "True"},
        {"type": "Evicted", "status": "True", "message": "preempted by a higher priority"},
    )
    condition = _admitted_of(kueue_admission(evicted, {}, generation=1, now=NOW))
    assert (condition["status"], condition["reason"]) == ("False", "Evicted")


def test_kueue_admission_writes_nothing_unchanged_or_finished() -> None:
    admitted = _workload({"type": "Admitted", "status": "True"}, admission={"clusterQueue": "cq"})
    first = kueue_admission(admitted, {}, generation=1, now=NOW)
    assert first is not None
    assert kueue_admission(admitted, first, generation=1, now=NOW) is None
    finished_workload = _workload({"type": "Finished", "status": "True"})
    assert kueue_admission(finished_workload, {}, generation=1, now=NOW) is None


def test_kueue_messages_are_bounded_printable_text() -> None:
    noisy = _workload(
        {"type": "QuotaReserved", "status": "False", "message": "a\nb\x00" + "x" * 5000}
    )
    message = _admitted_of(kueue_admission(noisy, {}, generation=None, now=NOW))["message"]
    assert len(message) == 512
    assert message.isprintable()
