"""Interruptions of a run: how often they come and what each costs (pure).

An interruption is an episode, not an event count: it opens at the last progress before
any sign of trouble (Kubernetes reporting failures, the step going back, metrics missing
for longer than the stall limit, or no step for longer than it) and closes when the run
regains the work it had reached. An episode that neither Kubernetes reported nor showed
a restart, and that cost less than the stall limit, was not an interruption (a missed
scrape, a slow step) and is forgotten. However many pods or restarts
Kubernetes reports inside one episode, it is one interruption, and its cost is the
wall-clock time of the episode less the productive time of any new work done in it.
Both ends are anchored at step changes, so the cost does not depend on how often the run
is observed.

Rate. Interruptions are a Poisson process (Gelman et al., Bayesian Data Analysis, 3rd
ed., section 2.6) whose rate has a prior with the plan's rate (fleet data) as mean: a
mixture of Gammas, each weighing three interruptions, for a cluster like the fleet, one
three times better and one several times worse, so a cluster four times worse than
the fleet is learned from its first few interruptions and its range is wide until then.
The exposure is the time the run was up.

Cost. Episode costs are heavy-tailed: restarts of minutes, and now and then a major
outage of hours or days (BLOOM-176B's hangs, OPT-175B's outages). So there are two
processes. Ordinary interruptions come at the rate above and cost a log-normal amount
with the plan's cost (restart plus half a checkpoint interval) as prior median. Major
outages (a cluster, storage or network incident; a hang nobody noticed) come at a rate
per second of running, whatever the job's size (one that strikes while the run is down
joins the interruption in progress), and cost a log-normal amount with a
prior median of `MAJOR_PRIOR_MEDIAN_SECONDS`. Each law is updated by its own episodes
(normal-inverse-chi-squared update of the log costs: Gelman et al., section 3.3), each
episode counting for each kind by the probability that it was of that kind (its cost
under each law, weighed by the kinds' rates: `Interruptions.major_share`). So one
multi-day outage raises the expected cost of the run's rest by one more outage's worth,
not by its length at every restart. An interruption in progress is one whose cost is known to
exceed its elapsed time: its expected rest is the mean residual life of the two kinds at
that age, which shifts to the major law as it lasts (partial moments of the log-normal:
Johnson, Kotz and Balakrishnan, Continuous Univariate Distributions, vol. 1, 2nd ed.,
section 14.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from trainplan.eta.distribution import Cumulants, LogNormal, Part, compound_raw_moments

PRIOR_INTERRUPTIONS = 3.0
"""Shape of each Gamma component of the rate's prior: it weighs as much as three
interruptions (a clump of two or three, as a Poisson process has, does not convince it
that the cluster is several times worse)."""
RATE_PRIOR_MIXTURE = ((0.22, 0.3), (0.55, 0.8), (0.19, 1.6), (0.04, 4.75))
"""(weight, rate over the plan's rate) of the prior's components; their mean is the plan's
rate and their median a little below it. Published rates per GPU-hour are at or above
the fleet default (Llama 3, arXiv 2407.21783, section 3.3.4): BLOOM-176B about 1x,
OPT-175B about 3.5x, Meta's research clusters (arXiv 2410.21680) about 6x for 1,024-GPU
jobs; none is several times better. So most of the weight is near the plan, a fifth on
a cluster three times better (so a quiet cluster is learned too), and the last
component (its 90th percentile about 8x) is a cluster like the worst published; a
run's major outages came ten times as often as a month's one in OPT-175B's worst
fortnight (four gaps of a day or more, 56_percent_update.md:27-30). A prior whose
median sits well below the plan's rate expects too few interruptions wherever that
rate is right."""
PRIOR_COST_LOG_SD = 1.0
"""Prior spread of the log cost of one interruption (a factor of e either way)."""
PRIOR_COST_WEIGHT = 2.0
"""The plan's cost weighs as much as two measured interruptions."""
RATE_MAX_EVIDENCE = 16.0
"""However many interruptions were seen, the rate's posterior is no surer than 16 of them
make it (a coefficient of variation of at least 25%)."""
FORGET_SECONDS = 14 * 86400.0
"""Interruptions and costs count less as the run goes on: a fortnight of running ago,
by e."""
BLOCK_SECONDS = 86400.0
"""Interruptions are counted per day of running, to see how much their rate wanders."""
MIN_BLOCKS = 5
RATE_WANDER_FLOOR = 0.05
"""The rate over the rest of the run differs from the past's by at least this squared
coefficient of variation (about 22%), more when the run's days were more unlike each
other than chance makes them (OPT-175B: 40+ restarts in the 16 days to 3 December,
27_percent_update.md:6, a few a week once spare hosts were kept, 56_percent_update.md:8;
BLOOM-176B: three evaluation hangs in three weeks, then none)."""
MIN_COST_SECONDS = 1.0
"""Costs are floored here before their logarithm is taken."""
MAX_COST_LOG_SD = 2.0
"""Ceiling on the fitted spread of log costs: a mean at most e^2 = 7.4 medians."""
MAJOR_PRIOR_PER_SECOND = 1.0 / (30 * 86400.0)
"""Prior rate of major outages: one a month of running, whatever the job's size (a
cluster, storage or network incident, or a hang nobody noticed). BLOOM-176B lost about
7, 18, 6 and 11 hours to a crash and three evaluation hangs in four months (its
chronicles); Llama 3 needed significant manual intervention three times in 54 days
(arXiv 2407.21783, section 3.3.4)."""
MAJOR_PRIOR_MEDIAN_SECONDS = 8 * 3600.0
"""Prior median length of a major outage (BLOOM-176B's: 6 to 18 hours)."""
MAJOR_PRIOR_LOG_SD = 1.0
MAJOR_PRIOR_WEIGHT = 1.0
MAJOR_MIN_SECONDS = 3600.0
"""No interruption shorter than an hour is a major outage."""
CLEAR_SHARE = 1e-3
"""A share of being a major outage below this is none, above 1 less this is one."""
Z99 = 2.3263478740408408
"""Standard normal quantile of 0.99."""
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True, slots=True)
class Episode:
    """An interruption in progress."""

    started_at: float
    """The last progress before it (seconds since the epoch)."""
    peak_work: float
    """The work to regain before the run is productive again."""
    cause: str
    """The first sign: reported (Kubernetes), resumed (the step went back), silent (no
    metrics for longer than the stall limit) or stall (metrics, but no step)."""
    reported: bool = False
    """Kubernetes reported a failure during it."""
    resumed: bool = False
    """The step went back during it (a restart from a checkpoint)."""
    resumed_at: float | None = None
    """When the step last went back."""
    credit_work: float = 0.0
    """Work whose redoing an earlier interruption already paid for (a second restart
    while lost work was being redone)."""

    @property
    def is_failure(self) -> bool:
        """A failure (reported, or a restart seen in the metrics), not only lost time."""
        return self.reported or self.resumed


