"""Reading TrainingPlan files for the command line: YAML or JSON, whole resources or bare
specs, several YAML documents per file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from trainplan.api import (
    ClusterCalibration,
    TrainingPlanSpec,
    format_validation_errors,
    parse_training_plan_spec,
)
from trainplan.api.serving import ServingSpec

_Model = TypeVar("_Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class PlanInput:
    """One document of one file: its label and either a spec or the problems found."""

    label: str
    name: str
    spec: TrainingPlanSpec | None
    problems: tuple[str, ...]
    spec_path: str = ""
    """Prefix of spec fields in this document: `spec.` for a whole resource."""
    namespace: str | None = None
    """The document's metadata.namespace, when it has one."""


MAX_PLAN_FILE_BYTES = 1 << 20
"""The largest plan file read (1 MiB; a plan is a few KiB): a larger one is refused before
it is parsed."""


class _FileTooLargeError(Exception):
    pass


MAX_EXPANDED_VALUES = 100_000
"""Most values a plan document may hold once its YAML aliases are expanded: a real plan
holds a few hundred; a "billion laughs" document, aliases of aliases, billions."""
_PLAIN_KEYS = (str, int, float, bool, type(None))


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` stands for once every alias is expanded (each node's size
    computed once, so this costs the composed graph's size, never the expansion's)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # a recursive alias counts once
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(
            _expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value
        )
    else:
        size = 1
    sizes[id(node)] = min(size, MAX_EXPANDED_VALUES + 1)
    return sizes[id(node)]


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives a key twice (YAML and JSON
    would otherwise keep the last one silently), a key that is not a plain value, and a
    document whose aliases would expand to more than `MAX_EXPANDED_VALUES` values (it is
    refused before anything is built)."""

    def construct_document(self, node: yaml.Node) -> Any:
        if _expanded_size(node, {}) > MAX_EXPANDED_VALUES:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"its YAML aliases expand to more than {MAX_EXPANDED_VALUES:,} values",
                node.start_mark,
            )
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    "a key must be a plain value, not a list or a mapping",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, _PLAIN_KEYS):
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    "a key must be a plain value",
                    key_node.start_mark,
                )
            if key in seen:
                shown = repr(key) if len(repr(key)) <= 80 else repr(key)[:77] + "..."
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {shown} is given twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _documents(path: Path) -> list[Any]:
    with path.open("rb") as file:
        data = file.read(MAX_PLAN_FILE_BYTES + 1)
    if len(data) > MAX_PLAN_FILE_BYTES:
        raise _FileTooLargeError
    text = data.decode("utf-8")
    loaded = yaml.load_all(text, Loader=_UniqueKeyLoader)
    return [document for document in loaded if document is not None]


def _load(path: Path) -> tuple[list[Any], str | None]:
    """The documents of `path`, or none and why it cannot be read."""
    try:
        documents = _documents(path)
    except OSError as error:
        return [], f"cannot read: {error.strerror}"
    except _FileTooLargeError:
        return [], f"larger than {MAX_PLAN_FILE_BYTES} bytes"
    except UnicodeDecodeError:
        return [], "not a text file (UTF-8 expected)"
    except yaml.YAMLError as error:
        return [], f"not YAML or JSON: {_one_line(error)}"
    if not documents:
        return [], "no document in file"
    return documents, None


def _read_one(path: Path, model: type[_Model], kind: str) -> tuple[_Model | None, tuple[str, ...]]:
    """The one `kind` document in `path`, or None and one line per problem (field paths
    as `status.records[0].gpuHours: ...`)."""
    documents, problem = _load(path)
    if problem is not None:
        return None, (problem,)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        return None, (f"expected one {kind} document",)
    try:
        return model.model_validate(documents[0]), ()
    except ValidationError as error:
        return None, tuple(format_validation_errors(error))


def read_cluster_calibration(path: Path) -> tuple[ClusterCalibration | None, tuple[str, ...]]:
    """The one ClusterCalibration resource in `path`, or None and one line per problem."""
    return _read_one(path, ClusterCalibration, "ClusterCalibration")


def read_serving_spec(path: Path) -> tuple[ServingSpec | None, tuple[str, ...]]:
    """The one serving spec in `path` (`trainplan serve`), or None and one line per
    problem."""
    return _read_one(path, ServingSpec, "serving spec")


def read_plan_inputs(path: Path) -> list[PlanInput]:
    """Every TrainingPlan document in `path`; unreadable files yield one problem."""
    label = str(path)
    documents, problem = _load(path)
    if problem is not None:
        if problem.startswith("larger than"):
            problem += "; a plan file is a few KiB"
        return [PlanInput(label, path.stem, None, (problem,))]
    inputs = []
    for index, document in enumerate(documents):
        where = label if len(documents) == 1 else f"{label}[{index}]"
        name = _name(document, path.stem if len(documents) == 1 else f"{path.stem}-{index}")
        if not isinstance(document, dict):
            problem = f"(root): expected a mapping, got {type(document).__name__}"
            inputs.append(PlanInput(where, name, None, (problem,)))
            continue
        try:
            spec = parse_training_plan_spec(document)
        except ValidationError as error:
            inputs.append(PlanInput(where, name, None, tuple(format_validation_errors(error))))
            continue
        prefix = "spec." if "spec" in document else ""
        inputs.append(PlanInput(where, name, spec, (), prefix, _namespace(document)))
    return inputs


def _one_line(error: yaml.YAMLError) -> str:
    """A PyYAML error on one line: its problem and where."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        problem = error.problem or error.context or "syntax error"
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(error).split())


def _namespace(document: dict[str, Any]) -> str | None:
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("namespace"), str):
        return str(metadata["namespace"])
    return None


def _name(document: Any, fallback: str) -> str:
    if isinstance(document, dict):
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            return str(metadata["name"])
    return fallback
