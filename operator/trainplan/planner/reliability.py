"""Failure-aware duration: interruptions, restarts, lost work, checkpoint interval (pure).

Interruptions arrive as a Poisson process at a rate per GPU-hour (default from Dubey et
al. 2024, arXiv 2407.21783, section 3.3.4: 419 unexpected interruptions in 54 days on
16,384 H100 GPUs). Each costs a restart plus, on average, half a checkpoint interval of
lost work. The checkpoint interval minimises the expected overhead, sqrt(2 C M) seconds
of work for checkpoint cost C and mean time between interruptions M (Young 1974, with
Daly's 2006 first-order form).

Whole runs spend time that neither steady steps nor failures explain: evaluation passes,
warm-up and batch-size ramp-up (LLaMA-3 ramps 4M -> 8M -> 16M tokens, Dubey et al. 2024
section 3.4.1; BLOOM and BloombergGPT ramp too), data-loader and storage stalls,
stragglers and clusters below the catalog's peak (LLaMA-2's production cluster capped
its A100s at 350 W against 400 W on RSC, Touvron et al. 2023, section 2.2.1). Their
sum is one multiplicative `goodput`: the fraction of failure-free wall-clock spent in
steady training steps, what Meta calls "effective training time" (over 90% for Llama
3 405B, Dubey et al. 2024, section 3.3.4, where failures are also counted).
`benchmarks/fit_calibration.py` fits it to published whole runs (`tests/data/`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReliabilityEstimate:
    """Expected overhead of checkpoints and interruptions over a whole run."""

    duration_seconds: float
    overhead_seconds: float
    expected_interruptions: float
    checkpoint_interval_steps: int
    checkpoint_seconds: float
    restart_seconds: float
    mean_seconds_between_interruptions: float
    lost_work_seconds: float
    feasible: bool


def mean_seconds_between_interruptions(interruptions_per_gpu_hour: float, gpus: int) -> float:
    """M = 1 / (rate x GPUs), in seconds; infinite when the rate is zero."""
    rate_per_second = interruptions_per_gpu_hour * gpus / 3600.0
    return math.inf if rate_per_second <= 0 else 1.0 / rate_per_second


def young_daly_interval_seconds(checkpoint_seconds: float, mtbi_seconds: float) -> float:
    """Optimal work between checkpoints: sqrt(2 C M) (Young 1974; Daly 2006)."""
    return math.sqrt(2.0 * checkpoint_seconds * mtbi_seconds)


def whole_run_compute_seconds(steady_seconds: float, goodput: float) -> float:
    """Failure-free wall-clock of `steady_seconds` of steady steps at `goodput` (0..1]:
    steady / goodput."""
    if not 0.0 < goodput <= 1.0:
        raise ValueError(f"goodput must be in (0, 1], got {goodput}")
    return steady_seconds / goodput


def estimate_reliability(
    *,
    compute_seconds: float,
    step_seconds: float,
    total_steps: int,
    gpus: int,
    interruptions_per_gpu_hour: float,
    checkpoint_seconds: float,
    restart_seconds: float,
    checkpoint_interval_steps: int | None = None,
    goodput: float = 1.0,
    whole_run_factor: float = 1.0,
) -> ReliabilityEstimate:
    """Expected wall-clock of a run of `compute_seconds` of steady training steps.

    The failure-free work is T = compute_seconds / goodput (`whole_run_compute_seconds`),
    times `whole_run_factor` (a cluster's measured whole-run ratio, `cluster_fit`; 1 for
    the published constants), never below the steady steps themselves.
    With work W between checkpoints, the run writes T / W checkpoints of C seconds and
    meets D / M interruptions of R + W / 2 seconds each, so
    D = T (1 + C / W) / (1 - (R + W / 2) / M). A run that loses more than it gains per
    interruption (denominator <= 0) is infeasible. `overhead_seconds` is D minus the
    steady steps' `compute_seconds`.
    """
    mtbi = mean_seconds_between_interruptions(interruptions_per_gpu_hour, gpus)
    if checkpoint_interval_steps is None:
        if math.isinf(mtbi) or checkpoint_seconds <= 0:
            interval_steps = total_steps
        else:
            ideal = young_daly_interval_seconds(checkpoint_seconds, mtbi)
            interval_steps = max(1, round(ideal / step_seconds))
        interval_steps = max(1, min(interval_steps, total_steps))
    else:
        interval_steps = checkpoint_interval_steps
    if not whole_run_factor > 0:
        raise ValueError(f"whole_run_factor must be positive, got {whole_run_factor}")
    # A whole run takes at least its steady steps, however much faster than the plan's
    # model of the rest a cluster's runs were.
    scale = max(1.0, whole_run_factor / goodput) * goodput
    work = whole_run_compute_seconds(compute_seconds, goodput) * scale
    work_seconds = interval_steps * step_seconds / goodput * scale
    checkpoints = math.floor(total_steps / interval_steps)
    with_checkpoints = work + checkpoints * checkpoint_seconds
    loss_per_interruption = restart_seconds + work_seconds / 2.0
    if math.isinf(mtbi):
        duration, interruptions, feasible = with_checkpoints, 0.0, True
    else:
        remaining = 1.0 - loss_per_interruption / mtbi
        feasible = remaining > 0.05
        duration = with_checkpoints / remaining if feasible else math.inf
        interruptions = duration / mtbi if feasible else math.inf
    return ReliabilityEstimate(
        duration_seconds=duration,
        overhead_seconds=duration - compute_seconds,
        expected_interruptions=interruptions,
        checkpoint_interval_steps=interval_steps,
        checkpoint_seconds=checkpoint_seconds,
        restart_seconds=restart_seconds,
        mean_seconds_between_interruptions=mtbi,
        lost_work_seconds=interruptions * work_seconds / 2.0,
        feasible=feasible,
    )
