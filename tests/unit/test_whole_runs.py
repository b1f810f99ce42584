"""The whole-run goodput's arithmetic, the published whole runs' data file and their
published layouts."""

from __future__ import annotations

import csv
import math
from dataclasses import replace

import pytest

from benchmarks.accuracy import run_choice, run_gpu_hours_of
from benchmarks.reference_data import DATA_DIR, other_reading, run_group, run_rows
from benchmarks.whole_runs import RunResult, by_gpu, describe_pins, why_nothing_fits
from trainplan.planner import Catalog
from trainplan.planner.reliability import estimate_reliability, whole_run_compute_seconds
from trainplan.planner.search import LayoutPins


def test_goodput_divides_steady_time() -> None:
    assert whole_run_compute_seconds(900.0, 0.9) == pytest.approx(1000.0)
    assert whole_run_compute_seconds(900.0, 1.0) == 900.0


@pytest.mark.parametrize("goodput", [0.0, -0.5, 1.01])
def test_goodput_outside_its_range_is_refused(goodput: float) -> None:
    with pytest.raises(ValueError, match="goodput"):
        whole_run_compute_seconds(1.0, goodput)


def _run(goodput: float, rate: float = 0.0) -> tuple[float, float]:
    estimate = estimate_reliability(
        compute_seconds=10_000.0,
        step_seconds=10.0,
        total_steps=1_000,
        gpus=1_000,
        interruptions_per_gpu_hour=rate,
        checkpoint_seconds=0.0,
        restart_seconds=600.0,
        checkpoint_interval_steps=100,
        goodput=goodput,
    )
    return estimate.duration_seconds, estimate.overhead_seconds


def test_goodput_without_failures_is_steady_over_goodput() -> None:
    duration, overhead = _run(0.8)
    assert duration == pytest.approx(12_500.0)
    assert overhead == pytest.approx(2_500.0)


def test_goodput_and_failures_compose() -> None:
    """D = (T / g) / (1 - (R + W / 2) / M), W the interval's wall-clock at goodput g."""
    rate = 1e-4  # per GPU-hour: M = 1 / (1e-4 x 1000 / 3600) = 36,000 s
    duration, _ = _run(0.8, rate)
    mtbi = 3600.0 / (rate * 1_000)
    work = 100 * 10.0 / 0.8
    assert duration == pytest.approx(12_500.0 / (1 - (600.0 + work / 2) / mtbi))
    assert duration > _run(1.0, rate)[0] / 0.8


def test_every_whole_run_row_parses_and_names_its_source(catalog: Catalog) -> None:
    with (DATA_DIR / "published_runs.csv").open(newline="") as handle:
        raw = list(csv.DictReader(handle))
    rows = list(run_rows(catalog))
    assert len(rows) == len(raw) >= 15
    assert len({row.row_id for row in rows}) == len(rows)
    assert len({row.group for row in rows}) >= 8
    for text, row in zip(raw, rows, strict=True):
        assert text["source"].strip(), row.row_id
        assert text["notes"].strip(), row.row_id
        assert row.gpus > 0
        assert row.tokens > 0
        assert row.published_gpu_hours > 0
        assert row.group == run_group(row.row_id)
        days = text["published_wall_days"].strip()
        if days:  # GPUs x days agrees with the hours where the source gives both
            assert math.isclose(
                row.gpus * float(days) * 24, row.published_gpu_hours, rel_tol=0.1
            ), row.row_id


def test_a_basis_the_source_does_not_state_is_read_both_ways(catalog: Catalog) -> None:
    # Where a source does not say whether its GPU-hours count wall-clock time or steady
    # steps, its notes say so, and the benchmark also reports the other reading.
    rows = list(run_rows(catalog))
    unstated = [row for row in rows if not row.hours_basis_stated]
    assert unstated, "Pythia's table does not say how it counted"
    for row in unstated:
        assert "does not say" in row_notes(row.row_id)
        flipped = other_reading(row)
        assert {flipped.hours_basis, row.hours_basis} == {"elapsed", "steps"}
        assert other_reading(flipped) == row
    assert all(row.hours_basis_stated for row in rows if row.group == "llama1")


def row_notes(row_id: str) -> str:
    with (DATA_DIR / "published_runs.csv").open(newline="") as handle:
        return next(r["notes"] for r in csv.DictReader(handle) if r["id"] == row_id)


def test_published_layouts_are_pins_and_unpublished_parts_are_searched(catalog: Catalog) -> None:
    rows = {row.row_id: row for row in run_rows(catalog)}
    assert rows["bloom-176b"].pins == LayoutPins(
        tensor=4,
        pipeline=12,
        micro_batch_size=2,
        zero_stage=1,
        checkpointing="full",
        sequence_parallel=False,
        virtual_stages=1,
    )
    assert rows["falcon-180b"].pins.zero_stage is None
    assert rows["llama2-70b"].pins == LayoutPins()


