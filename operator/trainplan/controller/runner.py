"""Running the operator: in the foreground (`trainplan operator`) or as a task (tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import kopf

from trainplan.controller.context import ControllerContext
from trainplan.controller.handlers import LoginFn, build_registry


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
    given, standalone (no peering), with an optional liveness endpoint such as
    `http://0.0.0.0:8081/healthz`."""
    await kopf.operator(
        registry=build_registry(login, context.config),
        memo=kopf.Memo(context=context),
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        standalone=True,
        liveness_endpoint=liveness_endpoint,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
