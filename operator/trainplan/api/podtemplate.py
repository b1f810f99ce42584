"""`spec.job.podTemplate`: a partial pod template that the launcher merges onto the
training pods it renders (strategic-merge semantics; docs/pod-template.md).

What can be set: the pod's labels and annotations; its serviceAccountName,
imagePullSecrets, volumes, affinity, tolerations, priorityClassName, schedulerName,
securityContext and hostNetwork; and, in the one container named `trainer`, env, envFrom,
volumeMounts, resources (limits, requests) and securityContext. Kubernetes objects this
module does not type (a volume's source, an env valueFrom, affinity, security contexts)
are free-form here and preserved by the CRD (`x-kubernetes-preserve-unknown-fields`); the
launcher checks the merged pod against the Kubernetes schema before anything is created.

Every level keeps unknown fields in the CRD, so nothing written under podTemplate is
pruned silently: a field trainplan owns (the container's command, args, image and ports;
the pod's restartPolicy, subdomain, hostname, nodeSelector, dnsPolicy; the plan's labels,
the metrics and Kueue topology annotations; `JOB_COMPLETION_INDEX`) is refused here with
the reason, any other unknown field as an extra input. What depends on the plan (the GPU count, the
volumes and mount paths the launcher renders) is checked by the launcher.

Pure: pydantic and the standard library only; no I/O.
"""

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Final, Literal

from annotated_types import MaxLen
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from trainplan.api.base import ApiModel
from trainplan.api.constants import GROUP
from trainplan.api.kubetypes import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_VALUE_PATTERN,
    NAME_MAX_LENGTH,
    QUALIFIED_NAME_PATTERN,
    Quantity,
    Toleration,
)

TRAINER_CONTAINER: Final = "trainer"
"""The name of the training container, the only one a pod template can patch."""

_PRESERVE: Final[dict[str, Any]] = {"x-kubernetes-preserve-unknown-fields": True}

MAX_LABELS: Final = 64
MAX_ANNOTATIONS: Final = 64
ANNOTATION_VALUE_MAX_LENGTH: Final = 16_384
MAX_IMAGE_PULL_SECRETS: Final = 16
MAX_VOLUMES: Final = 64
MAX_TOLERATIONS: Final = 64
MAX_ENV: Final = 128
MAX_ENV_FROM: Final = 32
MAX_VOLUME_MOUNTS: Final = 64
MAX_RESOURCES: Final = 32
"""Resource names in each of limits and requests."""
ENV_NAME_MAX_LENGTH: Final = 256
PATH_MAX_LENGTH: Final = 4096
MAX_SECURITY_CONTEXT_FIELDS: Final = 32

OWNED_LABEL_PREFIXES: Final = (f"{GROUP}/", "app.kubernetes.io/")
"""Label keys trainplan sets on its pods (`trainplan.dev/plan`, `app.kubernetes.io/*`):
the Service and the operator select the plan's pods by them."""
CONTROLLER_PREFIXES: Final = ("batch.kubernetes.io/", "jobset.sigs.k8s.io/")
"""Label and annotation keys the Job and JobSet controllers set on the pods."""
CONTROLLER_LABELS: Final = frozenset({"controller-uid", "job-name"})
"""The Job controller's legacy pod labels."""
METRICS_ANNOTATIONS: Final = frozenset(
    {"prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path"}
)
"""The scrape annotations trainplan derives from `job.metricsPort`."""
TOPOLOGY_ANNOTATIONS: Final = frozenset(
    {"kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"}
)
"""Kueue's topology-aware scheduling annotations, which `job.topology` sets."""
OWNED_ENV: Final = "JOB_COMPLETION_INDEX"
"""The node rank, from the pod's completion index (`trainplan.launcher.env`)."""

