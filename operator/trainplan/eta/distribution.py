"""The law of the remaining time and its percentiles (pure).

Remaining time = work + interruptions met while working + rest of an outage in
progress, independent parts:

- the work time is log-normal (its median priced by the measured speed, its log variance
  that speed's uncertainty over the horizon);
- the interruptions of each kind are a compound sum over a Poisson count N whose rate
  has a (mixture of) Gamma law, each cost log-normal, all of a kind's costs scaled by
  one log-normal factor for the error of its estimated mean. Over exposure T, N's
  factorial moments are T^j E[Lambda^j], and E S = m1 E N, E S^2 = m2 E N + m1^2
  E N(N-1), E S^3 = m3 E N + 3 m1 m2 E N(N-1) + m1^3 E N(N-1)(N-2) (m_k the cost's raw
  moments; Klugman, Panjer and Willmot, Loss Models, 4th ed., section 9.3);
- the rest of an outage in progress has the moments `trainplan.eta.failures` gives.

Each kind of interruption either does not come at all (the mixed Poisson's zero) or
comes; a major outage, rare and heavy-tailed, is split further into exactly one and two
or more. The remaining time is a mixture of those parts. In each part, all but one
log-normal term are summed by their first three cumulants into a three-parameter
(shifted) log-normal with that mean, variance and skewness (Aitchison and Brown, The
Lognormal Distribution, 1957, section 6.2). The term kept apart is the wider of the
work and the one major outage: folded into the fit, a rare outage's far tail would
rule its third moment and push the upper percentiles out and the lower ones in. The
part's law is the convolution of the two, by five-point Gauss-Hermite quadrature over
the narrower (Abramowitz and Stegun, Handbook of Mathematical Functions, 25.4.46): a
mixture of shifted log-normals again, whose percentiles are found by regula falsi.
`tests/unit/test_eta_distribution.py` checks them against Monte Carlo of the same
model: within 4% of the 10-90% range's width, a rare outage, an outage in progress and
hundreds of interruptions included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

Z90 = 1.2815515655446004
"""Standard normal quantile of 0.9."""


@dataclass(frozen=True, slots=True)
class Cumulants:
    """Mean, variance and third central moment of a time, in seconds (^k)."""

    mean: float = 0.0
    variance: float = 0.0
    third: float = 0.0

    def __add__(self, other: Cumulants) -> Cumulants:
        return Cumulants(
            self.mean + other.mean, self.variance + other.variance, self.third + other.third
        )

    @classmethod
    def from_raw(cls, first: float, second: float, third: float) -> Cumulants:
        """From the raw moments E X, E X^2, E X^3."""
        variance = max(0.0, second - first**2)
        return cls(first, variance, third - 3 * second * first + 2 * first**3)


def lognormal_cumulants(median: float, log_sd: float) -> Cumulants:
    """Cumulants of median x exp(N(0, log_sd^2))."""
    if median <= 0:
        return Cumulants()
    spread = math.exp(log_sd**2)
    mean = median * math.sqrt(spread)
    return Cumulants(mean, mean**2 * (spread - 1), mean**3 * (spread - 1) ** 2 * (spread + 2))


@dataclass(frozen=True, slots=True)
class LogNormal:
    """exp(N(log_median, log_sd^2)), a time in seconds."""

    log_median: float
    log_sd: float
    cumulants: Cumulants = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "cumulants", lognormal_cumulants(math.exp(self.log_median), self.log_sd)
        )


def compound_raw_moments(
    factorial_moments: tuple[float, float, float],
    cost_moments: tuple[float, float, float],
) -> tuple[float, float, float]:
    """E[S^k] (k = 1, 2, 3) of S, the sum of N independent costs with raw moments
    `cost_moments` (E C, E C^2, E C^3), from N's factorial moments (E N, E N(N-1),
    E N(N-1)(N-2)); summing only over the counts wanted gives the moments restricted to
    them (Klugman, Panjer and Willmot, Loss Models, 4th ed., section 9.3)."""
    n1, n2, n3 = factorial_moments
    m1, m2, m3 = cost_moments
    return m1 * n1, m2 * n1 + m1 * m1 * n2, m3 * n1 + 3 * m1 * m2 * n2 + m1**3 * n3


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a mixture: its probability, the cumulants of the sum it holds, and at
    most one more time that is exactly log-normal (kept out of the cumulant fit)."""

    weight: float
    total: Cumulants = Cumulants()
    single: LogNormal | None = None

    @property
    def mean(self) -> float:
        return self.total.mean + (self.single.cumulants.mean if self.single else 0.0)

    def plus(self, other: Part) -> Part:
        """Both parts together (independent): the probabilities multiply and the sums
        add; of two log-normals, the wider is kept apart and the other joins the fit."""
        total = self.total + other.total
        single = self.single or other.single
        if self.single is not None and other.single is not None:
            narrower, single = sorted(
                (self.single, other.single), key=lambda law: law.cumulants.variance
            )
            total = total + narrower.cumulants
        return Part(self.weight * other.weight, total, single)


