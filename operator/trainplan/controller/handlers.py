"""Kopf handlers, thin: each parses the event, calls the pure code in `reconcile`, applies
objects through `trainplan.cluster` and writes status once (Kopf's `patch`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, cast

import kopf

from trainplan.api import (
    ACTIVE_PHASES,
    API_VERSION,
    CLUSTER_CALIBRATION_KIND,
    GROUP,
    PLAN_LABEL,
    TRAINING_PLAN_KIND,
    TRAINING_PLAN_PLURAL,
    VERSION,
    HardwareSpec,
    Phase,
)
from trainplan.cluster import (
    KUEUE_API_VERSION,
    KubernetesApiError,
    OwnershipConflictError,
    ResourceVersionConflictError,
    StatusKeptChangingError,
    event_for,
    judge_ownership,
)
from trainplan.controller.budget_handlers import budgeted, follow_budget, register_budgets
from trainplan.controller.calibration import note_calibration, record_finished_run
from trainplan.controller.conditions import merge_conditions
from trainplan.controller.config import OperatorConfig, configure_kopf
from trainplan.controller.context import ControllerContext, connection_from
from trainplan.controller.metrics import snapshot_from_status
from trainplan.controller.reconcile import (
    JOB_DELETED,
    WAITING_FOR_DELETION,
    ChildState,
    LaunchDecision,
    changes_after_launch,
    child_gone_on_resume,
    child_status_patch,
    decide_launch,
    default_calibration,
    deletion_retry_seconds,
    finished,
    kueue_admission,
    launched_plan,
    lifecycle_conditions,
    plan_child_state,
    reject,
    resume_launched,
    waiting_for_deletion,
    waits_already_reported,
)
from trainplan.controller.revision import WorkloadIndex
from trainplan.controller.webhook import register_admission
from trainplan.launcher import KUEUE_JOB_UID_LABEL, LauncherError, workload_kind

STATUS_WRITE_ATTEMPTS = 8
"""How often a plan's status write is retried after a concurrent write."""
LoginFn = Callable[..., Awaitable[kopf.ConnectionInfo | None] | kopf.ConnectionInfo | None]
_PLANS = (GROUP, VERSION, TRAINING_PLAN_PLURAL)

_log = logging.getLogger(__name__)


def _context(memo: Any) -> ControllerContext:
    context: ControllerContext = memo.context
    return context