_RENDEZVOUS_REASON: Final = (
    "set by trainplan: torchrun's rendezvous endpoint is the index-0 pod's DNS name "
    "(<job>-0.<job>), made from the pod's hostname and subdomain"
)
OWNED_POD_FIELDS: Final[Mapping[str, str]] = {
    "restartPolicy": (
        "set by trainplan (Never): failed pods count against the Job's backoffLimit "
        "(reliability.maxRestarts) and its pod failure policy"
    ),
    "subdomain": _RENDEZVOUS_REASON,
    "hostname": _RENDEZVOUS_REASON,
    "setHostnameAsFQDN": _RENDEZVOUS_REASON,
    "dnsPolicy": (
        "set by trainplan: ClusterFirst, or ClusterFirstWithHostNet with hostNetwork, so "
        "that the rendezvous host resolves"
    ),
    "nodeSelector": (
        "set by trainplan from the plan's GPU and job.nodeSelector; use job.nodeSelector "
        "or affinity"
    ),
}
"""Pod fields trainplan owns, with the reason given when a pod template sets one."""
OWNED_CONTAINER_FIELDS: Final[Mapping[str, str]] = {
    "command": (
        "set by trainplan: torchrun with the plan's layout; give the program with "
        "job.command and job.args"
    ),
    "args": (
        "set by trainplan: torchrun's flags, then job.command and job.args; give the "
        "program's arguments with job.args"
    ),
    "image": "set by job.image",
    "ports": ("set by trainplan: the rendezvous port 29500 and the metrics port (job.metricsPort)"),
}
"""Container fields trainplan owns, with the reason given when a pod template sets one."""


def _list_map(key: str) -> dict[str, Any]:
    """CRD list type of a list merged by `key` (the API server refuses a repeated key)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


def _free_object(
    description: str,
    max_properties: int,
    *,
    min_properties: int | None = None,
    keys: Mapping[str, tuple[int, str]] | None = None,
) -> WithJsonSchema:
    """The CRD schema of a Kubernetes object this module does not type: its fields are
    kept as given (checked against the Kubernetes schema at render); `keys` are required
    strings, each with its maximum length and description."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": description,
        "maxProperties": max_properties,
        **_PRESERVE,
    }
    if min_properties is not None:
        schema["minProperties"] = min_properties
    if keys:
        schema["required"] = list(keys)
        schema["properties"] = {
            key: {
                "type": "string",
                "minLength": 1,
                "maxLength": max_length,
                "description": key_description,
            }
            for key, (max_length, key_description) in keys.items()
        }
    return WithJsonSchema(schema, mode="validation")


def _text(document: Mapping[str, Any], key: str, max_length: int) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} is required (a non-empty string)")
    if len(value) > max_length:
        raise ValueError(f"{key} has more than {max_length} characters")
    return value


def _check_volume(volume: dict[str, Any]) -> dict[str, Any]:
    name = _text(volume, "name", 63)
    if not re.fullmatch(DNS_LABEL_PATTERN, name):
        raise ValueError(f"name {name!r} is not a DNS label (lower-case letters, digits, '-')")
    sources = sorted(key for key in volume if key != "name")
    if len(sources) != 1:
        given = ", ".join(sources) if sources else "none"
        raise ValueError(
            f"a volume has exactly one source (persistentVolumeClaim, secret, configMap, "
            f"emptyDir, ...); given: {given}"
        )
    return volume


def _check_env(variable: dict[str, Any]) -> dict[str, Any]:
    name = _text(variable, "name", ENV_NAME_MAX_LENGTH)
    if name == OWNED_ENV:
        raise ValueError(
            f"{OWNED_ENV} is the node rank, set from the pod's completion index; it cannot "
            f"be overridden"
        )
    if "value" in variable and "valueFrom" in variable:
        raise ValueError(f"{name}: give value or valueFrom, not both")
    return variable


def _check_env_from(source: dict[str, Any]) -> dict[str, Any]:
    given = [key for key in ("configMapRef", "secretRef") if key in source]
    if len(given) != 1:
        raise ValueError("an envFrom entry names exactly one of configMapRef or secretRef")
    return source


def _check_mount(mount: dict[str, Any]) -> dict[str, Any]:
    _text(mount, "name", 63)
    _text(mount, "mountPath", PATH_MAX_LENGTH)
    return mount


