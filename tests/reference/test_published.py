"""Reference points: the planner against published measurements (tests/data/).

Tolerances are the project's accuracy goals; BENCHMARKS.md holds the full table
(`python -m benchmarks.accuracy`). Where a goal is missed, the bound here is what the
planner achieves and BENCHMARKS.md says which rows miss and why.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from benchmarks.accuracy import (
    Prediction,
    best_pinned,
    exact_sweep_layout,
    predict_benchmarks,
    predict_megatron,
    predict_sweeps,
    run_choice,
    run_gpu_hours_of,
    spearman,
)
from benchmarks.fit_calibration import fit_goodput, unmeasured_parameters
from benchmarks.holdout import groups
from benchmarks.reference_data import (
    STEP_FIT_RUNS,
    benchmark_rows,
    run_rows,
    sweep_free_pins,
    sweep_rows,
)
from trainplan.planner import Catalog
from trainplan.planner.frameworks import FRAMEWORK_LIMITS
from trainplan.planner.memory import estimate_memory
from trainplan.planner.shapes import parameter_count

pytestmark = pytest.mark.reference

ROW_TOLERANCE = 0.15
MEAN_TOLERANCE = 0.10
RUN_TOLERANCE = 0.15
FREE_CHOICE_TOLERANCE = 0.10
RANK_CORRELATION = {
    "3.6B": 0.8,
    "175B": 0.8,
    # Below the 0.8 goal: these sweeps hold layouts measured slower than any smooth cost
    # model explains (TP2 runs ~35% slower than TP4 at equal work per GPU; micro-batch 16
    # slower than 8 without a pipeline). See BENCHMARKS.md, "Layout ranking".
    "18.4B": 0.65,
    "39.1B": 0.65,
}


@pytest.fixture(scope="module")
def benchmark_predictions(catalog: Catalog) -> list[Prediction]:
    return predict_benchmarks(catalog, catalog.calibration)


def test_every_benchmark_row_has_a_feasible_pinned_layout(
    benchmark_predictions: list[Prediction],
) -> None:
    infeasible = [p.row_id for p in benchmark_predictions if not math.isfinite(p.predicted)]
    assert infeasible == []


def test_each_benchmark_row_within_tolerance(benchmark_predictions: list[Prediction]) -> None:
    misses = {
        p.row_id: f"{p.error:+.1%}"
        for p in benchmark_predictions
        if p.in_fit and abs(p.error) > ROW_TOLERANCE
    }
    assert misses == {}


def test_mean_absolute_error_of_benchmarks(benchmark_predictions: list[Prediction]) -> None:
    errors = [abs(p.error) for p in benchmark_predictions if p.in_fit]
    assert sum(errors) / len(errors) <= MEAN_TOLERANCE


def test_rows_on_other_hardware_are_shown_not_fitted(
    benchmark_predictions: list[Prediction],
) -> None:
    """torchtitan's Grand Teton H100s (500 W, HBM2e at 2.4 TB/s) are slower than the
    H100-SXM5-80GB entry they are priced on: every such row is predicted faster than it
    ran, and none is fitted (`reference_data.OFF_CATALOG_SOURCES`)."""
    off = [p for p in benchmark_predictions if not p.in_fit]
    assert {p.row_id for p in off} == {
        "titan-h100-8b-fsdp8-tp8",
        "titan-h100-70b-fsdp32-tp8",
        "titan-h100-405b-fsdp16-tp8",
    }
    assert all(-0.35 < p.error < 0 for p in off), {p.row_id: p.error for p in off}


def test_megatron_core_rows_on_hopper(catalog: Catalog) -> None:
    """NeMo's eight bf16 rows on DGX H100, fitted with Megatron-Core's own Hopper
    efficiencies and their tensor-parallel overlap, beside Megatron-LM's own H100 table:
    each within 10% (3.0% on average), where PyTorch's constants put them 17-35% slow."""
    predictions = predict_megatron(catalog, catalog.calibration)
    assert len(predictions) == 8
    errors = {p.row_id: p.error for p in predictions}
    assert all(abs(error) < 0.10 for error in errors.values()), errors
    assert sum(abs(e) for e in errors.values()) / len(errors) < 0.04
    assert all(abs(p.error) < abs(p.baseline_error) for p in predictions)


def test_megatron_lm_table_is_priced_as_megatron_core_ran_it(catalog: Catalog) -> None:
    """Megatron-LM's H100 scaling table (README, 2024): nine rows from 1.7B on 48 GPUs to
    462B on 6,144, under Megatron-Core's kernels, its distributed optimizer with the weight
    gather under the next forward pass, and the tensor-parallel overlap the README names;
    their untied embeddings give the table's parameter counts."""
    rows = [row for row in benchmark_rows(catalog) if row.row_id.startswith("meg24-")]
    assert len(rows) == 9
    for row in rows:
        assert row.pins.framework == FRAMEWORK_LIMITS["megatron"]  # searched as it runs
        assert row.workload.kernels == "megatron-core"
        assert row.workload.param_gather_overlap
        assert row.workload.tensor_comm_overlap
        assert row.pins.zero_stage == 1
        assert row.pins.sequence_parallel is (row.pins.tensor != 1)
        published_billions = float(row.row_id.removeprefix("meg24-").removesuffix("b"))
        billions = parameter_count(row.workload.shape) / 1e9
        assert billions == pytest.approx(published_billions, rel=0.03)


