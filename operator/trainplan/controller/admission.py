"""Budgets against the cluster: finding a plan's GPUBudget, judging a plan against it,
reserving its GPU-hours with optimistic concurrency, and keeping the budget's ledger and
figures current. Reads and writes through `trainplan.cluster`; the decisions are the
pure functions of `trainplan.controller.budgets`. Used by the admission webhook and by
the reconcile path alike, so a cluster without the webhook gets the same answers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from trainplan.api import (
    API_VERSION,
    GPU_BUDGET_KIND,
    TRAINING_PLAN_KIND,
    GPUBudgetSpec,
    PlanUsage,
    TrainingPlanSpec,
    format_validation_errors,
)
from trainplan.cluster import KubernetesApi, KubernetesApiError, ResourceVersionConflictError
from trainplan.controller.budgets import (
    ESTIMATE,
    Budget,
    BudgetSummary,
    Verdict,
    admit,
    budget_status,
    charge_for,
    find_usage,
    follow_phase,
    judge,
    ledger_from_status,
    phase_for_entry,
    release,
    replace_usage,
    summarize,
)
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan

CONFLICT_ATTEMPTS = 8
"""How often a budget write is retried after another writer changed the budget."""


class BudgetLookupError(Exception):
    """The plan names a budget that does not exist, or its namespace has several and
    the plan names none; the message says which."""


class BudgetContentionError(KubernetesApiError):
    """The budget kept changing under us for every attempt."""


_OBJECT_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A Kubernetes object name (RFC 1123 subdomain, at most 253 characters)."""
OTHER_NAMESPACE: Final = "spec.budgetRef names a budget in another namespace"
"""The only thing said of a budget outside the plan's namespace: never its name or figures."""


def _in_namespace(body: Mapping[str, Any], namespace: str) -> bool:
    return bool(body.get("metadata", {}).get("namespace") == namespace)


async def budget_for(
    api: KubernetesApi, namespace: str, budget_ref: str | None
) -> dict[str, Any] | None:
    """The plan's GPUBudget: `budgetRef`, else the namespace's only one; None when the
    namespace has none. Only a budget of the plan's own namespace is ever returned or
    named: a `budgetRef` that is not an object name (a path such as `../../other/...`)
    is refused before any request, and a budget that comes back from another namespace
    is refused without a word of its name or figures."""
    if budget_ref and not (len(budget_ref) <= 253 and _OBJECT_NAME.fullmatch(budget_ref)):
        raise BudgetLookupError("spec.budgetRef is not a GPUBudget name")
    if budget_ref:
        found = await api.get(API_VERSION, GPU_BUDGET_KIND, namespace, budget_ref)
        if found is None:
            raise BudgetLookupError(f"GPUBudget {budget_ref!r} not found in {namespace}")
        if not _in_namespace(found, namespace):
            raise BudgetLookupError(OTHER_NAMESPACE)
        return found
    budgets = await api.list_objects(API_VERSION, GPU_BUDGET_KIND, namespace)
    budgets = [budget for budget in budgets if _in_namespace(budget, namespace)]
    if len(budgets) > 1:
        names = ", ".join(sorted(str(b.get("metadata", {}).get("name")) for b in budgets))
        raise BudgetLookupError(
            f"namespace {namespace} has {len(budgets)} GPUBudgets ({names});"
            " name one in spec.budgetRef"
        )
    return budgets[0] if budgets else None


def _name(body: Mapping[str, Any]) -> str:
    return str(body.get("metadata", {}).get("name", ""))


def budget_spec(budget_body: Mapping[str, Any]) -> GPUBudgetSpec:
    """The budget's spec; ValueError with every problem when it is malformed."""
    try:
        return GPUBudgetSpec.model_validate(dict(budget_body.get("spec", {}) or {}))
    except ValidationError as error:
        problems = "; ".join(f"spec.{line}" for line in format_validation_errors(error))
        raise ValueError(f"GPUBudget {_name(budget_body)} is invalid: {problems}") from error


