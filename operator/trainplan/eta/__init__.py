"""The ETA engine (pure, clock injected): observations of a running plan in, a revised,
failure-aware completion estimate with a 10th-90th percentile range out."""

from trainplan.eta.engine import (
    StallPolicy,
    naive_remaining_seconds,
    revise,
)
from trainplan.eta.facts import plan_facts
from trainplan.eta.model import Estimate, EtaState, Observation, PlanFacts

__all__ = [
    "Estimate",
    "EtaState",
    "Observation",
    "PlanFacts",
    "StallPolicy",
    "naive_remaining_seconds",
    "plan_facts",
    "revise",
]
