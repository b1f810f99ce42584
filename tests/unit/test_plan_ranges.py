"""A plan's 10-90% ranges (step time, duration, GPU-hours) from the planner's held-out
errors, and `objective.confidence`: a deadline search that plans on a duration quantile.
The stored ratios come from `benchmarks/plan_ranges.py` (about 3 minutes: a refit per
publication), so here the arithmetic is tested, not the refit."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from benchmarks.plan_ranges import coverage, quantile, ranges
from trainplan.api import TrainingPlanSpec
from trainplan.planner import Catalog, plan
from trainplan.planner.planning import duration_quantile_factor

SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 2.5e11},  # 64 GPUs meet the deadline, but not at its 90th percentile
    "batch": {"globalBatchSize": 1024},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"deadline": "14d", "maxGPUs": 1024},
}


def _spec(**objective: Any) -> TrainingPlanSpec:
    document = {**SPEC, "objective": {**SPEC["objective"], **objective}}
    return TrainingPlanSpec.model_validate(document)


def test_every_plan_carries_its_ranges(catalog: Catalog) -> None:
    result = plan(_spec(), catalog)
    calibration = catalog.calibration
    pairs = (
        (result.step_seconds_range, result.step_seconds, calibration.step_seconds_ratio_p10,
         calibration.step_seconds_ratio_p90),
        (result.duration_seconds_range, result.duration_seconds,
         calibration.gpu_hours_ratio_p10, calibration.gpu_hours_ratio_p90),
        (result.gpu_hours_range, result.gpu_hours, calibration.gpu_hours_ratio_p10,
         calibration.gpu_hours_ratio_p90),
    )  # fmt: skip
    for span, value, low, high in pairs:
        assert span is not None
        assert span.p10 <= value <= span.p90
        assert span.p10 == pytest.approx(value * low)
        assert span.p90 == pytest.approx(value * high)
    document = result.to_document()
    assert set(document["gpuHoursRange"]) == {"p10", "p90"}


def test_the_stored_ratios_keep_the_estimate_inside(catalog: Catalog) -> None:
    calibration = catalog.calibration
    assert 0 < calibration.step_seconds_ratio_p10 <= 1 <= calibration.step_seconds_ratio_p90
    assert 0 < calibration.gpu_hours_ratio_p10 <= 1 <= calibration.gpu_hours_ratio_p90
    assert calibration.gpu_hours_ratio_p90 > 1  # whole runs are uncertain; not a default


def test_the_quantile_factor_runs_from_the_estimate_to_the_90th_percentile(
    catalog: Catalog,
) -> None:
    calibration = catalog.calibration
    assert duration_quantile_factor(calibration, 0.5) == 1.0
    assert duration_quantile_factor(calibration, 0.9) == pytest.approx(
        calibration.gpu_hours_ratio_p90
    )
    factors = [duration_quantile_factor(calibration, c) for c in (0.5, 0.7, 0.9, 0.95)]
    assert factors == sorted(factors)
    assert factors[-1] > calibration.gpu_hours_ratio_p90


def test_a_confident_deadline_plan_takes_more_gpus_and_its_90th_percentile_fits(
    catalog: Catalog,
) -> None:
    estimate = plan(_spec(), catalog)
    confident = plan(_spec(confidence=0.9), catalog)
    deadline = 14 * 86_400
    assert estimate.duration_seconds <= deadline
    assert confident.gpus > estimate.gpus
    assert confident.duration_seconds_range is not None
    assert confident.duration_seconds_range.p90 <= deadline * (1 + 1e-9)
    assert any("with 90% confidence" in line for line in confident.explanation)
    assert plan(_spec(confidence=0.5), catalog).gpus == estimate.gpus


@pytest.mark.parametrize("confidence", [0.4, 0.96])
def test_a_confidence_out_of_range_is_refused(confidence: float) -> None:
    with pytest.raises(ValidationError, match=r"objective\.confidence"):
        _spec(confidence=confidence)


# --- benchmarks/plan_ranges.py's arithmetic ------------------------------------------------


def test_quantiles_interpolate_between_order_statistics() -> None:
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert quantile(values, 0.0) == 1.0
    assert quantile(values, 1.0) == 10.0
    assert quantile(values, 0.1) == pytest.approx(1.9)
    assert quantile(values, 0.9) == pytest.approx(9.1)
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)


def test_ranges_keep_the_estimate_inside_even_for_a_biased_planner() -> None:
    always_slow = [1.2, 1.3, 1.4, 1.5]  # measured above plan on every row
    values = ranges(always_slow, always_slow)
    assert values["step_seconds_ratio_p10"] == 1.0
    assert values["step_seconds_ratio_p90"] == pytest.approx(quantile(always_slow, 0.9))
    assert math.isclose(values["gpu_hours_ratio_p10"], 1.0)


def test_coverage_counts_the_rows_inside() -> None:
    assert coverage([0.5, 0.9, 1.0, 1.1, 2.0], 0.8, 1.2) == pytest.approx(0.6)