def verdict_for(
    budget_body: Mapping[str, Any],
    *,
    name: str,
    uid: str | None,
    spec: TrainingPlanSpec,
    catalog: Catalog,
    now: datetime,
) -> Verdict:
    """Judge the plan of `spec`, charged its GPU-hours quantile (`charge_for`), against
    the budget, as if this plan were not admitted yet (so re-judging an admitted plan
    gives the same answer)."""
    budget = budget_spec(budget_body)
    ledger = [
        usage
        for usage in ledger_from_status(budget_body.get("status", {}) or {})
        if find_usage([usage], name, uid) is None
    ]
    summary = summarize(budget, ledger, now)
    try:
        planned = plan(spec, catalog)
    except PlanInputError as error:
        return Verdict(False, "; ".join(f"spec.{path}: {text}" for path, text in error.problems))
    except InfeasiblePlanError as error:
        return Verdict(False, "; ".join(error.reasons))
    return judge(
        Budget(_name(budget_body), budget, summary, charge_for(budget, spec, catalog.calibration)),
        spec,
        planned,
        lambda smaller: plan(smaller, catalog),
    )


@dataclass(frozen=True, slots=True)
class BudgetWrite:
    """A budget's status as written, with its Events and figures."""

    budget: Mapping[str, Any]
    """The budget as read before the write (for Events on it)."""
    status: dict[str, Any]
    events: tuple[tuple[str, str, str], ...]
    summary: BudgetSummary
    computed_at: datetime
    """The clock reading the figures were computed at."""

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of the budget."""
        meta = self.budget.get("metadata", {})
        return str(meta.get("namespace", "default")), str(meta.get("name", ""))


@dataclass(frozen=True, slots=True)
class Reservation:
    """A budget's verdict on a plan, and the budget write that recorded it (None when
    denied or recorded before)."""

    budget: str
    verdict: Verdict
    written: BudgetWrite | None


async def _write(
    api: KubernetesApi,
    budget_body: Mapping[str, Any],
    ledger: list[PlanUsage],
    now: datetime,
) -> BudgetWrite:
    """One status write of the budget, only onto the version that was read."""
    meta = budget_body.get("metadata", {})
    status, events, summary = budget_status(
        budget_spec(budget_body),
        ledger,
        budget_body.get("status", {}) or {},
        generation=meta.get("generation"),
        now=now,
    )
    await api.patch(
        API_VERSION,
        GPU_BUDGET_KIND,
        str(meta.get("namespace", "default")),
        str(meta.get("name")),
        {"status": status},
        subresource="status",
        resource_version=meta.get("resourceVersion"),
    )
    return BudgetWrite(budget_body, status, tuple(events), summary, now)


async def reserve(
    api: KubernetesApi,
    *,
    namespace: str,
    name: str,
    uid: str | None,
    spec: TrainingPlanSpec,
    catalog: Catalog,
    now: datetime,
) -> Reservation | None:
    """Judge the plan against its budget and, when admitted, record it in the budget's
    ledger in the same write; None when no budget applies. Two plans reserving at once
    cannot both take the same remainder: the write applies only to the version judged,
    and the loser judges again against the winner's ledger."""
    for _ in range(CONFLICT_ATTEMPTS):
        budget_body = await budget_for(api, namespace, spec.budget_ref)
        if budget_body is None:
            return None
        verdict = await asyncio.to_thread(  # the planner is CPU-bound
            verdict_for, budget_body, name=name, uid=uid, spec=spec, catalog=catalog, now=now
        )
        ledger = ledger_from_status(budget_body.get("status", {}) or {})
        budget = _name(budget_body)
        if not verdict.allowed or verdict.plan is None:
            return Reservation(budget, verdict, None)
        if find_usage(ledger, name, uid) is not None:
            return Reservation(budget, verdict, None)  # admitted before (resumed, retried)
        try:
            written = await _write(
                api,
                budget_body,
                admit(
                    ledger, name=name, uid=uid, plan=verdict.plan, charge=verdict.charge, now=now
                ),
                now,
            )
        except ResourceVersionConflictError:
            continue
        return Reservation(budget, verdict, written)
    raise BudgetContentionError(409, "Conflict", f"the budget of {namespace}/{name} kept changing")


