"""Every CEL rule (`x-kubernetes-validations`) of the committed CRDs, evaluated with cel-python.

What is evaluated, and how it follows the API server:

- Rules: every `x-kubernetes-validations` entry of `crds/*.yaml`, with the schema path of the
  node it sits on (properties, `items` as `[]`, `additionalProperties` as `[*]`). Each must
  parse (`celpy` compiles it), and each `self.a.b` / `oldSelf.a.b` it reads must name fields
  of its node's schema (the API server type-checks rules when the CRD is applied; celpy does
  not, so a misspelt field would otherwise read as absent). `reason` must be one of the four
  the API server allows, `fieldPath` must name a field below the node.
- Values: what the API server hands to CEL. Unknown fields are pruned, a null in a field that
  is not `nullable` is pruned, schema defaults are applied inside objects that are present,
  a `type: number` field is a double even when written as an integer (`epochs: 2`), and the
  root's `metadata` shows only `name` and `generateName`; the result goes through
  `celpy.json_to_cel` (`celpy.adapter`). A rule runs on every instance of its node (every
  list item, every map value); a node that is absent or null is not validated.
- Transition rules (those that read `oldSelf`) are skipped on create and run on update, when
  the old object has the node too. On an update of the main resource the status is the stored
  one (status subresource), so the new object carries the old status.
- A failing rule reports its `messageExpression` (evaluated) or else its `message`, at the
  node's path plus `fieldPath`, and an evaluation error refuses the object too.
- Functions: the rules use `has()`, logic, comparison and arithmetic, which celpy has. A rule
  calling a Kubernetes library function celpy lacks (`quantity()`, `url()`, `isSorted()`,
  ...) fails to evaluate on the examples until a faithful version is given here.

Tested: every example a user can copy (`deploy/examples/`, `deploy/budgets/`, and the complete
TrainingPlan and GPUBudget objects in README.md and docs/) passes every rule on create and on
an unchanged update, launched or not. `CASES` holds, for every rule (keyed by CRD, path and
the rule's text, so a new or changed rule fails until it has cases), at least one object
derived from an example by a minimal change that the rule refuses, with the message and field
the API server would report, and near misses it accepts. Each such object is valid for the
CRD's OpenAPI schema and for every other rule, so this rule alone decides; the pydantic models
(`trainplan.api`) must refuse the same objects (with the given message text) and accept the
near misses. `NULL_DIFFERENCES` pins the one documented difference (docs/crds.md): an explicit
null counts as given in CEL, while the models read it as left out.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import celpy
import jsonschema
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from pydantic import ValidationError

from tests.contract.crd_schema import (
    CRDS_DIR,
    REPO_ROOT,
    committed_crd,
    errors,
    openapi_schema,
    validator_for,
)
from trainplan.api import GPUBudget, TrainingPlan, TrainingPlanStatus
from trainplan.crdgen import IMMUTABLE_AFTER_LAUNCH

PLURALS: Final = {
    "TrainingPlan": "trainingplans",
    "GPUBudget": "gpubudgets",
    "ClusterCalibration": "clustercalibrations",
}
MODELS: Final = {"trainingplans": TrainingPlan, "gpubudgets": GPUBudget}
REASONS: Final = {
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
}
MISSING: Final[Any] = object()
DELETE: Final[Any] = object()
ENVIRONMENT: Final = celpy.Environment()


# --- the rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One `x-kubernetes-validations` entry and where it sits."""

    plural: str
    steps: tuple[str, ...]  # property names, "[]" (items), "[*]" (additionalProperties)
    index: int  # its place in the node's list
    entry: Mapping[str, Any]

    @property
    def path(self) -> str:
        return "".join(step if step.startswith("[") else f".{step}" for step in self.steps)

    @property
    def text(self) -> str:
        text = self.entry["rule"]
        assert isinstance(text, str)
        return text

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.plural, self.path, self.text)

    @property
    def transition(self) -> bool:
        return re.search(r"\boldSelf\b", self.text) is not None

    @property
    def id(self) -> str:
        return f"{self.plural}{self.path or '(root)'}[{self.index}]"

    def __str__(self) -> str:
        return f"{self.id}: {self.text}"


