"""The planner against the reference trainer measured on a real H200
(tests/data/measured_reference_gpu_h200.json, `benchmarks.reference_gpu`); never fitted.

The bounds are what the planner achieves (BENCHMARKS.md, "Step time measured on one
H200"): the larger models within 5%, the smallest, whose step is short and heavy in
unfused elementwise work and the 50,304-way softmax, within 20%.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks.reference_gpu_compare import Comparison, catalog_gpu, compare, load
from trainplan.planner import Catalog

MEASURED = Path(__file__).parent.parent / "data" / "measured_reference_gpu_h200.json"

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module")
def comparisons(catalog: Catalog) -> list[Comparison]:
    document = load(MEASURED)
    gpu = catalog_gpu(catalog, document, None)
    assert gpu.name == "H200-SXM-141GB"
    return compare(document, gpu, catalog.calibration)


def test_every_shape_was_measured(comparisons: list[Comparison]) -> None:
    assert len(comparisons) == 5
    assert all(c.measured_seconds is not None and c.error is not None for c in comparisons)


def test_step_time_errors(comparisons: list[Comparison]) -> None:
    errors = {c.name: abs(c.error or 0.0) for c in comparisons}
    assert errors["gpt-1.3b"] < 0.05
    assert errors["gpt-1.3b-full-recompute"] < 0.05
    assert errors["gpt-760m"] < 0.08
    assert max(errors.values()) < 0.20
    assert statistics.mean(errors.values()) < 0.08
    # The planner errs fast on a small model, never slow here.
    assert all((c.error or 0.0) < 0.01 for c in comparisons)


def test_the_range_holds_the_larger_models(comparisons: list[Comparison]) -> None:
    inside = {c.name for c in comparisons if c.inside_range}
    assert {"gpt-760m", "gpt-1.3b", "gpt-1.3b-full-recompute"} <= inside
