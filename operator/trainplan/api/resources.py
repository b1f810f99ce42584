"""The TrainingPlan and GPUBudget resources, parsing of user files, and error formatting.

Pure: pydantic and the standard library only; no I/O.
"""

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import AwareDatetime, ConfigDict, Field, ValidationError

from trainplan.api.base import ApiModel
from trainplan.api.budget import GPUBudgetSpec, GPUBudgetStatus
from trainplan.api.constants import API_VERSION, GPU_BUDGET_KIND, TRAINING_PLAN_KIND
from trainplan.api.spec import SUPPORTED_MODELS, TrainingPlanSpec
from trainplan.api.status import TrainingPlanStatus

_RESOURCE_KEYS: Final = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


class OwnerReference(ApiModel):
    """A Kubernetes owner reference; fields Kubernetes adds later are kept."""

    model_config = ConfigDict(extra="allow")

    api_version: str = Field(description="API version of the owner.")
    kind: str = Field(description="Kind of the owner.")
    name: str = Field(description="Name of the owner.")
    uid: str = Field(description="UID of the owner.")
    controller: bool | None = Field(None, description="The owner is the managing controller.")
    block_owner_deletion: bool | None = Field(
        None, description="Foreground deletion of the owner waits for this object."
    )


class ObjectMeta(ApiModel):
    """The metadata trainplan reads; every other metadata field Kubernetes sets is kept."""

    model_config = ConfigDict(extra="allow")

    name: str | None = Field(None, description="Object name.")
    generate_name: str | None = Field(None, description="Prefix for a generated name.")
    namespace: str | None = Field(None, description="Namespace.")
    uid: str | None = Field(None, description="Unique id set by the API server.")
    generation: int | None = Field(None, ge=0, description="Spec generation.")
    resource_version: str | None = Field(None, description="Version for optimistic locking.")
    creation_timestamp: AwareDatetime | None = Field(None, description="When it was created.")
    labels: dict[str, str] | None = Field(None, description="Labels.")
    annotations: dict[str, str] | None = Field(None, description="Annotations.")
    owner_references: tuple[OwnerReference, ...] | None = Field(
        None, description="Owners of this object."
    )
    finalizers: tuple[str, ...] | None = Field(None, description="Finalizers.")


class TrainingPlan(ApiModel):
    """A whole TrainingPlan resource."""

    api_version: Literal["trainplan.dev/v1alpha1"] = Field(
        API_VERSION, description="trainplan.dev/v1alpha1."
    )
    kind: Literal["TrainingPlan"] = Field(TRAINING_PLAN_KIND, description="TrainingPlan.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: TrainingPlanSpec = Field(description="What to train, on what, by when.")
    status: TrainingPlanStatus | None = Field(None, description="Written by the operator.")


class GPUBudget(ApiModel):
    """A whole GPUBudget resource."""

    api_version: Literal["trainplan.dev/v1alpha1"] = Field(
        API_VERSION, description="trainplan.dev/v1alpha1."
    )
    kind: Literal["GPUBudget"] = Field(GPU_BUDGET_KIND, description="GPUBudget.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: GPUBudgetSpec = Field(description="The allowance and its enforcement.")
    status: GPUBudgetStatus | None = Field(None, description="Written by the operator.")


class _TrainingPlanHeader(ApiModel):
    """apiVersion and kind alone, checked first so that a wrong kind is the only error."""

    model_config = ConfigDict(extra="ignore", title="TrainingPlan")

    api_version: Literal["trainplan.dev/v1alpha1"] = API_VERSION
    kind: Literal["TrainingPlan"] = TRAINING_PLAN_KIND


def parse_training_plan_spec(document: Mapping[str, Any]) -> TrainingPlanSpec:
    """The spec of a whole TrainingPlan resource or of a bare spec.

    A document with any of apiVersion, kind, metadata, spec or status is a resource: a wrong
    apiVersion or kind is reported alone, and error locations read `spec.model...`. Anything
    else is validated as a bare spec. Raises pydantic.ValidationError.
    """
    if isinstance(document, Mapping) and not _RESOURCE_KEYS.isdisjoint(document):
        _TrainingPlanHeader.model_validate(document)
        return TrainingPlan.model_validate(document).spec
    return TrainingPlanSpec.model_validate(document)


def _format_location(location: tuple[int | str, ...]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(root)"


def _in_model(location: tuple[int | str, ...]) -> bool:
    """Whether `location` is a field directly below a spec's `model` (e.g. `experts`)."""
    parts = location[1:] if location[:1] == ("spec",) else location
    return len(parts) == 2 and parts[0] == "model"


def format_validation_errors(error: ValidationError) -> list[str]:
    """One line per problem: "<dotted.camelCase.path>: <message>".

    List indices read `env[0]`; an error of a whole-model rule carries that model's path, and
    one on the document itself reads "(root)".
    """
    lines: list[str] = []
    for detail in error.errors(include_url=False):
        message = detail["msg"]
        cause = detail.get("ctx", {}).get("error")
        if detail["type"] == "value_error" and cause is not None:
            message = str(cause)
        elif detail["type"] == "literal_error":
            message = f"{message} (got {detail['input']!r})"
        elif detail["type"] == "extra_forbidden" and _in_model(detail["loc"]):
            message = f"{message}: {SUPPORTED_MODELS}"
        lines.append(f"{_format_location(detail['loc'])}: {message}")
    return lines