async def _default_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account; elsewhere: the kubeconfig (Kopf's own logins)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _active(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") in ACTIVE_PHASES and bool(status.get("plan"))


def _record(context: ControllerContext, body: kopf.Body, status: Mapping[str, Any]) -> None:
    """Put a plan's latest status into the operator metrics."""
    context.metrics.record(
        body.meta.namespace or "default",
        body.meta.name or "",
        snapshot_from_status(status, body.get("spec") or {}),
    )


def _merged(current: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(current)
    for key, value in update.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def build_registry(
    login: LoginFn | None = None, config: OperatorConfig | None = None
) -> kopf.OperatorRegistry:
    """A registry with every trainplan handler; `login` replaces the default login (tests
    point it at an emulated API server); `config` gives the ETA timer's interval."""
    registry = kopf.OperatorRegistry()
    config = config or OperatorConfig()
    eta_interval_seconds = config.eta_interval_seconds
    chosen_login: LoginFn = login or _default_login

    @kopf.on.startup(registry=registry)
    def configure(
        settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger, **_: Any
    ) -> None:
        context = _context(memo)
        configure_kopf(settings, context.config)
        port = context.serve_metrics()
        if port is not None:
            logger.info(f"operator metrics on :{port}/metrics")

    @kopf.on.login(registry=registry)
    async def authenticate(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
        info = chosen_login(memo=memo, **kwargs)
        if asyncio.iscoroutine(info) or isinstance(info, Awaitable):
            info = await info
        if info is not None:
            context = _context(memo)
            await context.login(connection_from(info, context.config.request_timeout_seconds))
        return info

    @kopf.on.cleanup(registry=registry)
    async def close(memo: Any, **_: Any) -> None:
        await _context(memo).close()

    @kopf.on.create(*_PLANS, registry=registry)
    @kopf.on.resume(*_PLANS, registry=registry)
    async def launch(
        *, body: kopf.Body, patch: kopf.Patch, memo: Any, logger: kopf.Logger, **_: Any
    ) -> None:
        """Plan, render and apply; write the decision as the status (once). A plan
        launched before a restart is not planned or judged again: its objects are
        applied from the stored plan and its status is left alone."""
        if finished(body.get("status")):
            return  # a run that ended is never launched again, even when its Job is gone
        context = _context(memo)
        resumed = _resumed(body, context)
        if resumed is None:
            decision = await budgeted(await _decide(body, context), body, context)
        elif await _ended_while_away(body, patch, context):
            return  # its Job was deleted while the operator was away: never re-created
        else:
            decision = resumed
        decision = await _apply(decision, body, context, logger, patch)
        patch.status.update(decision.status)
        _record(context, body, _merged(body.get("status", {}) or {}, decision.status))

    @kopf.on.update(*_PLANS, field="spec", registry=registry)
    async def spec_changed(
        *,
        body: kopf.Body,
        status: kopf.Status,
        patch: kopf.Patch,
        diff: kopf.Diff,
        memo: Any,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        """Before launch (nothing created yet), re-plan; after launch, `job.suspend` acts
        on the running Job and other changes are reported in the Planned condition."""
        context = _context(memo)
        if not status.get("jobName"):
            decision = await budgeted(await _decide(body, context), body, context)
            decision = await _apply(decision, body, context, logger, patch)
            patch.status.update(decision.status)
            return
        now = context.clock()
        generation = body.meta.get("generation")
        if not finished(status):  # an ended run's phase stays, and its Job may be gone
            await _follow_suspend(body, status, patch, context)
        conditions = changes_after_launch(
            [tuple(str(p) for p in change[1]) for change in diff],
            {
                **dict(status),
                **(
                    {"conditions": patch.status["conditions"]}
                    if "conditions" in patch.status
                    else {}
                ),
            },
            generation=generation,
            now=now,
        )
        if conditions is not None:
            patch.status["conditions"] = conditions
            kopf.warn(body, reason="SpecChangedAfterLaunch", message=conditions[-1]["message"])
        patch.status["observedGeneration"] = generation
        patch.status["lastUpdatedTime"] = now.isoformat()

    @kopf.timer(*_PLANS, id="eta", interval=eta_interval_seconds, when=_active, registry=registry)
    async def revise_eta(*, body: kopf.Body, memo: Any, **kwargs: Any) -> None:
        """Revise a running plan's ETA from its Job, Pods and metrics: one status write
        onto the version revised (so a concurrent phase change is never overwritten),
        an Event for each transition."""
        context = _context(memo)
        now = context.clock()
        api = context.api()
        # Kopf's body follows new events while the revision awaits: the status is revised
        # from, and written onto, the version seen here, so that a write made meanwhile
        # (the child's phase, Kueue's admission) makes this one fail, not vanish.
        snapshot = kopf.Body(cast(kopf.RawBody, _detached(body)))
        seen_version = snapshot.meta.get("resourceVersion")
        try:
            update = await context.revisions.revise(snapshot, api, now, _workloads(kwargs))
            await api.patch(
                API_VERSION,
                TRAINING_PLAN_KIND,
                snapshot.meta.namespace or "default",
                snapshot.meta.name or "",
                {"status": update.status},
                subresource="status",
                resource_version=seen_version,
            )
            for event_type, reason, message in update.events:
                await api.create(event_for(body, event_type, reason, message, now.isoformat()))
        except ResourceVersionConflictError:
            return  # the status changed meanwhile (the Job's phase): revised again next time
        except KubernetesApiError as error:
            raise kopf.TemporaryError(f"revising the ETA: {error}", delay=10) from error
        _record(context, snapshot, _merged(snapshot.get("status", {}) or {}, update.status))

    @kopf.on.delete(*_PLANS, optional=True, registry=registry)
    async def forget(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        """A deleted plan's ETA tracker and metrics go with it; its budget stops counting
        its GPUs (what it used stays in the budget's window)."""
        context = _context(memo)
        namespace, name = body.meta.namespace or "default", body.meta.name or ""
        context.revisions.forget(namespace, name)
        context.metrics.forget(namespace, name)
        await follow_budget(context, dict(body), None)

    @kopf.on.event(*_PLANS, when=_is_deletion, registry=registry)
    async def gone(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        """A plan that holds no finalizer (Rejected, Succeeded, Failed: no ETA timer
        runs) is deleted at once and `forget` is never called: its DELETED watch event
        drops its metrics series and ETA tracker all the same. Only that event calls it
        (every status write is a plan event: no thread hop, no log line for those), and
        on the event loop."""
        context = _context(memo)
        namespace, name = body.meta.namespace or "default", body.meta.name or ""
        context.revisions.forget(namespace, name)
        context.metrics.forget(namespace, name)

    async def child_changed(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
        """A training Job or JobSet changed, or was deleted: carry its state to the plan's
        status (a run whose Job was deleted outside the operator ends Failed)."""
        context = _context(memo)
        plan_name = body.meta.labels.get(PLAN_LABEL)
        namespace = body.meta.namespace
        if not plan_name or not namespace:
            return
        deleted = kwargs.get("type") == "DELETED"
        written = await _carry_child_state(context, namespace, plan_name, body, deleted=deleted)
        if written is None:
            return
        parent, status, state = written
        context.metrics.record(
            namespace, plan_name, snapshot_from_status(status, parent.get("spec") or {})
        )
        phase = status.get("phase")
        if phase is not None:
            await follow_budget(context, {**parent, "status": status}, phase)
        if phase == Phase.SUCCEEDED.value:
            await record_finished_run(context, {**parent, "status": status})
        if phase in (Phase.SUCCEEDED.value, Phase.FAILED.value):
            event_type = "Normal" if phase == Phase.SUCCEEDED.value else "Warning"
            reason = JOB_DELETED if state.reason == JOB_DELETED else phase
            now = context.clock().isoformat()
            await context.api().create(event_for(parent, event_type, reason, state.message, now))

    for group, version, plural, index_id, _ in _WORKLOADS:
        labelled = {PLAN_LABEL: kopf.PRESENT}
        kopf.on.event(group, version, plural, labels=labelled, registry=registry)(child_changed)
        kopf.index(group, version, plural, id=index_id, labels=labelled, registry=registry)(
            index_workload
        )

    @kopf.on.event(
        "kueue.x-k8s.io",
        "v1beta1",
        "workloads",
        labels={KUEUE_JOB_UID_LABEL: kopf.PRESENT},
        registry=registry,
    )
    async def kueue_changed(body: kopf.Body, memo: Any, **kwargs: Any) -> None:
        """A Kueue Workload changed: a queued plan's `Admitted` condition follows it."""
        if kwargs.get("type") == "DELETED":
            return
        await _follow_admission(_context(memo), body)

    register_budgets(registry, config)
    if config.webhook_port is not None:
        register_admission(registry, config)
    return registry


def _detached(body: kopf.Body) -> dict[str, Any]:
    """The body as it is now, which later events leave alone: Kopf points a live body at
    each new event's parsed object (`_replace_with`) and never changes an event's object
    in place, so a copy of the top level is enough (a deep copy of every running plan's
    body was 3% of the operator's round at 1,000 plans)."""
    return dict(body)


_WORKLOADS = (
    ("batch", "v1", "jobs", "training_jobs", workload_kind("Job")),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets", "training_jobsets", workload_kind("JobSet")),
)
"""The training workloads' resources (group, version, plural), the id of Kopf's index of
each (the name of the handler argument it comes in) and its (apiVersion, kind)."""


async def index_workload(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """A training Job or JobSet under (namespace, name), as its last watch event had it:
    the ETA revisions read it here instead of asking the API server for it every round
    (the operator watches these kinds for their state anyway)."""
    return {(body.meta.namespace or "default", body.meta.name or ""): _detached(body)}


def _workloads(kwargs: Mapping[str, Any]) -> dict[tuple[str, str], WorkloadIndex]:
    """The workload indices Kopf passed a handler, by (apiVersion, kind)."""
    return {kind: kwargs[index_id] for *_, index_id, kind in _WORKLOADS if index_id in kwargs}


def _is_deletion(**kwargs: Any) -> bool:
    """Kopf's filter: the watch event is a DELETED one."""
    return bool(kwargs.get("type") == "DELETED")


async def _still_wanted(body: kopf.Body, context: ControllerContext) -> bool:
    """Whether the plan is still there, the same one (uid) and not being deleted: read
    just before its objects are made, so that a plan deleted while it was planned and
    judged gets none (in a cluster the garbage collector would remove them later)."""
    try:
        current = await context.api().get(
            API_VERSION, TRAINING_PLAN_KIND, body.meta.namespace or "default", body.meta.name or ""
        )
    except KubernetesApiError as error:
        raise kopf.TemporaryError(f"reading the TrainingPlan: {error}", delay=10) from error
    meta = (current or {}).get("metadata", {}) or {}
    return (
        current is not None
        and meta.get("uid") == body.meta.uid
        and not meta.get("deletionTimestamp")
    )


async def _follow_admission(context: ControllerContext, workload: kopf.Body) -> None:
    """Carry a Workload's admission into the plan of the Job or JobSet that owns it (the
    owner's plan label, and the plan's `status.jobName`)."""
    namespace = workload.meta.namespace
    owner = next(
        (
            ref
            for ref in workload.meta.get("ownerReferences", []) or []
            if ref.get("kind") in ("Job", "JobSet") and ref.get("apiVersion") and ref.get("name")
        ),
        None,
    )
    if owner is None or not namespace:
        return
    api_version, kind = workload_kind("JobSet" if owner["kind"] == "JobSet" else "Job")
    if owner["apiVersion"] != api_version:
        return
    try:
        child = await context.api().get(api_version, kind, namespace, str(owner["name"]))
    except KubernetesApiError as error:
        raise kopf.TemporaryError(f"reading the {kind}: {error}", delay=10) from error
    plan_name = ((child or {}).get("metadata", {}).get("labels") or {}).get(PLAN_LABEL)
    if not plan_name:
        return

    def compute(parent: dict[str, Any], now: datetime) -> tuple[dict[str, Any], Any] | None:
        current = parent.get("status", {}) or {}
        if current.get("jobName") != owner["name"]:
            return None
        generation = parent.get("metadata", {}).get("generation")
        update = kueue_admission(dict(workload), current, generation=generation, now=now)
        return None if update is None else (update, None)

    await _patch_plan_status(context, namespace, str(plan_name), compute)


StatusUpdate = Callable[[dict[str, Any], datetime], tuple[dict[str, Any], Any] | None]
"""From the plan read and the time: its status patch and what to hand back, or None."""


async def _patch_plan_status(
    context: ControllerContext, namespace: str, plan_name: str, compute: StatusUpdate
) -> tuple[dict[str, Any], dict[str, Any], Any] | None:
    """Write the status patch `compute` makes from the plan, onto the version read (the
    ETA timer and the child handlers write the same status), reading again after a
    concurrent write; returns the plan, its new status and what `compute` handed back, or
    None when the plan is gone or `compute` has nothing to write."""
    extras: list[Any] = []

    async def update(parent: dict[str, Any]) -> dict[str, Any] | None:
        computed = compute(parent, context.clock())
        if computed is None:
            return None
        extras[:] = [computed[1]]
        return computed[0]

    try:
        written = await context.api().update_status(
            API_VERSION,
            TRAINING_PLAN_KIND,
            namespace,
            plan_name,
            update,
            attempts=STATUS_WRITE_ATTEMPTS,
        )
    except StatusKeptChangingError as error:
        raise kopf.TemporaryError(str(error), delay=1) from error
    if written is None:
        return None
    parent, patch = written
    return parent, {**(parent.get("status", {}) or {}), **patch}, extras[0]


async def _carry_child_state(
    context: ControllerContext,
    namespace: str,
    plan_name: str,
    child: kopf.Body,
    *,
    deleted: bool,
) -> tuple[dict[str, Any], dict[str, Any], ChildState] | None:
    """Write the child's state (`plan_child_state`) into its plan's status; returns the
    plan, its new status and the state carried, or None when nothing changed or the child
    is not the plan's."""

    def compute(parent: dict[str, Any], now: datetime) -> tuple[dict[str, Any], Any] | None:
        state = plan_child_state(child, parent, deleted=deleted, now=now)
        if state is None:
            return None
        current = parent.get("status", {}) or {}
        generation = parent.get("metadata", {}).get("generation")
        update = child_status_patch(state, current, generation=generation, now=now)
        return None if update is None else (update, state)

    written = await _patch_plan_status(context, namespace, plan_name, compute)
    if written is None:
        return None
    parent, status, state = written
    assert isinstance(state, ChildState)
    return parent, status, state


def _with_patched_conditions(status: kopf.Status, patch: kopf.Patch) -> dict[str, Any]:
    """The status with the conditions this handler has patched so far."""
    current = dict(status)
    if "conditions" in patch.status:
        current["conditions"] = patch.status["conditions"]
    return current


async def _follow_suspend(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, context: ControllerContext
) -> None:
    """`job.suspend` onto the running Job or JobSet, and the phase that follows. A Job
    that is gone (404) is left to the child handler, which ends the run."""
    job = body.get("spec", {}).get("job", {})
    suspend = bool(job.get("suspend", False))
    api_version, kind = workload_kind(job.get("launcher", "Job"))
    namespace = body.meta.namespace or "default"
    try:
        if job.get("queueName"):
            if not await _activate_kueue_workloads(
                context, api_version, kind, namespace, status["jobName"], active=not suspend
            ):
                return
        else:
            await context.api().patch(
                api_version, kind, namespace, status["jobName"], {"spec": {"suspend": suspend}}
            )
    except KubernetesApiError as error:
        if error.is_status(404):  # not a proxy's 404 page: the API server's
            return
        raise kopf.TemporaryError(f"suspending the {kind}: {error}", delay=10) from error
    if suspend:
        phase: Phase | None = Phase.SUSPENDED
    elif status.get("phase") == Phase.SUSPENDED.value:
        phase = Phase.LAUNCHING
    else:
        phase = None
    if phase is None:
        return
    patch.status["phase"] = phase.value
    updates = lifecycle_conditions(
        phase,
        "JobSuspended",
        f"{kind} {status['jobName']} is suspended (job.suspend)",
        dict(status),
        generation=body.meta.get("generation"),
        now=context.clock(),
    )
    patch.status["conditions"] = merge_conditions(
        patch.status.get("conditions") or status.get("conditions"), updates
    )


async def _activate_kueue_workloads(
    context: ControllerContext,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    *,
    active: bool,
) -> bool:
    """Pause (`active` False) or resume a queued job the way Kueue does: through its
    Workload's `spec.active` (Kueue evicts an inactive Workload and suspends its job,
    and admits an active one again), never the job's own `spec.suspend`, which Kueue
    sets itself (kubernetes-sigs/kueue, pkg/controller/jobframework/reconciler.go).
    False when the job is gone; `kopf.TemporaryError` until Kueue made its Workload."""
    api = context.api()
    child = await api.get(api_version, kind, namespace, name)
    if child is None:
        return False
    uid = str(child.get("metadata", {}).get("uid", ""))
    workloads = await api.list_objects(
        KUEUE_API_VERSION, "Workload", namespace, label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}"
    )
    if not workloads:
        raise kopf.TemporaryError(f"waiting for Kueue's Workload of {kind} {name}", delay=5)
    for workload in workloads:
        await api.patch(
            KUEUE_API_VERSION,
            "Workload",
            namespace,
            str(workload["metadata"]["name"]),
            {"spec": {"active": active}},
        )
    return True


async def _ended_while_away(body: kopf.Body, patch: kopf.Patch, context: ControllerContext) -> bool:
    """Whether a launched plan's Job or JobSet is gone at start-up; if so its run ends
    (Failed, JobDeleted: `reconcile.child_gone_on_resume`) in `patch`, in its budget and
    in an Event, as when a deletion is seen live."""
    status = dict(body.get("status", {}) or {})
    launcher = ((body.get("spec", {}) or {}).get("job", {}) or {}).get("launcher", "Job")
    api_version, kind = workload_kind(launcher)
    namespace, job = body.meta.namespace or "default", status.get("jobName")
    if not isinstance(job, str) or not job:
        return False
    try:
        existing = await context.api().get(api_version, kind, namespace, job)
    except KubernetesApiError as error:
        raise kopf.TemporaryError(f"reading the {kind}: {error}", delay=10) from error
    now = context.clock()
    state = None if existing is not None else child_gone_on_resume(dict(body), kind, now)
    if state is None:
        return False
    update = child_status_patch(state, status, generation=body.meta.get("generation"), now=now)
    merged = _merged(status, update or {})
    patch.status.update(update or {})
    await follow_budget(context, {**dict(body), "status": merged}, state.phase.value)
    kopf.warn(body, reason=JOB_DELETED, message=state.message)
    _record(context, body, merged)
    return True


def _resumed(body: kopf.Body, context: ControllerContext) -> LaunchDecision | None:
    status = body.get("status", {}) or {}
    stored = launched_plan(body.meta.get("generation"), status)
    if stored is None:
        return None
    try:
        return resume_launched(
            name=body.meta.name or "",
            namespace=body.meta.namespace or "default",
            uid=body.meta.uid,
            spec_document=dict(body.get("spec", {})),
            plan_document=stored,
            catalog=context.catalog,
        )
    except (ValueError, LauncherError):  # a stored plan this version cannot read: plan again
        return None


async def _decide(body: kopf.Body, context: ControllerContext) -> LaunchDecision:
    meta = body.meta
    spec_document = dict(body.get("spec", {}))
    decision = await asyncio.to_thread(
        decide_launch,
        name=meta.name or "",
        namespace=meta.namespace or "default",
        uid=meta.uid,
        generation=meta.get("generation"),
        spec_document=spec_document,
        previous_status=dict(body.get("status", {}) or {}),
        catalog=context.catalog,
        now=context.clock(),
        calibration_document=await _named_calibration(spec_document, context),
    )
    note_calibration(context, decision.status.get("plan"))
    return decision


async def _named_calibration(
    spec_document: Mapping[str, Any], context: ControllerContext
) -> Mapping[str, Any] | None:
    """The ClusterCalibration the spec names (`hardware.calibration`); when it names none,
    its GPU type's default (`reconcile.default_calibration`); or None (`none`, not found,
    or a name that is no object name: the spec check reports it)."""
    hardware = spec_document.get("hardware")
    hardware = hardware if isinstance(hardware, Mapping) else {}
    name = hardware.get("calibration")
    if name is None:
        try:
            listed = await context.api().list_objects(API_VERSION, CLUSTER_CALIBRATION_KIND, None)
        except KubernetesApiError as error:  # no CRD, no permission: plan from the catalog
            _log.warning(
                "listing ClusterCalibrations failed (HTTP %d); planned without", error.status
            )
            return None
        gpu_type = hardware.get("gpuType", HardwareSpec.model_fields["gpu_type"].default)
        if not listed or not isinstance(gpu_type, str):
            return None
        return default_calibration(listed, gpu_type, context.catalog)
    if not isinstance(name, str) or name == "none":
        return None
    try:
        return await context.api().get(API_VERSION, CLUSTER_CALIBRATION_KIND, "", name)
    except ValueError:  # not a single path segment
        return None


async def _apply(
    decision: LaunchDecision,
    body: kopf.Body,
    context: ControllerContext,
    logger: kopf.Logger,
    patch: kopf.Patch | None = None,
) -> LaunchDecision:
    """Apply the decision's objects and return the decision that stands: objects of the
    same names owned by someone else (or no one) turn it into a rejection before anything
    is made. Objects that are going away (the previous plan's of the same name, deleted
    just before this one was applied) are waited for: the status (through `patch`, when
    given) and an Event say so, and `kopf.TemporaryError` has Kopf try again shortly."""
    if not decision.accepted:
        kopf.warn(body, reason=decision.event_reason, message=decision.event_message)
        return decision
    api = context.api()
    try:
        found = await api.ownership_conflicts(decision.objects)
    except KubernetesApiError as error:
        raise kopf.TemporaryError(f"reading existing objects: {error}", delay=10) from error
    verdict = judge_ownership(found)
    previous_status = dict(body.get("status", {}) or {})
    if verdict.conflicts:
        rejected = reject(
            [conflict.message for conflict in verdict.conflicts],
            "NameConflict",
            generation=body.meta.get("generation"),
            previous_status=previous_status,
            now=context.clock(),
        )
        kopf.warn(body, reason=rejected.event_reason, message=rejected.event_message)
        return rejected
    if verdict.waits:
        waits = [conflict.wait_message for conflict in verdict.waits]
        if not waits_already_reported(waits, previous_status):
            message = "; ".join(waits)
            kopf.event(body, type="Normal", reason=WAITING_FOR_DELETION, message=message)
        if patch is not None:
            patch.status.update(
                waiting_for_deletion(
                    waits,
                    generation=body.meta.get("generation"),
                    previous_status=previous_status,
                    now=context.clock(),
                )
            )
        delay = deletion_retry_seconds(previous_status, context.clock())
        raise kopf.TemporaryError("; ".join(waits), delay=delay)
    if not await _still_wanted(body, context):
        logger.info("the TrainingPlan was deleted while it was launched: nothing is created")
        return decision
    for obj in decision.objects:
        try:
            result = await api.apply(obj)
        except (KubernetesApiError, OwnershipConflictError) as error:
            raise kopf.TemporaryError(f"applying {obj['kind']}: {error}", delay=10) from error
        logger.info(f"{result.kind} {result.name} {result.action}")
    if decision.event_reason:
        kopf.info(body, reason=decision.event_reason, message=decision.event_message)
    return decision
