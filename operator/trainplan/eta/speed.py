"""The measured training speed at several time scales, and the one that prices the rest
of a run (pure).

Every clean interval (progress between two step changes of one run segment, no failure
in between) adds its seconds and its work (tokens, or steps) to exponentially weighted
sums, one set per time scale `SCALES_SECONDS`; the weights decay with productive time, so
an outage does not age the memory. The speed at a scale is the ratio estimator
sum(seconds) / sum(work): periodic checkpoints and evaluations are averaged in, and
steps of different sizes (a batch-size ramp-up) count by their tokens.

The remaining run is priced at the scale that matches its horizon (the productive time
left, at least `MIN_WINDOW_INTERVALS` intervals): the mean speed over the next H seconds
is best predicted by the mean over the last H seconds when the speed wanders (Hyndman
and Athanasopoulos, Forecasting: Principles and Practice, 3rd ed., section 8.1, simple
exponential smoothing; the window grows with the horizon). A straggler hour then moves
a week's estimate by its share of a week, not by its share of the last 40 intervals,
while a lasting change still takes over as the run nears its end.

The uncertainty of the projected speed adds the standard error of the weighted mean
(the dispersion of the intervals' log rates over their effective number) to how much
the mean speed over the horizon may wander, measured on this run by batch means: the
spread of the speeds of its past batches of an hour to 64 hours, scaled to the
horizon. Slowdowns that come and go widen the range by what they did to this run,
steady runs keep it narrow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

SCALES_SECONDS: tuple[float, ...] = tuple(150.0 * 4.0**k for k in range(11))
"""Time constants of the weighted sums, in productive seconds: 2.5 minutes to 5 years."""
MIN_WINDOW_INTERVALS = 20.0
"""The shortest window the remaining run is priced over (near its end) spans this many
intervals of the run's mean length, so that it still averages their noise."""
MIN_INTERVALS_FOR_DISPERSION = 3.0
"""Below this effective number of intervals the dispersion is not estimated from them."""
BATCH_SECONDS = (3600.0, 4 * 3600.0, 16 * 3600.0, 64 * 3600.0)
"""Lengths (productive seconds) of the batches whose speeds measure how much it wanders."""
MIN_BATCHES = 6
SHIFT_Z = 3.0
"""A level shift must stand this many standard deviations of the run's own wander."""
SHIFT_BATCHES = 4.0
"""The noise a level shift is judged against comes from batches at most 1/4 of the
window long: in batches as long as the window, the shift itself is one of the few
successive differences and hides itself."""
SHIFT_MIN_SECONDS = 48 * 3600.0
"""...and have lasted at least two days of running (a slow node is found and fixed
sooner: BLOOM's took about three days to find at 5%, chronicles.md:250-303; a 2x
straggler is noticed within hours)."""
_EMPTY = (0.0,) * len(SCALES_SECONDS)


@dataclass(frozen=True, slots=True)
class Batches:
    """Consecutive batches of `length_seconds` of clean intervals: the one being filled,
    and of the finished ones the count, the sum and sum of squares of their log speeds,
    the last one's, and the sum of the squared differences between successive ones."""

    length_seconds: float
    seconds: float = 0.0
    work: float = 0.0
    count: int = 0
    log_sum: float = 0.0
    log_squared_sum: float = 0.0
    last_log_speed: float = 0.0
    squared_differences: float = 0.0

    def add(self, seconds: float, work: float) -> Batches:
        filled, done = self.seconds + seconds, self.work + work
        if filled < self.length_seconds:
            return replace(self, seconds=filled, work=done)
        speed = math.log(filled / done)
        step = (speed - self.last_log_speed) ** 2 if self.count else 0.0
        return Batches(
            self.length_seconds,
            0.0,
            0.0,
            self.count + 1,
            self.log_sum + speed,
            self.log_squared_sum + speed**2,
            speed,
            self.squared_differences + step,
        )

    @property
    def variance(self) -> float:
        """Sample variance of the batches' log speeds: every level the run has been at
        counts (a run whose speed moved once may move again)."""
        if self.count < 2:
            return 0.0
        mean = self.log_sum / self.count
        return max(0.0, (self.log_squared_sum - self.count * mean**2) / (self.count - 1))

    @property
    def local_variance(self) -> float:
        """The batches' log-speed variance by the mean squared successive difference (von
        Neumann et al., Annals of Mathematical Statistics 12(2), 1941): the noise about
        the current level, a lasting change of level counted once."""
        if self.count < 2:
            return 0.0
        return self.squared_differences / (2 * (self.count - 1))


