"""Who owns an object of a name a plan wants, and whether that is a conflict or a wait
(pure: `KubernetesApi.ownership_conflicts` reads the objects, this module judges them).

An object left by an earlier owner of the same kind and name (a TrainingPlan deleted and
applied again at once) is not a conflict: the garbage collector removes it because its
owner is gone, so the new owner waits for that instead of refusing the name for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

OwnerState = Literal["gone", "deleting", "present"]
"""What became of a controller owner, looked up by its name: no object of that name or
one with another uid (`gone`), the same uid being deleted, or the same uid alive."""


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The parts of an ownerReference that identify its owner."""

    api_version: str
    kind: str
    name: str
    uid: str | None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def same_owner_name(self, other: OwnerRef) -> bool:
        """Whether both name an owner of the same group, kind and name (any version)."""
        return (self.group, self.kind, self.name) == (other.group, other.kind, other.name)


def controller_of(obj: Mapping[str, Any]) -> OwnerRef | None:
    """The object's controller ownerReference, or None when it has none."""
    for owner in obj.get("metadata", {}).get("ownerReferences", []) or []:
        if isinstance(owner, Mapping) and owner.get("controller"):
            uid = owner.get("uid")
            return OwnerRef(
                api_version=str(owner.get("apiVersion", "")),
                kind=str(owner.get("kind", "")),
                name=str(owner.get("name", "")),
                uid=None if uid is None else str(uid),
            )
    return None


def owner_state(owner: OwnerRef, found: Mapping[str, Any] | None) -> OwnerState:
    """What became of `owner`, from the object now holding its name (None: no object)."""
    if found is None:
        return "gone"
    meta = found.get("metadata", {}) or {}
    if meta.get("uid") != owner.uid:
        return "gone"  # the name now holds another object: the owner was deleted
    return "deleting" if meta.get("deletionTimestamp") else "present"


@dataclass(frozen=True, slots=True)
class OwnershipConflict:
    """An object of a name the plan wants that exists under another controller (or none)."""

    kind: str
    namespace: str
    name: str
    wanted: OwnerRef | None
    """The controller the plan's object would have."""
    found: OwnerRef | None
    """The existing object's controller; None when it has none."""
    deleting: bool = False
    """The existing object has a deletionTimestamp."""
    found_state: OwnerState | None = None
    """What became of `found`, when it was looked up (an owner of the wanted kind)."""

    @property
    def message(self) -> str:
        found = self.found.uid if self.found is not None and self.found.uid else "nothing"
        wanted = self.wanted.uid if self.wanted is not None and self.wanted.uid else "no owner"
        return (
            f"{self.kind} {self.namespace}/{self.name} exists and is controlled by {found},"
            f" not by this plan ({wanted})"
        )

    @property
    def goes_away(self) -> bool:
        """Whether the object is on its way out rather than someone else's: it is being
        deleted, or its controller is an earlier owner of the same kind and name (another
        uid) that no longer exists or is being deleted, so the garbage collector removes
        it. An object of another owner, or of none, is a conflict."""
        if self.deleting:
            return True
        if self.found is None or self.wanted is None or self.found.uid == self.wanted.uid:
            return False
        return self.found.same_owner_name(self.wanted) and self.found_state in ("gone", "deleting")

    @property
    def wait_message(self) -> str:
        """What the plan waits for, for an object that goes away."""
        why = "it is being deleted"
        if not self.deleting and self.found is not None:
            went = "no longer exists" if self.found_state == "gone" else "is being deleted"
            why = (
                f"it belongs to the previous {self.found.kind} {self.found.name}"
                f" (uid {self.found.uid}), which {went}"
            )
        return f"waiting for {self.kind} {self.namespace}/{self.name} to be deleted: {why}"


@dataclass(frozen=True, slots=True)
class OwnershipVerdict:
    """The plan's existing objects, sorted: conflicts refuse it; waits delay it."""

    conflicts: tuple[OwnershipConflict, ...]
    waits: tuple[OwnershipConflict, ...]


def judge_ownership(conflicts: Sequence[OwnershipConflict]) -> OwnershipVerdict:
    """Split the objects found under another controller into those that go away (the
    plan waits) and real conflicts (someone else's object, or no one's)."""
    return OwnershipVerdict(
        conflicts=tuple(c for c in conflicts if not c.goes_away),
        waits=tuple(c for c in conflicts if c.goes_away),
    )
