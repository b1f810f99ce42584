"""Failure-aware duration: Young/Daly interval and the expected-duration closed form."""

import math
from itertools import pairwise

import pytest

from trainplan.planner.reliability import (
    ReliabilityEstimate,
    estimate_reliability,
    mean_seconds_between_interruptions,
    young_daly_interval_seconds,
)


def estimate(
    *,
    step_seconds: float = 10.0,
    total_steps: int = 100_000,
    gpus: int = 1024,
    rate: float = 1e-4,
    checkpoint: float = 60.0,
    restart: float = 600.0,
    interval: int | None = None,
) -> ReliabilityEstimate:
    return estimate_reliability(
        compute_seconds=step_seconds * total_steps,
        step_seconds=step_seconds,
        total_steps=total_steps,
        gpus=gpus,
        interruptions_per_gpu_hour=rate,
        checkpoint_seconds=checkpoint,
        restart_seconds=restart,
        checkpoint_interval_steps=interval,
    )


@pytest.mark.parametrize(("c", "m"), [(60.0, 3600.0), (1.0, 1.0), (300.0, 86_400.0), (0.0, 1e6)])
def test_young_daly_interval_is_sqrt_2cm(c: float, m: float) -> None:
    # Young 1974 / Daly 2006 first-order optimum: W = sqrt(2 C M).
    assert young_daly_interval_seconds(c, m) == pytest.approx(math.sqrt(2 * c * m))


@pytest.mark.parametrize(("rate", "gpus"), [(1e-4, 1), (1.973e-5, 16_384), (0.5, 8)])
def test_mean_time_between_interruptions_is_one_over_total_rate(rate: float, gpus: int) -> None:
    assert mean_seconds_between_interruptions(rate, gpus) == pytest.approx(3600 / (rate * gpus))


def test_no_failures_means_infinite_mtbi() -> None:
    assert mean_seconds_between_interruptions(0.0, 1024) == math.inf


def test_more_gpus_mean_shorter_time_between_interruptions() -> None:
    counts = [1, 8, 64, 512, 4096, 16_384]
    mtbi = [mean_seconds_between_interruptions(1.973e-5, n) for n in counts]
    assert all(later < earlier for earlier, later in pairwise(mtbi))


@pytest.mark.parametrize("checkpoint", [0.0, 30.0])
@pytest.mark.parametrize("interval", [None, 1000, 7])
def test_zero_failure_rate_costs_only_checkpoints(checkpoint: float, interval: int | None) -> None:
    result = estimate(rate=0.0, checkpoint=checkpoint, interval=interval)
    compute = 10.0 * 100_000
    checkpoints = math.floor(100_000 / result.checkpoint_interval_steps)
    assert result.duration_seconds == pytest.approx(compute + checkpoints * checkpoint)
    assert result.overhead_seconds == pytest.approx(checkpoints * checkpoint)
    assert result.expected_interruptions == 0.0
    assert result.lost_work_seconds == 0.0
    assert result.mean_seconds_between_interruptions == math.inf
    assert result.feasible


def test_zero_failure_rate_checkpoints_once_unless_pinned() -> None:
    assert estimate(rate=0.0).checkpoint_interval_steps == 100_000
    assert estimate(rate=0.0, interval=250).checkpoint_interval_steps == 250


