"""Every status the controller writes, applied as the API server applies a merge patch,
validates against the committed TrainingPlan CRD's status schema."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.contract.crd_schema import committed_crd, validator_for
from trainplan.controller.reconcile import (
    changes_after_launch,
    child_state,
    child_status_patch,
    decide_launch,
)
from trainplan.planner import Catalog

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: what the API server stores after a JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _validate(status: Mapping[str, Any]) -> None:
    validator = validator_for(committed_crd("trainingplans"), "status")
    errors = sorted(validator.iter_errors(dict(status)), key=str)
    assert errors == [], [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def _spec(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())["spec"]
    return spec


def _decide(spec: Mapping[str, Any], catalog: Catalog, previous: Mapping[str, Any]) -> Any:
    return decide_launch(
        name="p",
        namespace="ns",
        uid="u",
        generation=2,
        spec_document=spec,
        previous_status=previous,
        catalog=catalog,
        now=NOW,
    )


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.yaml")))
def test_launch_or_reject_status_of_each_example(catalog: Catalog, example: str) -> None:
    decision = _decide(_spec(example), catalog, {})
    _validate(merge_patch({}, decision.status))


def test_suspended_rejected_and_replanned_statuses(catalog: Catalog) -> None:
    spec = _spec("llama2-7b-deadline")
    launched = merge_patch({}, _decide(spec, catalog, {}).status)
    suspended_spec = {**spec, "job": {**spec["job"], "suspend": True}}
    _validate(merge_patch({}, _decide(suspended_spec, catalog, {}).status))
    rejected = merge_patch(launched, _decide({**spec, "foo": 1}, catalog, launched).status)
    _validate(rejected)
    assert "plan" not in rejected
    replanned = merge_patch(rejected, _decide(spec, catalog, rejected).status)
    _validate(replanned)


def test_child_and_change_statuses(catalog: Catalog) -> None:
    status = merge_patch({}, _decide(_spec("llama2-7b-deadline"), catalog, {}).status)
    jobs = [
        {"status": {"active": 4, "startTime": "2026-11-22T00:00:00Z"}},
        {"status": {"active": 0, "failed": 2}},
        {
            "status": {
                "failed": 11,
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ],
            }
        },
        {
            "status": {
                "completionTime": "2026-11-23T00:00:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        },
        {"spec": {"suspend": True}, "status": {}},
    ]
    for job in jobs:
        patch = child_status_patch(child_state(job), status, generation=2, now=NOW)
        assert patch is not None
        status = merge_patch(status, patch)
        _validate(status)
    conditions = changes_after_launch([("objective", "gpus")], status, generation=3, now=NOW)
    assert conditions is not None
    _validate(merge_patch(status, {"conditions": conditions, "observedGeneration": 3}))
