"""Standard Kubernetes conditions, merged without losing transition times (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from trainplan.api.status import CONDITION_MESSAGE_MAX_LENGTH

ConditionStatus = Literal["True", "False", "Unknown"]


def make_condition(
    condition_type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
) -> dict[str, Any]:
    """A condition as the API stores it; a message beyond metav1.Condition's 32,768
    characters is cut, ending in an ellipsis."""
    if len(message) > CONDITION_MESSAGE_MAX_LENGTH:
        message = message[: CONDITION_MESSAGE_MAX_LENGTH - 1] + "…"
    condition: dict[str, Any] = {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now.isoformat(),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, updates: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """`previous` with `updates` applied by type. A condition whose status did not change
    keeps its lastTransitionTime (the Kubernetes API conventions)."""
    merged = {str(c["type"]): dict(c) for c in previous or () if "type" in c}
    for update in updates:
        kind = str(update["type"])
        old = merged.get(kind)
        new = dict(update)
        if old is not None and old.get("status") == new.get("status"):
            new["lastTransitionTime"] = old.get("lastTransitionTime", new["lastTransitionTime"])
        merged[kind] = new
    return list(merged.values())
