"""Every numeric field of the spec has an upper bound, and planning a spec at any field's
bounds ends in a plan or one of the planner's documented errors, never anything else."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from trainplan.api import TrainingPlanSpec
from trainplan.api.spec import (
    BatchSpec,
    DataSpec,
    ModelSpec,
    ObjectiveSpec,
    ParallelismSpec,
    ReliabilitySpec,
)
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "llama2-7b-deadline.yaml"
SECTIONS: dict[str, type[BaseModel]] = {
    "model": ModelSpec,
    "data": DataSpec,
    "batch": BatchSpec,
    "objective": ObjectiveSpec,
    "parallelism": ParallelismSpec,
    "reliability": ReliabilitySpec,
}


def _bounds(model: type[BaseModel]) -> list[tuple[str, float, float | None]]:
    """(camelCase name, lower bound, upper bound) of every numeric field."""
    found = []
    for name, info in model.model_fields.items():
        if info.annotation not in (int, float, int | None, float | None):
            continue
        low, high = 0.0, None
        for rule in info.metadata:
            low = getattr(rule, "ge", None) or getattr(rule, "gt", None) or low
            high = getattr(rule, "le", None) or high
        found.append((info.alias or name, low, high))
    return found


FIELDS = [(section, *bounds) for section, model in SECTIONS.items() for bounds in _bounds(model)]


def test_every_numeric_field_has_an_upper_bound() -> None:
    unbounded = [f"{section}.{name}" for section, name, _, high in FIELDS if high is None]
    assert unbounded == []
    assert len(FIELDS) >= 25


@pytest.mark.parametrize(
    ("section", "name", "value"),
    [
        (section, name, value)
        for section, name, low, high in FIELDS
        for value in (low or 1e-300, high)
        if value is not None
    ]
    + [
        ("batch", "globalBatchSize", 10_000_000_000_037),
        ("data", "tokens", 1e308),
        ("reliability", "checkpointSeconds", 1e308),
        ("reliability", "interruptionsPerGPUHour", 1e308),
    ],
)
def test_a_spec_at_any_bound_is_planned_or_refused_with_a_documented_error(
    catalog: Catalog, section: str, name: str, value: float
) -> None:
    document: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text())["spec"])
    document.setdefault(section, {})[name] = value
    if section == "objective" and name == "gpus":
        document["objective"] = {"gpus": value}
    if section == "data" and name == "samples":
        document["data"].pop("tokens")
    outcome = _outcome(document, catalog)
    assert outcome == "planned" or outcome.startswith(("invalid:", "input:", "infeasible:"))
    if outcome.startswith("invalid:"):
        assert name in outcome or section in outcome, outcome
    else:
        assert outcome.split(":", 1)[-1].strip(), outcome  # every refusal says why


def _outcome(document: dict[str, Any], catalog: Catalog) -> str:
    """How planning ended: planned, or which documented error, with the fields or reasons
    it names. Any other exception propagates and fails the test."""
    try:
        spec = TrainingPlanSpec.model_validate(document)
    except ValidationError as error:
        named = {".".join(str(part) for part in e["loc"]) for e in error.errors()}
        return f"invalid: {sorted(named)} {error}"
    try:
        result = plan(spec, catalog)
    except PlanInputError as error:
        return f"input: {error.problems}"
    except InfeasiblePlanError as error:
        return f"infeasible: {' '.join(error.reasons)}"
    return "planned" if result.gpus >= 1 else "no GPUs"