Volume = Annotated[
    dict[str, Any],
    AfterValidator(_check_volume),
    _free_object(
        "A Kubernetes volume: its name and one source (persistentVolumeClaim, secret, "
        "configMap, emptyDir, csi, ...).",
        2,
        min_properties=2,
        keys={"name": (63, "Volume name, a DNS label; the key the volumes are merged by.")},
    ),
]
EnvEntry = Annotated[
    dict[str, Any],
    MaxLen(3),
    AfterValidator(_check_env),
    _free_object(
        "A Kubernetes EnvVar: name, and value or valueFrom (secretKeyRef, configMapKeyRef, "
        "fieldRef, resourceFieldRef).",
        3,
        keys={"name": (ENV_NAME_MAX_LENGTH, "Variable name; the key the variables are merged by.")},
    ),
]
EnvFromEntry = Annotated[
    dict[str, Any],
    MaxLen(3),
    AfterValidator(_check_env_from),
    _free_object(
        "A Kubernetes EnvFromSource: a configMapRef or a secretRef, and an optional prefix.",
        3,
    ),
]
VolumeMount = Annotated[
    dict[str, Any],
    MaxLen(8),
    AfterValidator(_check_mount),
    _free_object(
        "A Kubernetes VolumeMount: name, mountPath, and readOnly, subPath, ... as needed.",
        8,
        keys={
            "name": (63, "The volume mounted (a volume of the pod)."),
            "mountPath": (
                PATH_MAX_LENGTH,
                "Where it is mounted; the key the mounts are merged by.",
            ),
        },
    ),
]
Affinity = Annotated[
    dict[str, Any],
    MaxLen(3),
    _free_object("A Kubernetes Affinity: nodeAffinity, podAffinity, podAntiAffinity.", 3),
]
PodSecurityContextObject = Annotated[
    dict[str, Any],
    MaxLen(MAX_SECURITY_CONTEXT_FIELDS),
    _free_object(
        "A Kubernetes PodSecurityContext, merged over the one trainplan renders "
        "(job.securityContext, seccomp RuntimeDefault); its fields win.",
        MAX_SECURITY_CONTEXT_FIELDS,
    ),
]
ContainerSecurityContextObject = Annotated[
    dict[str, Any],
    MaxLen(MAX_SECURITY_CONTEXT_FIELDS),
    _free_object(
        "A Kubernetes SecurityContext of the trainer container, merged over the one "
        "trainplan renders (no privilege escalation, every capability dropped); its "
        "fields win.",
        MAX_SECURITY_CONTEXT_FIELDS,
    ),
]
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]
AnnotationValue = Annotated[str, StringConstraints(max_length=ANNOTATION_VALUE_MAX_LENGTH)]
ObjectName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=NAME_MAX_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN),
]


def _owned_fields(data: object, owned: Mapping[str, str]) -> None:
    """Refuse the fields of `owned` that `data` (a raw document) sets, with the reasons."""
    if isinstance(data, Mapping):
        given = [f"{key} is {reason}" for key, reason in owned.items() if key in data]
        if given:
            raise ValueError("; ".join(given))