@dataclass(frozen=True, slots=True)
class ShiftedLogNormal:
    """shift + exp(N(mu, sigma^2)) fitted to a mean, variance and skewness (Aitchison and
    Brown, section 6.2); sigma 0 is a normal with the given mean and variance."""

    shift: float
    scale: float
    """exp(mu); for the normal, its standard deviation."""
    sigma: float

    @classmethod
    def fit(cls, total: Cumulants) -> ShiftedLogNormal:
        mean, variance = total.mean, total.variance
        if variance <= 0:
            return cls(mean, 0.0, 0.0)
        sd = math.sqrt(variance)
        skewness = total.third / sd**3
        if skewness <= 1e-6:
            return cls(mean, sd, 0.0)
        # Skewness (w + 2) sqrt(w - 1) with w = exp(sigma^2): with y = sqrt(w - 1) it is
        # the cubic y^3 + 3 y = skewness, solved by Cardano's formula.
        root = math.sqrt(skewness**2 / 4 + 1)
        y = math.cbrt(skewness / 2 + root) + math.cbrt(skewness / 2 - root)
        w = 1 + y * y
        scale = sd / math.sqrt(w * (w - 1))
        return cls(mean - scale * math.sqrt(w), scale, math.sqrt(math.log(w)))

    def cdf(self, x: float) -> float:
        if self.scale <= 0:
            return 1.0 if x >= self.shift else 0.0
        if self.sigma <= 0:
            return 0.5 * math.erfc(-(x - self.shift) / (self.scale * _SQRT2))
        if x <= self.shift:
            return 0.0
        z = (math.log(x - self.shift) - math.log(self.scale)) / self.sigma
        return 0.5 * math.erfc(-z / _SQRT2)

    def quantile(self, z: float) -> float:
        if self.sigma <= 0:
            return self.shift + z * self.scale
        return self.shift + self.scale * math.exp(z * self.sigma)


_SQRT2 = math.sqrt(2.0)
_ITERATIONS = 100
_PROBABILITY_TOLERANCE = 1e-4


@dataclass(frozen=True, slots=True)
class Percentiles:
    p10: float
    p50: float
    p90: float


def percentiles(parts: list[Part]) -> Percentiles:
    """10th, 50th and 90th percentiles of a mixture of parts, floored at 0."""
    laws = [law for part in parts if part.weight > 0 for law in _laws(part)]
    total = sum(weight for weight, _ in laws)
    if len(laws) == 1:
        law = laws[0][1]
        found = [law.quantile(z) for z in (-Z90, 0.0, Z90)]
    else:
        cdf = _mixture_cdf([(weight / total, law) for weight, law in laws])
        # A mixture's quantile lies between its parts' quantiles of the same level.
        found = []
        for z, p in ((-Z90, 0.1), (0.0, 0.5), (Z90, 0.9)):
            candidates = [law.quantile(z) for _, law in laws]
            found.append(_invert(cdf, p, min(candidates), max(candidates)))
    return Percentiles(*(max(0.0, value) for value in found))