@dataclass(frozen=True, slots=True)
class SpeedStats:
    """Exponentially weighted sums over clean intervals, one entry per scale."""

    seconds: tuple[float, ...] = _EMPTY
    """sum(w x seconds)"""
    work: tuple[float, ...] = _EMPTY
    """sum(w x work)"""
    log_rate: tuple[float, ...] = _EMPTY
    """sum(w x seconds x log(seconds per work))"""
    log_rate_squared: tuple[float, ...] = _EMPTY
    """sum(w x seconds x log(seconds per work)^2)"""
    seconds_squared: tuple[float, ...] = _EMPTY
    """sum((w x seconds)^2), for the effective number of intervals."""
    blocks: tuple[Batches, ...] = ()
    """Batch means of the log speed, one per `BATCH_SECONDS`."""
    productive_seconds: float = 0.0
    """Seconds of every clean interval so far."""
    intervals: int = 0


def add_interval(stats: SpeedStats, seconds: float, work: float) -> SpeedStats:
    """The sums after one clean interval of `seconds` doing `work` (both positive)."""
    if not (seconds > 0 and work > 0 and math.isfinite(seconds) and math.isfinite(work)):
        return stats
    log_rate = math.log(seconds / work)
    decays = [math.exp(-seconds / scale) for scale in SCALES_SECONDS]
    batches = stats.blocks or tuple(Batches(length) for length in BATCH_SECONDS)
    return SpeedStats(
        seconds=tuple(s * d + seconds for s, d in zip(stats.seconds, decays, strict=True)),
        work=tuple(w * d + work for w, d in zip(stats.work, decays, strict=True)),
        log_rate=tuple(
            m * d + seconds * log_rate for m, d in zip(stats.log_rate, decays, strict=True)
        ),
        log_rate_squared=tuple(
            q * d + seconds * log_rate**2
            for q, d in zip(stats.log_rate_squared, decays, strict=True)
        ),
        seconds_squared=tuple(
            v * d * d + seconds**2 for v, d in zip(stats.seconds_squared, decays, strict=True)
        ),
        blocks=tuple(batch.add(seconds, work) for batch in batches),
        productive_seconds=stats.productive_seconds + seconds,
        intervals=stats.intervals + 1,
    )


@dataclass(frozen=True, slots=True)
class ScaleEstimate:
    """The measured speed at one window, on a log scale."""

    log_seconds_per_work: float
    standard_error_log_variance: float
    """Squared standard error of the weighted mean log rate; None-like (inf) when unknown."""
    effective_intervals: float


def _at_scale(stats: SpeedStats, index: int, fallback_dispersion: float) -> ScaleEstimate:
    seconds, work = stats.seconds[index], stats.work[index]
    effective = seconds**2 / stats.seconds_squared[index] if stats.seconds_squared[index] else 0.0
    if effective >= MIN_INTERVALS_FOR_DISPERSION:
        mean = stats.log_rate[index] / seconds
        dispersion = max(0.0, stats.log_rate_squared[index] / seconds - mean**2)
    else:
        dispersion = fallback_dispersion
    return ScaleEstimate(
        log_seconds_per_work=math.log(seconds / work),
        standard_error_log_variance=dispersion / max(1.0, effective),
        effective_intervals=effective,
    )


@dataclass(frozen=True, slots=True)
class ProjectedSpeed:
    """The measured speed that prices the remaining run."""

    seconds_per_work: float
    log_variance: float
    """Uncertainty of the mean speed over the horizon: estimation plus wander."""
    window_seconds: float


def window_for(stats: SpeedStats, horizon_seconds: float) -> float:
    """The window matching a horizon: the horizon itself, at least
    `MIN_WINDOW_INTERVALS` intervals of the run's mean length."""
    mean_interval = stats.productive_seconds / max(1, stats.intervals)
    return max(MIN_WINDOW_INTERVALS * mean_interval, 2.0 * horizon_seconds)


