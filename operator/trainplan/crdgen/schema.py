"""Pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

`structural_schema(model)` takes pydantic's JSON Schema of a model (by alias, draft 2020-12)
and rewrites it into the subset of OpenAPI v3 that a CustomResourceDefinition accepts as a
*structural* schema (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#specifying-a-structural-schema):

- every `$ref` is inlined (a recursive model cannot be, and is an error);
- `anyOf: [X, {type: null}]` becomes X with `nullable: true`;
- `const` becomes a one-value `enum`; `exclusiveMinimum: 5` becomes `minimum: 5` with
  `exclusiveMinimum: true` (the OpenAPI 3.0 boolean form), likewise for the maximum;
- `additionalProperties: false` beside `properties` is dropped (the API server prunes
  unknown fields), `additionalProperties: true` becomes `x-kubernetes-preserve-unknown-fields`;
- every node gets a `type`, except int-or-string nodes (`x-kubernetes-int-or-string`);
- `title`, `examples`, null defaults and non-scalar defaults are dropped; descriptions stay;
- fixed-length tuples whose items share one schema become arrays with that `items`.

Anything else that cannot be expressed structurally raises `StructuralSchemaError`, naming
the path of the offending node.

Pure: imports only pydantic and the standard library; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

__all__ = ["StructuralSchemaError", "structural_schema"]

_DEFS_PREFIX: Final = "#/$defs/"

_TYPES: Final = frozenset({"object", "array", "string", "integer", "number", "boolean"})

# Formats the API server knows (apiextensions JSONSchemaProps.format); others are dropped,
# as pydantic's "duration" (ISO 8601) would be checked as a Go duration there.
_FORMATS: Final = frozenset(
    {
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "date",
        "date-time",
        "byte",
        "password",
        "int32",
        "int64",
        "float",
        "double",
    }
)

# Keys copied as they are once the node is otherwise structural.
_PLAIN_KEYS: Final = frozenset(
    {
        "description",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "multipleOf",
        "required",
        "nullable",
    }
)

# Keys consumed or dropped by the conversion itself.
_HANDLED_KEYS: Final = frozenset(
    {
        "$ref",
        "$defs",
        "anyOf",
        "oneOf",
        "type",
        "const",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "properties",
        "additionalProperties",
        "items",
        "prefixItems",
        "format",
        "default",
        "title",
        "examples",
        "uniqueItems",
    }
)


class StructuralSchemaError(ValueError):
    """A construct of the pydantic schema that a structural CRD schema cannot express."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path or '(root)'}: {problem}")


def structural_schema(
    model: type[BaseModel], mode: JsonSchemaMode = "validation"
) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of `model`, field names by alias (camelCase).

    Raises StructuralSchemaError for a construct that cannot be made structural: a union
    of two non-null types, a recursive model, a tuple of mixed item types, a key that
    OpenAPI v3 in a CRD does not have.
    """
    document = model.model_json_schema(by_alias=True, mode=mode)
    definitions = document.get("$defs", {})
    return _Converter(definitions).convert(document, path="", expanding=())


def _json_type(value: object) -> str | None:
    """The structural type of a JSON scalar, or None for null, lists and objects."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _is_null(node: Mapping[str, Any]) -> bool:
    return node.get("type") == "null" and len(node) == 1


