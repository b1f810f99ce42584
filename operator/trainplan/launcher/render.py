"""Rendering a planned TrainingPlan into the Kubernetes objects that run it.

`render(ref, spec, plan, gpu)` returns plain dicts, ready for the API server, in a stable
order: the headless Service (Job launcher only), the DeepSpeed ConfigMap (deepspeed only),
then the Indexed Job or the JobSet. One pod per node runs torchrun with the plan's layout;
see `docs/frameworks.md` for the rendered commands and `trainplan.launcher.env` for the
environment contract with the training program.

Rules worth knowing:

- GPUs per pod: `plan.gpus / plan.nodes`, i.e. `plan.gpusPerNode` for whole nodes, and
  all of the plan's GPUs for a plan smaller than one node.
- Node selection: the GPU Feature Discovery label `nvidia.com/gpu.product: <gfd product>`
  of the plan's GPU (for an AMD GPU, AMD's `amd.com/gpu.product-name`), plus the user's
  `job.nodeSelector` keys. A user value for that label that differs from the plan's GPU is
  an error (LauncherError): the plan's memory and step time hold for that GPU only; change
  `hardware.gpuType`.
- Tolerations: the user's, then `nvidia.com/gpu:NoSchedule` (`amd.com/gpu` for an AMD
  GPU; operator Exists) unless the user already gave exactly that one.
- `job.resources` go to both requests and limits beside `nvidia.com/gpu` (`amd.com/gpu`);
  a different GPU count there is an error.
- Environment: `JOB_COMPLETION_INDEX` from the downward API, the `TRAINPLAN_` variables,
  then `job.env`; a user entry replaces a generated one of the same name (its position
  moves to the user's list). `JOB_COMPLETION_INDEX` itself cannot be overridden.
- Pod security: Pod Security `restricted` by default: the pod runs as non-root with
  seccomp `RuntimeDefault` (`job.securityContext` sets the user, group and fsGroup, or
  lets a root image run with `runAsNonRoot: false`), the container without privilege
  escalation and with every capability dropped. `/dev/shm` is a memory-backed emptyDir
  of at most `job.shmSize` (16Gi by default).
- Failures: `restartPolicy: Never`, `backoffLimit` = `reliability.maxRestarts`,
  `podReplacementPolicy: Failed`, and a pod failure policy that ignores disruptions
  (the `DisruptionTarget` condition: preemption, eviction, node drain; they do not count
  against the backoff limit) and fails the Job at once on the exit codes of
  `env.FAIL_JOB_EXIT_CODES` (2 usage error, 3 configuration error). A JobSet restarts
  as a whole instead (`jobset_failure_policy`): its Job has `backoffLimit: 0`, and its
  failure policy recreates all Jobs up to `reliability.maxRestarts` times, but fails the
  JobSet at once when the Job failed by that pod failure policy.
- Kueue: with `job.queueName` the Job or JobSet carries `kueue.x-k8s.io/queue-name` and
  is created suspended (`suspend: true`): Kueue unsuspends it on admission, so whoever
  applies the objects must not reset `suspend` on an existing one. Without a queue,
  `suspend` is `job.suspend`. `job.managedBy` is the JobSet's `spec.managedBy`
  (MultiKueue). `job.priorityClass` is the `kueue.x-k8s.io/priority-class`
  label, `job.topology` the pod template's `podset-required-topology` or
  `podset-preferred-topology` annotation.
- Names: `names.job_name` (long or unusual plan names are shortened with a hash suffix),
  label values by `names.label_value`.
- Pod template: `job.podTemplate` is merged onto the rendered pod last (strategic
  merge, `trainplan.launcher.podtemplate`; docs/pod-template.md). A template that
  sets what the launcher owns, or whose merged pod fails the Kubernetes 1.30 pod
  schema, is a LauncherError on `job.podTemplate...`, before any object exists.

Pure: no I/O, no clock; the same inputs give equal objects. (A spec with
`job.podTemplate` is checked against the pod schema that `kubernetes-validate` ships,
read from its package data.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from trainplan.api import (
    API_VERSION,
    APP_COMPONENT_LABEL,
    APP_INSTANCE_LABEL,
    APP_MANAGED_BY_LABEL,
    APP_NAME_LABEL,
    PLAN_LABEL,
    PYTHON_NAMES,
    TRAINING_PLAN_KIND,
    LoraSpec,
    Plan,
    TrainingPlanSpec,
)
from trainplan.launcher import env
from trainplan.launcher.errors import LauncherError
from trainplan.launcher.frameworks import DEEPSPEED_CONFIG_DIR, Launch, launch_for
from trainplan.launcher.names import (
    GENERATED_SUFFIX_LENGTH,
    MAX_INDEX_DIGITS,
    REPLICATED_JOB_NAME,
    is_dns_label,
    job_name,
    label_value,
    pod_hostname,
)
from trainplan.launcher.podtemplate import overlay
from trainplan.planner.catalog import Catalog, GPUSpec
from trainplan.planner.resolve import resolve_model, resolve_shape
from trainplan.planner.shapes import ModelShape

RENDEZVOUS_PORT: Final = 29500
"""torchrun's c10d rendezvous port on the index-0 pod (torch's default master port)."""

RENDEZVOUS_PORT_NAME: Final = "rendezvous"
METRICS_PORT_NAME: Final = "metrics"
METRICS_PATH: Final = "/metrics"

CONTAINER_NAME: Final = "trainer"
CHECKPOINT_DIR: Final = "/checkpoints"
"""Where `job.checkpointVolumeClaim` is mounted, and `TRAINPLAN_CHECKPOINT_DIR`. Without a
claim the directory is in the container's own file system and does not outlive a pod."""

