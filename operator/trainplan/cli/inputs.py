"""Reading TrainingPlan files for the command line: YAML or JSON, whole resources or bare
specs, several YAML documents per file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainplan.api import TrainingPlanSpec, format_validation_errors, parse_training_plan_spec


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


def _documents(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    return [document for document in yaml.safe_load_all(text) if document is not None]


def read_plan_inputs(path: Path) -> list[PlanInput]:
    """Every TrainingPlan document in `path`; unreadable files yield one problem."""
    label = str(path)
    try:
        documents = _documents(path)
    except OSError as error:
        return [PlanInput(label, path.stem, None, (f"cannot read: {error.strerror}",))]
    except UnicodeDecodeError:
        return [PlanInput(label, path.stem, None, ("not a text file (UTF-8 expected)",))]
    except yaml.YAMLError as error:
        return [PlanInput(label, path.stem, None, (f"not YAML or JSON: {_one_line(error)}",))]
    if not documents:
        return [PlanInput(label, path.stem, None, ("no document in file",))]
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
