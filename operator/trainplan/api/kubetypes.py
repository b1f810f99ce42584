"""Kubernetes value types shared by the spec models: resource quantities, tolerations and
object-name patterns.

Pure: pydantic and the standard library only; no I/O.
"""

from typing import Annotated, Final, Literal

from pydantic import BeforeValidator, Field, StringConstraints, WithJsonSchema

from trainplan.api.base import ApiModel


def number_to_text(value: object) -> object:
    """Let users write `cpu: 32` for a resource quantity, as kubectl does."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


RESOURCE_QUANTITY_PATTERN: Final = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""A non-negative Kubernetes quantity: the grammar of apimachinery's `resource.Quantity`
(the pattern controller-gen writes for it) without a minus sign, since requests cannot be
negative: "32", "500m", "256Gi", "1e3"."""
QUANTITY_MAX_LENGTH: Final = 64
"""Longest quantity text accepted."""

Quantity = Annotated[
    str,
    BeforeValidator(number_to_text),
    StringConstraints(max_length=QUANTITY_MAX_LENGTH, pattern=RESOURCE_QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": RESOURCE_QUANTITY_PATTERN,
            "maxLength": QUANTITY_MAX_LENGTH,
        },
        mode="validation",
    ),
]
"""A Kubernetes resource quantity ("32", "500m", "256Gi"); a bare number is read as its
text. Its input schema is Kubernetes' int-or-string, as for the quantities of built-in
kinds, with the quantity grammar as a pattern, so `cpu: lots` is refused at apply."""

NAME_MAX_LENGTH: Final = 253
"""Longest Kubernetes object name (a DNS subdomain)."""
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (RFC 1123 subdomain): no slash, no dot segment."""
DNS_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""An RFC 1123 label (at most 63 characters): a volume name, for one."""
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""A Kubernetes label value (at most 63 characters; may be empty)."""
QUALIFIED_NAME_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
"""A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at
most 63 characters."""


class Toleration(ApiModel):
    """A Kubernetes toleration for the training pods."""

    key: str | None = Field(None, description="Taint key; empty with Exists matches all taints.")
    operator: Literal["Exists", "Equal"] | None = Field(
        None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(None, description="Taint value, for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; empty matches all."
    )
    toleration_seconds: int | None = Field(
        None, description="For NoExecute: seconds the pod stays bound after the taint appears."
    )