SHM_DIR: Final = "/dev/shm"
SHM_VOLUME: Final = "dshm"
CHECKPOINT_VOLUME: Final = "checkpoints"
DEEPSPEED_VOLUME: Final = "deepspeed-config"


def gpu_toleration(gpu: GPUSpec) -> dict[str, str]:
    """The toleration for the taint GPU node pools commonly carry, keyed by the GPU's
    resource (`nvidia.com/gpu`: GKE, AKS, NVIDIA docs; `amd.com/gpu` likewise, where a
    cluster taints AMD nodes)."""
    return {"key": gpu.resource_name, "operator": "Exists", "effect": "NoSchedule"}


# Kueue's names: kubernetes-sigs/kueue pkg/controller/constants/constants.go (QueueLabel,
# JobUIDLabel, WorkloadPriorityClassLabel) and apis/kueue/v1beta1/topology_types.go;
# tests/contract/test_kueue_workload_schema.py checks them against v0.14.8's.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
"""The job's label naming its Kueue LocalQueue (Kueue's QueueLabel)."""
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
"""The label of a Kueue Workload that holds its job's uid (Kueue's JobUIDLabel)."""
KUEUE_PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
"""The Job's label naming its Kueue WorkloadPriorityClass (Kueue's WorkloadPriorityClassLabel)."""
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
"""Pod template annotations of Kueue's topology-aware scheduling
(kubernetes-sigs/kueue, apis/kueue/v1beta1/topology_types.go)."""


def kueue_topology_annotations(spec: TrainingPlanSpec) -> dict[str, str]:
    """The pod template's Kueue topology annotation for `job.topology`; empty without."""
    topology = spec.job.topology
    if topology is None:
        return {}
    if topology.required is not None:
        return {KUEUE_REQUIRED_TOPOLOGY: topology.required}
    assert topology.preferred is not None
    return {KUEUE_PREFERRED_TOPOLOGY: topology.preferred}


JOBSET_API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
APP_NAME: Final = "trainplan"
COMPONENT: Final = "training"
DISRUPTION_CONDITION: Final = "DisruptionTarget"

PROMETHEUS_SCRAPE_ANNOTATION: Final = "prometheus.io/scrape"
PROMETHEUS_PORT_ANNOTATION: Final = "prometheus.io/port"
PROMETHEUS_PATH_ANNOTATION: Final = "prometheus.io/path"

_PYTHON: Final = PYTHON_NAMES


