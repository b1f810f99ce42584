"""`job.podTemplate`: the strategic merge onto the rendered pod, the fields trainplan owns,
and the checks (the Kubernetes pod schema among them) that make a bad template a Rejected
plan with the field's path instead of a Job the API server or the kubelet refuses.

Specs are Llama 2 7B on 16 A100-80GB GPUs (2 nodes of 8), planned once each.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Final

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from trainplan.api import Plan, TrainingPlanSpec, format_validation_errors
from trainplan.api.podtemplate import (
    OWNED_CONTAINER_FIELDS,
    OWNED_POD_FIELDS,
    owned_annotation_reason,
    owned_label_reason,
)
from trainplan.controller.reconcile import decide_launch
from trainplan.launcher import LauncherError, PlanRef, render_for
from trainplan.launcher.podtemplate import (
    SCHEMA_VERSION,
    patch_path,
    quantity_value,
    strategic_merge,
)
from trainplan.launcher.render import (
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    PROMETHEUS_PATH_ANNOTATION,
    PROMETHEUS_PORT_ANNOTATION,
    PROMETHEUS_SCRAPE_ANNOTATION,
)
from trainplan.planner import Catalog, plan

BASE: Final[dict[str, Any]] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 16},
    "job": {
        "image": "registry.example/train:1.0",
        "checkpointVolumeClaim": "ckpt",
        "resources": {"cpu": "32", "memory": "256Gi"},
    },
}
REF: Final = PlanRef(name="llama", namespace="team-a", uid="5f1c2d3e-0000-4000-8000-000000000001")
NOW: Final = datetime(2026, 11, 25, tzinfo=UTC)

_CATALOG: list[Catalog] = []


@pytest.fixture(autouse=True)
def _remember_catalog(catalog: Catalog) -> None:
    if not _CATALOG:
        _CATALOG.append(catalog)


def _document(template: dict[str, Any] | None, **job: Any) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["job"].update(job)
    if template is not None:
        document["job"]["podTemplate"] = template
    return document


@cache
def _planned(document_json: str) -> tuple[TrainingPlanSpec, Plan]:
    spec = TrainingPlanSpec.model_validate(json.loads(document_json))
    return spec, plan(spec, _CATALOG[0])


def _render(template: dict[str, Any] | None, **job: Any) -> list[dict[str, Any]]:
    spec, result = _planned(json.dumps(_document(template, **job), sort_keys=True))
    return render_for(REF, spec, result, _CATALOG[0])


def _pod(template: dict[str, Any] | None, **job: Any) -> dict[str, Any]:
    workload = _render(template, **job)[-1]
    if workload["kind"] == "JobSet":
        (replicated,) = workload["spec"]["replicatedJobs"]
        pod: dict[str, Any] = replicated["template"]["spec"]["template"]
    else:
        pod = workload["spec"]["template"]
    return pod


def _trainer(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "trainer"
    return container


def _problems(template: dict[str, Any], **job: Any) -> list[tuple[str, str]]:
    with pytest.raises(LauncherError) as caught:
        _render(template, **job)
    return list(caught.value.problems)


def _spec_errors(template: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        TrainingPlanSpec.model_validate(_document(template))
    return format_validation_errors(caught.value)


def _trainer_patch(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", **fields}]}}


# --- the merge --------------------------------------------------------------------------


def test_maps_are_merged_and_scalars_replaced() -> None:
    base = {"a": {"x": 1, "y": {"z": 2}}, "b": "keep", "c": 3}
    patch = {"a": {"y": {"w": 4}, "x": 9}, "c": 5, "d": True}
    assert strategic_merge(base, patch) == {
        "a": {"x": 9, "y": {"z": 2, "w": 4}},
        "b": "keep",
        "c": 5,
        "d": True,
    }
    assert base == {"a": {"x": 1, "y": {"z": 2}}, "b": "keep", "c": 3}  # unchanged


def test_a_null_removes_a_key() -> None:
    assert strategic_merge({"a": {"x": 1, "y": 2}}, {"a": {"x": None, "z": {"q": None}}}) == {
        "a": {"y": 2, "z": {}}
    }


def test_named_lists_are_merged_by_name_and_others_replaced() -> None:
    base = {
        "spec": {
            "volumes": [
                {"name": "a", "emptyDir": {}},
                {"name": "b", "secret": {"secretName": "s"}},
            ],
            "imagePullSecrets": [{"name": "one"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "i",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "volumeMounts": [{"name": "a", "mountPath": "/a"}],
                    "securityContext": {"capabilities": {"drop": ["ALL"]}},
                }
            ],
        }
    }
    patch = {
        "spec": {
            "volumes": [{"name": "c", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "one"}, {"name": "two"}],
            "containers": [
                {
                    "name": "trainer",
                    "env": [
                        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        {"name": "C", "value": "3"},
                    ],
                    # The same volume at a second path: mounts are keyed by mountPath.
                    "volumeMounts": [{"name": "a", "mountPath": "/b", "readOnly": True}],
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                }
            ],
        }
    }
    spec = strategic_merge(base, patch)["spec"]
    assert [volume["name"] for volume in spec["volumes"]] == ["a", "b", "c"]
    assert spec["imagePullSecrets"] == [{"name": "one"}, {"name": "two"}]
    (container,) = spec["containers"]
    assert container["image"] == "i"
    # env: merged by name, an entry replaces the rendered one whole, in its place.
    assert container["env"] == [
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "B", "value": "2"},
        {"name": "C", "value": "3"},
    ]
    assert container["volumeMounts"] == [
        {"name": "a", "mountPath": "/a"},
        {"name": "a", "mountPath": "/b", "readOnly": True},
    ]
    assert container["securityContext"] == {"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}
    # A list without a merge key is replaced.
    replaced = strategic_merge(container, {"securityContext": {"capabilities": {"drop": []}}})
    assert replaced["securityContext"]["capabilities"] == {"drop": [], "add": ["IPC_LOCK"]}


def test_tolerations_are_added_once() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    spot = {"key": "spot", "operator": "Exists"}
    merged = strategic_merge(
        {"spec": {"tolerations": [gpu]}}, {"spec": {"tolerations": [gpu, spot]}}
    )
    assert merged["spec"]["tolerations"] == [gpu, spot]


def test_an_error_path_maps_back_to_the_patch() -> None:
    base = {"spec": {"volumes": [{"name": "a"}], "tolerations": [{"key": "g"}]}}
    patch = {"spec": {"volumes": [{"name": "b", "x": {}}], "tolerations": [{"key": "t"}]}}
    merged = strategic_merge(base, patch)
    assert patch_path(["spec", "volumes", 1, "x"], merged, patch) == (
        ("spec", "volumes", 0, "x"),
        True,
    )
    assert patch_path(["spec", "tolerations", 1], merged, patch) == (
        ("spec", "tolerations", 0),
        True,
    )
    assert patch_path(["spec", "volumes", 0], merged, patch) == (("spec", "volumes"), False)


@pytest.mark.parametrize(
    ("text", "value"),
    [("32", 32), ("500m", 0.5), ("1Gi", 2**30), ("1.5k", 1500), ("2e3", 2000), ("+4", 4)],
)
def test_quantity_values(text: str, value: float) -> None:
    assert quantity_value(text) == pytest.approx(value)


def test_an_unreadable_quantity_has_no_value() -> None:
    assert quantity_value("lots") is None
    assert quantity_value("1Gb") is None


# --- rendered -----------------------------------------------------------------------------


def test_a_pod_template_is_merged_onto_the_rendered_pod() -> None:
    pod = _pod(
        {
            "metadata": {"labels": {"team": "nlp"}, "annotations": {"example.com/owner": "me"}},
            "spec": {
                "serviceAccountName": "trainer",
                "imagePullSecrets": [{"name": "regcred"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "ds"}}],
                "affinity": {"podAntiAffinity": {}},
                "tolerations": [{"key": "spot", "operator": "Exists"}],
                "priorityClassName": "high",
                "schedulerName": "volcano",
                "securityContext": {"fsGroup": 2000, "runAsUser": 1000},
                "containers": [
                    {
                        "name": "trainer",
                        "env": [
                            {
                                "name": "HF_TOKEN",
                                "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
                            }
                        ],
                        "envFrom": [{"secretRef": {"name": "wandb"}}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                        "resources": {"limits": {"memory": "300Gi"}},
                    }
                ],
            },
        }
    )
    metadata, spec = pod["metadata"], pod["spec"]
    assert metadata["labels"]["team"] == "nlp"
    assert metadata["labels"]["trainplan.dev/plan"] == "llama"
    assert metadata["annotations"]["example.com/owner"] == "me"
    assert metadata["annotations"]["prometheus.io/scrape"] == "true"
    assert spec["serviceAccountName"] == "trainer"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert [volume["name"] for volume in spec["volumes"]] == ["dshm", "checkpoints", "data"]
    assert spec["affinity"] == {"podAntiAffinity": {}}
    assert spec["tolerations"][-1] == {"key": "spot", "operator": "Exists"}
    assert spec["priorityClassName"] == "high"
    assert spec["schedulerName"] == "volcano"
    assert spec["restartPolicy"] == "Never"
    assert spec["subdomain"] == "llama"
    # The pod template wins over the rendered (restricted) security context, key by key.
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": 2000,
        "runAsUser": 1000,
    }
    container = _trainer(pod)
    assert container["command"] == ["torchrun"]
    assert container["env"][0]["name"] == "JOB_COMPLETION_INDEX"
    assert container["env"][-1]["name"] == "HF_TOKEN"
    assert container["envFrom"] == [{"secretRef": {"name": "wandb"}}]
    assert container["volumeMounts"][-1] == {"name": "data", "mountPath": "/data", "readOnly": True}
    assert container["resources"]["limits"] == {
        "cpu": "32",
        "memory": "300Gi",
        "nvidia.com/gpu": "8",
    }
    assert container["resources"]["requests"]["memory"] == "256Gi"


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_host_network_and_rdma(launcher: str) -> None:
    pod = _pod(
        {
            "spec": {
                "hostNetwork": True,
                "containers": [
                    {
                        "name": "trainer",
                        "resources": {"limits": {"rdma/rdma_shared_device_a": 1}},
                        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                    }
                ],
            }
        },
        launcher=launcher,
    )
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    container = _trainer(pod)
    assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }


def test_job_security_context_and_the_pod_template_compose() -> None:
    pod = _pod(
        {"spec": {"securityContext": {"runAsUser": 2000, "supplementalGroups": [5]}}},
        securityContext={"runAsUser": 1000, "fsGroup": 3000},
    )
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "fsGroup": 3000,
        "seccompProfile": {"type": "RuntimeDefault"},
        "supplementalGroups": [5],
    }


def test_an_empty_pod_template_changes_nothing() -> None:
    assert _render({}) == _render(None)
    assert _render({"metadata": {}, "spec": {"containers": [{"name": "trainer"}]}}) == _render(None)


@pytest.mark.parametrize("version", [SCHEMA_VERSION, kubernetes_validate.latest_version()])
def test_the_merged_objects_validate_strictly(version: str) -> None:
    objects = _render(
        {
            "spec": {
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "ds"}}],
                "containers": [
                    {"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
                ],
            }
        }
    )
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


# --- refused: what trainplan owns -----------------------------------------------------------


@pytest.mark.parametrize("field", sorted(OWNED_POD_FIELDS))
def test_an_owned_pod_field_is_refused(field: str) -> None:
    (error,) = _spec_errors({"spec": {field: "x"}})
    assert error.startswith("job.podTemplate.spec: ")
    assert f"{field} is set by trainplan" in error


@pytest.mark.parametrize("field", sorted(OWNED_CONTAINER_FIELDS))
def test_an_owned_container_field_is_refused(field: str) -> None:
    (error,) = _spec_errors(_trainer_patch(**{field: ["x"]}))
    assert error.startswith("job.podTemplate.spec.containers[0]: ")
    assert f"{field} is set by" in error


def test_only_the_trainer_container_is_patched() -> None:
    (error,) = _spec_errors({"spec": {"containers": [{"name": "sidecar"}]}})
    assert error.startswith("job.podTemplate.spec.containers[0]: only the trainer container")


@pytest.mark.parametrize(
    "label",
    [
        "trainplan.dev/plan",
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/component",
        "app.kubernetes.io/managed-by",
        "batch.kubernetes.io/job-name",
        "jobset.sigs.k8s.io/jobset-name",
        "controller-uid",
    ],
)
def test_an_owned_label_is_refused(label: str) -> None:
    (error,) = _spec_errors({"metadata": {"labels": {label: "x", "team": "nlp"}}})
    assert error.startswith(f"job.podTemplate.metadata.labels: {label} is set by")


@pytest.mark.parametrize(
    "annotation",
    [
        PROMETHEUS_SCRAPE_ANNOTATION,
        PROMETHEUS_PORT_ANNOTATION,
        PROMETHEUS_PATH_ANNOTATION,
        "batch.kubernetes.io/job-completion-index",
        KUEUE_REQUIRED_TOPOLOGY,
        KUEUE_PREFERRED_TOPOLOGY,
    ],
)
def test_an_owned_annotation_is_refused(annotation: str) -> None:
    (error,) = _spec_errors({"metadata": {"annotations": {annotation: "1"}}})
    assert error.startswith(f"job.podTemplate.metadata.annotations: {annotation} is set by")


def test_the_renderers_labels_are_all_owned() -> None:
    for key in _pod(None)["metadata"]["labels"]:
        assert owned_label_reason(key) is not None, key
    for key in _pod(None)["metadata"]["annotations"]:
        assert owned_annotation_reason(key) is not None, key
    queued = _pod(None, queueName="team-a", topology={"required": "cloud.example/block"})
    for key in queued["metadata"]["annotations"]:
        assert owned_annotation_reason(key) is not None, key
    assert owned_label_reason("team") is None
    assert owned_annotation_reason("example.com/owner") is None


def test_the_node_rank_variable_is_refused() -> None:
    (error,) = _spec_errors(_trainer_patch(env=[{"name": "JOB_COMPLETION_INDEX", "value": "0"}]))
    assert error.startswith("job.podTemplate.spec.containers[0].env[0]: JOB_COMPLETION_INDEX")


def test_an_unknown_field_is_refused_not_dropped() -> None:
    errors = _spec_errors({"spec": {"initContainers": []}})
    assert errors == ["job.podTemplate.spec.initContainers: Extra inputs are not permitted"]


@pytest.mark.parametrize("part", ["limits", "requests"])
def test_another_gpu_count_is_refused(part: str) -> None:
    (problem,) = _problems(_trainer_patch(resources={part: {"nvidia.com/gpu": 4}}))
    assert problem[0] == f"job.podTemplate.spec.containers[0].resources.{part}[nvidia.com/gpu]"
    assert "contradicts the plan's 8 GPUs per pod" in problem[1]


def test_the_plans_gpu_count_is_allowed() -> None:
    pod = _pod(_trainer_patch(resources={"limits": {"nvidia.com/gpu": 8}}))
    assert _trainer(pod)["resources"]["limits"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize(
    ("volume", "path"), [("dshm", "/dev/shm"), ("checkpoints", "/checkpoints")]
)
def test_the_rendered_volumes_and_mounts_are_refused(volume: str, path: str) -> None:
    problems = _problems(
        {
            "spec": {
                "volumes": [{"name": volume, "emptyDir": {}}],
                "containers": [
                    {"name": "trainer", "volumeMounts": [{"name": "x", "mountPath": path}]}
                ],
            }
        }
    )
    assert [where for where, _ in problems] == [
        "job.podTemplate.spec.volumes[0]",
        "job.podTemplate.spec.containers[0].volumeMounts[0]",
    ]
    assert f"volume {volume!r} is rendered by trainplan" in problems[0][1]
    assert f"{path} is mounted by trainplan" in problems[1][1]


def test_checkpoints_may_be_mounted_without_a_claim() -> None:
    pod = _pod(
        {
            "spec": {
                "volumes": [{"name": "checkpoints", "nfs": {"server": "nfs", "path": "/ckpt"}}],
                "containers": [
                    {
                        "name": "trainer",
                        "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
                    }
                ],
            }
        },
        checkpointVolumeClaim=None,
    )
    assert pod["spec"]["volumes"][-1]["nfs"] == {"server": "nfs", "path": "/ckpt"}


# --- refused: a template the API server or the kubelet would refuse ---------------------------


def test_a_volume_with_two_sources_is_refused() -> None:
    (error,) = _spec_errors(
        {
            "spec": {
                "volumes": [
                    {"name": "d", "emptyDir": {}, "persistentVolumeClaim": {"claimName": "c"}}
                ]
            }
        }
    )
    assert error == (
        "job.podTemplate.spec.volumes[0]: a volume has exactly one source "
        "(persistentVolumeClaim, secret, configMap, emptyDir, ...); given: emptyDir, "
        "persistentVolumeClaim"
    )


@pytest.mark.parametrize("quantity", ["-1", "lots", "1Gb"])
def test_a_negative_or_unreadable_quantity_is_refused(quantity: str) -> None:
    (error,) = _spec_errors(_trainer_patch(resources={"limits": {"memory": quantity}}))
    assert error.startswith("job.podTemplate.spec.containers[0].resources.limits.memory: ")


def test_a_mount_of_a_missing_volume_is_refused() -> None:
    (problem,) = _problems(_trainer_patch(volumeMounts=[{"name": "nope", "mountPath": "/data"}]))
    assert problem == (
        "job.podTemplate.spec.containers[0].volumeMounts[0]",
        "mounts volume 'nope', which the pod does not have (its volumes: dshm, checkpoints)",
    )


def test_requests_above_limits_are_refused() -> None:
    problems = _problems(
        _trainer_patch(resources={"limits": {"cpu": "8", "rdma/x": 1}, "requests": {"rdma/x": 2}})
    )
    assert problems == [
        (
            "job.podTemplate.spec.containers[0].resources",
            "cpu: the request (32) exceeds the limit (8)",
        ),
        (
            "job.podTemplate.spec.containers[0].resources",
            "rdma/x: an extended resource's request (2) must equal its limit (1)",
        ),
    ]


def test_root_with_run_as_non_root_is_refused() -> None:
    (problem,) = _problems({"spec": {"securityContext": {"runAsUser": 0}}})
    assert problem[0] == "job.podTemplate.spec.securityContext"
    assert "runAsUser 0 is root while runAsNonRoot is true" in problem[1]
    # Letting root run is a choice the template (or job.securityContext) can make.
    pod = _pod({"spec": {"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}})
    assert pod["spec"]["securityContext"]["runAsUser"] == 0


@pytest.mark.parametrize(
    ("template", "path", "message"),
    [
        (
            {"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claim": "x"}}]}},
            "job.podTemplate.spec.volumes[0].persistentVolumeClaim",
            "'claimName' is a required property",
        ),
        (
            {"spec": {"volumes": [{"name": "d", "nfs2": {}}]}},
            "job.podTemplate.spec.volumes[0]",
            "Additional properties are not allowed ('nfs2' was unexpected)",
        ),
        (
            _trainer_patch(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
            "job.podTemplate.spec.containers[0].env[0].valueFrom.secretKeyRef",
            "'key' is a required property",
        ),
        (
            {"spec": {"securityContext": {"runAsUser": "root"}}},
            "job.podTemplate.spec.securityContext.runAsUser",
            "'root' is not of type 'integer', 'null'",
        ),
        (
            {"spec": {"affinity": {"nodeAffinity": {"preferred": []}}}},
            "job.podTemplate.spec.affinity.nodeAffinity",
            "Additional properties are not allowed ('preferred' was unexpected)",
        ),
        (
            _trainer_patch(securityContext={"privileged": "yes"}),
            "job.podTemplate.spec.containers[0].securityContext.privileged",
            "'yes' is not of type 'boolean', 'null'",
        ),
    ],
)
def test_the_kubernetes_schema_refuses_a_bad_template(
    template: dict[str, Any], path: str, message: str
) -> None:
    (problem,) = _problems(template)
    assert problem == (path, f"{message} (the Kubernetes 1.30 pod schema)")


def _decide(document: dict[str, Any], catalog: Catalog) -> Any:
    """The launch decision for a new plan `llama` with this spec."""
    return decide_launch(
        name="llama",
        namespace="team-a",
        uid="u",
        generation=1,
        spec_document=document,
        previous_status={},
        catalog=catalog,
        now=NOW,
    )


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_a_bad_template_is_a_rejected_plan_with_its_path(launcher: str, catalog: Catalog) -> None:
    document = _document(
        _trainer_patch(resources={"limits": {"nvidia.com/gpu": 1}}), launcher=launcher
    )
    document["job"]["podTemplate"]["spec"]["volumes"] = [{"name": "d", "hostPath": {"path": 1}}]
    decision = _decide(document, catalog)
    assert not decision.accepted
    assert decision.objects == ()
    assert decision.status["phase"] == "Rejected"
    (condition,) = decision.status["conditions"]
    assert condition["reason"] == "InvalidSpec"
    assert (
        "spec.job.podTemplate.spec.containers[0].resources.limits[nvidia.com/gpu]: '1' "
        "contradicts the plan's 8 GPUs per pod" in condition["message"]
    )
    # The schema is checked once what trainplan owns is settled.
    document["job"]["podTemplate"]["spec"]["containers"] = []
    decision = _decide(document, catalog)
    assert decision.objects == ()
    (condition,) = decision.status["conditions"]
    assert (
        "spec.job.podTemplate.spec.volumes[0].hostPath.path: 1 is not of type 'string'"
        in (condition["message"])
    )


def test_an_owned_field_is_a_rejected_plan(catalog: Catalog) -> None:
    decision = decide_launch(
        name="llama",
        namespace="team-a",
        uid="u",
        generation=1,
        spec_document=_document({"spec": {"restartPolicy": "OnFailure"}}),
        previous_status={},
        catalog=catalog,
        now=NOW,
    )
    assert decision.objects == ()
    assert decision.status["phase"] == "Rejected"
    assert decision.problems[0].startswith("spec.job.podTemplate.spec: restartPolicy is set by")


# --- bounds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "where"),
    [
        ({"metadata": {"labels": {f"k{i}": "v" for i in range(65)}}}, "metadata.labels"),
        ({"spec": {"volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(65)]}}, "volumes"),
        (_trainer_patch(env=[{"name": f"V{i}", "value": "x"} for i in range(129)]), "env"),
        ({"spec": {"containers": [{"name": "trainer"}, {"name": "trainer"}]}}, "containers"),
        ({"metadata": {"annotations": {"a": "x" * 16_385}}}, "annotations.a"),
        ({"metadata": {"labels": {"team": "x" * 64}}}, "labels.team"),
    ],
)
def test_the_template_is_bounded(template: dict[str, Any], where: str) -> None:
    errors = _spec_errors(template)
    assert any(where in error for error in errors), errors


# --- the documentation's examples ---------------------------------------------------------

DOCS: Final = Path(__file__).resolve().parents[2] / "docs" / "pod-template.md"


def _doc_jobs() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    jobs = [yaml.safe_load(block)["spec"]["job"] for block in blocks if "podTemplate" in block]
    assert len(jobs) == 2
    return jobs


@pytest.mark.parametrize("job", _doc_jobs(), ids=["secrets-and-dataset", "rdma"])
def test_the_documented_templates_render_and_validate(job: dict[str, Any]) -> None:
    objects = _render(None, **job)
    trainer = _trainer(_pod(None, **job))
    (patch,) = job["podTemplate"]["spec"]["containers"]
    for key in ("env", "volumeMounts"):
        for item in patch.get(key, []):
            assert item in trainer[key]
    for name, amount in patch.get("resources", {}).get("limits", {}).items():
        assert trainer["resources"]["limits"][name] == str(amount)
    for obj in objects:
        kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
