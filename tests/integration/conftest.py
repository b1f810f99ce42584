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
    for resource, info in RESOURCES.items():
        kmock.resources[resource] = kmock.ResourceInfo(
            kind=info["kind"],
            singular=info["singular"],
            subresources=info["subresources"],
            verbs=VERBS,
            namespaced=True,
        )
    for resource, info in CLUSTER_RESOURCES.items():
        kmock.resources[resource] = kmock.ResourceInfo(
            kind=info["kind"],
            singular=info["singular"],
            subresources=info["subresources"],
            verbs=VERBS,
            namespaced=False,
        )
    return Cluster(kmock)


@pytest_asyncio.fixture()
async def operator(cluster: Cluster, catalog: Catalog) -> AsyncIterator[OperatorProcess]:
    process = OperatorProcess(cluster, catalog)
    await process.start()
    yield process
    await process.stop()