class _Converter:
    """One conversion: the `$defs` of the schema being converted, and the conversion rules."""

    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self._definitions = definitions

    def convert(
        self, node: Mapping[str, Any], *, path: str, expanding: tuple[str, ...]
    ) -> dict[str, Any]:
        """The structural form of one schema node (and everything under it)."""
        while True:
            node, expanding = self._inline(node, path=path, expanding=expanding)
            collapsed = self._collapse_union(node, path=path)
            if collapsed is node:
                break
            node = collapsed
        unknown = sorted(
            key
            for key in node
            if key not in _PLAIN_KEYS
            and key not in _HANDLED_KEYS
            and not key.startswith("x-kubernetes-")
        )
        if unknown:
            raise StructuralSchemaError(
                path, f"{', '.join(unknown)} cannot be expressed in a structural schema"
            )
        if node.get("uniqueItems"):
            raise StructuralSchemaError(
                path, "uniqueItems is not allowed in a CRD; use a list-type set"
            )
        out: dict[str, Any] = {key: node[key] for key in node if key in _PLAIN_KEYS}
        out.update({key: value for key, value in node.items() if key.startswith("x-kubernetes-")})
        if "const" in node:
            if "enum" in node and node["enum"] != [node["const"]]:
                raise StructuralSchemaError(path, "const and enum disagree")
            out["enum"] = [node["const"]]
        self._bounds(node, out, path=path)
        if node.get("format") in _FORMATS:
            out["format"] = node["format"]
        self._children(node, out, path=path, expanding=expanding)
        int_or_string = out.get("x-kubernetes-int-or-string") is True
        if int_or_string:
            out.pop("format", None)
        else:
            out["type"] = self._type(node, out, path=path)
        default = node.get("default")
        if _json_type(default) is not None and not int_or_string:
            out["default"] = default
        return out

    def _inline(
        self, node: Mapping[str, Any], *, path: str, expanding: tuple[str, ...]
    ) -> tuple[Mapping[str, Any], tuple[str, ...]]:
        """The node with its `$ref` (and a single-item `allOf`) replaced by the target."""
        while "$ref" in node or ("allOf" in node and len(node["allOf"]) == 1):
            if "$ref" in node:
                reference = node["$ref"]
                if not isinstance(reference, str) or not reference.startswith(_DEFS_PREFIX):
                    raise StructuralSchemaError(path, f"cannot inline the reference {reference!r}")
                name = reference.removeprefix(_DEFS_PREFIX)
                if name in expanding:
                    chain = " -> ".join((*expanding, name))
                    raise StructuralSchemaError(
                        path, f"recursive model {chain} cannot be inlined in a CRD schema"
                    )
                if name not in self._definitions:
                    raise StructuralSchemaError(path, f"unknown reference {reference!r}")
                siblings = {key: value for key, value in node.items() if key != "$ref"}
                node = {**self._definitions[name], **siblings}
                expanding = (*expanding, name)
            else:
                (only,) = node["allOf"]
                siblings = {key: value for key, value in node.items() if key != "allOf"}
                node = {**only, **siblings}
        return node, expanding

    @staticmethod
    def _collapse_union(node: Mapping[str, Any], *, path: str) -> Mapping[str, Any]:
        """One step of `anyOf`/`oneOf` of one type and null -> that type, nullable.

        Returns `node` itself when there is nothing (more) to collapse. The kept variant may
        be a reference; the caller inlines it, with this node's keys (description, nullable)
        on top.
        """
        if node.get("x-kubernetes-int-or-string") is True:
            if "anyOf" in node or "type" in node:
                return {key: value for key, value in node.items() if key not in ("anyOf", "type")}
            return node
        if isinstance(node.get("type"), list):
            types = [kind for kind in node["type"] if kind != "null"]
            if len(types) != 1:
                raise StructuralSchemaError(path, f"a node of several types {node['type']}")
            nullable = len(types) != len(node["type"])
            node = {**node, "type": types[0], **({"nullable": True} if nullable else {})}
        for keyword in ("anyOf", "oneOf"):
            if keyword not in node:
                continue
            variants = node[keyword]
            kept = [variant for variant in variants if not _is_null(variant)]
            if len(kept) != 1:
                raise StructuralSchemaError(
                    path,
                    f"{keyword} of {len(kept)} non-null types cannot be made structural; "
                    "use one type (or mark an int-or-string with x-kubernetes-int-or-string)",
                )
            siblings = {key: value for key, value in node.items() if key != keyword}
            if len(kept) != len(variants):
                siblings["nullable"] = True
                if siblings.get("default", 0) is None:
                    del siblings["default"]
            (variant,) = kept
            return {**variant, **siblings}
        return node

    @staticmethod
    def _bounds(node: Mapping[str, Any], out: dict[str, Any], *, path: str) -> None:
        """Draft 2020 numeric exclusive bounds -> OpenAPI 3.0 boolean form."""
        for exclusive, inclusive in (
            ("exclusiveMinimum", "minimum"),
            ("exclusiveMaximum", "maximum"),
        ):
            if exclusive not in node:
                continue
            value = node[exclusive]
            if isinstance(value, bool):
                out[exclusive] = value
                continue
            if inclusive in node:
                raise StructuralSchemaError(
                    path, f"both {inclusive} and a numeric {exclusive}; keep one bound"
                )
            out[inclusive] = value
            out[exclusive] = True

    def _children(
        self,
        node: Mapping[str, Any],
        out: dict[str, Any],
        *,
        path: str,
        expanding: tuple[str, ...],
    ) -> None:
        """Convert properties, additionalProperties and items."""
        if "properties" in node:
            out["properties"] = {
                name: self.convert(child, path=f"{path}.{name}", expanding=expanding)
                for name, child in node["properties"].items()
            }
        additional = node.get("additionalProperties")
        if additional is True:
            if "properties" in node:
                raise StructuralSchemaError(
                    path, "extra fields allowed beside properties cannot be structural"
                )
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(additional, Mapping):
            if "properties" in node:
                raise StructuralSchemaError(
                    path, "additionalProperties and properties are mutually exclusive in a CRD"
                )
            out["additionalProperties"] = self.convert(
                additional, path=f"{path}[*]", expanding=expanding
            )
        if "prefixItems" in node:
            items = [
                self.convert(child, path=f"{path}[{index}]", expanding=expanding)
                for index, child in enumerate(node["prefixItems"])
            ]
            if "items" in node or any(item != items[0] for item in items[1:]):
                raise StructuralSchemaError(
                    path, "a tuple of mixed item types cannot be made structural"
                )
            if items:
                out["items"] = items[0]
            out.setdefault("minItems", len(items))
            out.setdefault("maxItems", len(items))
        elif "items" in node:
            if not isinstance(node["items"], Mapping):
                raise StructuralSchemaError(path, "items must be a single schema")
            out["items"] = self.convert(node["items"], path=f"{path}[*]", expanding=expanding)

    @staticmethod
    def _type(node: Mapping[str, Any], out: Mapping[str, Any], *, path: str) -> str:
        """The node's structural type: given, or inferred from its properties or values."""
        declared = node.get("type")
        if declared is not None:
            if declared not in _TYPES:
                raise StructuralSchemaError(path, f"type {declared!r} cannot be structural")
            return str(declared)
        if "properties" in out or "additionalProperties" in out:
            return "object"
        if "items" in out:
            return "array"
        values = out.get("enum", [])
        kinds = {_json_type(value) for value in values}
        if kinds == {"integer", "number"}:
            return "number"
        if len(kinds) == 1 and None not in kinds:
            return str(kinds.pop())
        raise StructuralSchemaError(path, "a node without a type (any value) is not structural")
