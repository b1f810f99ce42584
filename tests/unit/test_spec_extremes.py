"""Every numeric field of the spec has an upper bound, and planning a spec at any field's
bounds ends in a plan or one of the planner's documented errors, never anything else."""

from __future__ import annotations

import copy
import itertools
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


WIDE_SEARCHES: dict[str, dict[str, Any]] = {
    # A batch of 14,414,400 sequences (1,152 divisors) under a million-GPU ceiling, for a
    # framework that pipelines (the widest search).
    "ceiling": {
        "model": {"preset": "llama2-70b"},
        "data": {"tokens": 1e12},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"maxGPUs": 1_000_000},
        "job": {"framework": "megatron"},
    },
    "deadline": {
        "model": {"preset": "llama2-70b"},
        "data": {"tokens": 1e12},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"deadline": "1h", "maxGPUs": 1_000_000},
        "job": {"framework": "megatron"},
    },
}


@pytest.mark.parametrize("name", list(WIDE_SEARCHES))
def test_a_search_within_the_bounds_but_too_wide_is_refused_with_what_to_narrow(
    catalog: Catalog, name: str
) -> None:
    """Valid specs whose search would price hundreds of thousands of layouts (tens of
    seconds) stop at the evaluation budget, the planning-time bound, with a
    PlanInputError saying how to narrow the search (a smaller budget keeps this quick)."""
    spec = TrainingPlanSpec.model_validate(WIDE_SEARCHES[name])
    with pytest.raises(PlanInputError) as raised:
        plan(spec, catalog, max_layout_evaluations=2_000)
    ((field, message),) = raised.value.problems
    assert field == "spec"
    assert "more than 2,000 layouts" in message
    assert "pin parallelism.tensor and pipeline" in message


def test_the_evaluator_stops_at_its_budget(catalog: Catalog) -> None:
    from trainplan.planner.resolve import resolve
    from trainplan.planner.search import MAX_LAYOUT_EVALUATIONS, Evaluator, generate_layouts

    resolved = resolve(TrainingPlanSpec.model_validate(WIDE_SEARCHES["ceiling"]), catalog)
    evaluator = Evaluator(resolved.workload, catalog.calibration, resolved.run)
    assert evaluator.max_evaluations == MAX_LAYOUT_EVALUATIONS == 20_000
    evaluator.max_evaluations = 10
    layouts = list(itertools.islice(generate_layouts(resolved.workload, 4096, resolved.pins), 11))
    assert len(layouts) == 11
    for layout in layouts[:10]:
        evaluator.evaluate(layout)
    with pytest.raises(PlanInputError):
        evaluator.evaluate(layouts[10])
    assert evaluator.evaluations == 10
