"""The remaining time's percentiles (`trainplan.eta.distribution`, through
`remaining_distribution`) against Monte Carlo of the same model: log-normal work, and for
each kind of interruption a Poisson count whose rate is the wandered Gamma mixture over
the work's mean duration, log-normal costs, and one log-normal factor on all of a kind's
costs for the error of its estimated mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainplan.eta.engine import remaining_distribution
from trainplan.eta.failures import (
    CostLaw,
    FailureRate,
    Interruptions,
    failure_rate,
    major_rate,
)

HOUR = 3600.0
DAY = 24 * HOUR
DRAWS = 400_000


def _lost(rate: FailureRate, law: CostLaw, exposure: float, rng: np.random.Generator) -> np.ndarray:
    weights = np.array([part.weight for part in rate.parts])
    component = rng.choice(len(weights), DRAWS, p=weights / weights.sum())
    shapes = np.array([part.shape for part in rate.parts])
    scales = 1.0 / np.array([part.rate_seconds for part in rate.parts])
    counts = rng.poisson(rng.gamma(shapes[component], scales[component]) * exposure)
    owner = np.repeat(np.arange(DRAWS), counts)
    costs = np.exp(rng.normal(law.log_median, law.log_sd, owner.size))
    factor_log_variance = math.log1p(law.mean_variance)
    factor = np.exp(rng.normal(-factor_log_variance / 2, math.sqrt(factor_log_variance), DRAWS))
    return np.bincount(owner, weights=costs, minlength=DRAWS) * factor


def _rest_of_outage(
    laws: Interruptions, age_seconds: float, rng: np.random.Generator
) -> np.ndarray:
    """The rest of an outage that has lasted `age_seconds`: its kind drawn by rate times
    the chance of lasting that long, its cost from that kind's law beyond the age."""
    kinds = [
        (laws.ordinary_rate.mean, laws.ordinary_cost),
        (laws.major_rate.mean, laws.major_cost),
    ]
    weights = np.array([rate * math.exp(law.log_survival(age_seconds)) for rate, law in kinds])
    kind = rng.choice(len(kinds), DRAWS, p=weights / weights.sum())
    rest = np.zeros(DRAWS)
    for index, (_, law) in enumerate(kinds):
        wanted = np.flatnonzero(kind == index)
        while wanted.size:  # rejection: the cost's law beyond the age
            costs = np.exp(rng.normal(law.log_median, law.log_sd, wanted.size))
            kept = costs > age_seconds
            rest[wanted[kept]] = costs[kept] - age_seconds
            wanted = wanted[~kept]
    return rest


def _monte_carlo(
    work_seconds: float, work_log_sd: float, laws: Interruptions, outage_age_seconds: float = 0.0
) -> np.ndarray:
    rng = np.random.default_rng(20261127)
    work = work_seconds * np.exp(rng.normal(0.0, work_log_sd, DRAWS))
    if outage_age_seconds > 0:
        work = work + _rest_of_outage(laws, outage_age_seconds, rng)
    exposure = work_seconds * math.exp(work_log_sd**2 / 2)  # the work's mean
    total = work
    for rate, law in (
        (laws.ordinary_rate, laws.ordinary_cost),
        (laws.major_rate, laws.major_cost),
    ):
        total = total + _lost(rate.wandering(laws.wander), law, exposure, rng)
    return np.asarray(np.percentile(total, [10, 50, 90]))


def _laws(
    *,
    interruptions: float,
    exposure_seconds: float,
    cost_median_seconds: float,
    cost_log_sd: float,
    cost_evidence: float,
    majors: float,
    major_evidence: float = 1.0,
) -> Interruptions:
    return Interruptions(
        ordinary_rate=failure_rate(
            interruptions / exposure_seconds if interruptions else 1.0 / DAY,
            interruptions,
            exposure_seconds,
            max_prior_seconds=30 * DAY,
        ),
        ordinary_cost=CostLaw(math.log(cost_median_seconds), cost_log_sd, cost_evidence),
        major_rate=major_rate(majors, exposure_seconds),
        major_cost=CostLaw(math.log(8 * HOUR), 1.0, major_evidence),
    )


RUNS = {
    # Steps of two minutes on a quiet cluster, a tenth of the way: two restarts so far
    # and no major outage, but one of 8 h (log sd 1) is a one-in-three chance.
    "rare interruptions, a heavy-tailed outage possible": (
        436 * HOUR,
        0.022,
        _laws(
            interruptions=2,
            exposure_seconds=48 * HOUR,
            cost_median_seconds=1.3 * HOUR,
            cost_log_sd=1.0,
            cost_evidence=2,
            majors=0,
        ),
    ),
    # Restarts every few hours, learned from dozens, and one major outage seen.
    "many restarts": (
        240 * HOUR,
        0.03,
        _laws(
            interruptions=60,
            exposure_seconds=200 * HOUR,
            cost_median_seconds=0.5 * HOUR,
            cost_log_sd=0.5,
            cost_evidence=40,
            majors=1,
            major_evidence=2.0,
        ),
    ),
    # Manual restarts of hours after many outages: several majors are likely.
    "long restarts and several outages": (
        650 * HOUR,
        0.05,
        _laws(
            interruptions=10,
            exposure_seconds=100 * HOUR,
            cost_median_seconds=2 * HOUR,
            cost_log_sd=1.0,
            cost_evidence=20,
            majors=3,
            major_evidence=4.0,
        ),
    ),
    # A short run that will most likely meet nothing at all.
    "a short run": (
        20 * HOUR,
        0.02,
        _laws(
            interruptions=0,
            exposure_seconds=4 * HOUR,
            cost_median_seconds=0.2 * HOUR,
            cost_log_sd=0.5,
            cost_evidence=2,
            majors=0,
        ),
    ),
}


@pytest.mark.parametrize(
    ("name", "outage_age_seconds"),
    [(name, 0.0) for name in RUNS]
    + [("rare interruptions, a heavy-tailed outage possible", 10 * HOUR)],
)
def test_percentiles_agree_with_monte_carlo_of_the_same_model(
    name: str, outage_age_seconds: float
) -> None:
    work_seconds, work_log_sd, laws = RUNS[name]
    expected = _monte_carlo(work_seconds, work_log_sd, laws, outage_age_seconds)
    rest = laws.residual(outage_age_seconds) if outage_age_seconds else None
    found = remaining_distribution(work_seconds, work_log_sd**2, laws, rest)
    # Within 4% of the range's width: a heavy-tailed outage that the fitted sum would
    # let rule its skewness put the 90th percentile 15-20% of the range too high.
    tolerance = 0.04 * (expected[2] - expected[0])
    for label, value, reference in zip(
        ("10th", "50th", "90th"), (found.p10, found.median, found.p90), expected, strict=True
    ):
        assert abs(value - reference) <= tolerance, (
            f"{name}: {label} percentile {value / HOUR:.1f} h, Monte Carlo {reference / HOUR:.1f} h"
        )
