"""Validate documents against the committed CRDs' schemas with jsonschema (a test helper).

A CRD schema is OpenAPI v3 (structural), not JSON Schema: `nullable: true` allows null,
`exclusiveMinimum: true` qualifies `minimum`, `x-kubernetes-int-or-string` allows an integer
or a string, and `pattern` is Go's RE2, which takes flags after `^` (`^(?i)...`, upstream
CRDs have it), where Python's re wants them first (`(?i)^...`, the same meaning).
`to_json_schema` rewrites it into JSON Schema 2020-12, and adds
`additionalProperties: false` to every object with properties, as the API server's strict
field validation (`kubectl apply`'s default) rejects unknown fields. CEL rules are not
evaluated here. `validator_for(crd, "spec" | "status")` is what contract tests use;
`node_validator(node)` validates against one node of an upstream CRD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import jsonschema
import yaml

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
CRDS_DIR: Final = REPO_ROOT / "crds"

_RFC3339: Final = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)

_RE2_LATE_FLAGS: Final = re.compile(r"^\^\(\?([a-zA-Z]+)\)")

FORMAT_CHECKER: Final = jsonschema.FormatChecker(formats=())


@FORMAT_CHECKER.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    """RFC 3339 date-time with a time zone, as the API server checks it."""
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    return True


def committed_crd(plural: str) -> dict[str, Any]:
    """The CRD committed in `crds/<plural>.trainplan.dev.yaml`."""
    path = CRDS_DIR / f"{plural}.trainplan.dev.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict), f"{path} is not one YAML mapping"
    return document


def openapi_schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    """openAPIV3Schema of the CRD's only version."""
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def to_json_schema(node: Mapping[str, Any]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema node as JSON Schema 2020-12 (see the module doc)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = to_json_schema(value)
        elif key in ("nullable", "exclusiveMinimum", "exclusiveMaximum", "minimum", "maximum"):
            continue  # handled below
        elif key.startswith("x-kubernetes-"):
            continue
        elif key == "pattern" and isinstance(value, str):
            out[key] = _RE2_LATE_FLAGS.sub(r"(?\1)^", value)
        else:
            out[key] = value
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if inclusive in node:
            out[exclusive if node.get(exclusive) is True else inclusive] = node[inclusive]
    if node.get("x-kubernetes-int-or-string") is True:
        out["type"] = ["integer", "string"]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if node.get("nullable") is True:
        return {"anyOf": [{"type": "null"}, out]}
    return out


def validator_for(
    crd: Mapping[str, Any], part: Literal["spec", "status"]
) -> jsonschema.protocols.Validator:
    """A JSON Schema validator of the CRD's `spec` or `status`, date-time formats checked."""
    return node_validator(openapi_schema(crd)["properties"][part])


def node_validator(node: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    """A JSON Schema validator of one OpenAPI v3 schema node (a committed CRD's, or one
    vendored from an upstream CRD under tests/data/upstream/), date-time formats checked."""
    schema = to_json_schema(node)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


def errors(validator: jsonschema.protocols.Validator, document: object) -> list[str]:
    """Every validation error as "<path>: <message>", sorted; empty when valid."""
    return sorted(
        f"{'.'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message}"
        for error in validator.iter_errors(document)
    )
