"""`spec.job.podTemplate` in the committed TrainingPlan CRD: structural, every typed level
keeps unknown fields (so a field trainplan refuses reaches the operator and is refused
with its reason instead of being pruned), named lists are list maps, and the schema
refuses no more than the models do (and, for the bounds it can express, as much)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pytest
from pydantic import ValidationError

from tests.contract.crd_schema import committed_crd, errors, openapi_schema, validator_for
from trainplan.api import TrainingPlanSpec

MINIMAL_SPEC: Final[Mapping[str, Any]] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
}


def _pod_template_schema() -> dict[str, Any]:
    spec = openapi_schema(committed_crd("trainingplans"))["properties"]["spec"]
    schema: dict[str, Any] = spec["properties"]["job"]["properties"]["podTemplate"]
    return schema


def _spec(template: Mapping[str, Any]) -> dict[str, Any]:
    return {**MINIMAL_SPEC, "job": {"podTemplate": template}}


def _crd_errors(template: Mapping[str, Any]) -> list[str]:
    return errors(validator_for(committed_crd("trainingplans"), "spec"), _spec(template))


def test_every_typed_level_keeps_unknown_fields() -> None:
    template = _pod_template_schema()
    spec = template["properties"]["spec"]
    container = spec["properties"]["containers"]["items"]
    for node in (
        template,
        template["properties"]["metadata"],
        spec,
        container,
        container["properties"]["resources"],
    ):
        assert node["type"] == "object"
        assert node["x-kubernetes-preserve-unknown-fields"] is True
        assert "properties" in node


def test_named_lists_are_list_maps() -> None:
    spec = _pod_template_schema()["properties"]["spec"]["properties"]
    container = spec["containers"]["items"]["properties"]
    for node, key in (
        (spec["volumes"], "name"),
        (spec["imagePullSecrets"], "name"),
        (spec["containers"], "name"),
        (container["env"], "name"),
        (container["volumeMounts"], "mountPath"),
    ):
        assert node["x-kubernetes-list-type"] == "map"
        assert node["x-kubernetes-list-map-keys"] == [key]
        assert key in node["items"]["required"]
        assert "maxItems" in node


def test_kubernetes_objects_inside_are_free_form_and_bounded() -> None:
    spec = _pod_template_schema()["properties"]["spec"]["properties"]
    for node in (spec["affinity"], spec["securityContext"], spec["volumes"]["items"]):
        assert node["x-kubernetes-preserve-unknown-fields"] is True
        assert "maxProperties" in node


def test_a_full_template_is_valid_for_both() -> None:
    template = {
        "metadata": {"labels": {"team": "nlp"}, "annotations": {"example.com/a": "b"}},
        "spec": {
            "serviceAccountName": "trainer",
            "imagePullSecrets": [{"name": "regcred"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "ds"}}],
            "affinity": {"nodeAffinity": {}},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
            "priorityClassName": "high",
            "schedulerName": "default-scheduler",
            "securityContext": {"runAsUser": 1000},
            "hostNetwork": True,
            "containers": [
                {
                    "name": "trainer",
                    "env": [
                        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                    ],
                    "envFrom": [{"secretRef": {"name": "wandb"}}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                    "resources": {"limits": {"rdma/rdma_shared_device_a": 1}},
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                }
            ],
        },
    }
    assert _crd_errors(template) == []
    TrainingPlanSpec.model_validate(_spec(template))


@pytest.mark.parametrize(
    "template",
    [
        {"spec": {"restartPolicy": "Always"}},
        {"spec": {"containers": [{"name": "trainer", "command": ["bash"]}]}},
        {"spec": {"initContainers": [{"name": "x"}]}},
        {"metadata": {"name": "x"}},
    ],
    ids=["owned-pod-field", "owned-container-field", "unsupported", "metadata"],
)
def test_a_refused_field_is_kept_by_the_crd_and_refused_by_the_model(
    template: dict[str, Any],
) -> None:
    assert _crd_errors(template) == []
    with pytest.raises(ValidationError, match=r"job\.podTemplate"):
        TrainingPlanSpec.model_validate(_spec(template))


@pytest.mark.parametrize(
    "template",
    [
        {"spec": {"volumes": [{"name": "d", "emptyDir": {}, "secret": {"secretName": "s"}}]}},
        {"spec": {"volumes": [{"name": "d"}]}},
        {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"cpu": "-1"}}}]}},
        {"spec": {"containers": [{"name": "sidecar"}]}},
        {"spec": {"imagePullSecrets": [{"name": "Not_A_Name"}]}},
        {"metadata": {"labels": {"team": "not a value"}}},
    ],
    ids=["two-sources", "no-source", "negative-quantity", "sidecar", "secret-name", "label"],
)
def test_what_the_crd_refuses_the_model_refuses(template: dict[str, Any]) -> None:
    assert _crd_errors(template) != []
    with pytest.raises(ValidationError, match=r"job\.podTemplate"):
        TrainingPlanSpec.model_validate(_spec(template))