def test_a_pinned_run_is_priced_on_its_published_layout(catalog: Catalog) -> None:
    row = next(row for row in run_rows(catalog) if row.row_id == "gptneox-20b")
    choice = run_choice(row, catalog.calibration)
    assert choice is not None
    layout = choice.layout
    assert (layout.tensor, layout.pipeline, layout.data) == (2, 4, 12)
    assert (layout.micro_batch_size, layout.zero_stage, layout.checkpointing) == (4, 1, "full")
    assert describe_pins(row.pins) == "TP2 PP4 mb4 ZeRO-1 full-recompute"


def test_a_published_layout_that_does_not_fit_is_reported_not_replaced(catalog: Catalog) -> None:
    row = next(row for row in run_rows(catalog) if row.row_id == "gptneox-20b")
    unsharded = replace(
        row,
        pins=LayoutPins(tensor=1, pipeline=1, zero_stage=0, checkpointing="full"),
    )
    assert run_choice(unsharded, catalog.calibration) is None
    assert math.isinf(run_gpu_hours_of(unsharded, None, catalog.calibration))
    assert why_nothing_fits(unsharded, catalog.calibration).startswith(
        "published layout does not fit: TP1 PP1 DP96"
    )


def test_a_stated_cluster_network_prices_the_run_on_it(catalog: Catalog) -> None:
    # BloombergGPT's and Falcon-180B's p4d.24xlarge nodes: 400 Gb/s of EFA for 8 GPUs,
    # a quarter of the catalog A100's 200 Gb/s per GPU; rows that state none keep it.
    with (DATA_DIR / "published_runs.csv").open(newline="") as handle:
        stated = {
            r["id"]: float(r["network_gbps_per_node"])
            for r in csv.DictReader(handle)
            if r["network_gbps_per_node"].strip()
        }
    assert stated == {"bloomberggpt-50b": 400.0, "falcon-180b": 400.0}
    rows = {row.row_id: row for row in run_rows(catalog)}
    for row_id, gbps in stated.items():
        assert "400 Gb/s" in row_notes(row_id)
        gpu = rows[row_id].workload.gpu
        assert gpu.network_bandwidth_bytes_per_second == pytest.approx(gbps * 1e9 / 8 / 8)
        catalog_gpu = catalog.gpu(gpu.name)
        assert (
            gpu.network_bandwidth_bytes_per_second < catalog_gpu.network_bandwidth_bytes_per_second
        )
        assert replace(gpu, network_bandwidth_bytes_per_second=0.0) == replace(
            catalog_gpu, network_bandwidth_bytes_per_second=0.0
        )
    assert rows["llama2-70b"].workload.gpu == catalog.gpu("A100-SXM4-80GB")
    # The slower network costs Falcon's data-parallel reduction across nodes.
    falcon = rows["falcon-180b"]
    on_catalog = replace(
        falcon, workload=replace(falcon.workload, gpu=catalog.gpu("A100-SXM4-40GB"))
    )
    slow, fast = (run_choice(r, catalog.calibration) for r in (falcon, on_catalog))
    assert slow is not None
    assert fast is not None
    assert slow.step is not None
    assert fast.step is not None
    assert slow.step.data_comm_seconds > 2 * fast.step.data_comm_seconds


def test_bloomberggpt_is_priced_on_its_published_zero3_layout(catalog: Catalog) -> None:
    # Wu et al. 2023 (arXiv 2303.17564) section 3.4: ZeRO stage 3 over 128-GPU shards, no
    # tensor or pipeline parallelism, activation checkpointing on every transformer layer.
    row = next(row for row in run_rows(catalog) if row.row_id == "bloomberggpt-50b")
    assert describe_pins(row.pins) == "TP1 PP1 ZeRO-3 full-recompute"
    choice = run_choice(row, catalog.calibration)
    assert choice is not None
    assert (choice.layout.data, choice.layout.zero_stage) == (512, 3)
    assert row.workload.shape.dropout is False


def test_held_out_errors_are_summarised_per_gpu(catalog: Catalog) -> None:
    rows = list(run_rows(catalog))
    a100 = [row for row in rows if row.workload.gpu.name == "A100-SXM4-40GB"][:3]
    h100 = [row for row in rows if row.workload.gpu.name == "H100-SXM5-80GB"][:1]
    planned = {a100[0].row_id: 1.1, a100[1].row_id: 0.8, a100[2].row_id: 1.05, h100[0].row_id: 1.3}

    def result(row_id: str, ratio: float) -> RunResult:
        return RunResult(
            row_id, "", 100.0, ratio * 100.0, ratio * 100.0, 0.9, 100.0, "-", "-", None
        )

    results = [result(row_id, ratio) for row_id, ratio in planned.items()]
    results.append(result(rows[-1].row_id, math.inf))  # nothing fits: left out
    lines = by_gpu(results, rows)
    assert lines[0].startswith("A100-SXM4-40GB: 3 runs, median absolute error 10.0%")
    assert lines[0].endswith("median error +5.0%")
    assert lines[-1] == "H100-SXM5-80GB: 1 run, median absolute error 30.0%, median error +30.0%"