def _repeated(values: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    repeated: list[str] = []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    return repeated


def _unique(items: Iterable[Mapping[str, Any]], key: str) -> None:
    repeated = _repeated(str(item[key]) for item in items)
    if repeated:
        raise ValueError(f"repeated {key}: {', '.join(repeated)} (each may appear once)")


def _key_problem(key: str) -> str | None:
    """Why `key` is not a label or annotation key (a qualified name), or None."""
    prefix, _, name = key.rpartition("/")
    if re.fullmatch(QUALIFIED_NAME_PATTERN, key) and len(name) <= 63 and len(prefix) <= 253:
        return None
    return (
        f"{key!r} is not a valid key (an optional DNS-subdomain prefix and '/', then a name "
        f"of at most 63 letters, digits, '-', '_' or '.')"
    )


def owned_label_reason(key: str) -> str | None:
    """Why a pod template cannot set the label `key`, or None when it may."""
    if key.startswith(OWNED_LABEL_PREFIXES):
        return "set by trainplan: the plan's pods are selected by these labels"
    if key.startswith(CONTROLLER_PREFIXES) or key in CONTROLLER_LABELS:
        return "set by the Job or JobSet controller"
    return None


def owned_annotation_reason(key: str) -> str | None:
    """Why a pod template cannot set the annotation `key`, or None when it may."""
    if key in METRICS_ANNOTATIONS:
        return "set by trainplan from job.metricsPort"
    if key in TOPOLOGY_ANNOTATIONS:
        return "set by trainplan from job.topology"
    if key.startswith(f"{GROUP}/"):
        return "reserved for trainplan"
    if key.startswith(CONTROLLER_PREFIXES):
        return "set by the Job or JobSet controller (the completion index, for one)"
    return None


def _check_keys(keys: Iterable[str], owned: Callable[[str], str | None]) -> None:
    problems = []
    for key in keys:
        problem = _key_problem(key)
        reason = owned(key)
        if problem is not None:
            problems.append(problem)
        elif reason is not None:
            problems.append(f"{key} is {reason}")
    if problems:
        raise ValueError("; ".join(problems))


class PodTemplateMetadata(ApiModel):
    """Labels and annotations added to the training pods' own."""

    model_config = ConfigDict(json_schema_extra=_PRESERVE)

    labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description=(
            "Pod labels added to trainplan's; trainplan.dev/* and app.kubernetes.io/* "
            "keys are trainplan's."
        ),
    )
    annotations: dict[str, AnnotationValue] = Field(
        default_factory=dict,
        max_length=MAX_ANNOTATIONS,
        description="Pod annotations added to trainplan's; prometheus.io/* are trainplan's.",
    )

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        _check_keys(labels, owned_label_reason)
        return labels

    @field_validator("annotations")
    @classmethod
    def _check_annotations(cls, annotations: dict[str, str]) -> dict[str, str]:
        _check_keys(annotations, owned_annotation_reason)
        return annotations


class LocalObjectReference(ApiModel):
    """A Secret in the plan's namespace, by name."""

    name: ObjectName = Field(description="Secret name.")


class ResourcesOverride(ApiModel):
    """Limits and requests of the trainer container, merged by resource name over the
    rendered ones (job.resources and the plan's nvidia.com/gpu or amd.com/gpu)."""

    model_config = ConfigDict(json_schema_extra=_PRESERVE)

    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_RESOURCES,
        description="Limits by resource name, e.g. rdma/rdma_shared_device_a: 1.",
    )
    requests: dict[str, Quantity] = Field(
        default_factory=dict, max_length=MAX_RESOURCES, description="Requests by resource name."
    )

    @field_validator("limits", "requests")
    @classmethod
    def _check_names(cls, amounts: dict[str, str]) -> dict[str, str]:
        problems = [problem for key in amounts if (problem := _key_problem(key)) is not None]
        if problems:
            raise ValueError("; ".join(problems))
        return amounts


