"""A JobSet's status carried to its plan (issue 14, item 1): phases, times and failures
read from what the JobSet controller (kubernetes-sigs/jobset v0.12.0) writes, not from a
Job's fields. The statuses are the fixtures of `tests/data/jobset_statuses.yaml`, which
validate against the vendored upstream schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.jobset_statuses import CREATED, fixture_names, jobset
from trainplan.api import Phase, PlanUsage
from trainplan.controller.budgets import follow_phase
from trainplan.controller.metrics import snapshot_from_status
from trainplan.controller.reconcile import (
    JOBSET_RESTARTING,
    child_state,
    child_status_patch,
    plan_child_state,
)
from trainplan.monitor import FailureLedger, observe_failures

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

# fixture -> (phase, reason, start time, completion time, failure count)
EXPECTED: dict[str, tuple[Phase, str, str | None, str | None, int]] = {
    "launching": (Phase.LAUNCHING, "PodsPending", CREATED, None, 0),
    "pods_starting": (Phase.RUNNING, "PodsActive", CREATED, None, 0),
    "running": (Phase.RUNNING, "PodsActive", CREATED, None, 0),
    "restart_decided": (Phase.RESTARTING, JOBSET_RESTARTING, CREATED, None, 1),
    "restart_in_progress": (Phase.RESTARTING, JOBSET_RESTARTING, CREATED, None, 1),
    "restart_in_progress_before_v0_12": (Phase.RESTARTING, JOBSET_RESTARTING, CREATED, None, 1),
    "running_after_restart": (Phase.RUNNING, "PodsActive", CREATED, None, 1),
    "completed": (Phase.SUCCEEDED, "JobComplete", CREATED, "2026-11-22T01:00:00Z", 1),
    "failed_max_restarts": (
        Phase.FAILED,
        "ReachedMaxRestarts",
        CREATED,
        "2026-11-22T02:00:00Z",
        4,  # three restarts and the failure that ended it
    ),
    "failed_usage_error": (
        Phase.FAILED,
        "FailJobSetFailurePolicyAction",
        CREATED,
        "2026-11-22T00:03:00Z",
        1,
    ),
    "suspended": (Phase.SUSPENDED, "JobSuspended", None, None, 1),
    "resumed": (Phase.RUNNING, "PodsActive", "2026-11-22T02:00:00Z", None, 1),
}


@pytest.mark.parametrize("name", fixture_names())
def test_each_jobset_status_maps_to_its_phase_times_and_failures(name: str) -> None:
    phase, reason, start, done, failures = EXPECTED[name]  # every fixture has its line
    state = child_state(jobset(name))
    assert (state.phase, state.reason) == (phase, reason)
    assert (state.start_time, state.completion_time) == (start, done)
    assert state.failed_pods == failures


def test_a_failed_jobset_carries_its_reason_message_and_end() -> None:
    state = child_state(jobset("failed_max_restarts"))
    assert (state.reason, state.message, state.completion_time) == (
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: train-node-0)",
        "2026-11-22T02:00:00Z",
    )


def test_a_restart_says_which_restart_and_why() -> None:
    state = child_state(jobset("restart_in_progress"))
    assert state.message == (
        "restart 1: applying RestartJobSet failure policy action (first failed job: train-node-0)"
    )


def test_a_created_suspended_jobset_starts_when_it_is_resumed() -> None:
    held = jobset("launching")
    held["spec"]["suspend"] = True
    assert child_state(held).start_time is None
    # Kueue (or job.suspend) resumed it; its controller has not said so yet.
    held["spec"]["suspend"] = False
    suspended = {
        "type": "Suspended",
        "status": "True",
        "reason": "SuspendedJobs",
        "message": "jobset is suspended",
        "lastTransitionTime": "2026-11-22T00:00:01Z",
    }
    held["status"]["conditions"] = [suspended]
    assert (child_state(held).phase, child_state(held).start_time) == (Phase.SUSPENDED, None)
    # Now it has, and its Job's pods are created.
    suspended.update(
        status="False",
        reason="ResumeJobs",
        message="jobset is resumed",
        lastTransitionTime="2026-11-22T05:00:00Z",
    )
    held["status"]["replicatedJobsStatus"][0]["active"] = 1
    state = child_state(held)
    assert (state.phase, state.start_time) == (Phase.RUNNING, "2026-11-22T05:00:00Z")


def _plan(phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "uid": "uid-1"},
        "status": {"phase": phase, "jobName": "train", **status},
    }


def _owned(name: str) -> dict[str, Any]:
    child = jobset(name)
    child["metadata"]["ownerReferences"] = [
        {"kind": "TrainingPlan", "name": "train", "uid": "uid-1", "controller": True}
    ]
    return child


def test_a_jobset_run_reaches_every_phase_with_its_times_and_budget() -> None:
    """Launching -> Running -> Restarting -> Running -> Succeeded through the status
    patches; startTime and completionTime land in the plan status, the budget's interval
    opens at the start and closes at the end, and the deadline is measured from it."""
    status: dict[str, Any] = {"phase": "Launching", "jobName": "train"}
    usage = PlanUsage(
        name="train",
        uid="uid-1",
        gpus=8,
        projected_gpu_hours=100.0,
        admitted_gpu_hours=100.0,
        admitted_time=datetime(2026, 11, 21, tzinfo=UTC),
    )
    phases = []
    for name in (
        "launching",
        "running",
        "restart_decided",
        "restart_in_progress",
        "running_after_restart",
        "completed",
    ):
        state = plan_child_state(_owned(name), _plan(**status), deleted=False, now=NOW)
        assert state is not None
        patch = child_status_patch(state, status, generation=1, now=NOW)
        status = {**status, **(patch or {})}
        phases.append(status["phase"])
        usage = follow_phase(
            usage,
            phase=status["phase"],
            start_time=datetime.fromisoformat(status["startTime"]),
            end_time=(
                datetime.fromisoformat(status["completionTime"])
                if "completionTime" in status
                else None
            ),
            projected_gpu_hours=None,
            now=NOW,
        )
    assert phases == ["Launching", "Running", "Restarting", "Restarting", "Running", "Succeeded"]
    assert status["startTime"] == CREATED
    assert status["completionTime"] == "2026-11-22T01:00:00Z"
    assert status["failures"]["count"] == 1
    ((start, end),) = [(i.start, i.end) for i in usage.intervals]
    assert (start.isoformat(), end and end.isoformat()) == (
        "2026-11-22T00:00:00+00:00",
        "2026-11-22T01:00:00+00:00",
    )
    snapshot = snapshot_from_status(status, {"objective": {"deadline": "2d"}})
    assert snapshot.deadline_timestamp_seconds == datetime(2026, 11, 24, tzinfo=UTC).timestamp()


def test_the_eta_loop_counts_a_jobsets_restarts_as_failures() -> None:
    """The ETA timer reads the JobSet beside its pods: its restarts are failures even when
    the failed pods were deleted with their Job before they were seen."""
    ledger = observe_failures(FailureLedger(), [], jobset("restart_in_progress"))
    assert ledger.count == 1
    ended = observe_failures(ledger, [], jobset("failed_max_restarts"))
    assert ended.count == 4
