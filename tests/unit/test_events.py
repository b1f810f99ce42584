"""Events the operator posts have valid names for any plan name (up to 253 characters)."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from trainplan.cluster import event_for

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _plan(name: str) -> dict[str, object]:
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name, "namespace": "team-a", "uid": "uid-1"},
    }


@pytest.mark.parametrize(
    "name", ["llama", "a" * 200, "a" * 253, ("x." * 126) + "y", "run-1." + "b" * 240]
)
@pytest.mark.parametrize("reason", ["Succeeded", "DeadlineAtRisk", "SpecChangedAfterLaunch"])
def test_event_names_are_subdomains_of_at_most_253_characters(name: str, reason: str) -> None:
    event = event_for(_plan(name), "Normal", reason, "m", "2026-11-25T00:00:00+00:00")
    event_name = event["metadata"]["name"]
    assert len(event_name) <= 253
    assert SUBDOMAIN.fullmatch(event_name), event_name
    assert "generateName" not in event["metadata"]
    assert event["involvedObject"]["name"] == name
    kubernetes_validate.validate(event, "1.30.0", strict=True)


def test_events_of_one_plan_differ_by_reason_and_moment() -> None:
    plan = _plan("a" * 253)
    names = {
        event_for(plan, "Normal", reason, "m", moment)["metadata"]["name"]
        for reason in ("Succeeded", "Failed")
        for moment in ("2026-11-25T00:00:00+00:00", "2026-11-25T00:00:01+00:00")
    }
    assert len(names) == 4
