"""The base class of every trainplan API model.

Pure: pydantic only; no I/O.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Frozen, strict-keyed model with camelCase JSON names and snake_case attributes."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=True,
        allow_inf_nan=False,
    )

    def to_document(self) -> dict[str, Any]:
        """The JSON-compatible document: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
