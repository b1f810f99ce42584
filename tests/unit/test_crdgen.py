"""trainplan.crdgen.structural_schema: each rewrite rule on a small model, and its errors."""

from __future__ import annotations

import ast
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, WithJsonSchema

import trainplan.crdgen
from trainplan.api import ApiModel, Quantity
from trainplan.api.durations import DURATION_PATTERN, Duration
from trainplan.api.kubetypes import QUANTITY_MAX_LENGTH, RESOURCE_QUANTITY_PATTERN
from trainplan.crdgen import StructuralSchemaError, structural_schema, training_plan_crd


class Inner(ApiModel):
    """An inner model."""

    size_bytes: int = Field(ge=0, description="Bytes.")


class Shapes(ApiModel):
    """Every construct the API models use."""

    count: int = Field(3, ge=1, le=8, description="A bounded integer with a default.")
    ratio: float = Field(gt=0, lt=1, description="An open interval.")
    name: str | None = Field(None, min_length=1, description="An optional string.")
    inner: Inner = Field(description="A nested model, described here.")
    maybe_inner: Inner | None = Field(None, description="An optional nested model.")
    items: tuple[Inner, ...] = Field((), max_length=4, description="A list of models.")
    words: tuple[str, ...] = Field(("a",), description="A list with a list default.")
    labels: dict[str, str] = Field(default_factory=dict, description="A map of strings.")
    quantities: dict[str, Quantity] = Field(default_factory=dict, description="Quantities.")
    mode: Literal["fast", "slow"] = Field("fast", description="An enum.")
    fixed: Literal["v1"] = Field("v1", description="A constant.")
    when: AwareDatetime | None = Field(None, description="A time.")
    deadline: Duration | None = Field(None, description="A duration.")
    pair: tuple[int, int] = Field((1, 2), description="A fixed-length tuple.")


@pytest.fixture(scope="module")
def shapes() -> dict[str, object]:
    return structural_schema(Shapes)


def prop(schema: dict[str, object], name: str) -> dict[str, object]:
    properties = schema["properties"]
    assert isinstance(properties, dict)
    node = properties[name]
    assert isinstance(node, dict)
    return node


def test_object_with_properties_keeps_required_and_drops_additional_false(
    shapes: dict[str, object],
) -> None:
    assert shapes["type"] == "object"
    assert shapes["description"] == "Every construct the API models use."
    assert shapes["required"] == ["ratio", "inner"]
    assert "additionalProperties" not in shapes
    assert "title" not in shapes


def test_scalar_bounds_and_defaults(shapes: dict[str, object]) -> None:
    assert prop(shapes, "count") == {
        "type": "integer",
        "minimum": 1,
        "maximum": 8,
        "default": 3,
        "description": "A bounded integer with a default.",
    }
    assert prop(shapes, "ratio") == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
        "exclusiveMaximum": True,
        "description": "An open interval.",
    }


def test_optional_becomes_nullable_without_a_null_default(shapes: dict[str, object]) -> None:
    assert prop(shapes, "name") == {
        "type": "string",
        "minLength": 1,
        "nullable": True,
        "description": "An optional string.",
    }


def test_references_are_inlined_with_the_field_description(shapes: dict[str, object]) -> None:
    inner = prop(shapes, "inner")
    assert inner["type"] == "object"
    assert inner["description"] == "A nested model, described here."
    assert prop(inner, "sizeBytes") == {"type": "integer", "minimum": 0, "description": "Bytes."}
    maybe = prop(shapes, "maybeInner")
    assert maybe["nullable"] is True
    assert maybe["description"] == "An optional nested model."
    assert prop(maybe, "sizeBytes")["type"] == "integer"


def test_lists_maps_and_list_defaults(shapes: dict[str, object]) -> None:
    items = prop(shapes, "items")
    assert items["type"] == "array"
    assert items["maxItems"] == 4
    assert isinstance(items["items"], dict)
    assert items["items"]["type"] == "object"
    words = prop(shapes, "words")
    assert words["items"] == {"type": "string"}
    assert "default" not in words, "list defaults are dropped"
    assert prop(shapes, "labels")["additionalProperties"] == {"type": "string"}