_HERMITE_NODES = (
    (0.0, 0.5333333333333335),
    (1.355626179974266, 0.22207592200561257),
    (-1.355626179974266, 0.22207592200561257),
    (2.8569700138728056, 0.011257411327720677),
    (-2.8569700138728056, 0.011257411327720677),
)
"""Five-point Gauss-Hermite rule for E f(Z), Z standard normal: nodes and weights
(summing to 1; Abramowitz and Stegun, 25.4.46)."""


_BLEND_LOG_RATIO = math.log(2.0)
"""Where the two variances are within this factor (in log) of each other, the quadrature
over each is blended, so that the law (and the estimate) moves continuously when one
grows past the other."""


def _laws(part: Part) -> list[tuple[float, ShiftedLogNormal]]:
    """The part as weighted shifted log-normals: its fitted sum, convolved with its
    log-normal (if any) by quadrature over whichever of the two is narrower."""
    base = ShiftedLogNormal.fit(part.total)
    single = part.single
    if single is None:
        return [(part.weight, base)]
    scale = math.exp(single.log_median)
    if single.cumulants.variance <= 0:
        return [(part.weight, ShiftedLogNormal(base.shift + scale, base.scale, base.sigma))]
    if base.scale <= 0:
        return [(part.weight, ShiftedLogNormal(base.shift, scale, single.log_sd))]
    ratio = math.log(part.total.variance / single.cumulants.variance)
    # 1: nodes over the fitted sum (the narrower); 0: over the log-normal; smooth between.
    over_base = min(1.0, max(0.0, 0.5 - ratio / (2 * _BLEND_LOG_RATIO)))
    over_base = over_base * over_base * (3 - 2 * over_base)
    laws: list[tuple[float, ShiftedLogNormal]] = []
    if over_base > 0:
        laws.extend(
            (
                part.weight * over_base * weight,
                ShiftedLogNormal(base.quantile(z), scale, single.log_sd),
            )
            for z, weight in _HERMITE_NODES
        )
    if over_base < 1:
        laws.extend(
            (
                part.weight * (1 - over_base) * weight,
                ShiftedLogNormal(
                    base.shift + scale * math.exp(z * single.log_sd), base.scale, base.sigma
                ),
            )
            for z, weight in _HERMITE_NODES
        )
    return laws


def _mixture_cdf(laws: list[tuple[float, ShiftedLogNormal]]) -> Callable[[float], float]:
    """The mixture's distribution function, written out for speed (the inner loop)."""
    log, erfc = math.log, math.erfc
    terms = [
        (weight, law.shift, math.log(law.scale) if law.scale > 0 else 0.0, law.sigma * _SQRT2)
        for weight, law in laws
        if law.sigma > 0 and law.scale > 0
    ]
    others = [(weight, law) for weight, law in laws if not (law.sigma > 0 and law.scale > 0)]

    def cdf(x: float) -> float:
        total = 0.0
        for weight, shift, log_scale, width in terms:
            if x > shift:
                total += weight * 0.5 * erfc((log_scale - log(x - shift)) / width)
        for weight, law in others:
            total += weight * law.cdf(x)
        return total

    return cdf


def _invert(cdf: Callable[[float], float], probability: float, low: float, high: float) -> float:
    """x with cdf(x) = probability within [low, high]: Illinois regula falsi."""
    if high - low <= 1e-9 * abs(high):
        return low
    f_low, f_high = cdf(low) - probability, cdf(high) - probability
    if f_low >= 0:
        return low
    if f_high <= 0:
        return high
    side = 0
    for _ in range(_ITERATIONS):
        middle = (low * f_high - high * f_low) / (f_high - f_low)
        f_middle = cdf(middle) - probability
        if abs(f_middle) < _PROBABILITY_TOLERANCE or high - low <= 1e-9 * abs(high):
            return middle
        if f_middle > 0:
            high, f_high = middle, f_middle
            if side == 1:
                f_low /= 2
            side = 1
        else:
            low, f_low = middle, f_middle
            if side == -1:
                f_high /= 2
            side = -1
    return 0.5 * (low + high)
