"""`trainplan.cluster.ownership`: an object of a wanted name is a conflict, or a wait when
it is going away (the previous plan's of the same name, deleted just before)."""

from __future__ import annotations

from typing import Any

import pytest

from trainplan.cluster import (
    OwnerRef,
    OwnershipConflict,
    controller_of,
    judge_ownership,
)
from trainplan.cluster.ownership import OwnerState, owner_state

PLAN = "trainplan.dev/v1alpha1"
NEW = OwnerRef(PLAN, "TrainingPlan", "llama", "uid-new")
OLD = OwnerRef(PLAN, "TrainingPlan", "llama", "uid-old")


def _conflict(
    found: OwnerRef | None, state: OwnerState | None = None, deleting: bool = False
) -> OwnershipConflict:
    return OwnershipConflict("Job", "ns", "llama", NEW, found, deleting, state)


def test_controller_of_reads_the_controller_reference() -> None:
    obj: dict[str, Any] = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-0"},
                {
                    "apiVersion": PLAN,
                    "kind": "TrainingPlan",
                    "name": "llama",
                    "uid": "uid-old",
                    "controller": True,
                },
            ]
        }
    }
    assert controller_of(obj) == OLD
    assert controller_of({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("found", "state"),
    [
        (None, "gone"),
        ({"metadata": {"name": "llama", "uid": "uid-new"}}, "gone"),  # the name holds another
        ({"metadata": {"uid": "uid-old", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, "deleting"),
        ({"metadata": {"uid": "uid-old"}}, "present"),
    ],
)
def test_owner_state(found: dict[str, Any] | None, state: str) -> None:
    assert owner_state(OLD, found) == state


@pytest.mark.parametrize(
    "conflict",
    [
        _conflict(OLD, "gone"),  # the previous plan of the same name was deleted
        _conflict(OLD, "deleting"),
        _conflict(OwnerRef("trainplan.dev/v1beta1", "TrainingPlan", "llama", "uid-old"), "gone"),
        _conflict(None, deleting=True),  # anyone's object that is being deleted
        _conflict(OwnerRef("apps/v1", "Deployment", "web", "u-9"), deleting=True),
    ],
)
def test_objects_going_away_are_waited_for(conflict: OwnershipConflict) -> None:
    verdict = judge_ownership([conflict])
    assert (verdict.conflicts, verdict.waits) == ((), (conflict,))
    assert conflict.wait_message.startswith("waiting for Job ns/llama to be deleted")


@pytest.mark.parametrize(
    "conflict",
    [
        _conflict(None),  # nobody's object
        _conflict(OLD, "present"),  # a live plan of that name and uid
        _conflict(OLD, None),  # what became of the owner is not known
        _conflict(OwnerRef(PLAN, "TrainingPlan", "other", "uid-old"), "gone"),  # another name
        _conflict(OwnerRef(PLAN, "GPUBudget", "llama", "uid-old"), "gone"),  # another kind
        _conflict(OwnerRef("apps/v1", "TrainingPlan", "llama", "uid-old"), "gone"),  # group
        _conflict(OwnerRef(PLAN, "TrainingPlan", "llama", "uid-new"), "gone"),  # the same uid
    ],
)
def test_objects_of_someone_else_are_conflicts(conflict: OwnershipConflict) -> None:
    verdict = judge_ownership([conflict])
    assert (verdict.conflicts, verdict.waits) == ((conflict,), ())


def test_one_real_conflict_among_waits_is_still_a_conflict() -> None:
    waiting, foreign = _conflict(OLD, "gone"), _conflict(None)
    verdict = judge_ownership([waiting, foreign])
    assert verdict.conflicts == (foreign,)
    assert verdict.waits == (waiting,)


def test_messages_name_the_object_and_owners() -> None:
    conflict = _conflict(OLD, "gone")
    assert conflict.message == (
        "Job ns/llama exists and is controlled by uid-old, not by this plan (uid-new)"
    )
    assert _conflict(None).message.endswith("controlled by nothing, not by this plan (uid-new)")
    assert conflict.wait_message == (
        "waiting for Job ns/llama to be deleted: it belongs to the previous TrainingPlan"
        " llama (uid uid-old), which no longer exists"
    )
    assert _conflict(None, deleting=True).wait_message.endswith("it is being deleted")
