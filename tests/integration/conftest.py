"""Fixtures of the integration tests (the harness is in `harness.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest_asyncio

from tests.integration.harness import (
    CLUSTER_RESOURCES,
    RESOURCES,
    VERBS,
    Cluster,
    OperatorProcess,
)
from trainplan.planner import Catalog


@pytest_asyncio.fixture()
async def cluster(kmock: kmock.KubernetesEmulator) -> Cluster:
    scoped = [(RESOURCES, True), (CLUSTER_RESOURCES, False)]
    for resources, namespaced in scoped:
        for resource, info in resources.items():
            kmock.resources[resource] = kmock.ResourceInfo(
                kind=info["kind"],
                singular=info["singular"],
                subresources=info["subresources"],
                verbs=VERBS,
                namespaced=namespaced,
            )
    return Cluster(kmock)


@pytest_asyncio.fixture()
async def operator(cluster: Cluster, catalog: Catalog) -> AsyncIterator[OperatorProcess]:
    process = OperatorProcess(cluster, catalog)
    await process.start()
    yield process
    await process.stop()