@dataclass(frozen=True, slots=True)
class CostStats:
    """Sufficient statistics of the closed episodes' costs."""

    count: float = 0.0
    log_sum: float = 0.0
    log_squared_sum: float = 0.0
    total_seconds: float = 0.0

    def decayed(self, factor: float) -> CostStats:
        """Each episode's weight times `factor` (older evidence counts less)."""
        return CostStats(
            self.count * factor,
            self.log_sum * factor,
            self.log_squared_sum * factor,
            self.total_seconds * factor,
        )

    def add(self, cost_seconds: float, weight: float = 1.0) -> CostStats:
        """After one more episode of this cost, counted `weight` times (its share of
        being of this kind)."""
        cost = max(MIN_COST_SECONDS, cost_seconds)
        log_cost = math.log(cost)
        return CostStats(
            self.count + weight,
            self.log_sum + weight * log_cost,
            self.log_squared_sum + weight * log_cost**2,
            self.total_seconds + weight * cost,
        )


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the interruption laws are fitted to: interruptions, exposure and the closed
    episodes' costs, each weighed by exp(-age / `FORGET_SECONDS`), its age the exposure
    since (a cluster that settles after a bad fortnight is seen settling; exponential
    forgetting: Harvey, Forecasting, Structural Time Series Models and the Kalman
    Filter, 1989, section 2.2)."""

    interruptions: float = 0.0
    exposure_seconds: float = 0.0
    costs: CostStats = field(default_factory=CostStats)
    major_costs: CostStats = field(default_factory=CostStats)

    def aged(self, exposure_seconds: float) -> Evidence:
        """After `exposure_seconds` more of running."""
        if exposure_seconds <= 0:
            return self
        factor = math.exp(-exposure_seconds / FORGET_SECONDS)
        return Evidence(
            self.interruptions * factor,
            self.exposure_seconds * factor + exposure_seconds,
            self.costs.decayed(factor),
            self.major_costs.decayed(factor),
        )


@dataclass(frozen=True, slots=True)
class FailureBlocks:
    """Interruptions per `BLOCK_SECONDS` of running: the block being filled, and the
    count, sum and sum of squares of the finished ones."""

    filled_seconds: float = 0.0
    current: float = 0.0
    count: int = 0
    total: float = 0.0
    total_squared: float = 0.0

    def add(self, interruptions: float, exposure_seconds: float) -> FailureBlocks:
        """After `interruptions` more (negative: forgotten) and `exposure_seconds` more."""
        current = max(0.0, self.current + interruptions)
        filled = self.filled_seconds + max(0.0, exposure_seconds)
        if filled < BLOCK_SECONDS:
            return replace(self, filled_seconds=filled, current=current)
        return FailureBlocks(
            filled - BLOCK_SECONDS,
            0.0,
            self.count + 1,
            self.total + current,
            self.total_squared + current**2,
        )

    @property
    def wander(self) -> float:
        """How much the rate differs from day to day beyond what chance explains: the
        squared coefficient of variation of the daily counts less a Poisson's (the
        index of dispersion; Cox and Lewis, The Statistical Analysis of Series of
        Events, 1966, section 4.4), at least `RATE_WANDER_FLOOR`."""
        if self.count < MIN_BLOCKS or self.total <= 0:
            return RATE_WANDER_FLOOR
        mean = self.total / self.count
        variance = (self.total_squared - self.count * mean**2) / (self.count - 1)
        return max(RATE_WANDER_FLOOR, (variance - mean) / mean**2)


@dataclass(frozen=True, slots=True)
class CostLaw:
    """Log-normal law of one interruption's cost, in seconds."""

    log_median: float
    log_sd: float
    evidence: float = PRIOR_COST_WEIGHT
    """How many episodes the law rests on, the prior's included."""

    @property
    def mean_variance(self) -> float:
        """Squared coefficient of variation of the estimated mean cost: one cost's
        (exp(sigma^2) - 1) over the episodes it rests on. A cost law learned from few,
        heavy-tailed episodes may be off for every interruption still to come."""
        return math.expm1(self.log_sd**2) / max(1.0, self.evidence)

    def raw_moment(self, k: int) -> float:
        """E[cost^k]."""
        return math.exp(k * self.log_median + k * k * self.log_sd**2 / 2)

    @property
    def mean(self) -> float:
        return self.raw_moment(1)

    @property
    def second_moment(self) -> float:
        return self.raw_moment(2)

    @property
    def raw_moments(self) -> tuple[float, float, float]:
        return self.raw_moment(1), self.raw_moment(2), self.raw_moment(3)

    def quantile(self, z: float) -> float:
        return math.exp(self.log_median + z * self.log_sd)

    def log_density(self, cost_seconds: float) -> float:
        """log of the probability density of a cost of `cost_seconds` (per second)."""
        log_cost = math.log(max(MIN_COST_SECONDS, cost_seconds))
        z = (log_cost - self.log_median) / self.log_sd
        return -log_cost - math.log(self.log_sd) - _LOG_SQRT_2PI - z * z / 2

    def log_survival(self, age_seconds: float) -> float:
        """log P(cost > age)."""
        if age_seconds <= 0:
            return 0.0
        return _log_normal_cdf((self.log_median - math.log(age_seconds)) / self.log_sd)

    def residual_raw_moments(self, age_seconds: float) -> tuple[float, float, float]:
        """E[R], E[R^2], E[R^3] of the rest R = cost - age of an episode that has lasted
        `age_seconds` (partial moments of the log-normal: E[C^k | C > a] =
        exp(k mu + k^2 sigma^2 / 2) Phi((mu + k sigma^2 - ln a) / sigma) / Phi((mu - ln a)
        / sigma))."""
        if age_seconds <= 0:
            return self.raw_moments
        mu, sigma = self.log_median, self.log_sd
        z = (mu - math.log(age_seconds)) / sigma
        log_survival = _log_normal_cdf(z)
        c1, c2, c3 = (
            math.exp(k * mu + k * k * sigma**2 / 2 + _log_normal_cdf(z + k * sigma) - log_survival)
            for k in (1, 2, 3)
        )
        a = age_seconds
        r1 = max(0.0, c1 - a)
        r2 = max(r1**2, c2 - 2 * a * c1 + a * a)
        r3 = max(0.0, c3 - 3 * a * c2 + 3 * a * a * c1 - a**3)
        return r1, r2, r3


