"""The training pods pass Pod Security `restricted`, and `/dev/shm` has a size limit.

Every renderable example's Job or JobSet pod template is checked against the profile's
checks (`tests/contract/pod_security.py`), as rendered by default and with
`job.securityContext` set; the rendered objects with those settings also pass strict
kubernetes-validate. `/dev/shm` is a memory-backed emptyDir with `job.shmSize` as its
`sizeLimit` (16Gi unless given).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from pydantic import ValidationError

from tests.contract.pod_security import pod_specs, restricted_violations
from tests.contract.test_rendered_objects_validate import VERSIONS, as_built_in
from tests.rendered_examples import RENDERABLE, RENDERABLE_IDS, example_objects
from trainplan.api import TrainingPlanSpec
from trainplan.api.spec import DEFAULT_SHM_SIZE
from trainplan.launcher import PlanRef, render_for
from trainplan.launcher.render import SHM_DIR, SHM_VOLUME
from trainplan.planner import Catalog, plan

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0", "checkpointVolumeClaim": "ckpt"},
}


def _render(catalog: Catalog, job: dict[str, Any], launcher: str = "Job") -> list[Any]:
    document = copy.deepcopy(SPEC)
    document["job"].update(job, launcher=launcher)
    spec = TrainingPlanSpec.model_validate(document)
    return render_for(PlanRef("secure", "team-a", "uid-1"), spec, plan(spec, catalog), catalog)


def _pods(objects: list[Any]) -> list[dict[str, Any]]:
    found = [pod for obj in objects for pod in pod_specs(obj)]
    assert len(found) == 1
    return [dict(pod) for pod in found]


OUTSIDE_RESTRICTED: dict[str, list[str]] = {
    # job.podTemplate may leave restricted (docs/pod-template.md): RDMA with the node's
    # network and locked memory. The check reports IPC_LOCK for baseline and restricted.
    "rdma-host-network": [
        "host namespaces: hostNetwork is true",
        "capabilities: containers[0] adds ['IPC_LOCK']",
        "capabilities: containers[0] adds ['IPC_LOCK']",
    ],
}
"""Examples whose pod template leaves Pod Security restricted on purpose, and how."""


@pytest.mark.parametrize("path", RENDERABLE, ids=RENDERABLE_IDS)
def test_every_example_passes_restricted(path: Path, catalog: Catalog) -> None:
    (pod,) = _pods(example_objects(path, catalog))
    assert restricted_violations(pod) == OUTSIDE_RESTRICTED.get(path.stem, [])


def test_the_examples_outside_restricted_exist() -> None:
    assert set(OUTSIDE_RESTRICTED) <= set(RENDERABLE_IDS)


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_the_default_security_context(catalog: Catalog, launcher: str) -> None:
    (pod,) = _pods(_render(catalog, {}, launcher))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert restricted_violations(pod) == []


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_the_user_and_groups_are_set_from_the_spec(catalog: Catalog, launcher: str) -> None:
    objects = _render(
        catalog,
        {"securityContext": {"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000}},
        launcher,
    )
    (pod,) = _pods(objects)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 2000,
        "fsGroup": 3000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert restricted_violations(pod) == []
    for version in VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(as_built_in(obj), version, strict=True)


def test_a_root_image_can_be_let_run_outside_restricted(catalog: Catalog) -> None:
    (pod,) = _pods(_render(catalog, {"securityContext": {"runAsNonRoot": False}}))
    assert pod["securityContext"]["runAsNonRoot"] is False
    assert restricted_violations(pod) == [
        "running as non-root: containers[0] may run as root (runAsNonRoot is not true)"
    ]
    # Everything else stays restricted.
    (container,) = pod["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_root_with_run_as_non_root_is_refused() -> None:
    document = copy.deepcopy(SPEC)
    document["job"]["securityContext"] = {"runAsUser": 0}
    with pytest.raises(ValidationError, match="runAsUser 0 is root"):
        TrainingPlanSpec.model_validate(document)
    document["job"]["securityContext"] = {"runAsUser": -1}
    with pytest.raises(ValidationError):
        TrainingPlanSpec.model_validate(document)


@pytest.mark.parametrize(
    ("given", "limit"), [(None, DEFAULT_SHM_SIZE), ("64Gi", "64Gi"), (1 << 30, str(1 << 30))]
)
def test_dev_shm_has_a_size_limit(catalog: Catalog, given: Any, limit: str) -> None:
    (pod,) = _pods(_render(catalog, {} if given is None else {"shmSize": given}))
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes[SHM_VOLUME]["emptyDir"] == {"medium": "Memory", "sizeLimit": limit}
    (container,) = pod["containers"]
    assert {"name": SHM_VOLUME, "mountPath": SHM_DIR} in container["volumeMounts"]
    assert DEFAULT_SHM_SIZE == "16Gi"


@pytest.mark.parametrize("bad", ["lots", "-1Gi", "16 Gi", "1e9", "9" * 40])
def test_a_bad_shm_size_is_refused(bad: str) -> None:
    document = copy.deepcopy(SPEC)
    document["job"]["shmSize"] = bad
    with pytest.raises(ValidationError, match=r"job\.shmSize"):
        TrainingPlanSpec.model_validate(document)


def test_the_checker_catches_what_restricted_refuses() -> None:
    """A control: the pod as rendered before (no security context, hostPath) fails."""
    pod = {
        "containers": [{"name": "trainer", "image": "x", "ports": [{"hostPort": 80}]}],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
    }
    violations = restricted_violations(pod)
    assert any(v.startswith("host ports") for v in violations)
    assert any(v.startswith("hostPath volumes") for v in violations)
    assert any(v.startswith("volume types") for v in violations)
    assert any(v.startswith("privilege escalation") for v in violations)
    assert any(v.startswith("running as non-root") for v in violations)
    assert any(v.startswith("seccomp") for v in violations)
    assert any(v.startswith("capabilities") for v in violations)
