"""The planner against the reference trainer measured on a real H200 and a real H100
(tests/data/measured_reference_gpu_*.json, `benchmarks.reference_gpu`); never fitted.

The bounds are what the planner achieves (BENCHMARKS.md, "Step time measured on one H200
and one H100"): the 1.3B model within 9%, the smallest, whose step is short and heavy in
unfused elementwise work and the 50,304-way softmax, within 21%; the planner is fast on
every shape.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks.reference_gpu_compare import (
    Comparison,
    catalog_gpu,
    compare,
    load,
    measured_kinds,
    planned_kinds,
    workload_and_layout,
)
from trainplan.planner import Catalog

DATA = Path(__file__).parent.parent / "data"
MEASURED = {
    "h200": ("H200-SXM-141GB", DATA / "measured_reference_gpu_h200.json", 0.105),
    "h200-repeat": ("H200-SXM-141GB", DATA / "measured_reference_gpu_h200_repeat.json", 0.11),
    "h100": ("H100-SXM5-80GB", DATA / "measured_reference_gpu_h100.json", 0.13),
}
"""Run: (catalog GPU, measurement, the mean absolute error the planner achieves on it).
The repeat is the same five shapes on another H200 machine a day later (0.2-1.1% slower
per shape): the planner is held to each measurement, not to one lucky run."""

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module", params=sorted(MEASURED))
def measured(request: pytest.FixtureRequest, catalog: Catalog) -> tuple[list[Comparison], float]:
    gpu_name, path, mean_error = MEASURED[request.param]
    document = load(path)
    gpu = catalog_gpu(catalog, document, None)
    assert gpu.name == gpu_name
    return compare(document, gpu, catalog.calibration), mean_error


def test_every_shape_was_measured(measured: tuple[list[Comparison], float]) -> None:
    comparisons, _ = measured
    assert len(comparisons) == 5
    assert all(c.measured_seconds is not None and c.error is not None for c in comparisons)


def test_step_time_errors(measured: tuple[list[Comparison], float]) -> None:
    comparisons, mean_error = measured
    errors = {c.name: abs(c.error or 0.0) for c in comparisons}
    assert errors["gpt-1.3b"] < 0.09
    assert errors["gpt-1.3b-full-recompute"] < 0.05
    assert max(errors.values()) < 0.21
    assert statistics.mean(errors.values()) < mean_error
    # The planner errs fast, most on the smallest model, never slow here.
    assert all((c.error or 0.0) < 0.0 for c in comparisons)
    assert max(errors, key=errors.__getitem__) == "gpt-125m"


def test_long_sequences_are_priced_slow_on_hopper(catalog: Catalog) -> None:
    """The 1.3B model at 8,192 and 16,384 tokens on one H200: the planner prices its
    attention core at the catalog's fused-attention efficiency (23% of the peak, one
    constant for every architecture),
    about half what PyTorch's kernel reached here (36-45%, BENCHMARKS.md), so it is slow
    by 15% and 38%: bounds of what the planner achieves, not goals."""
    document = load(DATA / "measured_reference_gpu_h200_long.json")
    comparisons = compare(document, catalog_gpu(catalog, document, None), catalog.calibration)
    errors = {c.name: c.error or 0.0 for c in comparisons}
    assert 0.0 < errors["gpt-1.3b-seq8192"] < 0.2
    assert 0.2 < errors["gpt-1.3b-seq16384"] < 0.45


ZERO_STAGES = {
    "H200-SXM-141GB": (DATA / "measured_reference_gpu_h200_zero.json", 0.07),
    "H100-SXM5-80GB": (DATA / "measured_reference_gpu_h100_zero.json", 0.07),
}
"""Catalog GPU: (the ZeRO-stage run, the largest error the planner makes on it)."""


@pytest.mark.parametrize("gpu_name", sorted(ZERO_STAGES))
def test_zero_stages_with_accumulation_on_one_gpu(gpu_name: str, catalog: Catalog) -> None:
    """The 1.3B model with 4 micro-batches a step at ZeRO 0-3 on one GPU (DDP for 0,
    FSDP2 for 1-3, as the trainer runs each stage): on one GPU no stage communicates, so
    the planner prices them alike, and every stage's measured step is within 7% of it on
    either GPU (DDP's per-matmul casts and FSDP2's ZeRO-3 gathers cost the most), inside
    its 10-90% range."""
    path, largest_error = ZERO_STAGES[gpu_name]
    document = load(path)
    gpu = catalog_gpu(catalog, document, None)
    assert gpu.name == gpu_name
    comparisons = compare(document, gpu, catalog.calibration)
    assert [c.name for c in comparisons] == [f"gpt-1.3b-ga4-zero{stage}" for stage in range(4)]
    assert len({c.planned_seconds for c in comparisons}) == 1
    for comparison in comparisons:
        assert comparison.error is not None
        assert abs(comparison.error) < largest_error
        assert comparison.inside_range


def test_the_range_holds_the_largest_model(measured: tuple[list[Comparison], float]) -> None:
    comparisons, _ = measured
    inside = {c.name for c in comparisons if c.inside_range}
    assert {"gpt-1.3b", "gpt-1.3b-full-recompute"} <= inside


PROFILED = {
    "H100-SXM5-80GB": (DATA / "measured_reference_gpu_profile_h100.json", 5, 0.90),
    "H200-SXM-141GB": (DATA / "measured_reference_gpu_profile_h200.json", 4, 0.80),
}
"""Catalog GPU: (the profiled run, how many of its shapes have a complete profile, the
least share of the median step its kernels take). The H200 run's 14 steps leave 9 steady
ones, 6 of them slowed by the profiler (its warm-up and recorded steps), so its median
step is longer than the kernels' time by more than the H100 run's, which has 15 steady."""


@pytest.mark.parametrize("gpu_name", sorted(PROFILED))
def test_the_profiled_kernels_fill_the_step(gpu_name: str, catalog: Catalog) -> None:
    """The trainer keeps the GPU busy: its kernels take nearly all of each measured step,
    and every kind of kernel falls in one of the planner's terms."""
    path, complete, busy = PROFILED[gpu_name]
    document = load(path)
    assert catalog_gpu(catalog, document, None).name == gpu_name
    profiled = [r for r in document["shapes"] if r.get("kernel_profile", {}).get("complete")]
    assert len(profiled) == complete
    for record in profiled:
        profile = record["kernel_profile"]
        kernels = profile["kernel_seconds_per_step"]
        assert busy <= kernels / record["step_seconds"]["median"] <= 1.0
        assert sum(measured_kinds(profile).values()) == pytest.approx(kernels, rel=1e-9)