@dataclass(frozen=True, slots=True)
class PlanRef:
    """The TrainingPlan the objects belong to."""

    name: str
    """The TrainingPlan's metadata.name."""
    namespace: str
    uid: str | None = None
    """The owner's uid; None (e.g. for `trainplan render`) renders no ownerReferences."""


def workload_kind(launcher: str) -> tuple[str, str]:
    """(apiVersion, kind) of the training workload that `job.launcher` names."""
    return (JOBSET_API_VERSION, "JobSet") if launcher == "JobSet" else ("batch/v1", "Job")


def plan_pods_selector(plan_name: str) -> str:
    """The label selector of every pod of a plan's training workload."""
    return f"{PLAN_LABEL}={label_value(plan_name)}"


def _labels(ref: PlanRef) -> dict[str, str]:
    instance = label_value(ref.name)
    return {
        APP_NAME_LABEL: APP_NAME,
        APP_INSTANCE_LABEL: instance,
        APP_COMPONENT_LABEL: COMPONENT,
        APP_MANAGED_BY_LABEL: APP_NAME,
        PLAN_LABEL: instance,
    }


def pod_selector(ref: PlanRef) -> dict[str, str]:
    """Labels that select the training pods of a plan (the Service's selector)."""
    return {PLAN_LABEL: label_value(ref.name), APP_COMPONENT_LABEL: COMPONENT}


