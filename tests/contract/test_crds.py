"""The committed CRDs in crds/: current, structural, valid CRDs, with the agreed names, columns
and CEL rules."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from tests.contract.crd_schema import (
    CRDS_DIR,
    committed_crd,
    errors,
    openapi_schema,
    validator_for,
)
from trainplan.api import (
    GPUBudgetSpec,
    GPUBudgetStatus,
    TrainingPlanSpec,
    TrainingPlanStatus,
)
from trainplan.api.kubetypes import QUANTITY_MAX_LENGTH, RESOURCE_QUANTITY_PATTERN
from trainplan.cli.crds_command import HEADER, command, render_crd_files
from trainplan.crdgen import all_crds, gpu_budget_crd, training_plan_crd

KUBERNETES_VERSION: Final = "1.30.0"
OLDEST_KUBERNETES_VERSION: Final = "1.28.0"
"""The first release whose CRD validation rules have `reason` and `fieldPath` (docs/crds.md)."""

PLURALS: Final = ("trainingplans", "gpubudgets", "clustercalibrations")
MINIMAL_SPEC: Final[Mapping[str, Any]] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
}

TYPES: Final = frozenset({"object", "array", "string", "integer", "number", "boolean"})
FORMATS: Final = frozenset({"date-time", "date", "int32", "int64", "float", "double", "byte"})
NOT_STRUCTURAL: Final = frozenset(
    {
        "$ref",
        "$defs",
        "$schema",
        "definitions",
        "const",
        "title",
        "prefixItems",
        "additionalItems",
        "patternProperties",
        "dependencies",
        "id",
    }
)
# Inside anyOf/allOf/oneOf/not, Kubernetes allows value validations only.
NOT_IN_JUNCTORS: Final = frozenset(
    {"type", "nullable", "default", "description", "additionalProperties"}
)
LOOPING_MACROS: Final = re.compile(r"\.(all|exists|exists_one|map|filter)\(")


def walk(node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema node under `node` (properties, additionalProperties, items), with its path."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    additional = node.get("additionalProperties")
    if isinstance(additional, Mapping):
        yield from walk(additional, f"{path}[*]")
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from walk(items, f"{path}[]")


def _junctor_problems(path: str, node: Mapping[str, Any]) -> list[str]:
    problems = []
    for junctor in ("anyOf", "allOf", "oneOf", "not"):
        if junctor not in node:
            continue
        if junctor == "oneOf" and path:
            problems.append(f"{path}: oneOf below the root")
        variants = node[junctor] if isinstance(node[junctor], list) else [node[junctor]]
        for variant in variants:
            if variant.get("type") == "null":
                problems.append(f"{path}: {junctor} with null (use nullable: true)")
            forbidden = sorted(NOT_IN_JUNCTORS & set(variant))
            if forbidden:
                problems.append(f"{path}: {junctor} variant sets {', '.join(forbidden)}")
    return problems


def _node_problems(path: str, node: Mapping[str, Any]) -> list[str]:
    problems = [f"{path}: {key} is not structural" for key in sorted(NOT_STRUCTURAL & set(node))]
    problems += _junctor_problems(path, node)
    kind = node.get("type")
    special = node.get("x-kubernetes-int-or-string") is True or (
        node.get("x-kubernetes-preserve-unknown-fields") is True
    )
    if kind is None and not special:
        problems.append(f"{path}: no type")
    if kind is not None and kind not in TYPES:
        problems.append(f"{path}: type {kind!r}")
    if node.get("x-kubernetes-int-or-string") is True and kind is not None:
        problems.append(f"{path}: int-or-string with a type")
    additional = node.get("additionalProperties")
    if additional is not None and "properties" in node:
        problems.append(f"{path}: additionalProperties beside properties")
    if isinstance(additional, bool):
        problems.append(f"{path}: boolean additionalProperties {additional}")
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if exclusive in node and not isinstance(node[exclusive], bool):
            problems.append(f"{path}: {exclusive} is not a boolean")
        if node.get(exclusive) is True and inclusive not in node:
            problems.append(f"{path}: {exclusive} without {inclusive}")
    if kind == "array" and not isinstance(node.get("items"), Mapping):
        problems.append(f"{path}: array without one items schema")
    if node.get("uniqueItems"):
        problems.append(f"{path}: uniqueItems")
    if "format" in node and node["format"] not in FORMATS:
        problems.append(f"{path}: format {node['format']!r}")
    if "default" in node:
        problems += _default_problems(path, node)
    for rule in node.get("x-kubernetes-validations", []):
        message = rule.get("message", "")
        if not rule.get("rule") or not message or "\n" in message:
            problems.append(f"{path}: CEL rule without a one-line message: {rule}")
    return problems


def _default_problems(path: str, node: Mapping[str, Any]) -> list[str]:
    default = node["default"]
    python_types: dict[str, tuple[type, ...]] = {
        "string": (str,),
        "integer": (int,),
        "number": (int, float),
        "boolean": (bool,),
    }
    expected = python_types.get(node.get("type", ""))
    if expected is None or not isinstance(default, expected):
        return [f"{path}: default {default!r} is not a {node.get('type')}"]
    if isinstance(default, bool) and node.get("type") != "boolean":
        return [f"{path}: default {default!r} is not a {node.get('type')}"]
    if "enum" in node and default not in node["enum"]:
        return [f"{path}: default {default!r} not in enum"]
    return []


def structural_problems(schema: Mapping[str, Any]) -> list[str]:
    """Why `schema` (an openAPIV3Schema) is not a Kubernetes structural schema; [] if it is."""
    problems = []
    for path, node in walk(schema):
        problems += _node_problems(path, node)
    metadata = schema.get("properties", {}).get("metadata")
    if metadata is not None and set(metadata) - {"type", "description"}:
        problems.append(".metadata: constrains more than its type")
    return problems


@pytest.fixture(scope="module", params=PLURALS)
def crd(request: pytest.FixtureRequest) -> dict[str, Any]:
    return committed_crd(request.param)


# --- committed and current ----------------------------------------------------------------


def test_committed_crds_are_current() -> None:
    rendered = render_crd_files()
    assert sorted(rendered) == [
        "clustercalibrations.trainplan.dev.yaml",
        "gpubudgets.trainplan.dev.yaml",
        "trainingplans.trainplan.dev.yaml",
    ]
    committed = sorted(path.name for path in CRDS_DIR.glob("*.yaml"))
    stale = [
        name
        for name, text in rendered.items()
        if not (CRDS_DIR / name).is_file() or (CRDS_DIR / name).read_text(encoding="utf-8") != text
    ]
    extra = sorted(set(committed) - set(rendered))
    advice = "run `trainplan crds` from the repository root and commit crds/"
    assert not stale, f"crds/ is out of date with trainplan.api ({stale} differ); {advice}"
    assert not extra, f"crds/ holds files `trainplan crds` does not write: {extra}; {advice}"


def test_rendering_is_deterministic_and_round_trips() -> None:
    first, second = render_crd_files(), render_crd_files()
    assert first == second
    for crd in all_crds():
        text = first[f"{crd['metadata']['name']}.yaml"]
        assert text.startswith(HEADER)
        assert "generated by `trainplan crds`" in text.lower()
        assert "do not edit" in text
        assert yaml.safe_load(text) == crd


def test_crds_command_writes_the_rendered_files(tmp_path: Path) -> None:
    output = tmp_path / "out"
    result = CliRunner().invoke(command, ["--output-dir", str(output)])
    assert result.exit_code == 0, result.output
    written = {path.name: path.read_text(encoding="utf-8") for path in output.iterdir()}
    assert written == render_crd_files()
    assert "trainingplans.trainplan.dev.yaml" in result.output


# --- valid CRDs ---------------------------------------------------------------------------


@pytest.mark.parametrize("kubernetes_version", [OLDEST_KUBERNETES_VERSION, KUBERNETES_VERSION])
def test_crd_is_a_valid_apiextensions_v1_crd(crd: dict[str, Any], kubernetes_version: str) -> None:
    validated = kubernetes_validate.validate(crd, kubernetes_version, strict=True)
    assert kubernetes_version.startswith(validated)


def test_kubernetes_validate_catches_a_non_openapi_schema_key() -> None:
    broken = copy.deepcopy(training_plan_crd())
    openapi_schema(broken)["properties"]["spec"]["properties"]["data"]["const"] = 1
    with pytest.raises(kubernetes_validate.ValidationError, match="const"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_crd_schema_is_structural(crd: dict[str, Any]) -> None:
    schema = openapi_schema(crd)
    assert structural_problems(schema) == []
    assert crd["spec"].get("preserveUnknownFields") in (None, False)


def test_generated_schemas_use_no_unions() -> None:
    for crd in all_crds():
        for path, node in walk(openapi_schema(crd)):
            assert not {"anyOf", "allOf", "oneOf", "not"} & set(node), path


def test_structural_checker_rejects_pydantics_raw_schema() -> None:
    raw = TrainingPlanSpec.model_json_schema(by_alias=True)
    # Inline one level by hand so that the checker walks into a model with nullables.
    data = raw["$defs"]["DataSpec"]
    problems = structural_problems(raw) + structural_problems(data)
    text = "\n".join(problems)
    assert ": $ref is not structural" in text or ": $defs is not structural" in text
    assert "additionalProperties beside properties" in text
    assert "anyOf with null" in text
    assert "exclusiveMinimum is not a boolean" in text
    assert "title is not structural" in text
    assert ".tokens: no type" in text


def test_every_field_has_a_description() -> None:
    for crd in all_crds():
        schema = openapi_schema(crd)
        for part in ("spec", "status"):
            for path, node in walk(schema["properties"][part], part):
                if path.endswith("]") and node.get("type") != "object":
                    continue  # items of a list or values of a map of scalars
                assert node.get("description"), f"{crd['metadata']['name']} {path}"


@pytest.mark.parametrize(
    ("crd_factory", "part", "model"),
    [
        (training_plan_crd, "spec", TrainingPlanSpec),
        (training_plan_crd, "status", TrainingPlanStatus),
        (gpu_budget_crd, "spec", GPUBudgetSpec),
        (gpu_budget_crd, "status", GPUBudgetStatus),
    ],
)
def test_schema_fields_are_the_models_camel_case_names(
    crd_factory: Any, part: str, model: Any
) -> None:
    properties = openapi_schema(crd_factory())["properties"][part]["properties"]
    aliases = {field.alias or name for name, field in model.model_fields.items()}
    assert set(properties) == aliases


def test_resource_root_requires_spec_and_leaves_metadata_to_the_server(
    crd: dict[str, Any],
) -> None:
    schema = openapi_schema(crd)
    assert schema["type"] == "object"
    assert schema["required"] == ["spec"]
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["properties"]["metadata"]["type"] == "object"
    assert "properties" not in schema["properties"]["metadata"]


def test_quantities_are_int_or_string() -> None:
    job = openapi_schema(training_plan_crd())["properties"]["spec"]["properties"]["job"]
    values = job["properties"]["resources"]["additionalProperties"]
    assert values == {
        "x-kubernetes-int-or-string": True,
        "pattern": RESOURCE_QUANTITY_PATTERN,
        "maxLength": QUANTITY_MAX_LENGTH,
    }


# Quantities as kubectl users write them, and what apimachinery's parser refuses
# (k8s.io/apimachinery/pkg/api/resource, ParseQuantity) or requests cannot be.
GOOD_QUANTITIES: Final = ("32", 32, "0.5", ".5", "500m", "256Gi", "1.5Ti", "1e3", "2E-3", "+4")
BAD_QUANTITIES: Final = ("lots", "-1", "1Gb", "", "1 Gi", "1.2.3", "Gi", "1e", "0x10", "1" * 65)


@pytest.mark.parametrize("value", GOOD_QUANTITIES)
def test_the_crd_and_the_model_accept_quantities(value: object) -> None:
    spec = {**MINIMAL_SPEC, "job": {"resources": {"cpu": value}}}
    assert errors(validator_for(committed_crd("trainingplans"), "spec"), spec) == []
    TrainingPlanSpec.model_validate(spec)


@pytest.mark.parametrize("value", BAD_QUANTITIES)
def test_the_crd_and_the_model_refuse_what_is_not_a_quantity(value: str) -> None:
    spec = {**MINIMAL_SPEC, "job": {"resources": {"memory": value}}}
    (problem,) = errors(validator_for(committed_crd("trainingplans"), "spec"), spec)
    assert problem.startswith("job.resources.memory: ")
    with pytest.raises(ValidationError, match=r"job\.resources\.memory"):
        TrainingPlanSpec.model_validate(spec)


def test_times_are_date_times_and_conditions_a_list_map() -> None:
    status = openapi_schema(training_plan_crd())["properties"]["status"]["properties"]
    for name in ("startTime", "completionTime", "estimatedCompletionTime", "lastUpdatedTime"):
        assert status[name]["type"] == "string"
        assert status[name]["format"] == "date-time"
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


# --- names, scope, subresources, columns --------------------------------------------------


def test_training_plan_names() -> None:
    crd = committed_crd("trainingplans")
    assert crd["metadata"]["name"] == "trainingplans.trainplan.dev"
    spec = crd["spec"]
    assert spec["group"] == "trainplan.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "TrainingPlan",
        "listKind": "TrainingPlanList",
        "plural": "trainingplans",
        "singular": "trainingplan",
        "shortNames": ["tp"],
        "categories": ["trainplan"],
    }


def test_gpu_budget_names() -> None:
    crd = committed_crd("gpubudgets")
    assert crd["metadata"]["name"] == "gpubudgets.trainplan.dev"
    spec = crd["spec"]
    assert spec["group"] == "trainplan.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "GPUBudget"
    assert spec["names"]["plural"] == "gpubudgets"
    assert spec["names"]["singular"] == "gpubudget"
    assert spec["names"]["shortNames"] == ["gpub"]
    assert spec["names"]["categories"] == ["trainplan"]


def test_one_served_storage_version_with_a_status_subresource(crd: dict[str, Any]) -> None:
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}


def test_training_plan_printer_columns() -> None:
    (version,) = committed_crd("trainingplans")["spec"]["versions"]
    assert version["additionalPrinterColumns"] == [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
        {"name": "Layout", "type": "string", "jsonPath": ".status.layout"},
        {"name": "Progress", "type": "integer", "jsonPath": ".status.progressPercentage"},
        {"name": "ETA", "type": "string", "jsonPath": ".status.estimatedCompletionTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def test_gpu_budget_printer_columns() -> None:
    (version,) = committed_crd("gpubudgets")["spec"]["versions"]
    assert version["additionalPrinterColumns"] == [
        {"name": "Limit", "type": "number", "jsonPath": ".spec.gpuHours"},
        {"name": "Used", "type": "number", "jsonPath": ".status.usedGPUHours"},
        {"name": "Committed", "type": "number", "jsonPath": ".status.committedGPUHours"},
        {"name": "Remaining", "type": "number", "jsonPath": ".status.remainingGPUHours"},
        {"name": "Charged-At", "type": "number", "jsonPath": ".spec.chargeConfidence"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def test_printer_columns_point_at_schema_fields_of_their_type(crd: dict[str, Any]) -> None:
    (version,) = crd["spec"]["versions"]
    schema = openapi_schema(crd)
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        assert "[" not in path, f"{path}: no list indexing such as conditions[-1:]"
        if path == ".metadata.creationTimestamp":
            continue
        node = schema
        for name in path.removeprefix(".").split("."):
            node = node["properties"][name]
        assert node["type"] == column["type"], path


# --- CEL rules ----------------------------------------------------------------------------


def _rules(crd: Mapping[str, Any]) -> dict[str, list[dict[str, str]]]:
    return {
        path: list(node["x-kubernetes-validations"])
        for path, node in walk(openapi_schema(crd))
        if "x-kubernetes-validations" in node
    }


def test_training_plan_cel_rules() -> None:
    rules = _rules(committed_crd("trainingplans"))
    assert set(rules) == {
        "",
        ".spec.model",
        ".spec.data",
        ".spec.batch",
        ".spec.objective",
        ".spec.parallelism",
        ".spec.training",
    }
    (immutable,) = rules[""]
    rule = immutable["rule"]
    assert "oldSelf.status.jobName" in rule
    for section in ("model", "data", "batch"):
        assert f"self.spec.{section} == oldSelf.spec.{section}" in rule
    assert "spec.model, spec.data and spec.batch cannot change" in immutable["message"]
    assert immutable["reason"] == "FieldValueForbidden"

    def messages(path: str) -> list[str]:
        return [entry["message"] for entry in rules[path]]

    assert "give gpus or deadline, not both; to cap a deadline search use maxGPUs" in messages(
        ".spec.objective"
    )
    assert messages(".spec.data") == ["give exactly one of tokens or samples"]
    assert any("zeroStage 3 with pipeline > 1" in m for m in messages(".spec.parallelism"))
    assert messages(".spec.training") == [
        "lora needs method lora or qlora",
        "qlora computes in bf16 or fp16",
    ]
    data_rule = rules[".spec.data"][0]["rule"]
    assert data_rule == "has(self.tokens) != has(self.samples)"
    objective_rule = rules[".spec.objective"][0]["rule"]
    assert "has(self.gpus)" in objective_rule
    assert "has(self.deadline)" in objective_rule


def test_gpu_budget_has_no_cel_rules() -> None:
    assert _rules(committed_crd("gpubudgets")) == {}


def test_cel_rules_are_cheap(crd: dict[str, Any]) -> None:
    for path, entries in _rules(crd).items():
        for entry in entries:
            assert not LOOPING_MACROS.search(entry["rule"]), f"{path}: {entry['rule']}"
            assert len(entry["rule"]) < 300, path


def test_fields_compared_after_launch_have_bounded_sizes() -> None:
    """The immutability rule compares these sections: their strings and lists are bounded,
    so the API server's CEL cost estimate stays small."""
    spec = openapi_schema(training_plan_crd())["properties"]["spec"]
    for section in ("model", "data", "batch"):
        for path, node in walk(spec["properties"][section], section):
            if node["type"] == "string":
                assert "maxLength" in node or "enum" in node, path
            if node["type"] == "array":
                assert "maxItems" in node, path
            if node["type"] == "object" and path != section:
                assert "properties" in node, path


def test_free_form_job_lists_and_strings_are_bounded() -> None:
    job = openapi_schema(training_plan_crd())["properties"]["spec"]["properties"]["job"]
    bounds = {name: node.get("maxItems") for name, node in job["properties"].items()}
    assert bounds["args"] == 256
    assert bounds["command"] == 256
    assert bounds["env"] == 128
    assert bounds["tolerations"] == 64
    assert job["properties"]["image"]["maxLength"] == 1024
