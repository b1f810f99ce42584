"""The operator's diff-base storage (`SpecDiffBaseStorage`): the essence Kopf compares on
every watch event is exactly Kopf's own, built without copying the status, and a status
write alone still changes nothing Kopf would call an update."""

from __future__ import annotations

import json
from typing import Any, cast

import kopf
import pytest

from trainplan.api import GROUP
from trainplan.controller.config import OperatorConfig, SpecDiffBaseStorage, configure_kopf

KEY = "last-handled-configuration"


def _plan(status: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "TrainingPlan",
        "metadata": {
            "name": "llama",
            "namespace": "research",
            "uid": "0f1e",
            "resourceVersion": "41",
            "generation": 2,
            "labels": {"team": "nlp"},
            "annotations": {
                "note": "kept",
                f"{GROUP}/{KEY}": json.dumps({"spec": {"tokens": 1}}),
                f"{GROUP}/eta": json.dumps({"started": None}),
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
            "finalizers": [f"{GROUP}/finalizer"],
            "ownerReferences": [{"kind": "GPUBudget", "name": "team"}],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"model": {"parameters": 7e9}, "tokens": 2e12, "job": {"image": "trainer"}},
    }
    if status is not None:
        body["status"] = status
    return body


STATUSES = [
    None,
    {},
    {"phase": "Running", "plan": {"gpus": 64, "layout": [8, 8]}, "conditions": [{"a": 1}]},
]


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize(
    "extra_fields", [None, [("spec",)], ["spec.model"], ["status.phase"], [("metadata", "uid")]]
)
def test_the_essence_is_kopfs_own(
    status: dict[str, Any] | None, extra_fields: list[str] | None
) -> None:
    body = kopf.Body(cast(kopf.RawBody, _plan(status)))
    ours = SpecDiffBaseStorage(prefix=GROUP, key=KEY)
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key=KEY)
    built = ours.build(body=body, extra_fields=extra_fields)
    assert built == kopfs.build(body=body, extra_fields=extra_fields)
    assert ("status" in built) == (extra_fields == ["status.phase"] and bool(status))
    annotations = built["metadata"]["annotations"]
    assert annotations["note"] == "kept"
    assert f"{GROUP}/{KEY}" not in annotations
    assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations


def test_a_status_write_alone_changes_no_essence() -> None:
    storage = SpecDiffBaseStorage(prefix=GROUP, key=KEY)
    before = storage.build(body=kopf.Body(cast(kopf.RawBody, _plan(STATUSES[2]))))
    revised = _plan({**STATUSES[2], "estimatedRemainingSeconds": 3600})
    assert storage.build(body=kopf.Body(cast(kopf.RawBody, revised))) == before
    respecified = _plan(STATUSES[2])
    respecified["spec"]["tokens"] = 3e12
    assert storage.build(body=kopf.Body(cast(kopf.RawBody, respecified))) != before


def test_the_operator_uses_it() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, OperatorConfig())
    assert isinstance(settings.persistence.diffbase_storage, SpecDiffBaseStorage)
