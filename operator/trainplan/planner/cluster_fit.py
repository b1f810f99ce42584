"""What a cluster's finished runs say about its next plans (pure).

A `ClusterCalibration` keeps, per finished run, the planned and measured step time and the
interruptions over the run's GPU-hours. `fit_cluster` turns them into corrections:

- **Step time.** The log ratio r = ln(measured / planned) of each run is an observation of
  the cluster's log factor mu with run-to-run scatter s; mu has the prior N(0, s0^2), s0
  the planner's own held-out error (from the step-time 10-90% range of `calibration.yaml`,
  ln(p90 / p10) / (2 z(0.9))) or `CLUSTER_PRIOR_SCATTER_LOG`, whichever is wider. The
  posterior is the conjugate normal one (Gelman et al., Bayesian Data Analysis, 3rd ed.,
  section 2.5):
  mean = sum(w r) / s^2 / (sum(w) / s^2 + 1 / s0^2), variance = 1 / (sum(w) / s^2 + 1/s0^2).
  A run far from the others (a broken node, a noisy neighbour) is down-weighted with
  Huber's weights w = min(1, c / |z|), z its distance from the median in robust standard
  deviations (1.4826 x the median absolute deviation; Huber 1964), so one outlier cannot
  pull the factor. A new plan's 10-90% range is the predictive one: exp(+-z(0.9) x
  sqrt(variance + s^2)) around the corrected step time. s is the records' scatter about
  their weighted mean, each residual bounded by the Huber weight, pooled with
  `RUN_SCATTER_LOG` as a prior worth two runs (`_scatter`).
- **Interruptions** per GPU-hour: a Gamma(alpha, beta) posterior, conjugate to the Poisson
  count of interruptions over the runs' GPU-hours (Gelman et al., section 2.6), with the
  catalog's fleet rate as a prior worth `PRIOR_INTERRUPTIONS` interruptions.
- **Restart and checkpoint seconds**: the median of the runs that measured them.
- **Folded records.** Records beyond a resource's `maxRecords` are not lost: as they are
  dropped, their weighted log ratios, Huber-bounded squared residuals, GPU-hours,
  interruptions and restart and checkpoint means are added into one `FoldedEvidence`
  (sufficient statistics of the fit above), which counts as they did. Their weights stay
  those they had when folded.

`apply_cluster_fit` returns the catalog's calibration with these in place; the planner
uses it like any other (`plan(..., cluster=)`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from trainplan.api import ClusterCalibration, PlanCalibration
from trainplan.planner.calibration import Calibration

Z_90: Final = 1.2815515655446004
"""The standard normal quantile at 0.9."""
RUN_SCATTER_LOG: Final = 0.05
"""Run-to-run scatter of ln(measured / planned) on one cluster before three runs show
their own (set, not fitted: 5%)."""
CLUSTER_PRIOR_SCATTER_LOG: Final = 0.15
"""The least prior spread of a cluster's log factor (set, not fitted: 15%). The planner's
held-out error across publications on A100s is narrower, but clusters differ by more than
publications do (power caps, networks, software; the held-out H100 rows were 42% off), and
a prior narrower than the truth's distance would hold the first runs' evidence back."""
SCATTER_PRIOR_RUNS: Final = 2.0
"""How many runs' worth of evidence `RUN_SCATTER_LOG` counts for."""
MIN_RUN_SCATTER_LOG: Final = 0.01
"""The least scatter the fit believes, however alike the runs (1%)."""
HUBER_C: Final = 2.0
"""Runs more than this many robust standard deviations from the median are down-weighted."""
PRIOR_INTERRUPTIONS: Final = 1.0
"""The fleet failure rate's weight as a prior, in interruptions (a weak prior: the first
weeks of a large run outweigh it)."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What one finished run planned and measured."""

    planned_step_seconds: float
    measured_step_seconds: float
    gpu_hours: float
    interruptions: int
    restart_seconds: float | None = None
    checkpoint_seconds: float | None = None

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured_step_seconds / self.planned_step_seconds)


@dataclass(frozen=True, slots=True)
class FoldedEvidence:
    """Records no longer kept, as the sums the fit needs."""

    runs: int = 0
    weight_sum: float = 0.0
    """Sum of the folded runs' Huber weights."""
    weighted_log_ratio_sum: float = 0.0
    """Sum of weight x ln(measured / planned)."""
    squares: float = 0.0
    """Sum of (weight x (ratio - their weighted mean))^2, about their own mean."""
    gpu_hours: float = 0.0
    interruptions: int = 0
    restart_seconds: float | None = None
    """Mean restart seconds of the folded runs that measured it."""
    restart_runs: int = 0
    checkpoint_seconds: float | None = None
    """Mean checkpoint seconds of the folded runs that measured it."""
    checkpoint_runs: int = 0

    @property
    def mean_log_ratio(self) -> float:
        return self.weighted_log_ratio_sum / self.weight_sum if self.weight_sum > 0 else 0.0


def _merged_mean(
    mean: float | None, count: int, values: Sequence[float | None]
) -> tuple[float | None, int]:
    present = [v for v in values if v is not None]
    if not present:
        return mean, count
    total = (mean or 0.0) * count + sum(present)
    return total / (count + len(present)), count + len(present)


