"""`trainplan.launcher`: the Service, ConfigMap and Indexed Job or JobSet rendered for a plan.

Specs are small Llama 2 7B plans (planned for real, once each); each test changes one
thing and checks the rendered objects against the plan.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import torchtitan_upstream
from trainplan.api import DEFAULT_COMMAND, Plan, TrainingPlanSpec
from trainplan.launcher import LauncherError, PlanRef, job_name, label_value, render, render_for
from trainplan.launcher import env as envnames
from trainplan.launcher.frameworks import DEEPSPEED_CONFIG_DIR, DEEPSPEED_CONFIG_FILE
from trainplan.launcher.names import (
    MAX_JOB_NAME_LENGTH,
    MAX_JOBSET_NAME_LENGTH,
    is_dns_label,
    pod_hostname,
)
from trainplan.launcher.render import CHECKPOINT_DIR, RENDEZVOUS_PORT, torchrun_program
from trainplan.planner import Catalog, plan
from trainplan.planner.resolve import resolve_shape

BASE: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 16},
    "job": {"image": "registry.example/train:1.0"},
}
"""Llama 2 7B on 16 A100-80GB GPUs, 2 nodes: quick to plan."""

REF = PlanRef(name="llama", namespace="team-a", uid="5f1c2d3e-0000-4000-8000-000000000001")
PLAN_LABELS = {
    "app.kubernetes.io/name": "trainplan",
    "app.kubernetes.io/instance": "llama",
    "app.kubernetes.io/component": "training",
    "app.kubernetes.io/managed-by": "trainplan",
    "trainplan.dev/plan": "llama",
}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` merged in, section by section (a None value removes a key)."""
    result = copy.deepcopy(base)
    for key, value in change.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


_CATALOG: list[Catalog] = []


@cache
def _planned(document_json: str) -> tuple[TrainingPlanSpec, Plan]:
    spec = TrainingPlanSpec.model_validate(json.loads(document_json))
    return spec, plan(spec, _CATALOG[0])


@pytest.fixture(autouse=True)
def _remember_catalog(catalog: Catalog) -> None:
    if not _CATALOG:
        _CATALOG.append(catalog)


def planned(**change: Any) -> tuple[TrainingPlanSpec, Plan]:
    """The spec BASE with `change` merged in, and its plan."""
    return _planned(json.dumps(merged(BASE, change), sort_keys=True))


def objects_for(ref: PlanRef = REF, **change: Any) -> list[dict[str, Any]]:
    spec, result = planned(**change)
    return render_for(ref, spec, result, _CATALOG[0])


def launch_error(**change: Any) -> LauncherError:
    with pytest.raises(LauncherError) as caught:
        objects_for(**change)
    return caught.value


def framework_error(framework: str, **change: Any) -> LauncherError:
    """Plan for the reference trainer, then render the same plan for `framework`: the
    launcher's own check of layouts the framework cannot run (the planner, told the
    framework, never proposes them)."""
    spec, result = planned(**merged(change, {"job": {"framework": "reference"}}))
    job = spec.job.model_copy(update={"framework": framework})
    with pytest.raises(LauncherError) as caught:
        render_for(REF, spec.model_copy(update={"job": job}), result, _CATALOG[0])
    return caught.value