async def follow_plan(
    api: KubernetesApi,
    plan_body: Mapping[str, Any],
    *,
    phase: str | None,
    now: datetime,
) -> BudgetWrite | None:
    """Carry a plan's phase change (None: deleted) into its budget's ledger: intervals
    open and close as its pods hold and release GPUs."""
    meta = plan_body.get("metadata", {})
    namespace, name, uid = str(meta.get("namespace", "default")), _name(plan_body), meta.get("uid")
    budget_ref = (plan_body.get("spec", {}) or {}).get("budgetRef")
    for _ in range(CONFLICT_ATTEMPTS):
        try:
            budget_body = await budget_for(api, namespace, budget_ref)
        except BudgetLookupError:
            return None
        if budget_body is None:
            return None
        ledger = ledger_from_status(budget_body.get("status", {}) or {})
        usage = find_usage(ledger, name, uid)
        if usage is None:
            return None
        updated = release(usage, now) if phase is None else _followed(usage, plan_body, phase, now)
        if updated == usage:
            return None
        try:
            return await _write(api, budget_body, replace_usage(ledger, updated), now)
        except ResourceVersionConflictError:
            continue
    raise BudgetContentionError(409, "Conflict", f"the budget of {namespace}/{name} kept changing")


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _aware_time(value: Any) -> datetime | None:
    """A timestamp of the status, None when absent, malformed or without a zone."""
    try:
        moment = _time(value)
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def _followed(
    usage: PlanUsage, plan_body: Mapping[str, Any], phase: str | None, now: datetime
) -> PlanUsage:
    """The plan's entry after its status (a Rejected phase older than the entry left out)."""
    status = plan_body.get("status", {}) or {}
    observed = status.get("observedGeneration")
    generation = (plan_body.get("metadata", {}) or {}).get("generation")
    return follow_phase(
        usage,
        phase=phase_for_entry(
            usage,
            phase=phase,
            generation=generation if isinstance(generation, int) else None,
            observed_generation=observed if isinstance(observed, int) else None,
            updated_time=_aware_time(status.get("lastUpdatedTime")),
        ),
        start_time=_time(status.get("startTime")),
        end_time=_time(status.get("completionTime")),
        projected_gpu_hours=(status.get("gpuHours") or {}).get("projected"),
        now=now,
    )


def _plan_budget(plan_body: Mapping[str, Any]) -> str | None:
    ref = (plan_body.get("spec", {}) or {}).get("budgetRef")
    return str(ref) if ref else None


async def refresh_budget(
    api: KubernetesApi, budget_body: Mapping[str, Any], now: datetime
) -> BudgetWrite:
    """Recompute a budget as time passes: the window slides, running plans use more and
    commit less (with their ETA's projection), plans launched before the budget existed
    are taken into the ledger, and entries that left the window are dropped. When another
    writer changed the budget meanwhile, read it again and recompute."""
    meta = budget_body.get("metadata", {})
    namespace, name = str(meta.get("namespace", "default")), _name(budget_body)
    for _ in range(CONFLICT_ATTEMPTS):
        try:
            return await _refresh_once(api, budget_body, now)
        except ResourceVersionConflictError:
            fresh = await api.get(API_VERSION, GPU_BUDGET_KIND, namespace, name)
            if fresh is None:
                raise
            budget_body = fresh
    raise BudgetContentionError(409, "Conflict", f"the budget {namespace}/{name} kept changing")


async def _refresh_once(
    api: KubernetesApi, budget_body: Mapping[str, Any], now: datetime
) -> BudgetWrite:
    meta = budget_body.get("metadata", {})
    namespace, budget_name = str(meta.get("namespace", "default")), _name(budget_body)
    plans = await api.list_objects(API_VERSION, TRAINING_PLAN_KIND, namespace)
    only_budget = len(await api.list_objects(API_VERSION, GPU_BUDGET_KIND, namespace)) == 1
    ledger = ledger_from_status(budget_body.get("status", {}) or {})
    for plan_body in plans:
        ref = _plan_budget(plan_body)
        if ref != budget_name and not (ref is None and only_budget):
            continue
        status = plan_body.get("status", {}) or {}
        plan_meta = plan_body.get("metadata", {})
        uid = plan_meta.get("uid")
        usage = find_usage(ledger, _name(plan_body), uid)
        if usage is None:
            if not status.get("plan") or not status.get("startTime"):
                continue  # not launched: admission will take it
            planned = status["plan"]
            usage = PlanUsage(
                name=_name(plan_body),
                uid=uid,
                gpus=int(planned["gpus"]),
                projected_gpu_hours=float(planned["gpuHours"]),
                admitted_gpu_hours=float(planned["gpuHours"]),
                charged_confidence=ESTIMATE.confidence,  # launched before it was judged
                admitted_time=_time(status["startTime"]) or now,
            )
            ledger.append(usage)
        ledger = replace_usage(ledger, _followed(usage, plan_body, status.get("phase"), now))
    live = {(_name(p), p.get("metadata", {}).get("uid")) for p in plans}
    for usage in list(ledger):
        if not usage.finished and (usage.name, usage.uid) not in live:
            ledger = replace_usage(ledger, release(usage, now))  # deleted while we were away
    return await _write(api, budget_body, ledger, now)