def test_where_the_planner_misplaces_the_step_on_hopper(catalog: Catalog) -> None:
    """The figures of BENCHMARKS.md's "Where the step goes" table, which a planner that
    split the step better would change (and this test and the table with it): the
    planner's total is close on the 1.3B model only because its terms err both ways. It
    prices the matrix multiplies 1.6-1.9x and the attention core 1.3-1.8x slower than
    they ran (cuBLAS reached about 80% of the dense peak; the fitted Hopper efficiency is
    62%) and the eager trainer's memory-bound work (norms, fp32 residual adds, autocast's
    casts) at 0.3-0.4x of what it took."""
    document = load(DATA / "measured_reference_gpu_profile_h100.json")
    gpu = catalog_gpu(catalog, document, None)
    for record in document["shapes"]:
        workload, layout = workload_and_layout(record, gpu)
        planned = planned_kinds(workload, layout, catalog.calibration)
        measured = measured_kinds(record["kernel_profile"])
        ratio = {kind: planned[kind] / measured[kind] for kind in measured if measured[kind] > 0}
        assert 1.4 < ratio["matrix multiplies"] < 1.9
        assert 1.25 < ratio["attention core"] < 2.0
        assert 0.25 < ratio["norms, casts and other elementwise"] < 0.45
        assert 0.7 < ratio["optimizer"] < 0.8
