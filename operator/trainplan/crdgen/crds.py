"""The TrainingPlan, GPUBudget and ClusterCalibration CustomResourceDefinitions
(apiextensions.k8s.io/v1).

Built from the pydantic models of `trainplan.api` by `structural_schema`, plus what only a
CRD has: names, printer columns, the status subresource, list types, and CEL validation
rules (`x-kubernetes-validations`) for the static checks that belong in the API server.
Each CEL rule mirrors a validator of the models, so the API server never rejects what the
operator would accept; each is a fixed number of field tests (no loops over lists), so its
estimated cost stays far below the API server's limits.

Pure: imports only `trainplan.api`, pydantic and the standard library; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pydantic import BaseModel

from trainplan.api import (
    APP_NAME_LABEL,
    APP_PART_OF_LABEL,
    CLUSTER_CALIBRATION_KIND,
    CLUSTER_CALIBRATION_PLURAL,
    CLUSTER_CALIBRATION_SHORT_NAMES,
    GPU_BUDGET_KIND,
    GPU_BUDGET_PLURAL,
    GROUP,
    MOE_FIELDS,
    TRAINING_PLAN_KIND,
    TRAINING_PLAN_PLURAL,
    TRAINING_PLAN_SHORT_NAMES,
    VERSION,
    ClusterCalibration,
    ClusterCalibrationSpec,
    ClusterCalibrationStatus,
    GPUBudget,
    GPUBudgetSpec,
    GPUBudgetStatus,
    TrainingPlan,
    TrainingPlanSpec,
    TrainingPlanStatus,
)
from trainplan.crdgen.schema import StructuralSchemaError, structural_schema

__all__ = [
    "CATEGORY",
    "CLUSTER_CALIBRATION_COLUMNS",
    "GPU_BUDGET_COLUMNS",
    "GPU_BUDGET_SHORT_NAMES",
    "IMMUTABLE_AFTER_LAUNCH",
    "TRAINING_PLAN_COLUMNS",
    "all_crds",
    "cluster_calibration_crd",
    "crd_name",
    "gpu_budget_crd",
    "training_plan_crd",
]

CATEGORY: Final = "trainplan"
"""`kubectl get trainplan` lists every trainplan resource."""

GPU_BUDGET_SHORT_NAMES: Final = ("gpub",)

IMMUTABLE_AFTER_LAUNCH: Final = ("model", "data", "batch")
"""Spec sections fixed once the job exists (`status.jobName` set): they define the run."""

_API_VERSION_DESCRIPTION: Final = (
    "APIVersion defines the versioned schema of this representation of an object."
)
_KIND_DESCRIPTION: Final = "Kind is a string value representing the REST resource this object is."
_METADATA_DESCRIPTION: Final = "Standard object metadata."
_TRAINING_PLAN_DESCRIPTION: Final = (
    "A GPU training run: trainplan plans its GPU count and parallel layout, launches it as a "
    "torchrun job and keeps a failure-aware ETA in its status."
)
_CLUSTER_CALIBRATION_DESCRIPTION: Final = (
    "What a cluster's finished TrainingPlans measured (planned and measured step time,"
    " interruptions over GPU-hours) and the corrections they support for the next plans."
)
_GPU_BUDGET_DESCRIPTION: Final = (
    "A namespace's allowance of GPU-hours per rolling period, and the GPU-hours its "
    "TrainingPlans have used and committed."
)


def _column(name: str, json_path: str, column_type: str) -> dict[str, str]:
    return {"name": name, "type": column_type, "jsonPath": json_path}


_AGE: Final = _column("Age", ".metadata.creationTimestamp", "date")

TRAINING_PLAN_COLUMNS: Final = (
    _column("Phase", ".status.phase", "string"),
    _column("GPUs", ".status.gpus", "integer"),
    _column("Layout", ".status.layout", "string"),
    _column("Progress", ".status.progressPercentage", "integer"),
    # A string, not a date: kubectl prints a date column as an age ("3d"), which reads
    # wrongly for a time in the future.
    _column("ETA", ".status.estimatedCompletionTime", "string"),
    _AGE,
)
"""`kubectl get trainingplans`: phase, GPUs, layout, percent done, estimated completion, age."""

GPU_BUDGET_COLUMNS: Final = (
    _column("Limit", ".spec.gpuHours", "number"),
    _column("Used", ".status.usedGPUHours", "number"),
    _column("Committed", ".status.committedGPUHours", "number"),
    _column("Remaining", ".status.remainingGPUHours", "number"),
    _column("Charged-At", ".spec.chargeConfidence", "number"),
    _AGE,
)
"""`kubectl get gpubudgets`: the allowance, GPU-hours used, committed and left, the least
quantile plans are charged at (0.5: the estimate), age."""


CLUSTER_CALIBRATION_COLUMNS: Final = (
    _column("GPU", ".spec.gpuType", "string"),
    _column("Runs", ".status.runs", "integer"),
    _column("Step-Factor", ".status.stepSecondsFactor", "number"),
    _column("Interruptions/GPU-h", ".status.interruptionsPerGPUHour", "number"),
    _AGE,
)
"""`kubectl get clustercalibrations`: GPU type, runs, the step-time factor, the failure
rate, age."""


def _rule(rule: str, message: str, *, reason: str | None = None) -> dict[str, str]:
    entry = {"rule": rule, "message": message}
    if reason is not None:
        entry["reason"] = reason
    return entry


def _immutable_after_launch_rule() -> dict[str, str]:
    unchanged = " && ".join(
        f"self.spec.{section} == oldSelf.spec.{section}" for section in IMMUTABLE_AFTER_LAUNCH
    )
    *first, last = (f"spec.{section}" for section in IMMUTABLE_AFTER_LAUNCH)
    sections = f"{', '.join(first)} and {last}"
    return {
        "rule": f"!has(oldSelf.status) || !has(oldSelf.status.jobName) || ({unchanged})",
        "message": (
            f"{sections} cannot change once the plan has launched (status.jobName is set); "
            "create a new TrainingPlan instead"
        ),
        "reason": "FieldValueForbidden",
        "fieldPath": ".spec",
    }


# Rules on spec sections, keyed by the path below `spec`. Each repeats a model validator of
# trainplan.api.spec; a field left out is absent in CEL (`has` is false).
_TRAINING_PLAN_SPEC_RULES: Final[Mapping[tuple[str, ...], tuple[dict[str, str], ...]]] = {
    ("model",): (
        _rule(
            "has(self.preset) || (has(self.layers) && has(self.hiddenSize) && "
            "has(self.attentionHeads) && has(self.vocabSize) && has(self.sequenceLength))",
            "give either preset or all of layers, hiddenSize, attentionHeads, vocabSize, "
            "sequenceLength",
            reason="FieldValueRequired",
        ),
        _rule(
            "has(self.preset) || has(self.experts) || !("
            + " || ".join(f"has(self.{name})" for name in MOE_FIELDS)
            + ")",
            f"{', '.join(MOE_FIELDS)} need experts (a mixture-of-experts model)",
        ),
        _rule(
            "has(self.preset) || !has(self.experts) || has(self.expertsPerToken)",
            "experts needs expertsPerToken (the top-k routing)",
            reason="FieldValueRequired",
        ),
        _rule(
            "!has(self.experts) || !has(self.expertsPerToken) || "
            "self.expertsPerToken <= self.experts",
            "expertsPerToken must not exceed experts",
        ),
    ),
    ("data",): (
        _rule(
            "has(self.tokens) != has(self.samples)",
            "give exactly one of tokens or samples",
        ),
    ),
    ("batch",): (
        _rule(
            "!has(self.microBatchSize) || self.microBatchSize < 1 || "
            "(self.microBatchSize <= self.globalBatchSize && "
            "self.globalBatchSize % self.microBatchSize == 0)",
            "microBatchSize must not exceed globalBatchSize and must divide it",
        ),
    ),
    ("objective",): (
        _rule(
            "!(has(self.gpus) && has(self.deadline))",
            "give gpus or deadline, not both; to cap a deadline search use maxGPUs",
        ),
        _rule(
            "!has(self.gpus) || !has(self.maxGPUs) || self.gpus <= self.maxGPUs",
            "gpus must not exceed maxGPUs",
        ),
    ),
    ("training",): (
        _rule(
            "!has(self.lora) || (has(self.method) && "
            "(self.method == 'lora' || self.method == 'qlora'))",
            "lora needs method lora or qlora",
        ),
        _rule(
            "!has(self.method) || self.method != 'qlora' || !has(self.precision) || "
            "self.precision == 'bf16' || self.precision == 'fp16'",
            "qlora computes in bf16 or fp16",
        ),
    ),
    ("parallelism",): (
        _rule(
            "!has(self.zeroStage) || self.zeroStage != 3 || "
            "!has(self.pipeline) || self.pipeline <= 1",
            "zeroStage 3 with pipeline > 1 is not supported by the frameworks trainplan "
            "launches; use zeroStage <= 2",
        ),
        _rule(
            "!has(self.virtualPipelineStages) || self.virtualPipelineStages <= 1 || "
            "!has(self.pipeline) || self.pipeline > 1",
            "virtualPipelineStages > 1 needs pipeline > 1",
        ),
    ),
}

_CONDITIONS_LIST_MAP: Final = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


def _node(schema: dict[str, Any], path: Sequence[str]) -> dict[str, Any]:
    """The schema node at `path` (property names), or StructuralSchemaError if missing."""
    node = schema
    for depth, name in enumerate(path):
        properties = node.get("properties", {})
        if name not in properties:
            where = ".".join(path[: depth + 1])
            raise StructuralSchemaError(where, "no such field for a CRD rule or list type")
        node = properties[name]
    return node


def _add_rules(node: dict[str, Any], rules: Iterable[Mapping[str, str]]) -> None:
    node.setdefault("x-kubernetes-validations", []).extend(dict(rule) for rule in rules)


def _field_description(model: type[BaseModel], field: str) -> str:
    description = model.model_fields[field].description
    if not description:
        raise StructuralSchemaError(field, f"{model.__name__}.{field} has no description")
    return description


def _root_schema(
    resource: type[BaseModel],
    description: str,
    spec_model: type[BaseModel],
    status_model: type[BaseModel],
) -> dict[str, Any]:
    """openAPIV3Schema of a resource: apiVersion, kind, metadata, spec, status."""
    spec = structural_schema(spec_model)
    spec["description"] = _field_description(resource, "spec")
    status = structural_schema(status_model)
    status["description"] = _field_description(resource, "status")
    _node(status, ("conditions",)).update(_CONDITIONS_LIST_MAP)
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DESCRIPTION},
            "kind": {"type": "string", "description": _KIND_DESCRIPTION},
            # Only metadata.name and generateName may be constrained; the server owns the rest.
            "metadata": {"type": "object", "description": _METADATA_DESCRIPTION},
            "spec": spec,
            "status": status,
        },
    }


def crd_name(plural: str) -> str:
    """The CRD's metadata.name: `<plural>.<group>`."""
    return f"{plural}.{GROUP}"


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: Sequence[str],
    schema: dict[str, Any],
    columns: Sequence[Mapping[str, str]],
    scope: str = "Namespaced",
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": crd_name(plural),
            "labels": {APP_NAME_LABEL: "trainplan", APP_PART_OF_LABEL: "trainplan"},
        },
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": list(short_names),
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(column) for column in columns],
                }
            ],
        },
    }


