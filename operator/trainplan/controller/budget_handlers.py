"""Kopf handlers of GPU budgets, thin: a timer that keeps each GPUBudget's figures
current, and the steps the TrainingPlan handlers take through a plan's budget (reserve
before launch, follow its phases). Decisions are in `budgets` and `reconcile` (pure); the
reads and writes in `admission`."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from trainplan.api import (
    GPU_BUDGET_PLURAL,
    GROUP,
    VERSION,
    BudgetConditionType,
    TrainingPlanSpec,
)
from trainplan.cluster import KubernetesApiError, ResourceVersionConflictError, event_for
from trainplan.controller.admission import (
    BudgetLookupError,
    BudgetWrite,
    budget_spec,
    follow_plan,
    refresh_budget,
    reserve,
)
from trainplan.controller.conditions import make_condition, merge_conditions
from trainplan.controller.config import OperatorConfig
from trainplan.controller.context import ControllerContext
from trainplan.controller.metrics import budget_figures
from trainplan.controller.reconcile import LaunchDecision, reject, within_budget

logger = logging.getLogger("trainplan.budgets")
_BUDGETS = (GROUP, VERSION, GPU_BUDGET_PLURAL)


async def record_write(context: ControllerContext, written: BudgetWrite | None) -> None:
    """After a budget write: its figures into the operator metrics, its Events posted."""
    if written is None:
        return
    figures = budget_figures(written.summary, written.computed_at)
    context.metrics.record_budget(*written.key, figures)
    now = context.clock().isoformat()
    for event_type, reason, message in written.events:
        await context.api().create(event_for(written.budget, event_type, reason, message, now))


async def budgeted(
    decision: LaunchDecision, body: kopf.Body, context: ControllerContext
) -> LaunchDecision:
    """The launch decision once the plan's budget (if any) has judged it and, when it is
    admitted, recorded its GPU-hours."""
    if not decision.accepted:
        return decision
    meta = body.meta
    name, namespace, now = meta.name or "", meta.namespace or "default", context.clock()
    common: dict[str, Any] = {
        "generation": meta.get("generation"),
        "previous_status": dict(body.get("status", {}) or {}),
        "now": now,
    }
    spec = TrainingPlanSpec.model_validate(dict(body.get("spec", {})))
    try:
        reservation = await reserve(
            context.api(),
            namespace=namespace,
            name=name,
            uid=meta.uid,
            spec=spec,
            catalog=context.catalog,
            now=now,
        )
    except BudgetLookupError as error:
        return reject([str(error)], "BudgetNotFound", **common)
    except ValueError as error:  # a malformed budget
        return reject([str(error)], "InvalidBudget", **common)
    except KubernetesApiError as error:
        raise kopf.TemporaryError(f"reserving GPU-hours: {error}", delay=5) from error
    if reservation is None:
        return decision
    await record_write(context, reservation.written)
    for warning in reservation.verdict.warnings:
        kopf.warn(body, reason="BudgetWarning", message=warning)
    return within_budget(
        decision,
        reservation.verdict,
        reservation.budget,
        name=name,
        namespace=namespace,
        uid=meta.uid,
        catalog=context.catalog,
        **common,
    )


async def follow_budget(
    context: ControllerContext, plan_body: dict[str, Any], phase: str | None
) -> None:
    """Carry a plan's phase (None: deleted) into its budget; on API errors the budget's
    timer catches up on its next round."""
    try:
        written = await follow_plan(context.api(), plan_body, phase=phase, now=context.clock())
        await record_write(context, written)
    except (KubernetesApiError, ValueError) as error:  # ValueError: a malformed budget
        logger.warning(f"updating the budget of {plan_body['metadata'].get('name')}: {error}")


def _invalid_status(body: kopf.Body, message: str, context: ControllerContext) -> dict[str, Any]:
    condition = make_condition(
        BudgetConditionType.VALID,
        "False",
        "InvalidSpec",
        message,
        now=context.clock(),
        generation=body.meta.get("generation"),
    )
    return {"conditions": merge_conditions(body.get("status", {}).get("conditions"), [condition])}


async def _revise(body: kopf.Body, patch: kopf.Patch, context: ControllerContext) -> None:
    """Revise a budget's figures (one status write), or say why its spec is invalid."""
    try:
        budget_spec(body)
    except ValueError as error:
        kopf.warn(body, reason="InvalidSpec", message=str(error))
        patch.status.update(_invalid_status(body, str(error), context))
        return
    try:
        written = await refresh_budget(context.api(), body, context.clock())
    except ResourceVersionConflictError as error:
        raise kopf.TemporaryError("the budget changed; revising again", delay=1) from error
    except KubernetesApiError as error:
        raise kopf.TemporaryError(f"revising the budget: {error}", delay=10) from error
    await record_write(context, written)


def register_budgets(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """The GPUBudget handlers: figures revised on creation, on spec changes and every
    `budget_interval_seconds`."""

    @kopf.timer(*_BUDGETS, id="budget", interval=config.budget_interval_seconds, registry=registry)
    async def revise(*, body: kopf.Body, patch: kopf.Patch, memo: Any, **_: Any) -> None:
        await _revise(body, patch, memo.context)

    @kopf.on.update(*_BUDGETS, id="budget-spec", field="spec", registry=registry)
    async def spec_changed(*, body: kopf.Body, patch: kopf.Patch, memo: Any, **_: Any) -> None:
        await _revise(body, patch, memo.context)

    @kopf.on.delete(*_BUDGETS, optional=True, registry=registry)
    def forget(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        context: ControllerContext = memo.context
        context.metrics.forget_budget(body.meta.namespace or "default", body.meta.name or "")