def _schema_nodes(
    node: Mapping[str, Any], steps: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    yield steps, node
    for name, child in node.get("properties", {}).items():
        yield from _schema_nodes(child, (*steps, name))
    for key, step in (("items", "[]"), ("additionalProperties", "[*]")):
        child = node.get(key)
        if isinstance(child, Mapping):
            yield from _schema_nodes(child, (*steps, step))


def _count_rule_lists(value: object) -> int:
    """`x-kubernetes-validations` keys anywhere in a document (junctors included)."""
    if isinstance(value, Mapping):
        own = 1 if "x-kubernetes-validations" in value else 0
        return own + sum(_count_rule_lists(child) for child in value.values())
    if isinstance(value, list):
        return sum(_count_rule_lists(child) for child in value)
    return 0


def _crd_files() -> dict[str, dict[str, Any]]:
    crds = {}
    for path in sorted(CRDS_DIR.glob("*.yaml")):
        plural = path.name.split(".", 1)[0]
        crds[plural] = committed_crd(plural)
    assert set(crds) == set(PLURALS.values())
    return crds


CRDS: Final = _crd_files()
SCHEMAS: Final = {plural: openapi_schema(crd) for plural, crd in CRDS.items()}


def _collect_rules() -> list[Rule]:
    rules: list[Rule] = []
    for plural, schema in SCHEMAS.items():
        nodes_with_rules = 0
        for steps, node in _schema_nodes(schema):
            entries = node.get("x-kubernetes-validations")
            if entries is not None:
                nodes_with_rules += 1
                rules.extend(
                    Rule(plural, steps, index, entry) for index, entry in enumerate(entries)
                )
        # Every rule list sits on a node the walk reaches (none hides in a junctor).
        assert nodes_with_rules == _count_rule_lists(CRDS[plural]), plural
    return rules


RULES: Final = _collect_rules()


def _node_at(plural: str, steps: Sequence[str]) -> Mapping[str, Any]:
    node = SCHEMAS[plural]
    for step in steps:
        if step == "[]":
            node = node["items"]
        elif step == "[*]":
            node = node["additionalProperties"]
        else:
            node = node["properties"][step]
    return node


# --- values as the API server hands them to CEL --------------------------------------------


def prepared(node: Mapping[str, Any], value: Any) -> Any:
    """`value` pruned, defaulted and typed by its schema `node` (see the module doc)."""
    if value is None:
        return None
    kind = node.get("type")
    if kind == "object" and isinstance(value, Mapping):
        out: dict[str, Any] = {}
        properties = node.get("properties", {})
        for name, child in properties.items():
            if name in value and (value[name] is not None or child.get("nullable") is True):
                out[name] = prepared(child, value[name])
            elif "default" in child:
                out[name] = prepared(child, copy.deepcopy(child["default"]))
        additional = node.get("additionalProperties")
        if isinstance(additional, Mapping):
            out.update({key: prepared(additional, item) for key, item in value.items()})
        elif node.get("x-kubernetes-preserve-unknown-fields") is True:
            out.update({key: item for key, item in value.items() if key not in properties})
        return out
    if kind == "array" and isinstance(value, list):
        return [prepared(node["items"], item) for item in value]
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def prepared_object(plural: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """The whole object as the root rule's `self` sees it."""
    out = prepared(SCHEMAS[plural], document)
    assert isinstance(out, dict)
    metadata = document.get("metadata") or {}
    out["metadata"] = {key: metadata[key] for key in ("name", "generateName") if key in metadata}
    return out


def _instances(
    node: Mapping[str, Any], steps: Sequence[str], new: Any, old: Any, where: str
) -> Iterator[tuple[str, Any, Any]]:
    """(field path, value, old value or MISSING) of every instance of the node at `steps`."""
    if new is None:
        return  # absent or null: not validated
    if not steps:
        yield where, new, old
        return
    step, rest = steps[0], steps[1:]
    if step == "[]":
        keys = node.get("x-kubernetes-list-map-keys")
        for index, item in enumerate(new if isinstance(new, list) else []):
            old_item = MISSING  # only list-map items are correlated with the old list
            if keys and isinstance(old, list):
                matches = [o for o in old if all(o.get(k) == item.get(k) for k in keys)]
                old_item = matches[0] if matches else MISSING
            yield from _instances(node["items"], rest, item, old_item, f"{where}[{index}]")
    elif step == "[*]":
        for key, item in (new if isinstance(new, Mapping) else {}).items():
            old_item = old.get(key, MISSING) if isinstance(old, Mapping) else MISSING
            yield from _instances(
                node["additionalProperties"], rest, item, old_item, f"{where}[{key}]"
            )
    elif isinstance(new, Mapping) and step in new:
        old_child = old.get(step, MISSING) if isinstance(old, Mapping) else MISSING
        if old_child is None:
            old_child = MISSING
        child_where = f"{where}.{step}" if where else step
        yield from _instances(node["properties"][step], rest, new[step], old_child, child_where)


# --- evaluation ----------------------------------------------------------------------------


@functools.cache
def _program(text: str) -> celpy.Runner:
    return ENVIRONMENT.program(ENVIRONMENT.compile(text))


@dataclass(frozen=True)
class Refusal:
    """What the API server reports for a rule that is false (or fails) on one instance."""

    rule: Rule
    field: str
    message: str
    error: bool  # the rule failed to evaluate instead of being false


def _activation(value: Any, old: Any, transition: bool) -> dict[str, Any]:
    activation = {"self": json_to_cel(value)}
    if transition:
        activation["oldSelf"] = json_to_cel(old)
    return activation


def _check(rule: Rule, where: str, value: Any, old: Any) -> Refusal | None:
    activation = _activation(value, old, rule.transition)
    try:
        result: object = _program(rule.text).evaluate(activation)
    except CELEvalError as error:
        return Refusal(rule, where, f"evaluation error: {error.args[0]}", error=True)
    if isinstance(result, CELEvalError):
        return Refusal(rule, where, f"evaluation error: {result.args[0]}", error=True)
    assert isinstance(result, celtypes.BoolType), f"{rule}: not a bool: {result!r}"
    if result:
        return None
    if "messageExpression" in rule.entry:
        message = _program(rule.entry["messageExpression"]).evaluate(activation)
        assert isinstance(message, celtypes.StringType), rule
    else:
        message = rule.entry.get("message", f"failed rule: {rule.text}")
    field_path = rule.entry.get("fieldPath", "")
    reported = f"{where}{field_path}" if where else field_path.removeprefix(".")
    return Refusal(rule, reported, str(message), error=False)


def refusals(
    plural: str, document: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> list[Refusal]:
    """Every rule of the CRD that refuses `document`: a create when `old` is None, else an
    update of `old` (transition rules run on updates only, where the old node exists)."""
    new_value = prepared_object(plural, document)
    old_value = None if old is None else prepared_object(plural, old)
    found = []
    for rule in RULES:
        if rule.plural != plural or (rule.transition and old is None):
            continue
        node = SCHEMAS[plural]
        for where, value, old_node in _instances(node, rule.steps, new_value, old_value, ""):
            if rule.transition and old_node is MISSING:
                continue
            refusal = _check(rule, where, value, old_node)
            if refusal is not None:
                found.append(refusal)
    return found


def applications(plural: str, document: Mapping[str, Any], rule: Rule) -> int:
    """How many nodes of `document` the rule runs on."""
    value = prepared_object(plural, document)
    return sum(1 for _ in _instances(SCHEMAS[plural], rule.steps, value, MISSING, ""))


# --- documents -----------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict), path
    return document


def _documents() -> dict[str, dict[str, Any]]:
    """Every object a user can copy, by name: the example files and the complete objects
    shown in README.md and docs/ (a snippet with elided fields, `# ...`, is left out)."""
    documents = {}
    for folder in ("deploy/examples", "deploy/budgets"):
        for path in sorted((REPO_ROOT / folder).rglob("*.yaml")):
            documents[path.relative_to(REPO_ROOT).as_posix()] = _load(path)
    for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]:
        blocks = re.findall(r"```ya?ml\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
        for number, block in enumerate(blocks):
            if "# ..." in block:
                continue
            for part, document in enumerate(yaml.safe_load_all(block)):
                if isinstance(document, dict) and document.get("kind") in PLURALS:
                    name = f"{page.relative_to(REPO_ROOT).as_posix()}#yaml{number}.{part}"
                    documents[name] = document
    return documents


DOCUMENTS: Final = _documents()


def _base(name: str) -> dict[str, Any]:
    return copy.deepcopy(DOCUMENTS[name])


def launched_status(name: str) -> dict[str, Any]:
    """A status the operator writes once the job exists (checked by the model)."""
    status = TrainingPlanStatus.model_validate({"phase": "Running", "jobName": name})
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _changed(document: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(dict(document))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = changed
        for name in parents:
            node = node.setdefault(name, {})
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = copy.deepcopy(value)
    return changed


# --- the cases -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An object derived from example `base` by `changes` (dotted paths below the object).

    `refused`: (message, field) the API server reports when the rule refuses the object;
    None when it accepts it. `model`: (text of the error, its location) when the pydantic
    models refuse the object; None when they accept it. For a transition rule, `launched`
    says whether the stored object (the base, with a launched status when True) has
    `status.jobName`; the case is then an update of it.
    """

    name: str
    base: str
    changes: Mapping[str, Any]
    refused: tuple[str, str] | None = None
    model: tuple[str, str] | None = None
    launched: bool | None = None


TINY: Final = "deploy/examples/tiny-local.yaml"
PINNED: Final = "deploy/examples/llama2-70b-pinned.yaml"
V100: Final = "deploy/examples/v100-fp16.yaml"
TORCHTITAN: Final = "deploy/examples/frameworks/torchtitan-llama3-8b.yaml"
MEGATRON: Final = "deploy/examples/frameworks/megatron-llama2-7b.yaml"
MIXTRAL: Final = "deploy/examples/frameworks/megatron-mixtral-8x7b.yaml"

IMMUTABLE: Final = (
    "spec.model, spec.data and spec.batch cannot change once the plan has launched "
    "(status.jobName is set); create a new TrainingPlan instead",
    "spec",
)
SHAPE: Final = (
    "give either preset or all of layers, hiddenSize, attentionHeads, vocabSize, sequenceLength",
    "spec.model",
)
STRAY_MOE: Final = (
    "expertsPerToken, expertFfnHiddenSize, sharedExperts, sharedExpertFfnHiddenSize, "
    "moeLayerInterval, firstDenseLayers need experts (a mixture-of-experts model)",
    "spec.model",
)
TOP_K: Final = ("experts needs expertsPerToken (the top-k routing)", "spec.model")
TOP_K_RANGE: Final = ("expertsPerToken must not exceed experts", "spec.model")
ONE_AMOUNT: Final = ("give exactly one of tokens or samples", "spec.data")
MICRO: Final = ("microBatchSize must not exceed globalBatchSize and must divide it", "spec.batch")
GPUS_OR_DEADLINE: Final = (
    "give gpus or deadline, not both; to cap a deadline search use maxGPUs",
    "spec.objective",
)
ZERO3: Final = (
    "zeroStage 3 with pipeline > 1 is not supported by the frameworks trainplan launches; "
    "use zeroStage <= 2",
    "spec.parallelism",
)

CASES: Final[Mapping[tuple[str, str, str], tuple[Case, ...]]] = {
    (
        "trainingplans",
        "",
        "!has(oldSelf.status) || !has(oldSelf.status.jobName) || "
        "(self.spec.model == oldSelf.spec.model && self.spec.data == oldSelf.spec.data && "
        "self.spec.batch == oldSelf.spec.batch)",
    ): (
        Case("model after launch", TINY, {"spec.model.preset": "llama2-7b"},
             refused=IMMUTABLE, launched=True),
        Case("data after launch", TINY, {"spec.data.samples": 4096},
             refused=IMMUTABLE, launched=True),
        Case("epochs to its default 1.0 after launch", TINY, {"spec.data.epochs": DELETE},
             refused=IMMUTABLE, launched=True),
        Case("batch after launch", PINNED, {"spec.batch.microBatchSize": 2},
             refused=IMMUTABLE, launched=True),
        Case("model before launch", TINY, {"spec.model.preset": "llama2-7b"}, launched=False),
        Case("objective and job after launch", TINY,
             {"spec.objective.gpus": 4, "spec.job.suspend": True}, launched=True),
        Case("epochs 2 written as 2.0 after launch", TINY, {"spec.data.epochs": 2.0},
             launched=True),
        Case("epochs 1 left to its default after launch", PINNED, {"spec.data.epochs": DELETE},
             launched=True),
    ),
    (
        "trainingplans",
        ".spec.model",
        "has(self.preset) || (has(self.layers) && has(self.hiddenSize) && "
        "has(self.attentionHeads) && has(self.vocabSize) && has(self.sequenceLength))",
    ): (
        Case("shape without sequenceLength", V100, {"spec.model.sequenceLength": DELETE},
             refused=SHAPE, model=SHAPE),
        Case("no preset, no shape", TINY, {"spec.model": {"gatedMLP": True}},
             refused=SHAPE, model=SHAPE),
        Case("preset with an override", TINY, {"spec.model.layers": 4}),
    ),
    (
        "trainingplans",
        ".spec.model",
        "has(self.preset) || has(self.experts) || !(has(self.expertsPerToken) || "
        "has(self.expertFfnHiddenSize) || has(self.sharedExperts) || "
        "has(self.sharedExpertFfnHiddenSize) || has(self.moeLayerInterval) || "
        "has(self.firstDenseLayers))",
    ): (
        Case("expertsPerToken on a dense shape", V100, {"spec.model.expertsPerToken": 2},
             refused=STRAY_MOE, model=("expertsPerToken need experts", "spec.model")),
        Case("firstDenseLayers on a dense shape", V100, {"spec.model.firstDenseLayers": 1},
             refused=STRAY_MOE, model=("firstDenseLayers need experts", "spec.model")),
        Case("an MoE shape", V100, {"spec.model.experts": 8, "spec.model.expertsPerToken": 2}),
        Case("a preset's MoE field overridden", MIXTRAL, {"spec.model.expertsPerToken": 1}),
    ),
    (
        "trainingplans",
        ".spec.model",
        "has(self.preset) || !has(self.experts) || has(self.expertsPerToken)",
    ): (
        Case("experts without top-k", V100, {"spec.model.experts": 8},
             refused=TOP_K, model=("experts needs expertsPerToken", "spec.model")),
        Case("a preset's expert count overridden", MIXTRAL, {"spec.model.experts": 16}),
    ),
    (
        "trainingplans",
        ".spec.model",
        "!has(self.experts) || !has(self.expertsPerToken) || "
        "self.expertsPerToken <= self.experts",
    ): (
        Case("top-k above the experts", V100,
             {"spec.model.experts": 8, "spec.model.expertsPerToken": 9}, refused=TOP_K_RANGE,
             model=("expertsPerToken (9) must not exceed experts (8)", "spec.model")),
        Case("top-k equal to the experts", V100,
             {"spec.model.experts": 8, "spec.model.expertsPerToken": 8}),
    ),
    ("trainingplans", ".spec.data", "has(self.tokens) != has(self.samples)"): (
        Case("tokens and samples", TINY, {"spec.data.tokens": 1.0e6},
             refused=ONE_AMOUNT, model=ONE_AMOUNT),
        Case("neither tokens nor samples", PINNED, {"spec.data.tokens": DELETE},
             refused=ONE_AMOUNT, model=ONE_AMOUNT),
        Case("samples instead of tokens", PINNED,
             {"spec.data.tokens": DELETE, "spec.data.samples": 1000000}),
    ),
    (
        "trainingplans",
        ".spec.batch",
        "!has(self.microBatchSize) || self.microBatchSize < 1 || "
        "(self.microBatchSize <= self.globalBatchSize && "
        "self.globalBatchSize % self.microBatchSize == 0)",
    ): (
        Case("micro above global", TINY, {"spec.batch.microBatchSize": 32}, refused=MICRO,
             model=("microBatchSize (32) must not exceed globalBatchSize (16)", "spec.batch")),
        Case("micro not dividing global", TINY, {"spec.batch.microBatchSize": 5}, refused=MICRO,
             model=("globalBatchSize (16) must be divisible by microBatchSize (5)", "spec.batch")),
        Case("micro equal to global", TINY, {"spec.batch.microBatchSize": 16}),
        Case("micro left out", TINY, {"spec.batch.microBatchSize": DELETE}),
    ),
    ("trainingplans", ".spec.objective", "!(has(self.gpus) && has(self.deadline))"): (
        Case("gpus and deadline", TINY, {"spec.objective.deadline": "30d"},
             refused=GPUS_OR_DEADLINE, model=GPUS_OR_DEADLINE),
        Case("deadline instead of gpus", TINY,
             {"spec.objective.gpus": DELETE, "spec.objective.deadline": "30d"}),
    ),
    (
        "trainingplans",
        ".spec.objective",
        "!has(self.gpus) || !has(self.maxGPUs) || self.gpus <= self.maxGPUs",
    ): (
        Case("gpus above maxGPUs", TINY, {"spec.objective.maxGPUs": 1},
             refused=("gpus must not exceed maxGPUs", "spec.objective"),
             model=("gpus (2) must not exceed maxGPUs (1)", "spec.objective")),
        Case("gpus equal to maxGPUs", TINY, {"spec.objective.maxGPUs": 2}),
    ),
    (
        "trainingplans",
        ".spec.parallelism",
        "!has(self.zeroStage) || self.zeroStage != 3 || !has(self.pipeline) || "
        "self.pipeline <= 1",
    ): (
        # The models check it across sections, so their error is on `spec`.
        Case("ZeRO-3 with pipeline 2", TORCHTITAN, {"spec.parallelism.pipeline": 2},
             refused=ZERO3,
             model=("parallelism.zeroStage 3 with parallelism.pipeline > 1 (got 2)", "spec")),
        Case("ZeRO-2 with pipeline 2", MEGATRON, {"spec.parallelism.zeroStage": 2}),
        Case("ZeRO-3 without a pipeline pin", TORCHTITAN, {"spec.parallelism.pipeline": DELETE}),
    ),
    (
        "trainingplans",
        ".spec.parallelism",
        "!has(self.virtualPipelineStages) || self.virtualPipelineStages <= 1 || "
        "!has(self.pipeline) || self.pipeline > 1",
    ): (
        Case("interleaving on pipeline 1", MEGATRON, {"spec.parallelism.pipeline": 1},
             refused=("virtualPipelineStages > 1 needs pipeline > 1", "spec.parallelism"),
             model=("virtualPipelineStages (2) > 1 needs pipeline > 1 (got 1)",
                    "spec.parallelism")),
        Case("interleaving without a pipeline pin", MEGATRON,
             {"spec.parallelism.pipeline": DELETE}),
        Case("one virtual stage on pipeline 1", MEGATRON,
             {"spec.parallelism.pipeline": 1, "spec.parallelism.virtualPipelineStages": 1}),
    ),
    (
        "trainingplans",
        ".spec.training",
        "!has(self.lora) || (has(self.method) && "
        "(self.method == 'lora' || self.method == 'qlora'))",
    ): (
        Case("adapters on pre-training", TINY, {"spec.training.lora": {"rank": 8}},
             refused=("lora needs method lora or qlora", "spec.training"),
             model=("lora is set but method is pretrain; use lora or qlora", "spec.training")),
        Case("adapters on a LoRA fine-tune", TINY,
             {"spec.training.method": "lora", "spec.training.lora": {"rank": 8}}),
        Case("QLoRA with the default adapters", TINY,
             {"spec.training.method": "qlora", "spec.training.precision": "bf16"}),
    ),
    (
        "trainingplans",
        ".spec.training",
        "!has(self.method) || self.method != 'qlora' || !has(self.precision) || "
        "self.precision == 'bf16' || self.precision == 'fp16'",
    ): (
        Case("QLoRA in fp32", TINY,
             {"spec.training.method": "qlora", "spec.training.precision": "fp32"},
             refused=("qlora computes in bf16 or fp16", "spec.training"),
             model=("qlora computes in bf16 or fp16 on its 4-bit base, not fp32",
                    "spec.training")),
        Case("QLoRA in fp16", TINY,
             {"spec.training.method": "qlora", "spec.training.precision": "fp16"}),
    ),
}  # fmt: skip

NULL_DIFFERENCES: Final = (
    # (name, base, changes, rule path): CEL refuses, the models accept (docs/crds.md). The
    # second is an evaluation error (`null < 1` has no overload), which refuses it as well.
    ("samples: null beside tokens", PINNED, {"spec.data.samples": None}, ".spec.data"),
    ("microBatchSize: null", TINY, {"spec.batch.microBatchSize": None}, ".spec.batch"),
)

RULES_BY_KEY: Final = {rule.key: rule for rule in RULES}
ALL_CASES: Final = [(key, case) for key, cases in CASES.items() for case in cases]


def _case_id(item: tuple[tuple[str, str, str], Case]) -> str:
    (plural, path, _), case = item
    return f"{plural}{path or '(root)'}: {case.name}"


@functools.cache
def _validator(plural: str, part: Literal["spec", "status"]) -> jsonschema.protocols.Validator:
    return validator_for(CRDS[plural], part)


def _model_errors(plural: str, document: Mapping[str, Any]) -> list[tuple[str, str]]:
    try:
        MODELS[plural].model_validate(document)
    except ValidationError as error:
        return [(".".join(map(str, e["loc"])), e["msg"]) for e in error.errors()]
    return []


def _objects(key: tuple[str, str, str], case: Case) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the new object, the stored one or None for a create) of a case."""
    base = _base(case.base)
    if not RULES_BY_KEY[key].transition:
        return _changed(base, case.changes), None
    assert case.launched is not None, f"{case.name}: say whether the plan has launched"
    old = base
    if case.launched:
        old["status"] = launched_status(base["metadata"]["name"])
    return _changed(old, case.changes), old


# --- tests ---------------------------------------------------------------------------------


def test_rules_are_found() -> None:
    assert len(RULES) >= 8, "x-kubernetes-validations missing from crds/"


def test_every_rule_has_cases_and_every_case_a_rule() -> None:
    found = set(RULES_BY_KEY)
    assert len(found) == len(RULES), "a rule is repeated on one node"
    uncovered = sorted(found - {key for key, case in ALL_CASES if case.refused is not None})
    assert not uncovered, f"rules without a refused case in CASES: {uncovered}"
    stale = sorted(set(CASES) - found)
    assert not stale, f"CASES keys that are no rule of crds/ (rule text changed?): {stale}"


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.id)
def test_rule_compiles_and_reads_fields_of_its_node(rule: Rule) -> None:
    _program(rule.text)  # CELParseError fails the test
    if "messageExpression" in rule.entry:
        _program(rule.entry["messageExpression"])
    node = _node_at(rule.plural, rule.steps)
    for variable, chain in re.findall(r"\b(self|oldSelf)((?:\.[A-Za-z_]\w*)+)", rule.text):
        current = node
        for name in chain.removeprefix(".").split("."):
            properties = current.get("properties", {})
            assert name in properties, f"{rule}: {variable}{chain}: no field {name!r}"
            current = properties[name]
    reason = rule.entry.get("reason")
    assert reason is None or reason in REASONS, rule
    field_path = rule.entry.get("fieldPath")
    if field_path is not None:
        assert re.fullmatch(r"(\.[A-Za-z_]\w*)+", field_path), rule
        current = node
        for name in field_path.removeprefix(".").split("."):
            current = current["properties"][name]
    assert rule.entry.get("message") or rule.entry.get("messageExpression"), rule


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_document_passes_every_rule(name: str) -> None:
    document = DOCUMENTS[name]
    plural = PLURALS[document["kind"]]
    assert refusals(plural, document) == [], "create"
    assert refusals(plural, document, document) == [], "unchanged update, not launched"
    if plural == "trainingplans":
        launched = {**document, "status": launched_status(document["metadata"]["name"])}
        assert refusals(plural, launched, launched) == [], "unchanged update, launched"


@pytest.mark.parametrize(
    "rule", [rule for rule in RULES if not rule.transition], ids=lambda rule: rule.id
)
def test_examples_exercise_the_rule(rule: Rule) -> None:
    uses = sum(
        applications(rule.plural, document, rule)
        for document in DOCUMENTS.values()
        if PLURALS[document["kind"]] == rule.plural
    )
    assert uses > 0, f"{rule}: no example has this node, so no example tests the rule"


@pytest.mark.parametrize(("key", "case"), ALL_CASES, ids=[_case_id(item) for item in ALL_CASES])
def test_case(key: tuple[str, str, str], case: Case) -> None:
    rule = RULES_BY_KEY[key]
    plural = rule.plural
    new, old = _objects(key, case)
    # Valid for the OpenAPI schema: only CEL can refuse it.
    assert errors(_validator(plural, "spec"), new["spec"]) == [], "breaks the OpenAPI schema"
    if "status" in new:
        assert errors(_validator(plural, "status"), new["status"]) == []
    found = refusals(plural, new, old)
    if case.refused is None:
        assert found == []
    else:
        message, reported = case.refused
        assert [(r.rule, r.field, r.message, r.error) for r in found] == [
            (rule, reported, message, False)
        ]
    if old is not None and case.launched:
        assert refusals(plural, new) == [], "transition rules do not run on create"
    # The models say the same.
    problems = _model_errors(plural, new)
    if case.model is None:
        assert problems == [], "the models refuse what the CRD accepts"
    else:
        text, loc = case.model
        assert any(where == loc and text in message for where, message in problems), problems


def test_immutable_sections_are_the_ones_the_transition_rule_compares() -> None:
    (rule,) = [rule for rule in RULES if rule.transition]
    compared = set(re.findall(r"self\.spec\.(\w+) == oldSelf\.spec\.\1", rule.text))
    assert compared == set(IMMUTABLE_AFTER_LAUNCH)
    for case in CASES[rule.key]:
        sections = {path.split(".")[1] for path in case.changes}
        if case.refused is not None:
            assert sections & set(IMMUTABLE_AFTER_LAUNCH), case.name


@pytest.mark.parametrize(
    ("base", "changes", "path"),
    [item[1:] for item in NULL_DIFFERENCES],
    ids=[item[0] for item in NULL_DIFFERENCES],
)
def test_explicit_null_counts_as_given_in_cel_only(
    base: str, changes: Mapping[str, Any], path: str
) -> None:
    document = _changed(_base(base), changes)
    found = refusals("trainingplans", document)
    assert [refusal.rule.path for refusal in found] == [path]
    assert _model_errors("trainingplans", document) == []


def test_a_broken_rule_is_caught() -> None:
    """The evaluation bites: a rule with its comparison flipped refuses an example."""
    rule = RULES_BY_KEY[next(key for key in CASES if key[1] == ".spec.batch")]
    broken = Rule(
        rule.plural, rule.steps, rule.index, {**rule.entry, "rule": rule.text.replace("<=", ">")}
    )
    value = prepared_object("trainingplans", _base(TINY))
    ((where, batch, _),) = _instances(SCHEMAS["trainingplans"], broken.steps, value, MISSING, "")
    assert _check(rule, where, batch, MISSING) is None
    refusal = _check(broken, where, batch, MISSING)
    assert refusal is not None
    assert (refusal.message, refusal.field) == MICRO


def test_typing_follows_the_schema() -> None:
    """`epochs: 2` is a double in CEL, so it equals a stored 2.0; a null in a nullable field
    stays, a defaulted field appears."""
    document = _base(TINY)
    value = prepared_object("trainingplans", document)
    assert value["spec"]["data"]["epochs"] == 2.0
    assert isinstance(value["spec"]["data"]["epochs"], float)
    assert value["spec"]["hardware"]["gpuType"] == "A100-SXM4-80GB"
    assert value["metadata"] == {"name": "tiny-local"}
    cel = json_to_cel(value["spec"]["data"])
    assert isinstance(cel, celtypes.MapType)
    assert isinstance(cel[celtypes.StringType("epochs")], celtypes.DoubleType)
    nulled = prepared_object("trainingplans", _changed(document, {"spec.data.tokens": None}))
    assert "tokens" in nulled["spec"]["data"]