def _metadata(ref: PlanRef, name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": ref.namespace, "labels": dict(labels)}
    if ref.uid is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": TRAINING_PLAN_KIND,
                "name": ref.name,
                "uid": ref.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return metadata


def _bool(value: bool) -> str:
    return "true" if value else "false"


def shape_from_spec(spec: TrainingPlanSpec) -> ModelShape | None:
    """The model shape of a spec that spells it out (no preset), with the planner's
    defaults (`planner.resolve.resolve_model`); None when it names a preset, which needs
    the catalog."""
    if spec.model.preset is not None:
        return None
    return resolve_model(spec.model, None)[0]


def _adapter_environment(spec: TrainingPlanSpec) -> dict[str, str]:
    """The training method and, for lora and qlora, the adapters' rank and targets."""
    training = spec.training
    adapters = training.method in ("lora", "qlora")
    lora = training.lora or LoraSpec()
    return {
        env.TRAINING_METHOD: training.method,
        env.LORA_RANK: str(lora.rank) if adapters else "0",
        env.LORA_TARGETS: lora.targets if adapters else "none",
    }


def environment(
    ref: PlanRef, spec: TrainingPlanSpec, plan: Plan, shape: ModelShape
) -> list[dict[str, Any]]:
    """The container's environment: the completion index, `TRAINPLAN_`, then `job.env`."""
    layout = plan.layout
    values: dict[str, str] = {
        env.PLAN_NAME: ref.name,
        env.TENSOR_PARALLEL: str(layout.tensor),
        env.PIPELINE_PARALLEL: str(layout.pipeline),
        env.DATA_PARALLEL: str(layout.data),
        env.CONTEXT_PARALLEL: str(layout.context),
        env.EXPERT_PARALLEL: str(layout.expert),
        env.EXPERT_TENSOR_PARALLEL: str(layout.expert_tensor),
        env.VIRTUAL_PIPELINE_STAGES: str(layout.virtual_pipeline_stages),
        env.SEQUENCE_PARALLEL: _bool(layout.sequence_parallel),
        env.ZERO_STAGE: str(layout.zero_stage),
        env.MICRO_BATCH_SIZE: str(layout.micro_batch_size),
        env.GRADIENT_ACCUMULATION_STEPS: str(layout.gradient_accumulation_steps),
        env.GLOBAL_BATCH_SIZE: str(layout.global_batch_size),
        env.TOTAL_STEPS: str(plan.total_steps),
        env.PRECISION: spec.training.precision,
        env.OPTIMIZER: spec.training.optimizer,
        **_adapter_environment(spec),
        env.ACTIVATION_CHECKPOINTING: layout.activation_checkpointing,
        env.CHECKPOINT_DIR: CHECKPOINT_DIR,
        env.CHECKPOINT_INTERVAL_STEPS: str(plan.reliability.checkpoint_interval_steps),
        env.METRICS_PORT: str(spec.job.metrics_port),
        env.MODEL_LAYERS: str(shape.layers),
        env.MODEL_HIDDEN_SIZE: str(shape.hidden_size),
        env.MODEL_ATTENTION_HEADS: str(shape.attention_heads),
        env.MODEL_KV_HEADS: str(shape.kv_heads),
        env.MODEL_FFN_HIDDEN_SIZE: str(shape.ffn_hidden_size),
        env.MODEL_GATED_MLP: _bool(shape.gated_mlp),
        env.MODEL_VOCAB_SIZE: str(shape.vocab_size),
        env.MODEL_SEQUENCE_LENGTH: str(shape.sequence_length),
        env.MODEL_TIED_EMBEDDINGS: _bool(shape.tied_embeddings),
    }
    assert tuple(values) == env.NAMES
    user: dict[str, dict[str, Any]] = {}
    for variable in spec.job.env:
        entry: dict[str, Any] = {"name": variable.name}
        if variable.value is not None:
            entry["value"] = variable.value
        user.pop(variable.name, None)  # a repeated name: the last one wins, in its place
        user[variable.name] = entry
    index = {
        "name": env.JOB_COMPLETION_INDEX,
        "valueFrom": {
            "fieldRef": {
                "fieldPath": f"metadata.annotations['{env.JOB_COMPLETION_INDEX_ANNOTATION}']"
            }
        },
    }
    generated = [
        {"name": name, "value": value} for name, value in values.items() if name not in user
    ]
    store_name, store_value = env.TORCHRUN_FRESH_STORE
    if store_name not in user:
        generated.append({"name": store_name, "value": store_value})
    return [index, *generated, *user.values()]


def torchrun_program(program: tuple[str, ...]) -> tuple[str, ...]:
    """`program` as torchrun's positional part: `python -m m args` becomes `-m m args`,
    `python script.py args` becomes `script.py args` (torchrun starts the interpreter
    itself), anything else runs as is behind `--no-python`."""
    if program and program[0] in _PYTHON:
        rest = program[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            return rest
        if rest and not rest[0].startswith("-"):
            return rest
    return ("--no-python", *program)


def torchrun_arguments(
    *,
    nodes: int,
    gpus_per_pod: int,
    rendezvous_host: str,
    rendezvous_id: str,
    max_restarts: int,
    launch: Launch,
) -> list[str]:
    """torchrun's flags, then the program and its arguments."""
    return [
        f"--nnodes={nodes}",
        f"--nproc-per-node={gpus_per_pod}",
        f"--node-rank=$({env.JOB_COMPLETION_INDEX})",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rendezvous_host}:{RENDEZVOUS_PORT}",
        f"--rdzv-id={rendezvous_id}",
        f"--max-restarts={max_restarts}",
        *torchrun_program(launch.program),
        *launch.arguments,
    ]


def _node_selector(spec: TrainingPlanSpec, gpu: GPUSpec) -> dict[str, str]:
    label = gpu.product_label
    selector = {label: gpu.gfd_product}
    selector.update((key, value) for key, value in spec.job.node_selector.items() if key != label)
    return selector


def _tolerations(spec: TrainingPlanSpec, gpu: GPUSpec) -> list[dict[str, Any]]:
    tolerations = [toleration.to_document() for toleration in spec.job.tolerations]
    if gpu_toleration(gpu) not in tolerations:
        tolerations.append(gpu_toleration(gpu))
    return tolerations


def _resources(spec: TrainingPlanSpec, gpus_per_pod: int, gpu: GPUSpec) -> dict[str, Any]:
    resource = gpu.resource_name
    amounts = {key: value for key, value in spec.job.resources.items() if key != resource}
    amounts[resource] = str(gpus_per_pod)
    return {"limits": dict(amounts), "requests": dict(amounts)}


def _problems(
    spec: TrainingPlanSpec, plan: Plan, gpu: GPUSpec, job: str, gpus_per_pod: int
) -> list[tuple[str, str]]:
    """What stops this spec and plan from rendering, before the framework's own checks."""
    problems: list[tuple[str, str]] = []
    spec_job = spec.job
    if spec_job.image is None:
        problems.append(("job.image", "required to render the training job (a container image)"))
    if gpu.name != plan.gpu_type:
        problems.append(
            ("hardware.gpuType", f"the plan is for {plan.gpu_type}, the GPU given is {gpu.name}")
        )
    if plan.gpus % plan.nodes:
        problems.append(
            (
                "objective.gpus",
                f"{plan.gpus} GPUs do not split evenly over {plan.nodes} nodes",
            )
        )
    wanted_product = spec_job.node_selector.get(gpu.product_label)
    if wanted_product is not None and wanted_product != gpu.gfd_product:
        problems.append(
            (
                f"job.nodeSelector[{gpu.product_label}]",
                f"{wanted_product!r} contradicts the plan's GPU {gpu.name} (label value "
                f"{gpu.gfd_product!r}); the plan holds for that GPU only, so choose the GPU "
                f"with hardware.gpuType and leave this key out",
            )
        )
    wanted_gpus = spec_job.resources.get(gpu.resource_name)
    if wanted_gpus is not None and wanted_gpus != str(gpus_per_pod):
        problems.append(
            (
                f"job.resources[{gpu.resource_name}]",
                f"{wanted_gpus!r} contradicts the plan's {gpus_per_pod} GPUs per pod; leave "
                f"it out, the launcher requests the plan's GPUs",
            )
        )
    if spec_job.metrics_port == RENDEZVOUS_PORT:
        problems.append(
            ("job.metricsPort", f"{RENDEZVOUS_PORT} is torchrun's rendezvous port; pick another")
        )
    for position, variable in enumerate(spec_job.env):
        if variable.name == env.JOB_COMPLETION_INDEX:
            problems.append(
                (
                    f"job.env[{position}]",
                    f"{env.JOB_COMPLETION_INDEX} is the node rank, set from the pod's "
                    f"completion index; it cannot be overridden",
                )
            )
    jobset = spec_job.launcher == "JobSet"
    last_host = pod_hostname(job, plan.nodes - 1, jobset=jobset)
    # JobSet's webhook also counts a generated name's random suffix (`-abcde`).
    checked = last_host + "x" * GENERATED_SUFFIX_LENGTH if jobset else last_host
    if not is_dns_label(checked):
        problems.append(
            (
                "objective",
                f"{plan.nodes} nodes: pod hostnames such as {last_host!r} exceed 63 "
                f"characters (at most {10**MAX_INDEX_DIGITS} nodes are supported)",
            )
        )
    return problems


def pod_security_context(spec: TrainingPlanSpec) -> dict[str, Any]:
    """The pod's security context: non-root and seccomp RuntimeDefault (Pod Security
    `restricted`), with `job.securityContext`'s user and groups when given."""
    given = spec.job.security_context
    context: dict[str, Any] = {"runAsNonRoot": given.run_as_non_root}
    for key, value in (
        ("runAsUser", given.run_as_user),
        ("runAsGroup", given.run_as_group),
        ("fsGroup", given.fs_group),
    ):
        if value is not None:
            context[key] = value
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def container_security_context() -> dict[str, Any]:
    """The training container's: no privilege escalation, every capability dropped."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_template(
    ref: PlanRef,
    spec: TrainingPlanSpec,
    gpu: GPUSpec,
    *,
    gpus_per_pod: int,
    torchrun_args: list[str],
    environment_variables: list[dict[str, Any]],
    subdomain: str | None,
    config_map: str | None,
) -> dict[str, Any]:
    spec_job = spec.job
    metrics_port = spec_job.metrics_port
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": SHM_DIR}]
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec_job.shm_size}}
    ]
    if spec_job.checkpoint_volume_claim is not None:
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_DIR})
        volumes.append(
            {
                "name": CHECKPOINT_VOLUME,
                "persistentVolumeClaim": {"claimName": spec_job.checkpoint_volume_claim},
            }
        )
    if config_map is not None:
        mounts.append(
            {"name": DEEPSPEED_VOLUME, "mountPath": DEEPSPEED_CONFIG_DIR, "readOnly": True}
        )
        volumes.append({"name": DEEPSPEED_VOLUME, "configMap": {"name": config_map}})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec_job.image,
        "command": ["torchrun"],
        "args": torchrun_args,
        "env": environment_variables,
        "ports": [
            {"name": RENDEZVOUS_PORT_NAME, "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"},
            {"name": METRICS_PORT_NAME, "containerPort": metrics_port, "protocol": "TCP"},
        ],
        "resources": _resources(spec, gpus_per_pod, gpu),
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
    }
    pod_spec: dict[str, Any] = {"restartPolicy": "Never"}
    if subdomain is not None:
        pod_spec["subdomain"] = subdomain
    pod_spec |= {
        "nodeSelector": _node_selector(spec, gpu),
        "tolerations": _tolerations(spec, gpu),
        "securityContext": pod_security_context(spec),
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "metadata": {
            "labels": _labels(ref),
            "annotations": {
                PROMETHEUS_SCRAPE_ANNOTATION: "true",
                PROMETHEUS_PORT_ANNOTATION: str(metrics_port),
                PROMETHEUS_PATH_ANNOTATION: METRICS_PATH,
            },
        },
        "spec": pod_spec,
    }


def pod_failure_policy() -> dict[str, Any]:
    """Ignore disruptions; fail the Job at once on a usage or configuration error."""
    return {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}],
            },
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER_NAME,
                    "operator": "In",
                    "values": list(env.FAIL_JOB_EXIT_CODES),
                },
            },
        ]
    }


JOBSET_FAIL_RULE: Final = "UsageOrConfigurationError"
"""The JobSet failure policy rule that fails the JobSet when its Job failed by the pod
failure policy (reason PodFailurePolicy: the exit codes of `env.FAIL_JOB_EXIT_CODES`)."""


def jobset_failure_policy(spec: TrainingPlanSpec) -> dict[str, Any]:
    """A JobSet's `failurePolicy`: a failed Job restarts the whole JobSet (all its Jobs
    recreated, `status.restarts` + 1) at most `reliability.maxRestarts` times, as JobSet
    recommends for its Jobs of `backoffLimit: 0`; a Job failed by the pod failure policy
    (a usage or configuration error: restarting cannot help) fails the JobSet at once.
    Fields and actions of kubernetes-sigs/jobset v0.12.0 (`api/jobset/v1alpha2/
    jobset_types.go`, FailurePolicy; rules since v0.6.0)."""
    return {
        "maxRestarts": spec.reliability.max_restarts,
        "rules": [
            {
                "name": JOBSET_FAIL_RULE,
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }


def _job_spec(
    spec: TrainingPlanSpec,
    plan: Plan,
    template: dict[str, Any],
    suspend: bool | None,
    *,
    backoff_limit: int | None = None,
) -> dict[str, Any]:
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": plan.nodes,
        "parallelism": plan.nodes,
        "backoffLimit": spec.reliability.max_restarts if backoff_limit is None else backoff_limit,
        "podFailurePolicy": pod_failure_policy(),
        "podReplacementPolicy": "Failed",
    }
    if suspend is not None:
        job_spec["suspend"] = suspend
    job_spec["template"] = template
    return job_spec


def render(
    ref: PlanRef,
    spec: TrainingPlanSpec,
    plan: Plan,
    gpu: GPUSpec,
    *,
    shape: ModelShape | None = None,
) -> list[dict[str, Any]]:
    """Every object that runs `plan` for the TrainingPlan `ref`: Service (Job launcher),
    ConfigMap (deepspeed), then the Indexed Job or the JobSet.

    `gpu` is the catalog entry of `plan.gpuType`. `shape` is the resolved model shape
    (`trainplan.planner.resolve.resolve_shape(spec, catalog)[0]`); it may be left out for
    a spec that spells its shape out, not for one that names a preset (TypeError), so
    callers holding the catalog use `render_for`. Raises LauncherError listing every
    problem of the spec (missing image, a layout the framework cannot run, ...).
    """
    if shape is None:
        shape = shape_from_spec(spec)
        if shape is None:
            raise TypeError(
                f"render() needs shape= for a spec with model.preset {spec.model.preset!r}: "
                f"pass resolve_shape(spec, catalog)[0] or call render_for(ref, spec, plan, "
                f"catalog)"
            )
    job = job_name(ref.name, jobset=spec.job.launcher == "JobSet")
    gpus_per_pod = plan.gpus // plan.nodes
    problems = _problems(spec, plan, gpu, job, gpus_per_pod)
    launch: Launch | None = None
    try:
        launch = launch_for(spec, plan, shape, CHECKPOINT_DIR)
    except LauncherError as error:
        problems += error.problems
    if problems or launch is None:
        raise LauncherError(problems)

    jobset = spec.job.launcher == "JobSet"
    labels = _labels(ref)
    objects: list[dict[str, Any]] = []
    if not jobset:
        objects.append(_service(ref, spec, job, labels))
    config_map = None
    if launch.config_files:
        config_map = f"{job}-deepspeed"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _metadata(ref, config_map, labels),
                "data": dict(launch.config_files),
            }
        )
    rendezvous_host = f"{pod_hostname(job, 0, jobset=jobset)}.{job}"
    template = _pod_template(
        ref,
        spec,
        gpu,
        gpus_per_pod=gpus_per_pod,
        torchrun_args=torchrun_arguments(
            nodes=plan.nodes,
            gpus_per_pod=gpus_per_pod,
            rendezvous_host=rendezvous_host,
            rendezvous_id=ref.uid or ref.name,
            max_restarts=spec.reliability.max_restarts,
            launch=launch,
        ),
        environment_variables=environment(ref, spec, plan, shape),
        subdomain=None if jobset else job,
        config_map=config_map,
    )
    if spec.job.pod_template is not None:
        template, problems = overlay(
            template,
            spec.job.pod_template,
            gpus_per_pod=gpus_per_pod,
            name=job,
            namespace=ref.namespace,
        )
        if problems:
            raise LauncherError(problems)
    queue = spec.job.queue_name
    suspend = True if queue is not None else spec.job.suspend
    owner_labels = dict(labels)
    if queue is not None:
        owner_labels[KUEUE_QUEUE_LABEL] = queue
    if spec.job.priority_class is not None:
        owner_labels[KUEUE_PRIORITY_CLASS_LABEL] = spec.job.priority_class
    template["metadata"].setdefault("annotations", {}).update(kueue_topology_annotations(spec))
    if jobset:
        objects.append(
            {
                "apiVersion": JOBSET_API_VERSION,
                "kind": "JobSet",
                "metadata": _metadata(ref, job, owner_labels),
                "spec": {
                    "network": {"enableDNSHostnames": True, "subdomain": job},
                    **({} if spec.job.managed_by is None else {"managedBy": spec.job.managed_by}),
                    "suspend": suspend,
                    "failurePolicy": jobset_failure_policy(spec),
                    "replicatedJobs": [
                        {
                            "name": REPLICATED_JOB_NAME,
                            "replicas": 1,
                            "template": {
                                "metadata": {"labels": dict(labels)},
                                "spec": _job_spec(spec, plan, template, None, backoff_limit=0),
                            },
                        }
                    ],
                },
            }
        )
    else:
        objects.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": _metadata(ref, job, owner_labels),
                "spec": _job_spec(spec, plan, template, suspend),
            }
        )
    return objects


def _service(
    ref: PlanRef, spec: TrainingPlanSpec, job: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    metrics_port = spec.job.metrics_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ref, job, labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": pod_selector(ref),
            "ports": [
                {
                    "name": RENDEZVOUS_PORT_NAME,
                    "port": RENDEZVOUS_PORT,
                    "targetPort": RENDEZVOUS_PORT,
                    "protocol": "TCP",
                },
                {
                    "name": METRICS_PORT_NAME,
                    "port": metrics_port,
                    "targetPort": metrics_port,
                    "protocol": "TCP",
                },
            ],
        },
    }


def render_for(
    ref: PlanRef, spec: TrainingPlanSpec, plan: Plan, catalog: Catalog
) -> list[dict[str, Any]]:
    """`render` with the GPU and the model shape looked up in the catalog."""
    shape, _ = resolve_shape(spec, catalog)
    return render(ref, spec, plan, catalog.gpu(plan.gpu_type), shape=shape)