@pytest.mark.parametrize(
    ("rate", "gpus", "checkpoint", "restart", "step_seconds"),
    [
        (1e-4, 1024, 60.0, 600.0, 10.0),
        (1.973e-5, 16_384, 120.0, 600.0, 4.0),
        (1e-3, 64, 5.0, 30.0, 1.5),
        (2e-5, 512, 300.0, 1200.0, 20.0),
    ],
)
def test_duration_matches_closed_form(
    rate: float, gpus: int, checkpoint: float, restart: float, step_seconds: float
) -> None:
    """D = T (1 + C / W) / (1 - (R + W / 2) / M), with W from the returned interval."""
    chosen = estimate_reliability(
        compute_seconds=step_seconds * 10**9,
        step_seconds=step_seconds,
        total_steps=10**9,
        gpus=gpus,
        interruptions_per_gpu_hour=rate,
        checkpoint_seconds=checkpoint,
        restart_seconds=restart,
    ).checkpoint_interval_steps
    # A run of a whole number of intervals, so T / W checkpoints are written exactly.
    total_steps = 50 * chosen
    result = estimate(
        step_seconds=step_seconds,
        total_steps=total_steps,
        gpus=gpus,
        rate=rate,
        checkpoint=checkpoint,
        restart=restart,
    )
    assert result.checkpoint_interval_steps == chosen
    mtbi = 3600.0 / (rate * gpus)
    ideal = math.sqrt(2 * checkpoint * mtbi)
    assert chosen == max(1, round(ideal / step_seconds))
    t = step_seconds * total_steps
    w = chosen * step_seconds
    expected = t * (1 + checkpoint / w) / (1 - (restart + w / 2) / mtbi)
    assert result.duration_seconds == pytest.approx(expected, rel=1e-9)
    assert result.expected_interruptions == pytest.approx(expected / mtbi, rel=1e-9)
    assert result.lost_work_seconds == pytest.approx(expected / mtbi * w / 2, rel=1e-9)
    assert result.overhead_seconds == pytest.approx(expected - t, rel=1e-9)
    assert result.feasible


@pytest.mark.parametrize("interval", [1, 7, 500, 100_000, 250_000])
def test_pinned_interval_is_used_as_is(interval: int) -> None:
    result = estimate(interval=interval)
    assert result.checkpoint_interval_steps == interval
    mtbi = result.mean_seconds_between_interruptions
    w = interval * 10.0
    checkpoints = math.floor(100_000 / interval)
    remaining = 1 - (600.0 + w / 2) / mtbi
    # Intervals of 100,000 steps and more lose more per interruption than the run can bear.
    assert result.feasible == (remaining > 0.05)
    expected = (1e6 + checkpoints * 60.0) / remaining if remaining > 0.05 else math.inf
    assert result.duration_seconds == pytest.approx(expected, rel=1e-9)


def test_young_daly_interval_is_rounded_to_steps_and_clamped() -> None:
    result = estimate(step_seconds=1e7, total_steps=3)
    # sqrt(2 C M) is far below one step: the interval cannot fall below one step.
    assert result.checkpoint_interval_steps == 1
    long = estimate(rate=1e-9, gpus=1, total_steps=10)
    # and it cannot exceed the run.
    assert long.checkpoint_interval_steps == 10


@pytest.mark.parametrize("fraction", [0.96, 0.99, 1.0, 1.5])
def test_restart_close_to_mtbi_is_infeasible(fraction: float) -> None:
    mtbi = mean_seconds_between_interruptions(1e-3, 1000)  # 3600 s
    result = estimate(rate=1e-3, gpus=1000, restart=fraction * mtbi, interval=1, step_seconds=1.0)
    assert not result.feasible
    assert result.duration_seconds == math.inf
    assert result.expected_interruptions == math.inf


def test_overhead_grows_as_failures_become_more_frequent() -> None:
    durations = [estimate(rate=rate).duration_seconds for rate in (0.0, 1e-6, 1e-5, 1e-4)]
    assert all(later > earlier for earlier, later in pairwise(durations))


def test_a_clusters_whole_run_factor_scales_the_failure_free_time_never_below_the_steps() -> None:
    def failure_free(goodput: float, factor: float) -> float:
        return estimate_reliability(
            compute_seconds=1000.0,
            step_seconds=1.0,
            total_steps=1000,
            gpus=8,
            interruptions_per_gpu_hour=0.0,
            checkpoint_seconds=0.0,
            restart_seconds=0.0,
            goodput=goodput,
            whole_run_factor=factor,
        ).duration_seconds

    assert failure_free(0.8, 1.0) == pytest.approx(1250.0)
    assert failure_free(0.8, 1.1) == pytest.approx(1375.0)
    assert failure_free(0.8, 0.9) == pytest.approx(1125.0)
    assert failure_free(1.0, 0.5) == pytest.approx(1000.0)  # the steps themselves, at least
    with pytest.raises(ValueError, match="whole_run_factor"):
        failure_free(1.0, 0.0)
