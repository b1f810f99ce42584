"""The whole-run goodput's arithmetic and the published whole runs' data file."""

from __future__ import annotations

import csv
import math

import pytest

from benchmarks.reference_data import DATA_DIR, run_group, run_rows
from trainplan.planner import Catalog
from trainplan.planner.reliability import estimate_reliability, whole_run_compute_seconds


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