def _interpolated(
    stats: SpeedStats, window_seconds: float, fallback_dispersion: float
) -> ScaleEstimate:
    """The estimate at `window_seconds`, interpolated on log scale between two scales."""
    scales = SCALES_SECONDS
    if window_seconds <= scales[0]:
        return _at_scale(stats, 0, fallback_dispersion)
    if window_seconds >= scales[-1]:
        return _at_scale(stats, len(scales) - 1, fallback_dispersion)
    upper = next(i for i, scale in enumerate(scales) if scale >= window_seconds)
    low, high = (
        _at_scale(stats, upper - 1, fallback_dispersion),
        _at_scale(stats, upper, fallback_dispersion),
    )
    share = math.log(window_seconds / scales[upper - 1]) / math.log(
        scales[upper] / scales[upper - 1]
    )
    return ScaleEstimate(
        log_seconds_per_work=(1 - share) * low.log_seconds_per_work
        + share * high.log_seconds_per_work,
        standard_error_log_variance=(1 - share) * low.standard_error_log_variance
        + share * high.standard_error_log_variance,
        effective_intervals=(1 - share) * low.effective_intervals
        + share * high.effective_intervals,
    )


def wander_at(
    stats: SpeedStats,
    horizon_seconds: float,
    *,
    local: bool = False,
    longest_batch_seconds: float = math.inf,
) -> float:
    """The variance (log scale) of the mean speed over the next `horizon_seconds`, by
    batch means: the variance of the log speed over the run's past batches of the longest
    length (at most `longest_batch_seconds`) with at least `MIN_BATCHES` of them, scaled
    by length / horizon (batches that long are nearly independent; Law, Simulation
    Modeling and Analysis, 5th ed., section 9.5.3). 0 until the run has that many
    batches of an hour."""
    for batch in reversed(stats.blocks):
        if batch.count >= MIN_BATCHES and batch.length_seconds <= longest_batch_seconds:
            variance = batch.local_variance if local else batch.variance
            return variance * min(1.0, batch.length_seconds / max(horizon_seconds, 1.0))
    return 0.0


def _level_shift(stats: SpeedStats, fallback_dispersion: float) -> float | None:
    """The window to use when the speed has moved to a new level and stayed there: the
    speed over a recent window (a quarter of the run, at least `SHIFT_MIN_SECONDS`, at
    most half of it) differs from the whole run's by more than `SHIFT_Z` times what its
    wander (batch means, from batches at most 1/`SHIFT_BATCHES` of the window) explains,
    and so does the speed over half that window, on the same side (a lasting change, not
    a slowdown that is passing; the two-window test of Basseville and Nikiforov,
    Detection of Abrupt Changes, 1993, section 2.2). The answer is the younger window:
    its weights reach half as far back, so less of the old speed is mixed into the new.
    None: no shift."""
    history = stats.productive_seconds
    recent = max(SHIFT_MIN_SECONDS, history / 4)
    if recent > history / 2 or not stats.blocks:
        return None
    whole = _interpolated(stats, history, fallback_dispersion).log_seconds_per_work
    sides = []
    for window in (recent, recent / 2):
        level = _interpolated(stats, window, fallback_dispersion)
        noise = (
            wander_at(stats, window, local=True, longest_batch_seconds=window / SHIFT_BATCHES)
            + level.standard_error_log_variance
        )
        if noise <= 0:
            return None
        gap = level.log_seconds_per_work - whole
        if abs(gap) <= SHIFT_Z * math.sqrt(noise):
            return None
        sides.append(gap > 0)
    return recent / 2 if sides[0] == sides[1] else None


def long_run_seconds_per_work(stats: SpeedStats) -> float | None:
    """The speed over the whole run so far (the longest scale), or None without data."""
    if stats.intervals == 0:
        return None
    return stats.seconds[-1] / stats.work[-1]


def projected_speed(
    stats: SpeedStats, horizon_seconds: float, *, fallback_dispersion: float, drift_floor: float
) -> ProjectedSpeed | None:
    """The speed for the next `horizon_seconds` of work, or None without measurements."""
    if stats.intervals == 0:
        return None
    window = window_for(stats, horizon_seconds)
    shifted = _level_shift(stats, fallback_dispersion)
    if shifted is not None and shifted < window:
        window = shifted
    near = _interpolated(stats, window, fallback_dispersion)
    wander = wander_at(stats, horizon_seconds)
    variance = near.standard_error_log_variance + max(drift_floor**2, wander)
    return ProjectedSpeed(
        seconds_per_work=math.exp(near.log_seconds_per_work),
        log_variance=variance,
        window_seconds=window,
    )