def _log_normal_cdf(z: float) -> float:
    """log Phi(z), accurate far into the lower tail."""
    if z > -30.0:
        return math.log(0.5 * math.erfc(-z / math.sqrt(2.0)))
    # Mills ratio: Phi(z) ~ phi(z) / -z for z -> -infinity.
    return -(z**2) / 2 - _LOG_SQRT_2PI - math.log(-z)


def posterior_cost_law(
    prior_median: float, prior_log_sd: float, weight: float, stats: CostStats
) -> CostLaw:
    """The cost law after the episodes in `stats`, the prior weighing `weight` of them.

    Its spread is the normal-inverse-chi-squared update of the log costs (Gelman et al.,
    section 3.3), capped at `MAX_COST_LOG_SD`; its mean is the sample mean shrunk to the
    prior's, so that the expected cost stays unbiased however far the costs are from
    log-normal (restarts mixed with hangs, say)."""
    prior_mu = math.log(max(MIN_COST_SECONDS, prior_median))
    n = stats.count
    if n == 0:
        return CostLaw(prior_mu, prior_log_sd, weight)
    sample_mean = stats.log_sum / n
    sum_squares = max(0.0, stats.log_squared_sum - n * sample_mean**2)
    spread = (
        weight * prior_log_sd**2
        + sum_squares
        + weight * n / (weight + n) * (sample_mean - prior_mu) ** 2
    )
    sigma = min(MAX_COST_LOG_SD, math.sqrt(spread / (weight + n)))
    prior_mean = math.exp(prior_mu + prior_log_sd**2 / 2)
    mean = (weight * prior_mean + stats.total_seconds) / (weight + n)
    return CostLaw(math.log(mean) - sigma**2 / 2, sigma, weight + n)