class TrainerContainerOverride(ApiModel):
    """What is merged into the trainer container."""

    model_config = ConfigDict(json_schema_extra=_PRESERVE)

    name: Literal["trainer"] = Field(
        description="trainer: the training container, the only one a pod template patches."
    )
    env: tuple[EnvEntry, ...] = Field(
        (),
        max_length=MAX_ENV,
        description=(
            "Variables by name; one replaces the rendered variable of its name "
            "(JOB_COMPLETION_INDEX excepted)."
        ),
        json_schema_extra=_list_map("name"),
    )
    env_from: tuple[EnvFromEntry, ...] = Field(
        (), max_length=MAX_ENV_FROM, description="Variables from ConfigMaps and Secrets."
    )
    volume_mounts: tuple[VolumeMount, ...] = Field(
        (),
        max_length=MAX_VOLUME_MOUNTS,
        description="Mounts added to the rendered ones, by mountPath.",
        json_schema_extra=_list_map("mountPath"),
    )
    resources: ResourcesOverride | None = Field(
        None, description="Limits and requests merged over the rendered ones."
    )
    security_context: ContainerSecurityContextObject | None = Field(
        None, description="Merged over the rendered container security context."
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_owned(cls, data: object) -> object:
        if isinstance(data, Mapping) and data.get("name", TRAINER_CONTAINER) != TRAINER_CONTAINER:
            raise ValueError(
                f"only the {TRAINER_CONTAINER} container can be patched (got "
                f"{data.get('name')!r}); a pod template adds no containers"
            )
        _owned_fields(data, OWNED_CONTAINER_FIELDS)
        return data

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        _unique(env, "name")
        return env

    @field_validator("volume_mounts")
    @classmethod
    def _unique_mounts(cls, mounts: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        _unique(mounts, "mountPath")
        return mounts


class PodSpecOverride(ApiModel):
    """The pod spec fields a pod template may set; each is merged onto the rendered pod."""

    model_config = ConfigDict(json_schema_extra=_PRESERVE)

    service_account_name: ObjectName | None = Field(
        None, description="ServiceAccount the pods run as (its token, its image pull secrets)."
    )
    image_pull_secrets: tuple[LocalObjectReference, ...] = Field(
        (),
        max_length=MAX_IMAGE_PULL_SECRETS,
        description="Secrets for pulling job.image from a private registry.",
        json_schema_extra=_list_map("name"),
    )
    volumes: tuple[Volume, ...] = Field(
        (),
        max_length=MAX_VOLUMES,
        description="Volumes added to the rendered ones (datasets, caches, secrets).",
        json_schema_extra=_list_map("name"),
    )
    affinity: Affinity | None = Field(None, description="Node and pod affinity of the pods.")
    tolerations: tuple[Toleration, ...] = Field(
        (),
        max_length=MAX_TOLERATIONS,
        description=(
            "Tolerations added to job.tolerations and the GPU's (nvidia.com/gpu or amd.com/gpu)."
        ),
    )
    priority_class_name: ObjectName | None = Field(
        None, description="PriorityClass of the pods (scheduling priority and preemption)."
    )
    scheduler_name: ObjectName | None = Field(
        None, description="Scheduler of the pods; default the cluster's default scheduler."
    )
    security_context: PodSecurityContextObject | None = Field(
        None, description="Merged over the rendered pod security context."
    )
    host_network: bool | None = Field(
        None,
        description=(
            "Run in the node's network namespace (RDMA/RoCE NICs without a CNI); outside "
            "Pod Security baseline and restricted."
        ),
    )
    containers: tuple[TrainerContainerOverride, ...] = Field(
        (),
        max_length=1,
        description="The trainer container's env, envFrom, volumeMounts, resources, "
        "securityContext.",
        json_schema_extra=_list_map("name"),
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_owned(cls, data: object) -> object:
        _owned_fields(data, OWNED_POD_FIELDS)
        return data

    @field_validator("image_pull_secrets")
    @classmethod
    def _unique_secrets(
        cls, secrets: tuple[LocalObjectReference, ...]
    ) -> tuple[LocalObjectReference, ...]:
        repeated = _repeated(secret.name for secret in secrets)
        if repeated:
            raise ValueError(f"repeated name: {', '.join(repeated)} (each may appear once)")
        return secrets

    @field_validator("volumes")
    @classmethod
    def _unique_volumes(cls, volumes: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        _unique(volumes, "name")
        return volumes


class PodTemplateOverride(ApiModel):
    """A partial pod template merged onto the rendered training pods: maps merged, lists
    of named items merged by name (volume mounts by mountPath), other fields replaced."""

    model_config = ConfigDict(json_schema_extra=_PRESERVE)

    metadata: PodTemplateMetadata = Field(
        default_factory=PodTemplateMetadata, description="Labels and annotations of the pods."
    )
    spec: PodSpecOverride = Field(
        default_factory=PodSpecOverride, description="Pod spec fields merged onto the pods."
    )

    def to_patch(self) -> dict[str, Any]:
        """The pod template patch: camelCase, the fields left out (or empty) absent."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)

    @property
    def trainer(self) -> TrainerContainerOverride | None:
        """The trainer container's patch, if any."""
        return self.spec.containers[0] if self.spec.containers else None