def workload(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The Job or JobSet."""
    (found,) = [obj for obj in objects if obj["kind"] in ("Job", "JobSet")]
    return found


def job_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The Job's spec, or the JobSet's replicated job's."""
    found = workload(objects)
    if found["kind"] == "JobSet":
        return found["spec"]["replicatedJobs"][0]["template"]["spec"]  # type: ignore[no-any-return]
    return found["spec"]  # type: ignore[no-any-return]


def pod_template(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return job_spec(objects)["template"]  # type: ignore[no-any-return]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = pod_template(objects)["spec"]["containers"]
    return found  # type: ignore[no-any-return]


def env_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    entries = container(objects)["env"]
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), "environment variable names repeat"
    return {entry["name"]: entry.get("value", "") for entry in entries}


def torchrun_flags(objects: list[dict[str, Any]]) -> dict[str, str]:
    """torchrun's own `--name=value` flags."""
    args = container(objects)["args"]
    return dict(arg[2:].split("=", 1) for arg in args if arg.startswith("--") and "=" in arg)


def program_args(objects: list[dict[str, Any]]) -> list[str]:
    """What follows torchrun's own flags: the program and its arguments."""
    args: list[str] = container(objects)["args"]
    position = next(i for i, arg in enumerate(args) if arg.startswith("--max-restarts="))
    return args[position + 1 :]


def flag_values(args: list[str]) -> dict[str, str | bool]:
    """`--flag value` pairs and bare `--flag`s of a program's arguments."""
    values: dict[str, str | bool] = {}
    for position, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        following = args[position + 1] if position + 1 < len(args) else "--"
        values[arg] = True if following.startswith("--") else following
    return values


# --------------------------------------------------------------------------- objects


def test_job_launcher_renders_a_headless_service_then_an_indexed_job() -> None:
    objects = objects_for()
    _, result = planned()

    assert [obj["kind"] for obj in objects] == ["Service", "Job"]
    service, job = objects
    assert service["apiVersion"] == "v1"
    assert job["apiVersion"] == "batch/v1"
    assert service["metadata"]["name"] == job["metadata"]["name"] == job_name(REF.name)
    assert all(obj["metadata"]["namespace"] == "team-a" for obj in objects)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == result.nodes == 2


def test_service_selects_the_pods_and_names_their_subdomain() -> None:
    objects = objects_for()
    service, _ = objects
    pod = pod_template(objects)

    selector = service["spec"]["selector"]
    assert selector
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    ports = {port["name"]: port["port"] for port in service["spec"]["ports"]}
    assert ports == {"rendezvous": RENDEZVOUS_PORT, "metrics": 9400}


def test_one_pod_per_node_with_the_plans_gpus() -> None:
    objects = objects_for(job={"resources": {"cpu": "96", "memory": "1000Gi"}})
    _, result = planned(job={"resources": {"cpu": "96", "memory": "1000Gi"}})
    resources = container(objects)["resources"]

    expected = {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": str(result.gpus_per_node)}
    assert resources == {"limits": expected, "requests": expected}
    assert result.gpus_per_node == 8
    assert torchrun_flags(objects)["nproc-per-node"] == "8"
    assert torchrun_flags(objects)["nnodes"] == str(result.nodes)


def test_only_gpus_are_requested_without_job_resources() -> None:
    resources = container(objects_for())["resources"]

    assert resources == {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}


def test_a_plan_smaller_than_a_node_requests_only_its_gpus() -> None:
    objects = objects_for(objective={"gpus": 4})
    _, result = planned(objective={"gpus": 4})

    assert (result.nodes, result.gpus, result.gpus_per_node) == (1, 4, 8)
    assert container(objects)["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert torchrun_flags(objects)["nproc-per-node"] == "4"


def test_a_contradicting_gpu_resource_is_an_error() -> None:
    error = launch_error(job={"resources": {"nvidia.com/gpu": "4"}})

    assert error.problems[0][0] == "job.resources[nvidia.com/gpu]"
    assert "8 GPUs per pod" in str(error)
    same = objects_for(job={"resources": {"nvidia.com/gpu": "8"}})
    assert container(same)["resources"]["limits"] == {"nvidia.com/gpu": "8"}


# --------------------------------------------------------------------------- scheduling


def test_node_selector_is_the_gpu_product_plus_the_users_keys(catalog: Catalog) -> None:
    gfd = catalog.gpu("A100-SXM4-80GB").gfd_product
    objects = objects_for(job={"nodeSelector": {"pool": "training", "zone": "a"}})

    assert pod_template(objects)["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": gfd,
        "pool": "training",
        "zone": "a",
    }
    assert gfd == "NVIDIA-A100-SXM4-80GB"


def test_the_user_may_repeat_the_plans_gpu_product() -> None:
    objects = objects_for(job={"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}})

    assert pod_template(objects)["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"
    }


def test_a_contradicting_gpu_product_is_an_error() -> None:
    error = launch_error(job={"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}})

    assert error.problems[0][0] == "job.nodeSelector[nvidia.com/gpu.product]"
    assert "hardware.gpuType" in error.problems[0][1]
    assert "spec.job.nodeSelector[nvidia.com/gpu.product]" in str(error)


def test_tolerations_are_the_users_then_the_gpu_taints() -> None:
    user = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}
    objects = objects_for(job={"tolerations": [{**user, "tolerationSeconds": 60}]})

    assert pod_template(objects)["spec"]["tolerations"] == [
        {**user, "tolerationSeconds": 60},
        GPU_TOLERATION,
    ]
    assert pod_template(objects_for())["spec"]["tolerations"] == [GPU_TOLERATION]
    again = objects_for(job={"tolerations": [GPU_TOLERATION]})
    assert pod_template(again)["spec"]["tolerations"] == [GPU_TOLERATION]


def test_shared_memory_is_a_memory_backed_empty_dir() -> None:
    objects = objects_for()
    pod = pod_template(objects)["spec"]

    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(objects)["volumeMounts"]


def test_the_checkpoint_claim_is_mounted_at_the_checkpoint_dir() -> None:
    objects = objects_for(job={"checkpointVolumeClaim": "ckpt"})
    pod = pod_template(objects)["spec"]

    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["volumes"]
    assert {"name": "checkpoints", "mountPath": CHECKPOINT_DIR} in container(objects)[
        "volumeMounts"
    ]
    assert env_of(objects)[envnames.CHECKPOINT_DIR] == CHECKPOINT_DIR
    without = pod_template(objects_for())["spec"]["volumes"]
    assert [volume["name"] for volume in without] == ["dshm"]


# --------------------------------------------------------------------------- torchrun


def test_container_runs_torchrun_with_the_plans_shape() -> None:
    objects = objects_for(reliability={"maxRestarts": 7})
    _, result = planned(reliability={"maxRestarts": 7})
    main = container(objects)
    flags = torchrun_flags(objects)
    job = job_name(REF.name)

    assert main["command"] == ["torchrun"]
    assert flags == {
        "nnodes": str(result.nodes),
        "nproc-per-node": str(result.gpus_per_node),
        "node-rank": "$(JOB_COMPLETION_INDEX)",
        "rdzv-backend": "c10d",
        "rdzv-endpoint": f"{job}-0.{job}:29500",
        "rdzv-id": REF.uid,
        "max-restarts": "7",
    }
    assert program_args(objects) == ["-m", "trainplan.runtime.train"]


def test_the_rendezvous_host_is_the_index_0_pods_dns_name() -> None:
    objects = objects_for()
    pod = pod_template(objects)["spec"]
    host = torchrun_flags(objects)["rdzv-endpoint"].rsplit(":", 1)[0]

    # An Indexed Job's pod is named <job>-<index> in DNS, under its subdomain.
    assert host == f"{pod_hostname(job_name(REF.name), 0, jobset=False)}.{pod['subdomain']}"


def test_the_node_rank_comes_from_the_completion_index_annotation() -> None:
    entries = container(objects_for())["env"]

    assert entries[0] == {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
    }


def test_rendezvous_id_is_the_plan_name_without_a_uid() -> None:
    flags = torchrun_flags(objects_for(PlanRef("llama", "team-a")))

    assert flags["rdzv-id"] == "llama"


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        (("python", "-m", "pkg.train", "--x"), ("-m", "pkg.train", "--x")),
        (("python3", "train.py", "--x"), ("train.py", "--x")),
        (("python", "-u", "train.py"), ("--no-python", "python", "-u", "train.py")),
        (("bash", "run.sh"), ("--no-python", "bash", "run.sh")),
        (("/opt/bin/trainer",), ("--no-python", "/opt/bin/trainer")),
    ],
)
def test_torchrun_runs_python_programs_itself(
    program: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    assert torchrun_program(program) == expected


def test_user_command_and_args_follow_torchrun() -> None:
    objects = objects_for(job={"command": ["python", "train.py"], "args": ["--lr", "1e-4"]})

    assert program_args(objects) == ["train.py", "--lr", "1e-4"]


# --------------------------------------------------------------------------- environment


def test_environment_names_are_the_documented_ones_in_order() -> None:
    names = [entry["name"] for entry in container(objects_for())["env"]]

    assert names == ["JOB_COMPLETION_INDEX", *envnames.NAMES, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]
    assert all(name.startswith(envnames.PREFIX) for name in envnames.NAMES)
    assert len(set(envnames.NAMES)) == len(envnames.NAMES)


def test_environment_values_equal_the_plan(catalog: Catalog) -> None:
    change: dict[str, Any] = {
        "parallelism": {"tensor": 2, "pipeline": 2, "virtualPipelineStages": 2},
        "reliability": {"checkpointIntervalSteps": 25},
        # A program of the user's own: the reference trainer runs no pipeline.
        "job": {"metricsPort": 9100, "command": ["python", "train.py"]},
    }
    spec, result = planned(**change)
    values = env_of(objects_for(**change))
    layout = result.layout
    shape, _ = resolve_shape(spec, catalog)

    assert values == {
        "JOB_COMPLETION_INDEX": "",
        "TRAINPLAN_PLAN_NAME": "llama",
        "TRAINPLAN_TENSOR_PARALLEL": "2",
        "TRAINPLAN_PIPELINE_PARALLEL": "2",
        "TRAINPLAN_DATA_PARALLEL": str(layout.data),
        "TRAINPLAN_CONTEXT_PARALLEL": "1",
        "TRAINPLAN_EXPERT_PARALLEL": "1",
        "TRAINPLAN_EXPERT_TENSOR_PARALLEL": "1",
        "TRAINPLAN_VIRTUAL_PIPELINE_STAGES": "2",
        "TRAINPLAN_SEQUENCE_PARALLEL": "true" if layout.sequence_parallel else "false",
        "TRAINPLAN_ZERO_STAGE": str(layout.zero_stage),
        "TRAINPLAN_MICRO_BATCH_SIZE": str(layout.micro_batch_size),
        "TRAINPLAN_GRADIENT_ACCUMULATION_STEPS": str(layout.gradient_accumulation_steps),
        "TRAINPLAN_GLOBAL_BATCH_SIZE": "64",
        "TRAINPLAN_TOTAL_STEPS": str(result.total_steps),
        "TRAINPLAN_PRECISION": "bf16",
        "TRAINPLAN_OPTIMIZER": "adamw",
        "TRAINPLAN_TRAINING_METHOD": "pretrain",
        "TRAINPLAN_LORA_RANK": "0",
        "TRAINPLAN_LORA_TARGETS": "none",
        "TRAINPLAN_ACTIVATION_CHECKPOINTING": layout.activation_checkpointing,
        "TRAINPLAN_CHECKPOINT_DIR": "/checkpoints",
        "TRAINPLAN_CHECKPOINT_INTERVAL_STEPS": "25",
        "TRAINPLAN_METRICS_PORT": "9100",
        "TRAINPLAN_MODEL_LAYERS": str(shape.layers),
        "TRAINPLAN_MODEL_HIDDEN_SIZE": str(shape.hidden_size),
        "TRAINPLAN_MODEL_ATTENTION_HEADS": str(shape.attention_heads),
        "TRAINPLAN_MODEL_KV_HEADS": str(shape.kv_heads),
        "TRAINPLAN_MODEL_FFN_HIDDEN_SIZE": str(shape.ffn_hidden_size),
        "TRAINPLAN_MODEL_GATED_MLP": "true",
        "TRAINPLAN_MODEL_VOCAB_SIZE": str(shape.vocab_size),
        "TRAINPLAN_MODEL_SEQUENCE_LENGTH": str(shape.sequence_length),
        "TRAINPLAN_MODEL_TIED_EMBEDDINGS": "false",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    assert (shape.layers, shape.hidden_size, shape.ffn_hidden_size) == (32, 4096, 11008)
    assert result.total_steps == int(values["TRAINPLAN_TOTAL_STEPS"])


def test_user_env_is_appended_and_overrides_same_named_variables() -> None:
    objects = objects_for(
        job={
            "env": [
                {"name": "NCCL_DEBUG", "value": "INFO"},
                {"name": "TRAINPLAN_CHECKPOINT_DIR", "value": "/scratch/ckpt"},
                {"name": "EMPTY"},
            ]
        }
    )
    entries = container(objects)["env"]
    names = [entry["name"] for entry in entries]

    assert names[-3:] == ["NCCL_DEBUG", "TRAINPLAN_CHECKPOINT_DIR", "EMPTY"]
    assert names.count("TRAINPLAN_CHECKPOINT_DIR") == 1
    assert env_of(objects)["TRAINPLAN_CHECKPOINT_DIR"] == "/scratch/ckpt"
    assert entries[-1] == {"name": "EMPTY"}
    assert set(envnames.NAMES) <= set(names)


def test_a_repeated_user_variable_keeps_the_last_value() -> None:
    objects = objects_for(job={"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]})

    assert env_of(objects)["A"] == "2"


def test_the_completion_index_cannot_be_overridden() -> None:
    error = launch_error(job={"env": [{"name": "X"}, {"name": "JOB_COMPLETION_INDEX"}]})

    assert error.problems == (
        (
            "job.env[1]",
            "JOB_COMPLETION_INDEX is the node rank, set from the pod's completion index; "
            "it cannot be overridden",
        ),
    )


# --------------------------------------------------------------------------- failures


def test_pod_failure_policy_ignores_disruptions_and_fails_on_config_errors() -> None:
    spec = job_spec(objects_for())

    assert spec["podFailurePolicy"] == {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2, 3]},
            },
        ]
    }
    assert envnames.CONFIG_ERROR_EXIT_CODE == 3
    assert envnames.FAIL_JOB_EXIT_CODES == (2, 3)
    assert spec["podReplacementPolicy"] == "Failed"


def test_backoff_limit_is_max_restarts_and_pods_never_restart_in_place() -> None:
    objects = objects_for(reliability={"maxRestarts": 4})
    spec = job_spec(objects)

    assert spec["backoffLimit"] == 4
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert torchrun_flags(objects)["max-restarts"] == "4"


# --------------------------------------------------------------------------- metadata


def test_owner_references_on_every_object_only_with_a_uid() -> None:
    change: dict[str, Any] = {"job": {"framework": "deepspeed", "command": ["python", "train.py"]}}
    with_uid = objects_for(**change)
    without = objects_for(PlanRef("llama", "team-a"), **change)

    assert [obj["kind"] for obj in with_uid] == ["Service", "ConfigMap", "Job"]
    for obj in with_uid:
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "trainplan.dev/v1alpha1",
                "kind": "TrainingPlan",
                "name": "llama",
                "uid": REF.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    assert all("ownerReferences" not in obj["metadata"] for obj in without)


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_labels_on_every_object_and_the_pod_template(launcher: str) -> None:
    objects = objects_for(job={"launcher": launcher})

    for obj in objects:
        assert obj["metadata"]["labels"] == PLAN_LABELS
    assert pod_template(objects)["metadata"]["labels"] == PLAN_LABELS
    if launcher == "JobSet":
        replicated = workload(objects)["spec"]["replicatedJobs"][0]
        assert replicated["template"]["metadata"]["labels"] == PLAN_LABELS


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_kueue_label_and_suspension_only_with_a_queue(launcher: str) -> None:
    queued = objects_for(job={"launcher": launcher, "queueName": "team-a-queue"})
    plain = objects_for(job={"launcher": launcher})

    assert workload(queued)["metadata"]["labels"] == {
        **PLAN_LABELS,
        "kueue.x-k8s.io/queue-name": "team-a-queue",
    }
    assert workload(queued)["spec"]["suspend"] is True
    assert workload(plain)["metadata"]["labels"] == PLAN_LABELS
    assert workload(plain)["spec"]["suspend"] is False
    for obj in queued:
        if obj["kind"] not in ("Job", "JobSet"):
            assert "kueue.x-k8s.io/queue-name" not in obj["metadata"]["labels"]
    assert "kueue.x-k8s.io/queue-name" not in pod_template(queued)["metadata"]["labels"]


def test_a_multikueue_jobset_is_managed_by_multikueue() -> None:
    job = {"launcher": "JobSet", "queueName": "team-a-queue"}
    managed = objects_for(job={**job, "managedBy": "kueue.x-k8s.io/multikueue"})
    local = objects_for(job=job)

    assert workload(managed)["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert "managedBy" not in workload(local)["spec"]
    assert [obj["kind"] for obj in managed] == ["JobSet"]  # nothing left behind on this cluster


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_suspend_follows_the_spec_without_a_queue(launcher: str) -> None:
    objects = objects_for(job={"launcher": launcher, "suspend": True})

    assert workload(objects)["spec"]["suspend"] is True


def test_scrape_annotations_and_the_metrics_port() -> None:
    objects = objects_for(job={"metricsPort": 9100})

    assert pod_template(objects)["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics",
    }
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container(objects)[
        "ports"
    ]
    assert env_of(objects)["TRAINPLAN_METRICS_PORT"] == "9100"


def test_the_metrics_port_cannot_be_the_rendezvous_port() -> None:
    error = launch_error(job={"metricsPort": 29500})

    assert error.problems[0][0] == "job.metricsPort"


# --------------------------------------------------------------------------- JobSet


def test_jobset_holds_the_same_indexed_job_and_no_service() -> None:
    as_job = objects_for()
    as_jobset = objects_for(job={"launcher": "JobSet"})
    jobset = workload(as_jobset)
    name = job_name(REF.name)

    assert [obj["kind"] for obj in as_jobset] == ["JobSet"]
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["metadata"]["name"] == name
    assert jobset["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": name}
    (replicated,) = jobset["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"
    assert replicated["replicas"] == 1
    expected = copy.deepcopy(job_spec(as_job))
    del expected["suspend"]  # the JobSet suspends its jobs itself
    del expected["template"]["spec"]["subdomain"]  # JobSet sets the subdomain
    expected["backoffLimit"] = 0  # the JobSet restarts as a whole (its failurePolicy)
    args = expected["template"]["spec"]["containers"][0]["args"]
    args[:] = [
        f"--rdzv-endpoint={name}-node-0-0.{name}:29500"
        if arg.startswith("--rdzv-endpoint")
        else arg
        for arg in args
    ]
    assert replicated["template"]["spec"] == expected


def test_jobset_rendezvous_host_is_its_first_pods_dns_name() -> None:
    flags = torchrun_flags(objects_for(job={"launcher": "JobSet"}))
    name = job_name(REF.name)

    assert flags["rdzv-endpoint"] == f"{pod_hostname(name, 0, jobset=True)}.{name}:29500"
    assert flags["rdzv-endpoint"] == f"{name}-node-0-0.{name}:29500"


# --------------------------------------------------------------------------- errors


def test_missing_image_is_a_clear_error() -> None:
    error = launch_error(job={"image": None})

    assert isinstance(error, ValueError)
    assert error.problems[0][0] == "job.image"
    assert "spec.job.image" in str(error)


def test_every_problem_is_reported_at_once() -> None:
    error = launch_error(job={"image": None, "metricsPort": 29500})

    assert [path for path, _ in error.problems] == ["job.image", "job.metricsPort"]


def test_a_preset_spec_needs_the_resolved_shape(catalog: Catalog) -> None:
    spec, result = planned()
    gpu = catalog.gpu(result.gpu_type)

    with pytest.raises(TypeError, match="shape="):
        render(REF, spec, result, gpu)
    shape, _ = resolve_shape(spec, catalog)
    assert render(REF, spec, result, gpu, shape=shape) == objects_for()


def test_an_explicit_shape_spec_renders_without_the_catalogs_shape(catalog: Catalog) -> None:
    explicit: dict[str, Any] = {
        "model": {
            "preset": None,
            "layers": 24,
            "hiddenSize": 2048,
            "attentionHeads": 16,
            "vocabSize": 50257,
            "sequenceLength": 2048,
        }
    }
    spec, result = planned(**explicit)
    objects = render(REF, spec, result, catalog.gpu(result.gpu_type))

    assert objects == objects_for(**explicit)
    values = env_of(objects)
    assert values["TRAINPLAN_MODEL_KV_HEADS"] == "16"
    assert values["TRAINPLAN_MODEL_FFN_HIDDEN_SIZE"] == str(4 * 2048)


def test_the_gpu_must_be_the_plans(catalog: Catalog) -> None:
    spec, result = planned()
    shape, _ = resolve_shape(spec, catalog)

    with pytest.raises(LauncherError, match=r"hardware\.gpuType"):
        render(REF, spec, result, catalog.gpu("H100-SXM5-80GB"), shape=shape)


# --------------------------------------------------------------------------- names

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def test_a_short_plan_name_is_the_job_name() -> None:
    assert job_name("llama") == "llama"
    assert job_name("a" * MAX_JOB_NAME_LENGTH) == "a" * MAX_JOB_NAME_LENGTH


@pytest.mark.parametrize(
    "name",
    [
        "a" * (MAX_JOB_NAME_LENGTH + 1),
        "x" * 253,
        "llama2.7b.run",
        "7b-run",
        "0",
        "My_Plan",
        "-.-",
    ],
)
def test_other_names_are_shortened_deterministically_with_a_hash(name: str) -> None:
    short = job_name(name)

    assert short != name
    assert short == job_name(name)
    assert len(short) <= MAX_JOB_NAME_LENGTH
    assert DNS_1035.fullmatch(short)
    assert re.search(r"-[0-9a-f]{8}$", short)
    assert is_dns_label(pod_hostname(short, 99_999, jobset=True))


def _jobset_webhook_accepts(jobset_name: str, nodes: int) -> bool:
    """JobSet's create check of a replicated job's pod names (kubernetes-sigs/jobset,
    pkg/webhooks/jobset_webhook.go): `GenPodName(jobset, rjob, maxJobIndex, maxPodIndex)`
    (`%s-%s-%s-%s`) plus a 5-character random suffix must be a DNS-1035 label (<= 63)."""
    longest_pod_name = f"{jobset_name}-node-0-{nodes - 1}" + "-abcde"
    return len(longest_pod_name) <= 63 and DNS_1035.fullmatch(longest_pod_name) is not None


@pytest.mark.parametrize("length", range(40, 254, 3))
def test_jobset_names_pass_jobsets_webhook_at_every_plan_name_length(length: int) -> None:
    """Plan names of 45-50 characters used to be kept whole for a JobSet and refused."""
    name = ("llama-" * 50)[: length - 1] + "z"
    short = job_name(name, jobset=True)
    assert len(short) <= MAX_JOBSET_NAME_LENGTH
    assert _jobset_webhook_accepts(short, nodes=100_000)
    assert job_name(name, jobset=True) == short


def test_jobset_names_are_kept_whole_when_they_fit() -> None:
    assert job_name("a" * MAX_JOBSET_NAME_LENGTH, jobset=True) == "a" * MAX_JOBSET_NAME_LENGTH
    assert job_name("a" * (MAX_JOBSET_NAME_LENGTH + 1), jobset=True) != "a" * (
        MAX_JOBSET_NAME_LENGTH + 1
    )
    assert not _jobset_webhook_accepts("a" * (MAX_JOBSET_NAME_LENGTH + 1), nodes=100_000)


def test_a_rendered_jobset_of_a_long_plan_name_passes_jobsets_webhook() -> None:
    name = "a" * 50
    objects = objects_for(PlanRef(name, "team-a", REF.uid), job={"launcher": "JobSet"})
    (jobset,) = [obj for obj in objects if obj["kind"] == "JobSet"]
    (replicated,) = jobset["spec"]["replicatedJobs"]
    completions = replicated["template"]["spec"]["completions"]
    assert replicated["name"] == "node"
    assert replicated["template"]["spec"]["completionMode"] == "Indexed"
    assert _jobset_webhook_accepts(jobset["metadata"]["name"], nodes=completions)


def test_shortened_names_of_different_plans_differ() -> None:
    prefix = "p" * 60

    assert job_name(prefix + "a") != job_name(prefix + "b")
    assert job_name("run.1") != job_name("run-1")
    assert job_name("run-1") == "run-1"


def test_the_empty_name_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        job_name("")


def test_label_values_fit() -> None:
    assert label_value("llama2.7b") == "llama2.7b"
    long = label_value("x" * 253)
    assert len(long) <= 63
    assert long == label_value("x" * 253)
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", long)


def test_a_long_plan_name_renders_valid_names_everywhere() -> None:
    name = "a-very-long-training-plan-name." + "x" * 200
    objects = objects_for(PlanRef(name, "team-a", REF.uid), job={"launcher": "Job"})
    short = job_name(name)

    for obj in objects:
        assert obj["metadata"]["name"] == short
        assert all(len(value) <= 63 for value in obj["metadata"]["labels"].values())
        assert obj["metadata"]["ownerReferences"][0]["name"] == name
    assert env_of(objects)["TRAINPLAN_PLAN_NAME"] == name
    host = torchrun_flags(objects)["rdzv-endpoint"].split(".")[0]
    assert host == f"{short}-0"
    assert is_dns_label(host)


def test_too_many_nodes_for_a_hostname_is_an_error(catalog: Catalog) -> None:
    spec, result = planned(job={"launcher": "JobSet"})
    huge = result.model_copy(update={"nodes": 200_000, "gpus": 1_600_000})
    shape, _ = resolve_shape(spec, catalog)
    long_name = PlanRef("n" * MAX_JOB_NAME_LENGTH, "team-a")

    with pytest.raises(LauncherError, match="63 characters"):
        render(long_name, spec, huge, catalog.gpu(result.gpu_type), shape=shape)


# --------------------------------------------------------------------------- frameworks


def test_reference_framework_runs_the_reference_trainer_with_user_args() -> None:
    objects = objects_for(job={"framework": "reference", "args": ["--seed", "1"]})

    assert tuple(DEFAULT_COMMAND) == ("python", "-m", "trainplan.runtime.train")
    assert program_args(objects) == ["-m", "trainplan.runtime.train", "--seed", "1"]


MEGATRON: dict[str, Any] = {
    "parallelism": {
        "tensor": 2,
        "pipeline": 2,
        "virtualPipelineStages": 2,
        "sequenceParallel": True,
        "zeroStage": 1,
        "activationCheckpointing": "selective",
    },
    "reliability": {"checkpointIntervalSteps": 40},
    "job": {"framework": "megatron", "args": ["--data-path", "/data/x"]},
}


def test_megatron_arguments_equal_the_plan() -> None:
    _, result = planned(**MEGATRON)
    args = program_args(objects_for(**MEGATRON))
    flags = flag_values(args)
    layout = result.layout

    assert args[0] == "pretrain_gpt.py"
    assert args[-2:] == ["--data-path", "/data/x"]
    # Exactly these: no --no-overlap-p2p-communication, so Megatron-LM overlaps the
    # interleaved schedule's steady-state transfers, as the plan priced them.
    assert flags == {
        "--tensor-model-parallel-size": "2",
        "--pipeline-model-parallel-size": "2",
        "--num-layers-per-virtual-pipeline-stage": str(32 // (2 * 2)),
        "--sequence-parallel": True,
        "--micro-batch-size": str(layout.micro_batch_size),
        "--global-batch-size": "64",
        "--use-distributed-optimizer": True,
        "--overlap-grad-reduce": True,
        "--overlap-param-gather": True,
        "--recompute-granularity": "selective",
        "--bf16": True,
        "--train-iters": str(result.total_steps),
        "--num-layers": "32",
        "--hidden-size": "4096",
        "--num-attention-heads": "32",
        "--ffn-hidden-size": "11008",
        "--swiglu": True,
        "--untie-embeddings-and-output-weights": True,
        "--attention-dropout": "0.0",
        "--hidden-dropout": "0.0",
        "--seq-length": "4096",
        "--max-position-embeddings": "4096",
        "--save": "/checkpoints",
        "--load": "/checkpoints",
        "--save-interval": "40",
        "--data-path": "/data/x",
    }


def test_megatron_full_recompute_fp16_and_grouped_query_attention() -> None:
    change: dict[str, Any] = {
        "model": {"preset": "llama2-70b"},
        "objective": {"gpus": 64},
        "training": {"precision": "fp16"},
        "parallelism": {
            "tensor": 8,
            "pipeline": 2,
            "virtualPipelineStages": 1,
            "zeroStage": 0,
            "activationCheckpointing": "full",
        },
        "job": {"framework": "megatron", "command": ["python", "/opt/megatron/pretrain_gpt.py"]},
    }
    args = program_args(objects_for(**change))
    flags = flag_values(args)

    assert args[0] == "/opt/megatron/pretrain_gpt.py"
    assert flags["--recompute-granularity"] == "full"
    assert flags["--recompute-method"] == "uniform"
    assert flags["--recompute-num-layers"] == "1"
    assert flags["--fp16"] is True
    assert "--bf16" not in flags
    assert "--use-distributed-optimizer" not in flags
    # ZeRO-0: the gradient all-reduce overlaps the backward pass; no sharded weights to gather.
    assert flags["--overlap-grad-reduce"] is True
    assert "--overlap-param-gather" not in flags
    assert "--num-layers-per-virtual-pipeline-stage" not in flags
    assert flags["--group-query-attention"] is True
    assert flags["--num-query-groups"] == "8"


def _megatron_overlap_flags() -> dict[str, str]:
    path = Path(__file__).resolve().parents[1] / "data" / "upstream"
    lines = (path / "megatron-lm-core_v0.19.0-overlap-flags.txt").read_text().splitlines()
    return {line.split()[0]: line for line in lines if line.startswith("--")}


@pytest.mark.parametrize(
    ("gpus", "zero", "expected"),
    [
        (16, 1, {"--overlap-grad-reduce", "--overlap-param-gather"}),
        (16, 0, {"--overlap-grad-reduce"}),
        (4, 1, set()),  # TP2 PP2 on 4 GPUs: one data rank, nothing to reduce
    ],
)
def test_megatron_overlaps_the_data_parallel_communication_the_plan_prices(
    gpus: int, zero: int, expected: set[str]
) -> None:
    # Megatron-LM core_v0.19.0 leaves both overlaps off by default; the planner prices the
    # gradient reduction as partly hidden behind the backward pass, so the launcher turns
    # them on (the weight gather only with the distributed optimizer, as validate_args
    # requires), and never turns off the pipeline transfers' overlap (on by default).
    change = merged(MEGATRON, {"objective": {"gpus": gpus}, "parallelism": {"zeroStage": zero}})
    args = program_args(objects_for(**change))
    written = {a for a in args if a.startswith("--") and "overlap" in a and "moe" not in a}
    assert written == expected
    upstream = _megatron_overlap_flags()
    assert written <= set(upstream)
    assert "store_true, default off" in upstream["--overlap-grad-reduce"]
    assert "--no-overlap-p2p-communication" in upstream
    assert "--no-overlap-p2p-communication" not in args
    if "--overlap-param-gather" in written:
        assert "--use-distributed-optimizer" in args


@pytest.mark.parametrize("dropout", [True, False])
def test_megatron_trains_with_dropout_only_where_the_plan_counts_it(dropout: bool) -> None:
    # Megatron-LM's default hidden and attention dropout is 0.1 (core_v0.19.0
    # TransformerConfig); a plan for a model without dropout counts no masks, so the
    # launcher turns both off, as Megatron-LM's own Llama 3 example does.
    change = merged(MEGATRON, {"model": {"dropout": dropout}})
    flags = flag_values(program_args(objects_for(**change)))
    if dropout:
        assert "--hidden-dropout" not in flags
        assert "--attention-dropout" not in flags
    else:
        assert flags["--hidden-dropout"] == flags["--attention-dropout"] == "0.0"


@pytest.mark.parametrize("zero", [2, 3])
def test_megatron_rejects_zero_2_and_3(zero: int) -> None:
    error = framework_error("megatron", parallelism={"zeroStage": zero, "pipeline": 1})

    (problem,) = error.problems
    assert problem[0] == "job.framework"
    assert f"ZeRO stage {zero}" in problem[1]
    assert "deepspeed" in problem[1]
    assert "torchtitan" in problem[1]


TORCHTITAN: dict[str, Any] = {
    "parallelism": {"tensor": 2, "pipeline": 1, "zeroStage": 3, "activationCheckpointing": "full"},
    "reliability": {"checkpointIntervalSteps": 30},
    "job": {"framework": "torchtitan", "args": ["--job.config_file", "llama.toml"]},
}


def test_torchtitan_arguments_equal_the_plan() -> None:
    _, result = planned(**TORCHTITAN)
    args = program_args(objects_for(**TORCHTITAN))
    layout = result.layout

    assert args[:2] == ["-m", "torchtitan.train"]
    assert args[-2:] == ["--job.config_file", "llama.toml"]
    assert flag_values(args[2:]) == {
        "--parallelism.tensor_parallel_degree": "2",
        "--parallelism.pipeline_parallel_degree": "1",
        "--parallelism.data_parallel_shard_degree": str(layout.data),
        "--parallelism.data_parallel_replicate_degree": "1",
        "--training.local_batch_size": str(layout.micro_batch_size),
        "--training.global_batch_size": "64",
        "--training.seq_len": "4096",
        "--training.steps": str(result.total_steps),
        "--training.mixed_precision_param": "bfloat16",
        "--activation_checkpoint.mode": "full",
        "--checkpoint.enable": True,
        "--checkpoint.folder": "/checkpoints",
        "--checkpoint.interval": "30",
        "--job.config_file": "llama.toml",
    }


def test_torchtitan_pipeline_and_zero_1() -> None:
    change: dict[str, Any] = {
        "parallelism": {"tensor": 1, "pipeline": 2, "virtualPipelineStages": 2, "zeroStage": 1},
        "training": {"precision": "fp8"},
        "hardware": {"gpuType": "H100-SXM5-80GB"},
        "job": {"framework": "torchtitan"},
    }
    _, result = planned(**change)
    flags = flag_values(program_args(objects_for(**change)))
    layout = result.layout

    assert flags["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    # 32 layers in 4 chunks of 8, rank 0 running chunks 0 and 2 (explicit modules: torchtitan
    # would count the embedding and the output as layers, and pick its own chunk count).
    config = torchtitan_upstream.parse(program_args(objects_for(**change))[2:])
    assert config.parallelism.module_fqns_per_model_part == [
        ["tok_embeddings", *(f"layers.{i}" for i in range(8))],
        [f"layers.{i}" for i in range(8, 16)],
        [f"layers.{i}" for i in range(16, 24)],
        [*(f"layers.{i}" for i in range(24, 32)), "norm", "output"],
    ]
    assert "--parallelism.pipeline_parallel_layers_per_stage" not in flags
    assert flags["--parallelism.pipeline_parallel_microbatch_size"] == str(layout.micro_batch_size)
    local = layout.micro_batch_size * layout.gradient_accumulation_steps
    assert flags["--training.local_batch_size"] == str(local)
    assert flags["--parallelism.data_parallel_shard_degree"] == str(layout.data)
    assert flags["--parallelism.fsdp_reshard_after_forward"] == "never"
    assert flags["--model.converters"] == "float8"
    assert flags["--training.mixed_precision_param"] == "bfloat16"


def test_torchtitan_zero_0_with_data_parallelism_alone_is_ddp() -> None:
    change: dict[str, Any] = {
        "parallelism": {"tensor": 1, "pipeline": 1, "zeroStage": 0},
        "objective": {"gpus": 8},
        "model": {"preset": "pythia-410m"},
        "job": {"framework": "torchtitan"},
    }
    flags = flag_values(program_args(objects_for(**change)))

    assert flags["--parallelism.data_parallel_replicate_degree"] == "8"
    assert flags["--parallelism.data_parallel_shard_degree"] == "1"
    assert "--parallelism.fsdp_reshard_after_forward" not in flags


def test_torchtitan_rejects_fp16() -> None:
    # The planner, told the framework, refuses fp16 itself (test_planning); the launcher
    # checks a plan made for another framework.
    error = framework_error("torchtitan", training={"precision": "fp16"})

    assert error.problems[0][0] == "training.precision"


DEEPSPEED: dict[str, Any] = {
    "parallelism": {"pipeline": 1, "tensor": 1, "zeroStage": 2, "activationCheckpointing": "full"},
    "job": {
        "framework": "deepspeed",
        "command": ["python", "train.py"],
        "args": ["--data", "/data"],
    },
}


def test_deepspeed_config_map_equals_the_plan() -> None:
    _, result = planned(**DEEPSPEED)
    objects = objects_for(**DEEPSPEED)
    config_map = next(obj for obj in objects if obj["kind"] == "ConfigMap")
    layout = result.layout

    assert config_map["metadata"]["name"] == f"{job_name(REF.name)}-deepspeed"
    assert json.loads(config_map["data"][DEEPSPEED_CONFIG_FILE]) == {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.gradient_accumulation_steps,
        "zero_optimization": {"stage": 2, "overlap_comm": True},
        "bf16": {"enabled": True},
        "activation_checkpointing": {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        },
    }
    assert (
        layout.micro_batch_size * layout.data * layout.gradient_accumulation_steps
        == layout.global_batch_size
    )


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_deepspeed_overlaps_the_reduction_wherever_its_zero_optimizer_can(zero: int) -> None:
    # DeepSpeedZeroConfig.overlap_comm defaults to stage == 3; the plan prices stages 1-2
    # as overlapped too, so the config turns it on. Stage 0 has no such option.
    # Without ZeRO, 7B fits in 80 GB only split over two tensor ranks (AutoTP).
    parallelism = {"zeroStage": zero, "tensor": 2 if zero == 0 else 1}
    change = merged(DEEPSPEED, {"parallelism": parallelism})
    config_map = next(obj for obj in objects_for(**change) if obj["kind"] == "ConfigMap")
    zero_config = json.loads(config_map["data"][DEEPSPEED_CONFIG_FILE])["zero_optimization"]
    assert zero_config == ({"stage": 0} if zero == 0 else {"stage": zero, "overlap_comm": True})


def test_deepspeed_config_is_mounted_and_named_after_the_users_args() -> None:
    objects = objects_for(**DEEPSPEED)
    pod = pod_template(objects)["spec"]
    path = f"{DEEPSPEED_CONFIG_DIR}/{DEEPSPEED_CONFIG_FILE}"

    assert program_args(objects) == [
        "train.py",
        "--data",
        "/data",
        "--deepspeed",
        "--deepspeed_config",
        path,
    ]
    assert {
        "name": "deepspeed-config",
        "configMap": {"name": f"{job_name(REF.name)}-deepspeed"},
    } in pod["volumes"]
    assert {
        "name": "deepspeed-config",
        "mountPath": DEEPSPEED_CONFIG_DIR,
        "readOnly": True,
    } in container(objects)["volumeMounts"]


def test_deepspeed_fp16_and_tensor_parallelism() -> None:
    change = merged(
        DEEPSPEED,
        {
            "training": {"precision": "fp16"},
            "parallelism": {"tensor": 2, "zeroStage": 1, "activationCheckpointing": "none"},
        },
    )
    objects = objects_for(**change)
    config_map = next(obj for obj in objects if obj["kind"] == "ConfigMap")
    config = json.loads(config_map["data"][DEEPSPEED_CONFIG_FILE])

    assert config["fp16"] == {"enabled": True, "loss_scale": 0}
    assert "bf16" not in config
    assert "activation_checkpointing" not in config
    assert config["tensor_parallel"] == {"autotp_size": 2}


def test_deepspeed_with_jobset_mounts_the_config_map_too() -> None:
    objects = objects_for(**merged(DEEPSPEED, {"job": {"launcher": "JobSet"}}))

    assert [obj["kind"] for obj in objects] == ["ConfigMap", "JobSet"]
    assert any(
        volume["name"] == "deepspeed-config" for volume in pod_template(objects)["spec"]["volumes"]
    )


def test_deepspeed_needs_the_users_script() -> None:
    error = launch_error(job={"framework": "deepspeed"})

    assert error.problems[0][0] == "job.command"
    assert "DeepSpeed is a library" in error.problems[0][1]


def test_deepspeed_rejects_pipeline_with_zero_2() -> None:
    error = framework_error(
        "deepspeed", **merged(DEEPSPEED, {"parallelism": {"pipeline": 2, "zeroStage": 2}})
    )

    (problem,) = error.problems
    assert problem[0] == "parallelism.zeroStage"
    assert "pipeline" in problem[1]


def test_deepspeed_rejects_tensor_parallelism_with_zero_3() -> None:
    # The planner, told the framework, refuses the pin itself (test_planning); the
    # launcher checks a plan made for another framework.
    error = framework_error(
        "deepspeed", **merged(DEEPSPEED, {"parallelism": {"tensor": 2, "zeroStage": 3}})
    )

    assert "AutoTP" in error.problems[0][1]


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("framework", ["reference", "megatron", "torchtitan", "deepspeed"])
@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
def test_render_is_deterministic(framework: str, launcher: str, catalog: Catalog) -> None:
    change = merged(
        {"parallelism": {"zeroStage": 1}},
        {"job": {"framework": framework, "launcher": launcher, "command": ["python", "t.py"]}},
    )
    spec, result = planned(**change)
    first = render_for(REF, spec, result, catalog)
    second = render_for(REF, spec, result, catalog)

    assert first == second
    assert yaml.safe_dump_all(first, sort_keys=False) == yaml.safe_dump_all(second, sort_keys=False)
    first[-1]["metadata"]["labels"]["changed"] = "yes"
    container(first)["env"].clear()
    assert render_for(REF, spec, result, catalog) == second


@pytest.mark.parametrize(
    "change",
    [
        TORCHTITAN,
        {
            "parallelism": {"tensor": 1, "pipeline": 2, "virtualPipelineStages": 2},
            "training": {"precision": "fp8"},
            "hardware": {"gpuType": "H100-SXM5-80GB"},
            "job": {"framework": "torchtitan"},
        },
        {
            "parallelism": {"tensor": 1, "pipeline": 1, "zeroStage": 0},
            "objective": {"gpus": 8},
            "model": {"preset": "pythia-410m"},
            "job": {"framework": "torchtitan"},
        },
        {
            "parallelism": {"tensor": 2, "zeroStage": 3, "activationCheckpointing": "selective"},
            "job": {"framework": "torchtitan"},
        },
    ],
)
def test_torchtitan_parses_the_flags_into_the_plan(change: dict[str, Any]) -> None:
    """torchtitan 0.2.2's own parser takes every flag the launcher writes, and the
    configuration it makes of them is the plan's."""
    _, result = planned(**change)
    layout = result.layout
    args = [a for a in program_args(objects_for(**change))[2:] if a != "--job.config_file"]
    args = [a for a in args if a != "llama.toml"]  # the user's file, not here
    config = torchtitan_upstream.parse(args)
    parallelism = config.parallelism
    assert parallelism.tensor_parallel_degree == layout.tensor
    assert parallelism.pipeline_parallel_degree == layout.pipeline
    data = parallelism.data_parallel_shard_degree * parallelism.data_parallel_replicate_degree
    assert data == layout.data
    assert config.training.global_batch_size == layout.global_batch_size
    assert config.training.steps == result.total_steps
    assert config.training.mixed_precision_param == "bfloat16"
    assert config.activation_checkpoint.mode == layout.activation_checkpointing
    if layout.activation_checkpointing == "selective":
        # The per-op policy the plan prices; v0.2.2's default "2" is every second layer.
        assert config.activation_checkpoint.selective_ac_option == "op"
    assert config.checkpoint.enable is True
    assert config.checkpoint.folder == "/checkpoints"
    assert config.checkpoint.interval == result.reliability.checkpoint_interval_steps
    if layout.pipeline > 1:
        parts = parallelism.module_fqns_per_model_part
        assert len(parts) == layout.pipeline * layout.virtual_pipeline_stages
        assert parts[0][0] == "tok_embeddings"
        assert parts[-1][-2:] == ["norm", "output"]
        layers = [name for part in parts for name in part if name.startswith("layers.")]
        assert layers == [f"layers.{i}" for i in range(len(layers))]


@pytest.mark.parametrize("framework", ["reference", "megatron", "torchtitan"])
def test_adapters_are_refused_where_the_program_trains_every_weight(framework: str) -> None:
    training = {"method": "lora", "lora": {"rank": 8}}
    error = launch_error(training=training, job={"framework": framework})
    ((field, message),) = error.problems
    assert field == "training.method"
    assert f"{framework} trains every weight" in message
    assert "deepspeed" in message


def test_a_lora_plan_runs_the_users_peft_script_under_deepspeed() -> None:
    change: dict[str, Any] = {
        "training": {"method": "qlora", "lora": {"rank": 32, "targets": "attention"}},
        "job": {"framework": "deepspeed", "command": ["python", "peft_train.py"]},
    }
    values = env_of(objects_for(**change))
    assert values["TRAINPLAN_TRAINING_METHOD"] == "qlora"
    assert values["TRAINPLAN_LORA_RANK"] == "32"
    assert values["TRAINPLAN_LORA_TARGETS"] == "attention"
    assert container(objects_for(**change))["command"][-2:] != ["-m", "trainplan.runtime.train"]


@pytest.mark.parametrize(
    ("framework", "flag"),
    [
        ("megatron", "--context-parallel-size"),
        ("torchtitan", "--parallelism.context_parallel_degree"),
    ],
)
def test_context_parallelism_reaches_the_framework(framework: str, flag: str) -> None:
    change: dict[str, Any] = {
        "model": {"preset": "llama2-7b", "sequenceLength": 32768},
        "parallelism": {"context": 2},
        "job": {"framework": framework},
    }
    _, result = planned(**change)
    assert result.layout.context == 2
    args = list(container(objects_for(**change))["args"])
    assert args[args.index(flag) + 1] == "2"
    assert env_of(objects_for(**change))["TRAINPLAN_CONTEXT_PARALLEL"] == "2"


def test_a_split_sequence_is_refused_where_the_program_cannot_split_it() -> None:
    change: dict[str, Any] = {
        "model": {"preset": "llama2-7b", "sequenceLength": 32768},
        "parallelism": {"context": 2},
        "job": {"framework": "megatron"},
    }
    spec, result = planned(**change)
    job = spec.job.model_copy(update={"framework": "deepspeed", "command": ("python", "x.py")})
    with pytest.raises(LauncherError) as caught:
        render_for(REF, spec.model_copy(update={"job": job}), result, _CATALOG[0])
    ((field, message),) = caught.value.problems
    assert field == "parallelism.context"
    assert "megatron or torchtitan" in message