@dataclass(frozen=True, slots=True)
class GammaPart:
    """One Gamma component of the rate's law: weight, shape, rate (seconds)."""

    weight: float
    shape: float
    rate_seconds: float

    @property
    def mean(self) -> float:
        return self.shape / self.rate_seconds


@dataclass(frozen=True, slots=True)
class FailureRate:
    """The interruption rate's posterior (per second): a mixture of Gammas."""

    parts: tuple[GammaPart, ...]

    @property
    def mean(self) -> float:
        return sum(part.weight * part.mean for part in self.parts)

    def wandering(self, drift: float) -> FailureRate:
        """The rate over the rest of the run: each component's squared coefficient of
        variation grows by `drift`, its mean kept (a rate that wanders as the run's did)."""
        parts = []
        for part in self.parts:
            if part.shape <= 0:
                parts.append(part)
                continue
            shape = 1.0 / (1.0 / part.shape + drift)
            parts.append(GammaPart(part.weight, shape, part.rate_seconds * shape / part.shape))
        return FailureRate(tuple(parts))

    def none_and_one_within(self, seconds: float) -> tuple[float, float]:
        """P(no interruption) and P(exactly one) in the next `seconds`: the negative
        binomial's first two terms, p^shape and shape p^shape (1 - p), per component."""
        none = one = 0.0
        for part in self.parts:
            if part.shape <= 0:
                none += part.weight
                continue
            p = part.rate_seconds / (part.rate_seconds + seconds)
            zero = part.weight * p**part.shape
            none += zero
            one += zero * part.shape * (1.0 - p)
        return none, one

    @property
    def raw_moments(self) -> tuple[float, float, float]:
        """E L, E L^2, E L^3 of the rate L (per second)."""
        moments = [0.0, 0.0, 0.0]
        for part in self.parts:
            term = part.weight
            for k in range(3):
                term *= (part.shape + k) / part.rate_seconds
                moments[k] += term
        return moments[0], moments[1], moments[2]


