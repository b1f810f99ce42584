"""Every built-in object rendered for the examples passes kubernetes-validate.

The Service, ConfigMap and Job objects of every renderable example in deploy/examples and
deploy/examples/frameworks, rendered as the operator renders them (with owner
references), pass `kubernetes_validate.validate(obj, version, strict=True)` (strict:
unknown fields are errors) for Kubernetes 1.30.0 and for the newest version the installed
kubernetes-validate has schemas for (`kubernetes_validate.latest_version()`).

JobSet (jobset.x-k8s.io/v1alpha2) is a custom resource; kubernetes-validate has no schema
for it. Its one replicated job's template is a batch/v1 JobTemplateSpec, so it is
validated by wrapping it into a whole batch/v1 Job (the JobSet's name and namespace, the
template's labels and spec); that covers the pod template, the pod failure policy and
everything else the pods run with. The JobSet's own few fields are checked by shape in
`test_jobset_fields_have_the_jobset_api_shape`, its `failurePolicy` against the schema of
JobSet v0.12.0's CRD (vendored: `tests/data/upstream/jobset-v0.12.0-schema.yaml`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.contract.crd_schema import FORMAT_CHECKER, errors, to_json_schema
from tests.jobset_statuses import upstream_schema
from tests.rendered_examples import RENDERABLE, RENDERABLE_IDS, example_objects
from trainplan.launcher.render import JOBSET_API_VERSION
from trainplan.planner import Catalog

VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
BUILT_IN_KINDS = {"Service", "ConfigMap", "Job"}


def as_built_in(obj: dict[str, Any]) -> dict[str, Any]:
    """A built-in object as is; a JobSet as the batch/v1 Job of its replicated job."""
    if obj["kind"] != "JobSet":
        assert obj["kind"] in BUILT_IN_KINDS
        return obj
    (replicated,) = obj["spec"]["replicatedJobs"]
    template = replicated["template"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            **template.get("metadata", {}),
        },
        "spec": template["spec"],
    }


def test_the_versions_are_supported() -> None:
    assert VERSIONS[0] != VERSIONS[1]
    assert kubernetes_validate.utils.major_minor(VERSIONS[1]) >= "1.30"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", RENDERABLE, ids=RENDERABLE_IDS)
def test_rendered_objects_validate(path: Path, version: str, catalog: Catalog) -> None:
    objects = example_objects(path, catalog)
    assert objects
    for obj in objects:
        kubernetes_validate.validate(as_built_in(obj), version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_validation_catches_a_broken_job(version: str, catalog: Catalog) -> None:
    """A control: strict validation rejects an unknown field and a wrong type."""
    (path,) = [path for path in RENDERABLE if path.stem == "llama2-7b-deadline"]
    job = next(obj for obj in example_objects(path, catalog) if obj["kind"] == "Job")
    unknown = copy.deepcopy(job)
    unknown["spec"]["template"]["spec"]["containers"][0]["gpus"] = 8
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["completions"] = "eight"

    for broken in (unknown, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, version, strict=True)


@pytest.mark.parametrize("path", RENDERABLE, ids=RENDERABLE_IDS)
def test_jobset_fields_have_the_jobset_api_shape(path: Path, catalog: Catalog) -> None:
    for obj in example_objects(path, catalog):
        if obj["kind"] != "JobSet":
            continue
        assert obj["apiVersion"] == JOBSET_API_VERSION
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
        spec = obj["spec"]
        assert set(spec) == {"network", "suspend", "failurePolicy", "replicatedJobs"}
        assert spec["network"] == {"enableDNSHostnames": True, "subdomain": obj["metadata"]["name"]}
        assert isinstance(spec["suspend"], bool)
        failure_policy = jsonschema.Draft202012Validator(
            to_json_schema(upstream_schema("failurePolicy")), format_checker=FORMAT_CHECKER
        )
        assert errors(failure_policy, spec["failurePolicy"]) == []
        (replicated,) = spec["replicatedJobs"]
        assert set(replicated) == {"name", "replicas", "template"}
        assert replicated["replicas"] == 1
        assert set(replicated["template"]) == {"metadata", "spec"}
