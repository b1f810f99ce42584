"""The planner's mixture-of-experts step times against published runs
(tests/data/published_moe.csv, `benchmarks.moe`); nothing is fitted to them.

The bounds are what the planner achieves (BENCHMARKS.md, "Mixture-of-experts"): 22.1% mean
absolute step-time error over 17 rows of six sources (Grok-1, DeepSeek-V3, Qwen3 on H100
and GB200), the load imbalance fitted with each source held out no better than the
catalog's 1.0, and DeepSeek-V3's whole pre-training planned 2.9 x its published GPU-hours
(DualPipe hides the all-to-all that Megatron-LM's schedule at 16 uneven stages cannot).
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.moe import Evaluation, evaluate, load_rows, spread, whole_run
from trainplan.planner import Catalog

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module")
def evaluation(catalog: Catalog) -> Evaluation:
    rows, left_out = load_rows(catalog)
    assert len(rows) >= 17
    assert all(reason for _, reason in left_out)
    return evaluate(rows, catalog.calibration)


def test_step_times_at_the_catalog_constants(evaluation: Evaluation) -> None:
    errors = [abs(priced.error) for priced in evaluation.catalog]
    assert statistics.mean(errors) < 0.25
    assert statistics.median(errors) < 0.20
    assert all(-0.6 < priced.error < 0.75 for priced in evaluation.catalog)
    # Each layout ran; by the planner's memory count at least 13 of the 17 fit (the middle
    # stages of an interleaved pipeline hold Megatron-LM's whole warm-up, a little more
    # than Korthikanti et al.'s first-stage factor gave them: `stages.held_chunk_passes`).
    assert sum(priced.fits for priced in evaluation.catalog) >= 13


def test_the_published_overlap_is_what_the_planner_prices(evaluation: Evaluation) -> None:
    """The same Qwen3-235B layout with and without the all-to-all overlapped: published
    19.7 s and 17.6 s. The planner's overlap shortens the step too, but by more (about a
    third, where the published saving is 11%): under Megatron-Core's kernels the
    all-to-all it prices is dearer than this layout's, so the plain row is planned slow and
    the overlapped one fast, each within 20% (BENCHMARKS.md, "Mixture-of-experts")."""
    by_id = {priced.row.id: priced for priced in evaluation.catalog}
    plain = by_id["mcoremoezoo-qwen3-235b-256g-ep32-bf16"]
    overlapped = by_id["mcoremoezoo-qwen3-235b-256g-ep32-a2aoverlap-bf16"]
    assert overlapped.planned_seconds < plain.planned_seconds
    assert plain.error > 0 > overlapped.error
    assert abs(plain.error) < 0.2
    assert abs(overlapped.error) < 0.2


def test_the_held_out_fit_keeps_an_even_load(evaluation: Evaluation) -> None:
    assert evaluation.imbalance == 1.0
    held = statistics.mean(abs(priced.error) for priced in evaluation.held_out)
    assert held < 0.25


def test_deepseek_v3_whole_run(catalog: Catalog) -> None:
    run = whole_run(catalog)
    assert run.layout.startswith("TP1 PP16 DP128 EP64")
    assert 1.0 < run.planned_gpu_hours / run.published_gpu_hours < 4.0


def test_moe_ranges_are_the_published_rows_spread(evaluation: Evaluation, catalog: Catalog) -> None:
    """calibration.yaml's MoE spreads are what the benchmark computes, and the resulting
    10-90% step range holds about 80% of the rows, each source judged by the others'."""
    computed = spread(evaluation, catalog.calibration)
    calibration = catalog.calibration
    assert calibration.moe_range_spread_p10 == pytest.approx(computed.spread_p10, abs=1e-4)
    assert calibration.moe_range_spread_p90 == pytest.approx(computed.spread_p90, abs=1e-4)
    assert computed.coverage >= 0.7
    assert computed.held_out_coverage >= 0.7