def _log_negative_binomial(
    count: float, shape: float, rate_seconds: float, exposure: float
) -> float:
    """log P(count interruptions in `exposure` seconds) under Gamma(shape, rate)."""
    if shape <= 0:
        return 0.0 if count <= 1e-9 else -math.inf
    p = rate_seconds / (rate_seconds + exposure)
    if p >= 1.0:  # no exposure (or none against a vast prior): no interruption possible
        return 0.0 if count <= 1e-9 else -math.inf
    return (
        math.lgamma(shape + count)
        - math.lgamma(shape)
        - math.lgamma(count + 1)
        + shape * math.log(p)
        + (count * math.log1p(-p) if count else 0.0)
    )


def failure_rate(
    prior_per_second: float,
    interruptions: float,
    exposure_seconds: float,
    *,
    max_prior_seconds: float,
) -> FailureRate:
    """Posterior rate. The prior is a mixture of Gammas whose mean is the plan's rate:
    `RATE_PRIOR_MIXTURE` (a cluster like the fleet, one three times better, ones twice and
    several times worse), each of shape `PRIOR_INTERRUPTIONS` and weighing at most
    `max_prior_seconds` of exposure (a plan that expects almost no failures learns from
    its first ones). Each component is updated by conjugacy and reweighed by how well it
    predicted the count seen (the negative binomial; Gelman et al., section 5.2, mixtures
    of conjugate priors)."""
    exposure = max(0.0, exposure_seconds)
    parts = []
    for weight, factor in RATE_PRIOR_MIXTURE:
        rate = prior_per_second * factor
        prior_seconds = (
            min(PRIOR_INTERRUPTIONS / rate, max_prior_seconds) if rate > 0 else max_prior_seconds
        )
        parts.append((weight, rate * prior_seconds, prior_seconds))
    logs = [
        math.log(weight) + _log_negative_binomial(interruptions, shape, seconds, exposure)
        for weight, shape, seconds in parts
    ]
    top = max(logs)
    if top == -math.inf:  # a plan of no failures at all has seen some: learn from them
        return FailureRate((_discounted(1.0, float(interruptions), max_prior_seconds + exposure),))
    weights = [math.exp(value - top) for value in logs]
    total = sum(weights)
    return FailureRate(
        tuple(
            _discounted(w / total, shape + interruptions, seconds + exposure)
            for w, (_, shape, seconds) in zip(weights, parts, strict=True)
        )
    )


def _discounted(weight: float, shape: float, rate_seconds: float) -> GammaPart:
    """A Gamma posterior whose evidence is capped at `RATE_MAX_EVIDENCE` interruptions
    (its mean kept): rates drift over a run (bad hosts are found and replaced, new
    software brings new faults), so no count makes the next weeks' rate certain (a
    discounted, or power, likelihood: Ibrahim and Chen, Statistical Science 15(1), 2000)."""
    if shape > RATE_MAX_EVIDENCE:
        rate_seconds *= RATE_MAX_EVIDENCE / shape
        shape = RATE_MAX_EVIDENCE
    return GammaPart(weight, shape, rate_seconds)


