"""Small readers of what the emulator holds, shared by the integration tests."""

from __future__ import annotations

from typing import Any

from tests.integration.harness import Cluster


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The object's condition of type `kind`, or {}."""
    conditions = obj.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    """Every Event with this reason."""
    return [e for e in cluster.objects("v1/events").values() if e.get("reason") == reason]