def training_plan_crd() -> dict[str, Any]:
    """The TrainingPlan CRD: schema from TrainingPlanSpec/Status, columns, CEL rules."""
    schema = _root_schema(
        TrainingPlan, _TRAINING_PLAN_DESCRIPTION, TrainingPlanSpec, TrainingPlanStatus
    )
    _add_rules(schema, [_immutable_after_launch_rule()])
    spec = schema["properties"]["spec"]
    for path, rules in _TRAINING_PLAN_SPEC_RULES.items():
        _add_rules(_node(spec, path), rules)
    return _crd(
        kind=TRAINING_PLAN_KIND,
        plural=TRAINING_PLAN_PLURAL,
        short_names=TRAINING_PLAN_SHORT_NAMES,
        schema=schema,
        columns=TRAINING_PLAN_COLUMNS,
    )


def gpu_budget_crd() -> dict[str, Any]:
    """The GPUBudget CRD: schema from GPUBudgetSpec/Status and its columns."""
    return _crd(
        kind=GPU_BUDGET_KIND,
        plural=GPU_BUDGET_PLURAL,
        short_names=GPU_BUDGET_SHORT_NAMES,
        schema=_root_schema(GPUBudget, _GPU_BUDGET_DESCRIPTION, GPUBudgetSpec, GPUBudgetStatus),
        columns=GPU_BUDGET_COLUMNS,
    )


def cluster_calibration_crd() -> dict[str, Any]:
    """The ClusterCalibration CRD (cluster-scoped): schema from its Spec/Status, columns."""
    return _crd(
        kind=CLUSTER_CALIBRATION_KIND,
        plural=CLUSTER_CALIBRATION_PLURAL,
        short_names=CLUSTER_CALIBRATION_SHORT_NAMES,
        schema=_root_schema(
            ClusterCalibration,
            _CLUSTER_CALIBRATION_DESCRIPTION,
            ClusterCalibrationSpec,
            ClusterCalibrationStatus,
        ),
        columns=CLUSTER_CALIBRATION_COLUMNS,
        scope="Cluster",
    )


def all_crds() -> list[dict[str, Any]]:
    """Every CRD trainplan defines, TrainingPlan first."""
    return [training_plan_crd(), gpu_budget_crd(), cluster_calibration_crd()]