def test_planner_beats_the_six_n_d_baseline(benchmark_predictions: list[Prediction]) -> None:
    planner = sum(abs(p.error) for p in benchmark_predictions)
    baseline = sum(abs(p.baseline_error) for p in benchmark_predictions)
    assert planner < baseline / 2


@pytest.mark.parametrize("model", sorted(RANK_CORRELATION))
def test_sweep_rank_correlation(catalog: Catalog, model: str) -> None:
    pairs = [
        (row.measured_step_seconds, predicted)
        for row, predicted in predict_sweeps(catalog, catalog.calibration)
        if row.model == model
    ]
    assert len(pairs) >= 10
    rho = spearman([m for m, _ in pairs], [p for _, p in pairs])
    assert rho >= RANK_CORRELATION[model]


@pytest.mark.parametrize("model", ["3.6B", "18.4B", "39.1B", "175B"])
def test_free_choice_near_fastest_measured_layout(catalog: Catalog, model: str) -> None:
    """The planner's own layout (zero stage, recompute and schedule as in the sweep) is
    within 10% of the fastest measured: by its measured time when that layout was
    measured, else by its predicted time."""
    rows = [row for row in sweep_rows(catalog) if row.model == model]
    measured = {exact_sweep_layout(row): row.measured_step_seconds for row in rows}
    fastest = min(measured.values())
    choice = best_pinned(rows[0].workload, rows[0].gpus, sweep_free_pins(), catalog.calibration)
    assert choice is not None
    seconds = measured.get(choice.layout, choice.step_seconds)
    assert abs(seconds / fastest - 1) <= FREE_CHOICE_TOLERANCE


def test_whole_runs_gpu_hours_within_tolerance(catalog: Catalog) -> None:
    """The LLaMA-1 runs the step-time constants were fitted to, priced as steady steps
    (their source priced steady throughput). The other whole runs, and their goal, are in
    BENCHMARKS.md ("Whole runs from many sources")."""
    errors = {}
    for row in run_rows(catalog):
        if row.row_id not in STEP_FIT_RUNS:
            continue
        choice = run_choice(row, catalog.calibration)
        assert choice is not None
        gpu_hours = run_gpu_hours_of(row, choice, catalog.calibration, goodput=1.0)
        errors[row.row_id] = gpu_hours / row.published_gpu_hours - 1
    assert errors
    assert all(abs(e) <= RUN_TOLERANCE for e in errors.values()), errors


def test_memory_model_admits_every_measured_sweep_layout(catalog: Catalog) -> None:
    """Each sweep layout ran on 80 GB A100s, so the memory model must let it fit."""
    too_big = [
        exact_sweep_layout(row).describe()
        for row in sweep_rows(catalog)
        if not estimate_memory(row.workload, exact_sweep_layout(row), catalog.calibration).fits
    ]
    assert too_big == []


def test_sweeps_group_by_model(catalog: Catalog) -> None:
    counts: dict[str, int] = defaultdict(int)
    for row in sweep_rows(catalog):
        counts[row.model] += 1
    assert set(counts) == set(RANK_CORRELATION)


def test_run_goodput_is_what_the_fit_gives(catalog: Catalog) -> None:
    """calibration.yaml's whole-run goodput is `fit_goodput` on published_runs.csv with
    the stored step-time constants (a few seconds: one search per run)."""
    assert fit_goodput(catalog, catalog.calibration) == catalog.calibration.run_goodput


def test_a_constant_no_fitted_row_prices_is_found(catalog: Catalog) -> None:
    """With MosaicML's two H100 rows held out, no fitted row runs PyTorch's kernels on
    Hopper, so a held-out fit sets that matrix efficiency as the planner sets an
    unmeasured architecture's (the `default` entry's), not where the solver's steps left
    it; with every row fitted, each constant is priced by some row."""
    h100 = groups(catalog)["MosaicML H100-SXM5-80GB"]
    unmeasured = unmeasured_parameters(catalog, catalog.calibration, h100)
    assert [p.name for p in unmeasured] == ["hopper.gemm_efficiency"]
    fallback = unmeasured[0].unmeasured(catalog.calibration)
    default = catalog.calibration.architecture("default").gemm_efficiency
    assert fallback.architecture("hopper").gemm_efficiency == default
    assert unmeasured_parameters(catalog, catalog.calibration) == []