def fold(
    folded: FoldedEvidence, dropped: Sequence[RunRecord], weights: Sequence[float]
) -> FoldedEvidence:
    """`folded` with the `dropped` records (and their Huber weights) added."""
    if not dropped:
        return folded
    values = [record.log_ratio for record in dropped]
    weight_sum = sum(weights)
    weighted = sum(w * v for w, v in zip(weights, values, strict=True))
    combined_weights = folded.weight_sum + weight_sum
    mean = (folded.weighted_log_ratio_sum + weighted) / combined_weights
    # Squares about the combined mean: each part's own squares plus its offset (the
    # parallel-axis rule; the offset counts each folded weight w, not w^2 as `_scatter`
    # counts a kept run's residual: with w <= 1, slightly more scatter, never less).
    squares = (
        folded.squares
        + folded.weight_sum * (folded.mean_log_ratio - mean) ** 2
        + sum((w * (v - mean)) ** 2 for w, v in zip(weights, values, strict=True))
    )
    restart, restart_runs = _merged_mean(
        folded.restart_seconds, folded.restart_runs, [r.restart_seconds for r in dropped]
    )
    checkpoint, checkpoint_runs = _merged_mean(
        folded.checkpoint_seconds,
        folded.checkpoint_runs,
        [r.checkpoint_seconds for r in dropped],
    )
    return FoldedEvidence(
        runs=folded.runs + len(dropped),
        weight_sum=combined_weights,
        weighted_log_ratio_sum=folded.weighted_log_ratio_sum + weighted,
        squares=squares,
        gpu_hours=folded.gpu_hours + sum(r.gpu_hours for r in dropped),
        interruptions=folded.interruptions + sum(r.interruptions for r in dropped),
        restart_seconds=restart,
        restart_runs=restart_runs,
        checkpoint_seconds=checkpoint,
        checkpoint_runs=checkpoint_runs,
    )


@dataclass(frozen=True, slots=True)
class ClusterFit:
    """The corrections a cluster's records support, with their uncertainty."""

    runs: int
    """Records the fit rests on."""
    down_weighted: int
    """Records weighted below 1 as outliers."""
    step_seconds_factor: float
    """Multiplies the planner's step time (posterior mean of measured / planned)."""
    step_seconds_ratio_p10: float
    """10th percentile of a new run's measured / corrected planned step time."""
    step_seconds_ratio_p90: float
    interruptions_alpha: float
    """Gamma posterior shape of the interruption rate."""
    interruptions_beta_gpu_hours: float
    """Gamma posterior rate, in GPU-hours."""
    restart_seconds: float | None
    checkpoint_seconds: float | None

    @property
    def interruptions_per_gpu_hour(self) -> float:
        """The posterior mean rate."""
        return self.interruptions_alpha / self.interruptions_beta_gpu_hours


