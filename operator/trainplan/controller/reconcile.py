"""What the operator decides, as pure functions: spec -> plan -> objects and status, and
child Job state -> plan status. Handlers only parse the event, call these, apply the
objects and write the status they return, once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from trainplan.api import (
    FINISHED_PHASES,
    ClusterCalibration,
    ConditionType,
    Phase,
    Plan,
    TrainingPlanSpec,
    format_validation_errors,
)
from trainplan.controller.budgets import Verdict
from trainplan.controller.conditions import ConditionStatus, make_condition, merge_conditions
from trainplan.launcher import LauncherError, PlanRef, job_name, render_for
from trainplan.monitor import workload_failures
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan
from trainplan.planner.cluster_fit import ClusterEvidence, cluster_evidence


@dataclass(frozen=True, slots=True)
class LaunchDecision:
    """Objects to apply (none when rejected) and the status patch to write."""

    objects: tuple[dict[str, Any], ...]
    status: dict[str, Any]
    accepted: bool
    event_reason: str
    event_message: str
    problems: tuple[str, ...] = field(default=())


def reject(
    problems: list[str],
    reason: str,
    *,
    generation: int | None,
    previous_status: Mapping[str, Any],
    now: datetime,
) -> LaunchDecision:
    """Phase Rejected with a Planned=False condition listing every problem."""
    message = "; ".join(problems)
    conditions = merge_conditions(
        previous_status.get("conditions"),
        [
            make_condition(
                ConditionType.PLANNED, "False", reason, message, now=now, generation=generation
            )
        ],
    )
    status: dict[str, Any] = {
        "phase": Phase.REJECTED.value,
        "conditions": conditions,
        "lastUpdatedTime": now.isoformat(),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    for stale in ("plan", "gpus", "layout"):
        if stale in previous_status:
            status[stale] = None  # merge-patch null removes the previous plan
    return LaunchDecision((), status, False, reason, message, tuple(problems))


WAITING_FOR_DELETION = "WaitingForDeletion"
"""Reason of `Launched=False` while objects of the plan's names are still being deleted."""


