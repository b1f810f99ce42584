"""Running the operator: in the foreground (`trainplan operator`) or as a task (tests)."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Sequence

import kopf

from trainplan.controller.config import PRIORITY_TIEBREAK_VALUES, seniority_priority
from trainplan.controller.context import ControllerContext
from trainplan.controller.handlers import LoginFn, build_registry

logger = logging.getLogger(__name__)


async def run_operator(
    context: ControllerContext,
    *,
    namespaces: Sequence[str] = (),
    login: LoginFn | None = None,
    liveness_endpoint: str | None = None,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run until `stop_flag` is set (or forever): every namespace unless `namespaces` are
    given, standalone or peered (`config.peering_name`), with an optional liveness
    endpoint such as `http://0.0.0.0:8081/healthz`."""
    config = context.config
    priority: int | None = None
    if config.peering_name is not None:
        priority = config.peering_priority
        if priority is None:
            tiebreak = random.SystemRandom().randrange(PRIORITY_TIEBREAK_VALUES)
            priority = seniority_priority(context.clock(), tiebreak)
        logger.info(f"peering through {config.peering_name!r} with priority {priority}")
    await kopf.operator(
        registry=build_registry(login, context.config),
        memo=kopf.Memo(context=context),
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        standalone=config.peering_name is None,
        peering_name=config.peering_name,
        priority=priority,
        liveness_endpoint=liveness_endpoint,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