def test_quantity_is_int_or_string_without_a_type(shapes: dict[str, object]) -> None:
    assert prop(shapes, "quantities")["additionalProperties"] == {
        "x-kubernetes-int-or-string": True,
        "pattern": RESOURCE_QUANTITY_PATTERN,
        "maxLength": QUANTITY_MAX_LENGTH,
    }


def test_enum_const_datetime_duration_and_tuple(shapes: dict[str, object]) -> None:
    assert prop(shapes, "mode")["enum"] == ["fast", "slow"]
    assert prop(shapes, "mode")["default"] == "fast"
    fixed = prop(shapes, "fixed")
    assert fixed["enum"] == ["v1"]
    assert fixed["type"] == "string"
    assert "const" not in fixed
    when = prop(shapes, "when")
    assert (when["type"], when["format"], when["nullable"]) == ("string", "date-time", True)
    assert prop(shapes, "deadline")["pattern"] == DURATION_PATTERN
    pair = prop(shapes, "pair")
    assert pair == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 2,
        "maxItems": 2,
        "description": "A fixed-length tuple.",
    }


def test_union_of_two_types_is_an_error() -> None:
    class Union(BaseModel):
        value: int | str

    with pytest.raises(StructuralSchemaError, match=r"\.value: anyOf of 2 non-null types"):
        structural_schema(Union)


def test_recursive_model_is_an_error() -> None:
    class Tree(BaseModel):
        children: list[Tree] = []

    with pytest.raises(StructuralSchemaError, match="recursive model Tree -> Tree"):
        structural_schema(Tree)


def test_mixed_tuple_and_untyped_values_are_errors() -> None:
    class Mixed(BaseModel):
        pair: tuple[int, str]

    class Untyped(BaseModel):
        anything: object

    with pytest.raises(StructuralSchemaError, match="tuple of mixed item types"):
        structural_schema(Mixed)
    with pytest.raises(StructuralSchemaError, match=r"\.anything: a node without a type"):
        structural_schema(Untyped)


def test_extra_allowed_beside_properties_is_an_error() -> None:
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        name: str

    with pytest.raises(StructuralSchemaError, match="extra fields allowed beside properties"):
        structural_schema(Open)


def test_keys_outside_openapi_are_errors() -> None:
    class Odd(BaseModel):
        value: Annotated[str, WithJsonSchema({"type": "string", "propertyNames": {}})]

    with pytest.raises(StructuralSchemaError, match="propertyNames cannot be expressed"):
        structural_schema(Odd)


def test_intersection_of_schemas_is_an_error() -> None:
    both = WithJsonSchema({"allOf": [{"type": "string"}, {"maxLength": 3}]})

    class Both(BaseModel):
        value: Annotated[str, both]

    with pytest.raises(StructuralSchemaError, match="allOf cannot be expressed"):
        structural_schema(Both)


def test_unknown_formats_are_dropped() -> None:
    class Times(BaseModel):
        at: datetime
        period: Annotated[str, WithJsonSchema({"type": "string", "format": "duration"})]

    schema = structural_schema(Times)
    assert prop(schema, "at")["format"] == "date-time"
    assert "format" not in prop(schema, "period")


def test_generation_is_repeatable() -> None:
    assert training_plan_crd() == training_plan_crd()


def test_crdgen_imports_only_the_api_pydantic_and_the_standard_library() -> None:
    package = Path(trainplan.crdgen.__file__).parent
    allowed_roots = {"pydantic", "__future__"} | set(sys.stdlib_module_names)
    for module in package.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module]
            else:
                continue
            for name in names:
                ok = (
                    name.split(".")[0] in allowed_roots
                    or name == "trainplan.api"
                    or name.startswith(("trainplan.api.", "trainplan.crdgen"))
                )
                assert ok, f"{module.name} imports {name}"
