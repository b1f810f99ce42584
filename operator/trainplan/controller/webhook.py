"""The GPU-budget admission webhook: a new TrainingPlan is judged against its GPUBudget
before it is stored, so `kubectl apply` answers at once. The judgement is the reconcile
path's (`admission.verdict_for`); the webhook only says it earlier. Served by Kopf's
webhook server, which `config.configure_kopf` sets up when `webhook_port` is set.

A review names only the plan's own namespace's budgets: the plan's namespace is the
review's object's (the API server sets it); an object without one is denied, never judged
in another namespace, and `admission.budget_for` never returns nor names a budget of
another namespace. A plan in a namespace the operator does not watch is allowed unjudged.
The handler keeps nothing between reviews (and the server gives Kopf no per-object
memory: `tls.StatelessMemories`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Collection
from typing import Any

import kopf
from pydantic import ValidationError

from trainplan.api import (
    GROUP,
    TRAINING_PLAN_PLURAL,
    VERSION,
    TrainingPlanSpec,
    format_validation_errors,
)
from trainplan.controller.admission import BudgetLookupError, budget_for, verdict_for
from trainplan.controller.budgets import Verdict
from trainplan.controller.config import OperatorConfig
from trainplan.controller.context import ControllerContext

HANDLER_ID = "budget"
"""The handler's id: Kopf serves it at the webhook server's `/budget`."""
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace name (an RFC 1123 label)."""


def register_admission(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Add the validating handler of new TrainingPlans to `registry`. `config` is the
    operator's; its webhook settings start the server (`configure_kopf`)."""
    assert config.webhook_port is not None, "the webhook handler needs a webhook server"

    @kopf.on.validate(
        GROUP,
        VERSION,
        TRAINING_PLAN_PLURAL,
        id=HANDLER_ID,
        operations=["CREATE"],
        registry=registry,
    )
    async def budget(*, body: kopf.Body, memo: Any, warnings: list[str], **_: Any) -> None:
        """Deny a plan its budget refuses (403) or whose spec is malformed (422); admit
        the rest, with the budget's warnings (Warn: over budget; Downsize: the GPUs it
        will run on)."""
        verdict = await judge(body, memo.context, config.webhook_namespaces)
        if not verdict.allowed:
            raise kopf.AdmissionError(verdict.message, code=403)
        warnings.extend(verdict.warnings)


def parse_spec(body: kopf.Body) -> TrainingPlanSpec:
    """The plan's spec; AdmissionError (422) naming every malformed field."""
    try:
        return TrainingPlanSpec.model_validate(dict(body.get("spec", {}) or {}))
    except ValidationError as error:
        problems = "; ".join(f"spec.{line}" for line in format_validation_errors(error))
        raise kopf.AdmissionError(problems, code=422) from error


async def judge(
    body: kopf.Body, context: ControllerContext, namespaces: Collection[str] = ()
) -> Verdict:
    """The verdict of the plan's budget; allowed when its namespace has none, or when
    `namespaces` are given and it is not one of them. A budget that is named but missing,
    ambiguous or malformed denies; so does a plan without a namespace."""
    spec = parse_spec(body)
    namespace = body.meta.namespace
    if not namespace or not _NAMESPACE.fullmatch(namespace):
        return Verdict(False, "the TrainingPlan has no valid metadata.namespace")
    if namespaces and namespace not in namespaces:
        return Verdict(True, "")
    try:
        budget = await budget_for(context.api(), namespace, spec.budget_ref)
    except BudgetLookupError as error:
        return Verdict(False, str(error))
    if budget is None:
        return Verdict(True, "")
    try:
        return await asyncio.to_thread(
            verdict_for,
            budget,
            name=body.meta.name or "",
            uid=body.meta.uid,
            spec=spec,
            catalog=context.catalog,
            now=context.clock(),
        )
    except ValueError as error:  # the budget's own spec is malformed
        return Verdict(False, str(error))
