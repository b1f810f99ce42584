"""trainplan.crdgen: the CustomResourceDefinitions, generated from the pydantic API models.

`structural_schema` turns a model's JSON Schema into a Kubernetes structural OpenAPI v3
schema; `training_plan_crd`, `gpu_budget_crd` and `all_crds` build the apiextensions.k8s.io/v1
CRDs (names, printer columns, status subresource, CEL rules). `trainplan crds` writes them
to `crds/`.

Pure: imports only `trainplan.api`, pydantic and the standard library; no I/O.
"""

from trainplan.crdgen.crds import (
    CATEGORY,
    GPU_BUDGET_COLUMNS,
    GPU_BUDGET_SHORT_NAMES,
    IMMUTABLE_AFTER_LAUNCH,
    TRAINING_PLAN_COLUMNS,
    all_crds,
    crd_name,
    gpu_budget_crd,
    training_plan_crd,
)
from trainplan.crdgen.schema import StructuralSchemaError, structural_schema

__all__ = [
    "CATEGORY",
    "GPU_BUDGET_COLUMNS",
    "GPU_BUDGET_SHORT_NAMES",
    "IMMUTABLE_AFTER_LAUNCH",
    "TRAINING_PLAN_COLUMNS",
    "StructuralSchemaError",
    "all_crds",
    "crd_name",
    "gpu_budget_crd",
    "structural_schema",
    "training_plan_crd",
]
