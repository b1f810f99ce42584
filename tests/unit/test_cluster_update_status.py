"""`KubernetesApi.update_status`: read, compute, patch onto the version read, again after a
concurrent write (the API server's optimistic concurrency)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from trainplan.cluster import (
    Connection,
    KubernetesApi,
    ResourceVersionConflictError,
    StatusKeptChangingError,
)


class Recorded(KubernetesApi):
    """The client's get and patch answered from memory: `conflicts` patches fail first."""

    def __init__(self, document: dict[str, Any] | None, conflicts: int) -> None:
        super().__init__(Connection(server="http://127.0.0.1:1"))
        self.document, self.conflicts = document, conflicts
        self.patches: list[tuple[Mapping[str, Any], str | None]] = []

    async def get(self, *_: Any, **__: Any) -> Any:
        return self.document

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Any, **kwargs: Any
    ) -> Any:
        self.patches.append((patch, kwargs.get("resource_version")))
        if self.conflicts:
            self.conflicts -= 1
            assert self.document is not None
            version = int(self.document["metadata"]["resourceVersion"]) + 1
            self.document = {**self.document, "metadata": {"resourceVersion": str(version)}}
            raise ResourceVersionConflictError(409, "Conflict", "changed")
        return {}


async def _run(api: Recorded, compute: Any) -> Any:
    try:
        return await api.update_status("v1", "ConfigMap", "ns", "name", compute, attempts=3)
    finally:
        await api.close()


@pytest.mark.asyncio
async def test_a_concurrent_write_is_read_again_and_the_status_written_on_it() -> None:
    api = Recorded({"metadata": {"resourceVersion": "7"}}, conflicts=2)
    seen: list[str] = []

    async def compute(document: dict[str, Any]) -> dict[str, Any]:
        seen.append(document["metadata"]["resourceVersion"])
        return {"count": len(seen)}

    written = await _run(api, compute)
    assert seen == ["7", "8", "9"]
    assert [version for _, version in api.patches] == ["7", "8", "9"]
    assert written == ({"metadata": {"resourceVersion": "9"}}, {"count": 3})
    assert api.patches[-1][0] == {"status": {"count": 3}}


@pytest.mark.asyncio
async def test_gone_nothing_to_write_or_always_changing() -> None:
    async def compute(_: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    async def nothing(_: dict[str, Any]) -> None:
        return None

    assert await _run(Recorded(None, 0), compute) is None
    quiet = Recorded({"metadata": {"resourceVersion": "1"}}, 0)
    assert await _run(quiet, nothing) is None
    assert quiet.patches == []
    with pytest.raises(StatusKeptChangingError, match="kept changing"):
        await _run(Recorded({"metadata": {"resourceVersion": "1"}}, 5), compute)