def waiting_for_deletion(
    waits: list[str],
    *,
    generation: int | None,
    previous_status: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The status of a plan that cannot launch yet because objects of its names are going
    away (the previous plan's of the same name, deleted just before): phase Pending,
    `Launched=False` reason WaitingForDeletion naming each object."""
    condition = make_condition(
        ConditionType.LAUNCHED,
        "False",
        WAITING_FOR_DELETION,
        "; ".join(waits),
        now=now,
        generation=generation,
    )
    status: dict[str, Any] = {
        "phase": Phase.PENDING.value,
        "conditions": merge_conditions(previous_status.get("conditions"), [condition]),
        "lastUpdatedTime": now.isoformat(),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def _waiting_since(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == ConditionType.LAUNCHED:
            if condition.get("reason") != WAITING_FOR_DELETION:
                return None
            return str(condition.get("lastTransitionTime") or "") or None
    return None


def waits_already_reported(waits: list[str], status: Mapping[str, Any]) -> bool:
    """Whether the status says the plan waits for exactly these objects already."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == ConditionType.LAUNCHED:
            return bool(
                condition.get("reason") == WAITING_FOR_DELETION
                and condition.get("message") == "; ".join(waits)
            )
    return False


def deletion_retry_seconds(
    status: Mapping[str, Any], now: datetime, *, first: float = 3.0, most: float = 60.0
) -> float:
    """How long a plan waiting for deletions waits before it looks again: `first` at
    first, then as long as it has waited so far (the delay doubles), at most `most`."""
    since = _waiting_since(status)
    try:
        waited = (now - datetime.fromisoformat(since)).total_seconds() if since else 0.0
    except (TypeError, ValueError):  # a malformed or naive time: start again
        waited = 0.0
    return min(most, max(first, waited))


def cluster_from_document(
    name: str, document: Mapping[str, Any] | None, catalog: Catalog
) -> ClusterEvidence | str:
    """The fit of ClusterCalibration `name` as read from the API, or why it cannot be used
    (missing, or not a valid ClusterCalibration: its records are input, checked here)."""
    if document is None:
        return f"ClusterCalibration {name!r} not found; create it or remove the field"
    try:
        resource = ClusterCalibration.model_validate(dict(document))
    except ValidationError as error:
        first = format_validation_errors(error)[0]
        return f"ClusterCalibration {name!r} is not valid ({first})"
    return cluster_evidence(resource, catalog.calibration)


def _catalog_gpu(catalog: Catalog, name: str) -> str | None:
    try:
        return catalog.gpu(name).name
    except LookupError:  # no catalog GPU of that name
        return None


def default_calibration(
    documents: Sequence[Mapping[str, Any]], gpu_type: str, catalog: Catalog
) -> Mapping[str, Any] | None:
    """Of the ClusterCalibrations listed, the one a plan of `gpu_type` naming none uses:
    `spec.default` true and the same catalog GPU (aliases resolved), the first by name;
    None when there is none (or `gpu_type` is not in the catalog)."""
    wanted = _catalog_gpu(catalog, gpu_type)
    if wanted is None:
        return None
    chosen = [
        document
        for document in documents
        if isinstance(spec := document.get("spec"), Mapping)
        and spec.get("default") is True
        and isinstance(spec.get("gpuType"), str)
        and _catalog_gpu(catalog, spec["gpuType"]) == wanted
    ]
    return min(chosen, key=lambda d: str((d.get("metadata") or {}).get("name", "")), default=None)


def decide_launch(
    *,
    name: str,
    namespace: str,
    uid: str | None,
    generation: int | None,
    spec_document: Mapping[str, Any],
    previous_status: Mapping[str, Any],
    catalog: Catalog,
    now: datetime,
    calibration_document: Mapping[str, Any] | None = None,
) -> LaunchDecision:
    """Parse, plan and render a TrainingPlan; or reject it with every problem found.

    A spec naming a ClusterCalibration (`hardware.calibration`) is planned with it:
    `calibration_document` is that resource as read from the API (None when it does not
    exist, which rejects the plan). A spec naming none is planned with
    `calibration_document` when given (its GPU type's default, `default_calibration`),
    and without it when that is not a valid ClusterCalibration (it asked for none)."""
    try:
        spec = TrainingPlanSpec.model_validate(dict(spec_document))
    except ValidationError as error:
        problems = [f"spec.{line}" for line in format_validation_errors(error)]
        return reject(
            problems, "InvalidSpec", generation=generation, previous_status=previous_status, now=now
        )
    cluster = None
    wanted = spec.hardware.calibration
    if wanted is not None and wanted != "none":
        found = cluster_from_document(wanted, calibration_document, catalog)
        if isinstance(found, str):
            return reject(
                [f"spec.hardware.calibration: {found}"],
                "InvalidSpec",
                generation=generation,
                previous_status=previous_status,
                now=now,
            )
        cluster = found
    elif wanted is None and calibration_document is not None:
        default = cluster_from_document("", calibration_document, catalog)
        cluster = None if isinstance(default, str) else default
    try:
        result = plan(spec, catalog, cluster=cluster)
    except PlanInputError as error:
        problems = [f"spec.{path}: {message}" for path, message in error.problems]
        return reject(
            problems, "InvalidSpec", generation=generation, previous_status=previous_status, now=now
        )
    except InfeasiblePlanError as error:
        return reject(
            list(error.reasons),
            "Infeasible",
            generation=generation,
            previous_status=previous_status,
            now=now,
        )
    ref = PlanRef(name=name, namespace=namespace, uid=uid)
    try:
        objects = render_for(ref, spec, result, catalog)
    except LauncherError as error:
        return reject(
            [str(error)],
            "InvalidSpec",
            generation=generation,
            previous_status=previous_status,
            now=now,
        )
    plan_document = result.to_document()
    summary = (
        f"{result.gpus} x {result.gpu_type} ({result.nodes} nodes),"
        f" {result.layout.summary}, {result.duration_seconds / 86400:.1f} days,"
        f" {result.gpu_hours:,.0f} GPU-hours"
    )
    suspended = spec.job.suspend
    job = job_name(name, jobset=spec.job.launcher == "JobSet")
    conditions = merge_conditions(
        previous_status.get("conditions"),
        [
            make_condition(
                ConditionType.PLANNED, "True", "Planned", summary, now=now, generation=generation
            ),
            make_condition(
                ConditionType.LAUNCHED,
                "False" if suspended else "True",
                "Suspended" if suspended else "JobCreated",
                f"{spec.job.launcher} {job} is suspended (job.suspend)"
                if suspended
                else f"{spec.job.launcher} {job} created with {result.nodes} pods",
                now=now,
                generation=generation,
            ),
            *lifecycle_conditions(
                Phase.SUSPENDED if suspended else Phase.LAUNCHING,
                "JobSuspended",
                f"{spec.job.launcher} {job} is suspended (job.suspend)",
                previous_status,
                generation=generation,
                now=now,
            ),
        ],
    )
    status: dict[str, Any] = {
        "phase": (Phase.SUSPENDED if suspended else Phase.LAUNCHING).value,
        "conditions": conditions,
        "plan": plan_document,
        "gpus": result.gpus,
        "layout": result.layout.summary,
        "jobName": job,
        "lastUpdatedTime": now.isoformat(),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return LaunchDecision(tuple(objects), status, True, "Planned", summary)


def finished(status: Mapping[str, Any] | None) -> bool:
    """Whether the run ended (Succeeded or Failed): nothing of it is made again, even when
    its Job is gone."""
    return (status or {}).get("phase") in FINISHED_PHASES


def launched_plan(generation: int | None, status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The plan in force when the plan was launched for this generation (Job named,
    plan stored, same generation); None when it still has to be planned."""
    current = status.get("observedGeneration") == generation
    if status.get("jobName") and status.get("plan") and current:
        plan_document: Mapping[str, Any] = status["plan"]
        return plan_document
    return None


def resume_launched(
    *,
    name: str,
    namespace: str,
    uid: str | None,
    spec_document: Mapping[str, Any],
    plan_document: Mapping[str, Any],
    catalog: Catalog,
) -> LaunchDecision:
    """A plan launched before the operator (re)started: its objects are rendered again
    from the stored plan (create-or-adopt puts back anything missing), without planning
    again, and its status is left as it is (its phase follows its Job)."""
    spec = TrainingPlanSpec.model_validate(dict(spec_document))
    result = Plan.model_validate(dict(plan_document))
    objects = render_for(PlanRef(name=name, namespace=namespace, uid=uid), spec, result, catalog)
    return LaunchDecision(tuple(objects), {}, True, "", "")


def within_budget(
    decision: LaunchDecision,
    verdict: Verdict,
    budget_name: str,
    *,
    name: str,
    namespace: str,
    uid: str | None,
    generation: int | None,
    previous_status: Mapping[str, Any],
    catalog: Catalog,
    now: datetime,
) -> LaunchDecision:
    """The launch decision after the budget's verdict: rejected (reason OverBudget),
    re-planned from the downsized spec, or as it was; with condition BudgetExceeded
    (True when admitted over budget under Warn) and the verdict in the event message."""
    if not verdict.allowed:
        return reject(
            [f"GPUBudget {budget_name}: {verdict.message}"],
            "OverBudget",
            generation=generation,
            previous_status=previous_status,
            now=now,
        )
    downsized = verdict.spec is not None and bool(verdict.message) and not verdict.exceeded
    if downsized and verdict.spec is not None:  # launch the smaller plan
        decision = decide_launch(
            name=name,
            namespace=namespace,
            uid=uid,
            generation=generation,
            spec_document=verdict.spec.to_document(),
            previous_status=previous_status,
            catalog=catalog,
            now=now,
        )
    exceeded = make_condition(
        ConditionType.BUDGET_EXCEEDED,
        "True" if verdict.exceeded else "False",
        "OverBudget" if verdict.exceeded else "WithinBudget",
        verdict.message
        if verdict.exceeded
        else f"admitted by GPUBudget {budget_name}, charged {verdict.charged}",
        now=now,
        generation=generation,
    )
    status = {
        **decision.status,
        "conditions": merge_conditions(decision.status.get("conditions"), [exceeded]),
    }
    message = (
        f"{decision.event_message}; GPUBudget {budget_name}: "
        + ("; ".join(verdict.warnings) or "admitted")
        + f", charged {verdict.charged}"
    )
    return LaunchDecision(
        decision.objects, status, decision.accepted, decision.event_reason, message
    )


def changes_after_launch(
    changed_paths: list[tuple[str, ...]],
    current: Mapping[str, Any],
    *,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]] | None:
    """Conditions saying which spec fields changed after launch and were not applied
    (everything but `job.suspend`), or None when only suspension changed."""
    ignored = sorted(
        "spec." + ".".join(path) for path in changed_paths if tuple(path[:2]) != ("job", "suspend")
    )
    if not ignored:
        return None
    message = (
        f"{', '.join(ignored)} changed after launch and were not applied: the running job"
        f" keeps the plan of generation {current.get('observedGeneration')}; delete and"
        " re-apply the TrainingPlan to re-plan"
    )
    return merge_conditions(
        current.get("conditions"),
        [
            make_condition(
                ConditionType.PLANNED,
                "True",
                "SpecChangedAfterLaunch",
                message,
                now=now,
                generation=generation,
            )
        ],
    )


@dataclass(frozen=True, slots=True)
class ChildState:
    """What a training Job (or JobSet) says about the run."""

    phase: Phase
    reason: str
    message: str
    start_time: str | None
    completion_time: str | None
    failed_pods: int


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def _true_condition(obj: Mapping[str, Any], *types: str) -> Mapping[str, Any] | None:
    for kind in types:
        condition = _condition(obj, kind)
        if condition is not None and condition.get("status") == "True":
            return condition
    return None


def _time_of(condition: Mapping[str, Any] | None) -> str | None:
    moment = None if condition is None else condition.get("lastTransitionTime")
    return str(moment) if moment else None


def child_state(child: Mapping[str, Any]) -> ChildState:
    """The run's state from its child: a batch/v1 Job's status (`job_state`), or a
    JobSet's (`jobset_state`) for `kind: JobSet`."""
    if child.get("kind") == JOBSET_KIND:
        return jobset_state(child)
    return job_state(child)


def job_state(job: Mapping[str, Any]) -> ChildState:
    """Map a batch/v1 Job's status to a plan phase, as the Job controller reports it:
    terminal conditions first (Complete -> Succeeded, Failed -> Failed), then Suspended,
    then failures waiting for a replacement (Restarting), then active pods (Running);
    otherwise still Launching. Times are the Job's `startTime` and `completionTime`."""
    status = job.get("status", {}) or {}
    failed = workload_failures(job)
    start = status.get("startTime")
    done = status.get("completionTime")
    complete = _true_condition(job, "Complete", "Completed")
    if complete is not None:
        return ChildState(Phase.SUCCEEDED, "JobComplete", "training completed", start, done, failed)
    failure = _true_condition(job, "Failed")
    if failure is not None:
        reason = str(failure.get("reason") or "JobFailed")
        message = str(failure.get("message") or "the training job failed")
        return ChildState(Phase.FAILED, reason, message, start, done, failed)
    if _true_condition(job, "Suspended") is not None or job.get("spec", {}).get("suspend"):
        return ChildState(
            Phase.SUSPENDED, "JobSuspended", "the job is suspended", start, None, failed
        )
    active = int(status.get("active", 0) or 0)
    if failed > 0 and active == 0:
        message = f"{failed} pod failure(s); waiting for replacements"
        return ChildState(Phase.RESTARTING, "PodFailed", message, start, None, failed)
    if active > 0:
        message = f"{active} pod(s) active" + (f", {failed} failed before" if failed else "")
        return ChildState(Phase.RUNNING, "PodsActive", message, start, None, failed)
    return ChildState(Phase.LAUNCHING, "PodsPending", "waiting for pods", start, None, failed)


JOBSET_KIND: Final = "JobSet"
JOBSET_RESTARTING = "JobSetRestarting"
"""Reason of the Restarting phase of a JobSet that recreates its Jobs."""


def jobset_start_time(jobset: Mapping[str, Any]) -> str | None:
    """When a JobSet started, as a Job's `startTime` says it (the Job controller sets it
    when it starts a Job, and again each time the Job is resumed): a JobSet has no start
    time of its own, so this is its `metadata.creationTimestamp` (its controller creates
    the Jobs at once), or, once resumed, the `lastTransitionTime` of its `Suspended=False`
    condition (reason ResumeJobs, written on each resume); None while it is suspended."""
    suspended = _condition(jobset, "Suspended")
    if suspended is not None:
        return _time_of(suspended) if suspended.get("status") == "False" else None
    if (jobset.get("spec") or {}).get("suspend"):
        return None
    created = (jobset.get("metadata") or {}).get("creationTimestamp")
    return str(created) if created else None


def jobset_state(jobset: Mapping[str, Any]) -> ChildState:
    """Map a JobSet's status (jobset.x-k8s.io/v1alpha2) to a plan phase, as the JobSet
    controller of kubernetes-sigs/jobset v0.12.0 writes it (`pkg/controllers/
    jobset_controller.go`, `failure_policy.go`; fields in `jobset_types.go`):

    - Succeeded: condition `Completed=True` (or `terminalState: Completed`), completed at
      its `lastTransitionTime`.
    - Failed: condition `Failed=True` (or `terminalState: Failed`), with its reason
      (`FailedJobs`, `ReachedMaxRestarts`, `FailJobSetFailurePolicyAction`) and message,
      ended at its `lastTransitionTime`.
    - Suspended: condition `Suspended=True`, or `spec.suspend`.
    - Restarting: a Job failed and the failure policy recreates all Jobs: `restarts` goes
      up by one and `RestartingJobSet=True` until every Job is ready again (then False,
      reason JobsReady; the condition is v0.12.0's). Before v0.12.0 there is no such
      condition: restarted (`restarts` > 0) and its Jobs not all ready
      (`replicatedJobsStatus[].ready + succeeded` below the replicas). Also a failed Job
      not yet acted upon (`replicatedJobsStatus[].failed` > 0).
    - Running: a Job with active pods (`replicatedJobsStatus[].active`, pending or
      running, as a Job's `active`) or ready; otherwise Launching.

    The counts are of child Jobs (trainplan's JobSet has one: `node`, one replica), not
    pods. The start time is `jobset_start_time`; the failure count is
    `monitor.workload_failures` (restarts, plus the failed Jobs of a failed JobSet)."""
    status = jobset.get("status") or {}
    start = jobset_start_time(jobset)
    failures = workload_failures(jobset)
    terminal = status.get("terminalState")
    complete = _true_condition(jobset, "Completed")
    if complete is not None or terminal == "Completed":
        done = _time_of(complete)
        return ChildState(
            Phase.SUCCEEDED, "JobComplete", "training completed", start, done, failures
        )
    failure = _true_condition(jobset, "Failed")
    if failure is not None or terminal == "Failed":
        reason = str((failure or {}).get("reason") or "JobSetFailed")
        message = str((failure or {}).get("message") or "the training JobSet failed")
        return ChildState(Phase.FAILED, reason, message, start, _time_of(failure), failures)
    if _true_condition(jobset, "Suspended") is not None or (jobset.get("spec") or {}).get(
        "suspend"
    ):
        return ChildState(
            Phase.SUSPENDED, "JobSuspended", "the JobSet is suspended", None, None, failures
        )
    jobs = _replicated_job_counts(jobset)
    restarts = _count(status.get("restarts"))
    restarting = _condition(jobset, "RestartingJobSet")
    not_ready = jobs["ready"] + jobs["succeeded"] < _replicas(jobset)
    if restarting is not None and restarting.get("status") == "True":
        message = f"restart {restarts}: {restarting.get('message') or 'recreating its Jobs'}"
        return ChildState(Phase.RESTARTING, JOBSET_RESTARTING, message, start, None, failures)
    if (restarting is None and restarts > 0 and not_ready) or jobs["failed"] > 0:
        message = (
            f"restart {restarts}: waiting for the recreated Jobs' pods to be ready"
            if not jobs["failed"]
            else f"{jobs['failed']} Job(s) failed; the JobSet controller restarts or fails it"
        )
        return ChildState(Phase.RESTARTING, JOBSET_RESTARTING, message, start, None, failures)
    if jobs["active"] > 0 or jobs["ready"] > 0:
        message = f"{jobs['active']} Job(s) with active pods, {jobs['ready']} ready" + (
            f", {restarts} restart(s)" if restarts else ""
        )
        return ChildState(Phase.RUNNING, "PodsActive", message, start, None, failures)
    return ChildState(Phase.LAUNCHING, "PodsPending", "waiting for pods", start, None, failures)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _replicated_job_counts(jobset: Mapping[str, Any]) -> dict[str, int]:
    """`replicatedJobsStatus` summed over the replicated jobs."""
    totals = dict.fromkeys(("active", "ready", "failed", "succeeded", "suspended"), 0)
    for entry in (jobset.get("status") or {}).get("replicatedJobsStatus") or []:
        if isinstance(entry, Mapping):
            for key in totals:
                totals[key] += _count(entry.get(key))
    return totals


def _replicas(jobset: Mapping[str, Any]) -> int:
    """The JobSet's child Jobs: `spec.replicatedJobs[].replicas` (1 when left out)."""
    replicated = (jobset.get("spec") or {}).get("replicatedJobs") or []
    total = sum(
        entry.get("replicas", 1) if isinstance(entry.get("replicas", 1), int) else 1
        for entry in replicated
        if isinstance(entry, Mapping)
    )
    return max(total, 1)


JOB_DELETED = "JobDeleted"
"""Reason of the end of a run whose Job (JobSet) was deleted outside the operator."""
RUN_PHASES: Final = (Phase.LAUNCHING, Phase.RUNNING, Phase.RESTARTING, Phase.SUSPENDED)
"""The phases of a launched run that has not ended: its Job (JobSet) should exist."""


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for owner in obj.get("metadata", {}).get("ownerReferences", []) or []:
        if isinstance(owner, Mapping) and owner.get("controller"):
            return None if owner.get("uid") is None else str(owner["uid"])
    return None


def plan_child_state(
    child: Mapping[str, Any], plan: Mapping[str, Any], *, deleted: bool, now: datetime
) -> ChildState | None:
    """The state a child (Job or JobSet) carries to its plan, or None when it carries
    none: it is not the plan's current child (not `status.jobName`, or controlled by
    another uid: the Job of an earlier plan of the same name). A deleted child that had
    ended carries its end. One deleted while its run was launched and had not ended
    (Launching, Running, Restarting, Suspended), and the plan is not being deleted itself
    (the garbage collector deletes a deleted plan's Job), ends the run: Failed, reason
    JobDeleted, completed now; otherwise a deleted child carries nothing."""
    meta, plan_meta = child.get("metadata", {}) or {}, plan.get("metadata", {}) or {}
    status = plan.get("status", {}) or {}
    if status.get("jobName") != meta.get("name"):
        return None
    if _controller_uid(child) != plan_meta.get("uid"):
        return None
    state = child_state(child)
    if not deleted or state.phase in FINISHED_PHASES:
        return state
    if plan_meta.get("deletionTimestamp") or status.get("phase") not in RUN_PHASES:
        return None
    kind = str(child.get("kind") or "Job")
    return ChildState(
        Phase.FAILED,
        JOB_DELETED,
        _deleted_message(kind, str(meta.get("name"))),
        state.start_time,
        now.isoformat(),
        state.failed_pods,
    )


def _deleted_message(kind: str, name: str, *, while_away: bool = False) -> str:
    when = " while the operator was not running" if while_away else ""
    return (
        f"the {kind} {name} was deleted outside the operator{when}, so the run ended;"
        " re-apply the TrainingPlan (delete it and apply it again) to run it again"
    )


def child_gone_on_resume(plan: Mapping[str, Any], kind: str, now: datetime) -> ChildState | None:
    """The state of a launched plan whose Job or JobSet (`status.jobName`) is not there
    when the operator starts again: it was created (the status names it only after its
    objects were applied), so it was deleted while the operator was away (by hand, or by
    a TTL) and the run ended, Failed with reason JobDeleted, as for a deletion seen live
    (`plan_child_state`). None for a plan that is being deleted or not in a run phase."""
    meta, status = plan.get("metadata", {}) or {}, plan.get("status", {}) or {}
    if not status.get("jobName") or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") not in RUN_PHASES:
        return None
    count = (status.get("failures") or {}).get("count")
    start = status.get("startTime")
    return ChildState(
        Phase.FAILED,
        JOB_DELETED,
        _deleted_message(kind, str(status["jobName"]), while_away=True),
        start if isinstance(start, str) else None,
        now.isoformat(),
        count if isinstance(count, int) and count >= 0 else 0,
    )


def lifecycle_conditions(
    phase: Phase,
    reason: str,
    message: str,
    current: Mapping[str, Any],
    *,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """The terminal and suspended conditions a phase sets beside itself, as a Job's
    (`Complete`, `Failed` and `Suspended`, which `kubectl wait --for=condition=...`
    reads): `Complete=True` or `Failed=True` when the run ends, `Suspended=True` while
    suspended and `Suspended=False` (reason Resumed) once a suspended run goes on. Empty
    when the phase sets none."""

    def condition(
        kind: ConditionType, status: ConditionStatus, why: str, text: str
    ) -> dict[str, Any]:
        return make_condition(kind, status, why, text, now=now, generation=generation)

    if phase is Phase.SUCCEEDED:
        return [condition(ConditionType.COMPLETE, "True", reason, message)]
    if phase is Phase.FAILED:
        return [condition(ConditionType.FAILED, "True", reason, message)]
    if phase is Phase.SUSPENDED:
        return [condition(ConditionType.SUSPENDED, "True", reason, message)]
    was_suspended = any(
        c.get("type") == ConditionType.SUSPENDED and c.get("status") == "True"
        for c in current.get("conditions", []) or []
    )
    if was_suspended:
        return [condition(ConditionType.SUSPENDED, "False", "Resumed", "the run was resumed")]
    return []


KUEUE_MESSAGE_MAX_LENGTH: Final = 512
"""Most characters of a Kueue condition message carried into the plan's status."""


def _kueue_text(value: object) -> str:
    """A Kueue message as a bounded line of printable text."""
    text = "".join(c if c.isprintable() else " " for c in str(value or ""))
    return text[:KUEUE_MESSAGE_MAX_LENGTH]


def kueue_admission(
    workload: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    generation: int | None,
    now: datetime,
) -> dict[str, Any] | None:
    """The plan's `Admitted` condition from its Kueue Workload's status
    (kubernetes-sigs/kueue, apis/kueue/v1beta1/workload_types.go: conditions
    QuotaReserved, Admitted, Evicted, Finished; `status.admission.clusterQueue` and the
    pod sets' flavors), merged into the current conditions; None when it would not change
    or the Workload finished (the job's own status tells the end). Reasons are trainplan's
    (Admitted, QuotaReserved, Evicted, Pending); Kueue's message is carried, bounded."""
    status = workload.get("status", {}) or {}
    by_type = {
        str(c.get("type")): c for c in status.get("conditions", []) or [] if isinstance(c, dict)
    }

    def true(kind: str) -> Mapping[str, Any] | None:
        condition = by_type.get(kind)
        return condition if condition and condition.get("status") == "True" else None

    if true("Finished"):
        return None
    admission = status.get("admission", {}) or {}
    queue = _kueue_text(admission.get("clusterQueue")) or "its ClusterQueue"
    flavors = sorted(
        {
            _kueue_text(flavor)
            for pod_set in admission.get("podSetAssignments", []) or []
            if isinstance(pod_set, dict)
            for flavor in (pod_set.get("flavors", {}) or {}).values()
        }
    )
    evicted, admitted, reserved = true("Evicted"), true("Admitted"), true("QuotaReserved")
    state: ConditionStatus
    if evicted:
        state, reason, message = "False", "Evicted", _kueue_text(evicted.get("message"))
    elif admitted:
        on = f" on {', '.join(flavors)}" if flavors else ""
        state, reason, message = "True", "Admitted", f"admitted by ClusterQueue {queue}{on}"
    elif reserved:
        state, reason = "False", "QuotaReserved"
        message = f"quota reserved in ClusterQueue {queue}; waiting for admission checks"
    else:
        waiting = by_type.get("QuotaReserved", {}) or {}
        state, reason = "False", "Pending"
        message = _kueue_text(waiting.get("message")) or "waiting in its Kueue queue"
    condition = make_condition(
        ConditionType.ADMITTED, state, reason, message or reason, now=now, generation=generation
    )
    previous = next(
        (c for c in current.get("conditions", []) or [] if c.get("type") == "Admitted"), None
    )
    if previous and all(previous.get(k) == condition[k] for k in ("status", "reason", "message")):
        return None
    return {"conditions": merge_conditions(current.get("conditions"), [condition])}


def child_status_patch(
    state: ChildState, current: Mapping[str, Any], *, generation: int | None, now: datetime
) -> dict[str, Any] | None:
    """The plan status patch for a child's state, or None when nothing would change."""
    patch: dict[str, Any] = {}
    if current.get("phase") != state.phase.value:
        patch["phase"] = state.phase.value
    if state.start_time and current.get("startTime") != state.start_time:
        patch["startTime"] = state.start_time
    if state.completion_time and current.get("completionTime") != state.completion_time:
        patch["completionTime"] = state.completion_time
    failures = current.get("failures") or {}
    counted = failures.get("count")
    counted = counted if isinstance(counted, int) else 0
    # The ETA revision counts failed pods and container restarts: the Job's failed pods
    # alone may only raise the count, never lower it (each failure is counted once).
    if state.failed_pods > counted:
        patch["failures"] = {**failures, "count": state.failed_pods, "lastReason": state.reason}
    if not patch:
        return None
    progressing: ConditionStatus = (
        "True" if state.phase in (Phase.RUNNING, Phase.RESTARTING) else "False"
    )
    updates = [
        make_condition(
            ConditionType.PROGRESSING,
            progressing,
            state.reason,
            state.message,
            now=now,
            generation=generation,
        )
    ]
    if "phase" in patch:
        updates += lifecycle_conditions(
            state.phase, state.reason, state.message, current, generation=generation, now=now
        )
    patch["conditions"] = merge_conditions(current.get("conditions"), updates)
    patch["lastUpdatedTime"] = now.isoformat()
    return patch
