"""Fixtures of the integration tests (the harness is in `harness.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
import pytest_asyncio
from aiohttp import web

from tests.integration.harness import (
    Cluster,
    OperatorProcess,
    TrainingPod,
    VersionedEmulator,
    declare_resources,
)
from trainplan.controller import OperatorConfig
from trainplan.planner import Catalog


@pytest.fixture
def kmock_options() -> dict[str, Any]:
    """kmock's emulator with the API server's resource versions."""
    return {"cls": VersionedEmulator}


@pytest_asyncio.fixture()
async def cluster(kmock: kmock.KubernetesEmulator) -> Cluster:
    declare_resources(kmock)
    return Cluster(kmock)


@pytest_asyncio.fixture()
async def operator(cluster: Cluster, catalog: Catalog) -> AsyncIterator[OperatorProcess]:
    process = OperatorProcess(cluster, catalog)
    await process.start()
    yield process
    await process.stop()


@pytest_asyncio.fixture()
async def pod() -> AsyncIterator[TrainingPod]:
    served = TrainingPod()
    app = web.Application()
    app.router.add_get("/metrics", served.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    served.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield served
    await runner.cleanup()


@pytest_asyncio.fixture()
async def fast_operator(cluster: Cluster, catalog: Catalog) -> AsyncIterator[OperatorProcess]:
    config = OperatorConfig(metrics_port=0, metrics_address="127.0.0.1", eta_interval_seconds=0.2)
    process = OperatorProcess(cluster, catalog, config)
    await process.start()
    yield process
    await process.stop()


@pytest_asyncio.fixture()
async def budget_operator(cluster: Cluster, catalog: Catalog) -> AsyncIterator[OperatorProcess]:
    """The operator with ETA and budget revisions every 0.2 s."""
    config = OperatorConfig(
        metrics_port=0,
        metrics_address="127.0.0.1",
        eta_interval_seconds=0.2,
        budget_interval_seconds=0.2,
    )
    process = OperatorProcess(cluster, catalog, config)
    await process.start()
    yield process
    await process.stop()
