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
- **Whole runs.** A record that carries the catalog's failure-free GPU-hours for its run
  gives ln(measured / planned failure-free GPU-hours) - ln(measured / planned step time),
  the measured side less the GPU-hours lost to interruptions: what the run spent beyond
  its steps against the plan's model of checkpoints and goodput (failures are fitted on
  their own, above, and not counted twice). The same
  normal fit (prior: the catalog's whole-run 10-90% range, `gpu_hours_ratio_p10/p90`)
  gives a whole-run factor on a run's failure-free time, and a new run's GPU-hours range:
  exp(+-z(0.9) x sqrt(step predictive variance + whole-run predictive variance)).
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

from trainplan.api import ClusterCalibration, Plan, PlanCalibration
from trainplan.api.cluster_calibration import FoldedRecords, LogRatioTotals
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
MAX_CHECKPOINT_BYTES_PER_SECOND: Final = 1.0e15
"""The fastest checkpoint write rate a record counts (a petabyte a second, the
ClusterCalibration's bound): a pod's checkpoint seconds are input, and a near-zero figure
must not make the rate overflow."""
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
    checkpoint_bytes: float | None = None
    """Bytes each of its checkpoints wrote (the plan's `memory.checkpoint_bytes`)."""
    planned_gpu_hours: float | None = None
    """The catalog's failure-free GPU-hours for the run (`failure_free_gpu_hours` of its
    plan, over the factors that corrected it); None when not recorded."""
    lost_gpu_hours: float = 0.0
    """GPU-hours the run lost to interruptions (restarts and redone steps)."""

    @property
    def checkpoint_bytes_per_second(self) -> float | None:
        """The run's checkpoint write rate, at most `MAX_CHECKPOINT_BYTES_PER_SECOND`; None
        unless it measured both figures."""
        if not self.checkpoint_bytes or not self.checkpoint_seconds:
            return None
        if self.checkpoint_bytes >= self.checkpoint_seconds * MAX_CHECKPOINT_BYTES_PER_SECOND:
            return MAX_CHECKPOINT_BYTES_PER_SECOND
        return self.checkpoint_bytes / self.checkpoint_seconds

    @property
    def log_ratio(self) -> float:
        """ln(measured / planned step time)."""
        return math.log(self.measured_step_seconds / self.planned_step_seconds)

    @property
    def whole_run_log_ratio(self) -> float | None:
        """ln of measured over planned failure-free GPU-hours beyond the step time's own
        ratio: what the run spent outside steady steps and interruptions (checkpoints,
        evaluation, warm-up, stalls) against the plan's model of it; None without planned
        GPU-hours. Interruptions are left out on both sides: the failure rate and restart
        cost are fitted on their own."""
        failure_free = self.gpu_hours - self.lost_gpu_hours
        if not self.planned_gpu_hours or self.planned_gpu_hours <= 0 or failure_free <= 0:
            return None
        return math.log(failure_free / self.planned_gpu_hours) - self.log_ratio


def failure_free_gpu_hours(plan: Plan) -> float:
    """A plan's GPU-hours less its expected time lost to interruptions: each costs its
    restart plus half a checkpoint interval of redone steps (`planner.reliability`)."""
    reliability = plan.reliability
    work_seconds = reliability.checkpoint_interval_steps * plan.step_seconds
    lost_seconds = reliability.expected_interruptions * (
        reliability.restart_seconds + work_seconds / 2.0
    )
    return max(0.0, plan.duration_seconds - lost_seconds) * plan.gpus / 3600.0


@dataclass(frozen=True, slots=True)
class LogRatioSums:
    """Folded runs' evidence on one log ratio, as the sums the fit needs."""

    runs: int = 0
    weight_sum: float = 0.0
    """Sum of the runs' Huber weights."""
    weighted_sum: float = 0.0
    """Sum of weight x log ratio."""
    squares: float = 0.0
    """Sum of (weight x (ratio - their weighted mean))^2, about their own mean."""

    @property
    def mean(self) -> float:
        return self.weighted_sum / self.weight_sum if self.weight_sum > 0 else 0.0

    def add(self, values: Sequence[float], weights: Sequence[float]) -> LogRatioSums:
        """These sums with `values` (and their weights) added."""
        if not values:
            return self
        weight_sum = self.weight_sum + sum(weights)
        weighted_sum = self.weighted_sum + sum(w * v for w, v in zip(weights, values, strict=True))
        mean = weighted_sum / weight_sum if weight_sum > 0 else 0.0
        # Squares about the combined mean: each part's own squares plus its offset (the
        # parallel-axis rule; the offset counts each folded weight w, not w^2 as a kept
        # run's residual is counted: with w <= 1, slightly more scatter, never less).
        squares = (
            self.squares
            + self.weight_sum * (self.mean - mean) ** 2
            + sum((w * (v - mean)) ** 2 for w, v in zip(weights, values, strict=True))
        )
        return LogRatioSums(self.runs + len(values), weight_sum, weighted_sum, squares)


@dataclass(frozen=True, slots=True)
class FoldedEvidence:
    """Records no longer kept, as the sums the fit needs."""

    step: LogRatioSums = LogRatioSums()
    """Their step-time log ratios."""
    whole_run: LogRatioSums = LogRatioSums()
    """Their whole-run log ratios (those that recorded planned GPU-hours)."""
    gpu_hours: float = 0.0
    interruptions: int = 0
    restart_seconds: float | None = None
    """Mean restart seconds of the folded runs that measured it."""
    restart_runs: int = 0
    checkpoint_seconds: float | None = None
    """Mean checkpoint seconds of the folded runs that measured it."""
    checkpoint_runs: int = 0
    checkpoint_bytes_per_second: float | None = None
    """Mean checkpoint write rate of the folded runs that measured it."""
    checkpoint_rate_runs: int = 0

    @property
    def runs(self) -> int:
        return self.step.runs


def _merged_mean(
    mean: float | None, count: int, values: Sequence[float | None]
) -> tuple[float | None, int]:
    present = [v for v in values if v is not None]
    if not present:
        return mean, count
    total = (mean or 0.0) * count + sum(present)
    return total / (count + len(present)), count + len(present)


def fold(
    folded: FoldedEvidence, dropped: Sequence[RunRecord], among: Sequence[RunRecord]
) -> FoldedEvidence:
    """`folded` with the `dropped` records added, each with the Huber weight it has among
    `among` (all the records, dropped ones included)."""
    if not dropped:
        return folded
    step_weights = dict(zip(map(id, among), _weights([r.log_ratio for r in among]), strict=True))
    whole = [r for r in among if r.whole_run_log_ratio is not None]
    whole_weights = dict(zip(map(id, whole), _weights([_whole(r) for r in whole]), strict=True))
    dropped_whole = [r for r in dropped if r.whole_run_log_ratio is not None]
    restart, restart_runs = _merged_mean(
        folded.restart_seconds, folded.restart_runs, [r.restart_seconds for r in dropped]
    )
    checkpoint, checkpoint_runs = _merged_mean(
        folded.checkpoint_seconds,
        folded.checkpoint_runs,
        [r.checkpoint_seconds for r in dropped],
    )
    rate, rate_runs = _merged_mean(
        folded.checkpoint_bytes_per_second,
        folded.checkpoint_rate_runs,
        [r.checkpoint_bytes_per_second for r in dropped],
    )
    return FoldedEvidence(
        step=folded.step.add(
            [r.log_ratio for r in dropped], [step_weights[id(r)] for r in dropped]
        ),
        whole_run=folded.whole_run.add(
            [_whole(r) for r in dropped_whole], [whole_weights[id(r)] for r in dropped_whole]
        ),
        gpu_hours=folded.gpu_hours + sum(r.gpu_hours for r in dropped),
        interruptions=folded.interruptions + sum(r.interruptions for r in dropped),
        restart_seconds=restart,
        restart_runs=restart_runs,
        checkpoint_seconds=checkpoint,
        checkpoint_runs=checkpoint_runs,
        checkpoint_bytes_per_second=rate,
        checkpoint_rate_runs=rate_runs,
    )


def _whole(record: RunRecord) -> float:
    value = record.whole_run_log_ratio
    assert value is not None
    return value


@dataclass(frozen=True, slots=True)
class ClusterFit:
    """The corrections a cluster's records support, with their uncertainty."""

    runs: int
    """Records the fit rests on."""
    down_weighted: int
    """Records weighted below 1 as outliers (by their step time)."""
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
    whole_run_factor: float = 1.0
    """Multiplies a plan's duration beyond what its step-time correction explains
    (posterior mean of the whole-run log ratio, exponentiated): the cluster's failures,
    checkpoints, evaluations and stalls against the plan's model of them."""
    whole_run_runs: int = 0
    """Records that measured the whole-run ratio (planned GPU-hours recorded)."""
    gpu_hours_ratio_p10: float | None = None
    """10th percentile of a new run's GPU-hours over the corrected plan's; None without
    whole-run evidence (the catalog's range stands)."""
    gpu_hours_ratio_p90: float | None = None
    checkpoint_bytes_per_second: float | None = None
    """The checkpoint write rate (median of the records' bytes over seconds); None when
    no record measured it."""

    @property
    def interruptions_per_gpu_hour(self) -> float:
        """The posterior mean rate."""
        return self.interruptions_alpha / self.interruptions_beta_gpu_hours


@dataclass(frozen=True, slots=True)
class RatioFit:
    """The posterior of one log ratio's cluster mean, and a new run's spread about it."""

    mean: float
    predictive_sd: float
    down_weighted: int


def _robust_scale(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal data,
    unmoved by a minority of outliers."""
    median = statistics.median(values)
    return max(1.4826 * statistics.median(abs(v - median) for v in values), MIN_RUN_SCATTER_LOG)


def _weights(values: Sequence[float]) -> list[float]:
    """Huber's weights min(1, c s / |v - median|), s the robust scale."""
    if not values:
        return []
    scale, median = _robust_scale(values), statistics.median(values)
    deviations = [abs(v - median) for v in values]
    return [min(1.0, HUBER_C * scale / d) if d > 0 else 1.0 for d in deviations]


def _scatter(values: Sequence[float], weights: Sequence[float], folded: LogRatioSums) -> float:
    """The run-to-run scatter: a scaled inverse-chi-squared posterior with `RUN_SCATTER_LOG`
    as a prior worth `SCATTER_PRIOR_RUNS` runs (Gelman et al., section 3.2), over the
    Huber-bounded residuals sum((w (r - mean))^2), so one outlier adds at most
    (c x robust scale)^2 (Huber's proposal 2); folded runs add their squares about the
    common mean."""
    runs = len(values) + folded.runs
    total = sum(weights) + folded.weight_sum
    if runs == 0 or total <= 0:
        return RUN_SCATTER_LOG
    mean = (sum(w * v for w, v in zip(weights, values, strict=True)) + folded.weighted_sum) / total
    squares = (
        sum((w * (v - mean)) ** 2 for w, v in zip(weights, values, strict=True))
        + folded.squares
        + folded.weight_sum * (folded.mean - mean) ** 2
    )
    variance = (SCATTER_PRIOR_RUNS * RUN_SCATTER_LOG**2 + squares) / (SCATTER_PRIOR_RUNS + runs - 1)
    return max(math.sqrt(variance), MIN_RUN_SCATTER_LOG)


def fit_log_ratios(values: Sequence[float], folded: LogRatioSums, prior_sd: float) -> RatioFit:
    """The conjugate normal posterior of the cluster's mean log ratio, N(0, prior_sd^2)
    a priori, from Huber-weighted `values` and `folded` sums (module docstring)."""
    weights = _weights(values)
    scatter = _scatter(values, weights, folded)
    precision = (sum(weights) + folded.weight_sum) / scatter**2 + 1.0 / prior_sd**2
    weighted = sum(w * v for w, v in zip(weights, values, strict=True)) + folded.weighted_sum
    if not values and not folded.runs:
        return RatioFit(0.0, prior_sd, 0)
    return RatioFit(
        mean=weighted / scatter**2 / precision,
        predictive_sd=math.sqrt(1.0 / precision + scatter**2),
        down_weighted=sum(1 for w in weights if w < 1.0),
    )


def _median_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _prior_sd(p10: float, p90: float) -> float:
    """The log-normal standard deviation of a 10-90% ratio range."""
    return math.log(p90 / p10) / (2 * Z_90)


def fit_cluster(
    records: Sequence[RunRecord],
    prior: Calibration,
    folded: FoldedEvidence = FoldedEvidence(),
) -> ClusterFit:
    """The corrections `records` (and the `folded` older ones) support, starting from the
    catalog's `prior`."""
    prior_sd = _prior_sd(prior.step_seconds_ratio_p10, prior.step_seconds_ratio_p90)
    step = fit_log_ratios(
        [r.log_ratio for r in records], folded.step, max(prior_sd, CLUSTER_PRIOR_SCATTER_LOG)
    )
    whole_values = [_whole(r) for r in records if r.whole_run_log_ratio is not None]
    whole = fit_log_ratios(
        whole_values,
        folded.whole_run,
        _prior_sd(prior.gpu_hours_ratio_p10, prior.gpu_hours_ratio_p90),
    )
    whole_runs = len(whole_values) + folded.whole_run.runs
    runs = len(records) + folded.runs
    alpha0 = PRIOR_INTERRUPTIONS
    beta0 = alpha0 / max(prior.interruptions_per_gpu_hour, 1e-12)
    if not runs:
        low, high = prior.step_seconds_ratio_p10, prior.step_seconds_ratio_p90
    else:
        low, high = math.exp(-Z_90 * step.predictive_sd), math.exp(Z_90 * step.predictive_sd)
    hours_sd = math.hypot(step.predictive_sd, whole.predictive_sd)
    restart = _median_of([r.restart_seconds for r in records])
    checkpoint = _median_of([r.checkpoint_seconds for r in records])
    rate = _median_of([r.checkpoint_bytes_per_second for r in records])
    return ClusterFit(
        runs=runs,
        down_weighted=step.down_weighted,
        step_seconds_factor=math.exp(step.mean),
        step_seconds_ratio_p10=low,
        step_seconds_ratio_p90=high,
        interruptions_alpha=alpha0 + folded.interruptions + sum(r.interruptions for r in records),
        interruptions_beta_gpu_hours=beta0 + folded.gpu_hours + sum(r.gpu_hours for r in records),
        restart_seconds=folded.restart_seconds if restart is None else restart,
        checkpoint_seconds=folded.checkpoint_seconds if checkpoint is None else checkpoint,
        whole_run_factor=math.exp(whole.mean),
        whole_run_runs=whole_runs,
        gpu_hours_ratio_p10=math.exp(-Z_90 * hours_sd) if whole_runs else None,
        gpu_hours_ratio_p90=math.exp(Z_90 * hours_sd) if whole_runs else None,
        checkpoint_bytes_per_second=folded.checkpoint_bytes_per_second if rate is None else rate,
    )


def apply_cluster_fit(calibration: Calibration, fit: ClusterFit) -> Calibration:
    """`calibration` with the cluster's step-time factor and range, whole-run factor and
    GPU-hours range, failure rate and restart cost in place of the published ones. The
    whole-run factor multiplies a run's failure-free time (`reliability`), which scales
    the duration as the records measured it, to first order."""
    return replace(
        calibration,
        step_seconds_factor=calibration.step_seconds_factor * fit.step_seconds_factor,
        step_seconds_ratio_p10=fit.step_seconds_ratio_p10,
        step_seconds_ratio_p90=fit.step_seconds_ratio_p90,
        whole_run_factor=calibration.whole_run_factor * fit.whole_run_factor,
        gpu_hours_ratio_p10=(
            calibration.gpu_hours_ratio_p10
            if fit.gpu_hours_ratio_p10 is None
            else fit.gpu_hours_ratio_p10
        ),
        gpu_hours_ratio_p90=(
            calibration.gpu_hours_ratio_p90
            if fit.gpu_hours_ratio_p90 is None
            else fit.gpu_hours_ratio_p90
        ),
        interruptions_per_gpu_hour=fit.interruptions_per_gpu_hour,
        restart_seconds=(
            calibration.restart_seconds if fit.restart_seconds is None else fit.restart_seconds
        ),
        checkpoint_bytes_per_second=(
            calibration.checkpoint_bytes_per_second
            if fit.checkpoint_bytes_per_second is None
            else fit.checkpoint_bytes_per_second
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
            whole_run_factor=self.fit.whole_run_factor,
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
            checkpoint_bytes=record.checkpoint_bytes,
            planned_gpu_hours=record.planned_gpu_hours,
            lost_gpu_hours=record.lost_gpu_hours,
        )
        for record in records[-resource.spec.max_records :]
    ]


def _sums(model: LogRatioTotals | None) -> LogRatioSums:
    if model is None:
        return LogRatioSums()
    return LogRatioSums(model.runs, model.weight_sum, model.weighted_log_ratio_sum, model.squares)


def folded_evidence(resource: ClusterCalibration) -> FoldedEvidence:
    """The sums of `resource`'s folded records (none when it has none)."""
    folded = resource.status.folded if resource.status is not None else None
    if folded is None:
        return FoldedEvidence()
    return FoldedEvidence(
        step=_sums(folded.step_seconds),
        whole_run=_sums(folded.whole_run),
        gpu_hours=folded.gpu_hours,
        interruptions=folded.interruptions,
        restart_seconds=folded.restart_seconds,
        restart_runs=folded.restart_runs,
        checkpoint_seconds=folded.checkpoint_seconds,
        checkpoint_runs=folded.checkpoint_runs,
        checkpoint_bytes_per_second=folded.checkpoint_bytes_per_second,
        checkpoint_rate_runs=folded.checkpoint_rate_runs,
    )


def _totals(sums: LogRatioSums) -> LogRatioTotals:
    return LogRatioTotals(
        runs=sums.runs,
        weight_sum=sums.weight_sum,
        weighted_log_ratio_sum=sums.weighted_sum,
        squares=sums.squares,
    )


def folded_records(folded: FoldedEvidence) -> FoldedRecords | None:
    """The status field of `folded` (None when nothing is folded)."""
    if not folded.runs:
        return None
    return FoldedRecords(
        step_seconds=_totals(folded.step),
        whole_run=_totals(folded.whole_run) if folded.whole_run.runs else None,
        gpu_hours=folded.gpu_hours,
        interruptions=folded.interruptions,
        restart_seconds=folded.restart_seconds,
        restart_runs=folded.restart_runs,
        checkpoint_seconds=folded.checkpoint_seconds,
        checkpoint_runs=folded.checkpoint_runs,
        checkpoint_bytes_per_second=folded.checkpoint_bytes_per_second,
        checkpoint_rate_runs=folded.checkpoint_rate_runs,
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