def major_rate(outages: float, exposure_seconds: float) -> FailureRate:
    """Posterior rate of major outages per second of running: the same mixture prior
    as the interruptions' (`RATE_PRIOR_MIXTURE`) about `MAJOR_PRIOR_PER_SECOND`, so a
    quiet fortnight does not make them unlikely and a bad one makes them likely."""
    return failure_rate(
        MAJOR_PRIOR_PER_SECOND, outages, exposure_seconds, max_prior_seconds=math.inf
    )


@dataclass(frozen=True, slots=True)
class Interruptions:
    """What the run's interruptions are expected to be: ordinary ones (restarts) and
    major outages, each a Poisson process with its rate's posterior and its cost law."""

    ordinary_rate: FailureRate
    ordinary_cost: CostLaw
    major_rate: FailureRate
    major_cost: CostLaw
    wander: float = RATE_WANDER_FLOOR
    """How far (squared coefficient of variation) the rate may stray from its estimate."""

    @property
    def rate_per_second(self) -> float:
        return self.ordinary_rate.mean + self.major_rate.mean

    @property
    def mean_cost_seconds(self) -> float:
        """The mean cost of the next interruption, whichever kind it is."""
        ordinary, major = self.ordinary_rate.mean, self.major_rate.mean
        total = ordinary + major
        if total <= 0:
            return self.ordinary_cost.mean
        return (ordinary * self.ordinary_cost.mean + major * self.major_cost.mean) / total

    @property
    def major_above_seconds(self) -> float:
        """A pause without any sign of failure lasting more than this was a major outage
        (an unnoticed hang), not the run's pace: beyond the ordinary law's 99th
        percentile, and at least `MAJOR_MIN_SECONDS`."""
        return max(MAJOR_MIN_SECONDS, self.ordinary_cost.quantile(Z99))

    def major_share(self, cost_seconds: float) -> float:
        """The probability that an interruption that cost `cost_seconds` was a major
        outage: each kind weighed by its rate and its cost law's density at that cost
        (Bayes' rule on the two-kind mixture, the E step of EM: Dempster, Laird and
        Rubin, JRSS B 39(1), 1977). None below `MAJOR_MIN_SECONDS`; shares within
        `CLEAR_SHARE` of 0 or 1 are taken as such. A soft share, unlike a threshold on
        the ordinary law, does not let a few long outages counted as ordinary widen that
        law until every later one counts as ordinary too."""
        if cost_seconds <= MAJOR_MIN_SECONDS:
            return 0.0
        ordinary, major = self.ordinary_rate.mean, self.major_rate.mean
        if major <= 0:
            return 0.0
        if ordinary <= 0:
            return 1.0
        log_odds = (
            math.log(major)
            + self.major_cost.log_density(cost_seconds)
            - math.log(ordinary)
            - self.ordinary_cost.log_density(cost_seconds)
        )
        share = 1.0 / (1.0 + math.exp(-log_odds)) if log_odds > -700 else 0.0
        if share < CLEAR_SHARE:
            return 0.0
        return 1.0 if share > 1.0 - CLEAR_SHARE else share

    def residual(self, age_seconds: float) -> Cumulants:
        """Cumulants of the rest of an interruption that has lasted `age_seconds`: the
        longer it lasts, the likelier it is a major outage (each kind weighed by its rate
        and its chance of lasting that long)."""
        kinds = [
            (self.ordinary_rate.mean, self.ordinary_cost),
            (self.major_rate.mean, self.major_cost),
        ]
        logs = [
            math.log(rate) + law.log_survival(age_seconds) if rate > 0 else -math.inf
            for rate, law in kinds
        ]
        top = max(logs)
        if top == -math.inf:
            logs, top = [0.0, -math.inf], 0.0
        weights = [math.exp(value - top) for value in logs]
        total = sum(weights)
        raw = [0.0, 0.0, 0.0]
        for weight, (_, law) in zip(weights, kinds, strict=True):
            for k, moment in enumerate(law.residual_raw_moments(age_seconds)):
                raw[k] += weight / total * moment
        return Cumulants.from_raw(raw[0], raw[1], raw[2])

    def over(self, exposure_seconds: float) -> list[Part]:
        """The time lost to interruptions over `exposure_seconds` of running, as a
        mixture of parts: none or some ordinary interruptions, and none, one or more
        major outages."""
        ordinary = _lost(
            self.ordinary_rate.wandering(self.wander),
            self.ordinary_cost,
            exposure_seconds,
            one_apart=False,
        )
        major = _lost(
            self.major_rate.wandering(self.wander),
            self.major_cost,
            exposure_seconds,
            one_apart=True,
        )
        return [
            joint
            for first in ordinary
            for second in major
            if (joint := first.plus(second)).weight > _NEGLIGIBLE
        ]