def _robust_scale(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal data,
    unmoved by a minority of outliers."""
    median = statistics.median(values)
    return max(1.4826 * statistics.median(abs(v - median) for v in values), MIN_RUN_SCATTER_LOG)


def _huber_weights(values: Sequence[float], scale: float) -> list[float]:
    median = statistics.median(values)
    deviations = [abs(v - median) for v in values]
    return [min(1.0, HUBER_C * scale / d) if d > 0 else 1.0 for d in deviations]


def _scatter(
    values: Sequence[float], weights: Sequence[float], folded: FoldedEvidence = FoldedEvidence()
) -> float:
    """The run-to-run scatter: a scaled inverse-chi-squared posterior with `RUN_SCATTER_LOG`
    as a prior worth `SCATTER_PRIOR_RUNS` runs (Gelman et al., section 3.2), over the
    Huber-bounded residuals sum((w (r - mean))^2), so one outlier adds at most
    (c x robust scale)^2 (Huber's proposal 2); folded runs add their squares about the
    common mean."""
    runs = len(values) + folded.runs
    total = sum(weights) + folded.weight_sum
    if runs == 0 or total <= 0:
        return RUN_SCATTER_LOG
    mean = (
        sum(w * v for w, v in zip(weights, values, strict=True)) + folded.weighted_log_ratio_sum
    ) / total
    squares = (
        sum((w * (v - mean)) ** 2 for w, v in zip(weights, values, strict=True))
        + folded.squares
        + folded.weight_sum * (folded.mean_log_ratio - mean) ** 2
    )
    variance = (SCATTER_PRIOR_RUNS * RUN_SCATTER_LOG**2 + squares) / (SCATTER_PRIOR_RUNS + runs - 1)
    return max(math.sqrt(variance), MIN_RUN_SCATTER_LOG)


def _median_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def record_weights(records: Sequence[RunRecord]) -> list[float]:
    """Each record's Huber weight among `records`."""
    values = [record.log_ratio for record in records]
    return _huber_weights(values, _robust_scale(values)) if values else []


def fit_cluster(
    records: Sequence[RunRecord],
    prior: Calibration,
    folded: FoldedEvidence = FoldedEvidence(),
) -> ClusterFit:
    """The corrections `records` (and the `folded` older ones) support, starting from the
    catalog's `prior`."""
    prior_sd = math.log(prior.step_seconds_ratio_p90 / prior.step_seconds_ratio_p10) / (2 * Z_90)
    prior_precision = 1.0 / max(prior_sd, CLUSTER_PRIOR_SCATTER_LOG) ** 2
    values = [record.log_ratio for record in records]
    weights = record_weights(records)
    scatter = _scatter(values, weights, folded)
    data_precision = (sum(weights) + folded.weight_sum) / scatter**2
    precision = data_precision + prior_precision
    weighted = sum(w * v for w, v in zip(weights, values, strict=True))
    mean = (weighted + folded.weighted_log_ratio_sum) / scatter**2 / precision
    runs = len(records) + folded.runs
    predictive_sd = math.sqrt(1.0 / precision + scatter**2) if runs else prior_sd
    alpha0 = PRIOR_INTERRUPTIONS
    beta0 = alpha0 / max(prior.interruptions_per_gpu_hour, 1e-12)
    if not runs:
        low, high = prior.step_seconds_ratio_p10, prior.step_seconds_ratio_p90
    else:
        low, high = math.exp(-Z_90 * predictive_sd), math.exp(Z_90 * predictive_sd)
    restart = _median_of([r.restart_seconds for r in records])
    checkpoint = _median_of([r.checkpoint_seconds for r in records])
    return ClusterFit(
        runs=runs,
        down_weighted=sum(1 for w in weights if w < 1.0),
        step_seconds_factor=math.exp(mean),
        step_seconds_ratio_p10=low,
        step_seconds_ratio_p90=high,
        interruptions_alpha=alpha0 + folded.interruptions + sum(r.interruptions for r in records),
        interruptions_beta_gpu_hours=beta0 + folded.gpu_hours + sum(r.gpu_hours for r in records),
        restart_seconds=folded.restart_seconds if restart is None else restart,
        checkpoint_seconds=folded.checkpoint_seconds if checkpoint is None else checkpoint,
    )


def apply_cluster_fit(calibration: Calibration, fit: ClusterFit) -> Calibration:
    """`calibration` with the cluster's step-time factor and range, failure rate and
    restart cost in place of the published ones."""
    return replace(
        calibration,
        step_seconds_factor=calibration.step_seconds_factor * fit.step_seconds_factor,
        step_seconds_ratio_p10=fit.step_seconds_ratio_p10,
        step_seconds_ratio_p90=fit.step_seconds_ratio_p90,
        interruptions_per_gpu_hour=fit.interruptions_per_gpu_hour,
        restart_seconds=(
            calibration.restart_seconds if fit.restart_seconds is None else fit.restart_seconds
        ),
    )


@dataclass(frozen=True, slots=True)
class ClusterEvidence:
    """A ClusterCalibration's identity and the fit of its records."""

    name: str
    generation: int
    gpu_type: str
    fit: ClusterFit

    def reference(self) -> PlanCalibration:
        """What a plan records of it (`status.plan.calibration`)."""
        return PlanCalibration(
            name=self.name,
            generation=self.generation,
            runs=self.fit.runs,
            step_seconds_factor=self.fit.step_seconds_factor,
            interruptions_per_gpu_hour=self.fit.interruptions_per_gpu_hour,
        )


def run_records(resource: ClusterCalibration) -> list[RunRecord]:
    """`resource`'s records as the fit reads them, the newest `spec.maxRecords`."""
    records = resource.status.records if resource.status is not None else ()
    return [
        RunRecord(
            planned_step_seconds=record.planned_step_seconds,
            measured_step_seconds=record.measured_step_seconds,
            gpu_hours=record.gpu_hours,
            interruptions=record.interruptions,
            restart_seconds=record.restart_seconds,
            checkpoint_seconds=record.checkpoint_seconds,
        )
        for record in records[-resource.spec.max_records :]
    ]


def folded_evidence(resource: ClusterCalibration) -> FoldedEvidence:
    """The sums of `resource`'s folded records (none when it has none)."""
    folded = resource.status.folded if resource.status is not None else None
    if folded is None:
        return FoldedEvidence()
    return FoldedEvidence(
        runs=folded.runs,
        weight_sum=folded.weight_sum,
        weighted_log_ratio_sum=folded.weighted_log_ratio_sum,
        squares=folded.squares,
        gpu_hours=folded.gpu_hours,
        interruptions=folded.interruptions,
        restart_seconds=folded.restart_seconds,
        restart_runs=folded.restart_runs,
        checkpoint_seconds=folded.checkpoint_seconds,
        checkpoint_runs=folded.checkpoint_runs,
    )


def cluster_evidence(resource: ClusterCalibration, prior: Calibration) -> ClusterEvidence:
    """Fit `resource`'s records and folded sums afresh (its status's fitted figures are
    not trusted)."""
    fit = fit_cluster(run_records(resource), prior, folded_evidence(resource))
    return ClusterEvidence(
        name=resource.metadata.name or "",
        generation=resource.metadata.generation or 0,
        gpu_type=resource.spec.gpu_type,
        fit=fit,
    )