_NEGLIGIBLE = 1e-9
"""A part of the mixture less likely than this is left out."""


def _lost(
    rate: FailureRate, law: CostLaw, exposure_seconds: float, *, one_apart: bool
) -> list[Part]:
    """The cost of one kind's interruptions over `exposure_seconds` as parts: none, one
    (if `one_apart`: that cost's own log-normal) and the rest, whose raw moments are the
    compound sum's over those counts. The mean cost is an estimate too: a log-normal
    factor of mean 1 and squared coefficient of variation `law.mean_variance` scales
    every interruption alike (E F^k = (1 + v)^(k(k-1)/2))."""
    t = max(0.0, exposure_seconds)
    moments = rate.raw_moments
    if moments[0] * t <= 0:
        return [Part(1.0)]
    none, one = rate.none_and_one_within(t)
    if not one_apart:
        one = 0.0
    some = 1.0 - none - one
    spread = 1.0 + law.mean_variance
    parts = [Part(none)]
    if one > _NEGLIGIBLE:
        factor_log_variance = math.log(spread)
        parts.append(
            Part(
                one,
                single=LogNormal(
                    law.log_median - factor_log_variance / 2,
                    math.sqrt(law.log_sd**2 + factor_log_variance),
                ),
            )
        )
    if some > _NEGLIGIBLE:
        # N's factorial moments over the counts in this part: E N(N-1) and E N(N-1)(N-2)
        # are nothing at N = 0 or 1, E N loses the one kept apart.
        factorial = (max(0.0, moments[0] * t - one), moments[1] * t**2, moments[2] * t**3)
        raw = compound_raw_moments(factorial, law.raw_moments)
        parts.append(
            Part(
                some,
                Cumulants.from_raw(
                    raw[0] / some, raw[1] * spread / some, raw[2] * spread**3 / some
                ),
            )
        )
    return parts


def interruption_laws(
    *,
    prior_per_second: float,
    prior_cost_seconds: float,
    max_prior_seconds: float,
    evidence: Evidence,
    blocks: FailureBlocks | None = None,
) -> Interruptions:
    """Both processes after the evidence: the plan's rate and cost for ordinary
    interruptions, the `MAJOR_PRIOR_*` figures for major outages."""
    majors = evidence.major_costs.count
    return Interruptions(
        ordinary_rate=failure_rate(
            prior_per_second,
            max(0.0, evidence.interruptions - majors),
            evidence.exposure_seconds,
            max_prior_seconds=max_prior_seconds,
        ),
        # The plan's cost (restart plus half a checkpoint interval) is an expected value:
        # the prior's mean, its median below it.
        ordinary_cost=posterior_cost_law(
            prior_cost_seconds * math.exp(-(PRIOR_COST_LOG_SD**2) / 2),
            PRIOR_COST_LOG_SD,
            PRIOR_COST_WEIGHT,
            evidence.costs,
        ),
        major_rate=major_rate(majors, evidence.exposure_seconds),
        major_cost=posterior_cost_law(
            MAJOR_PRIOR_MEDIAN_SECONDS, MAJOR_PRIOR_LOG_SD, MAJOR_PRIOR_WEIGHT, evidence.major_costs
        ),
        wander=(blocks or FailureBlocks()).wander,
    )
