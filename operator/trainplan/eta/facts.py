"""`PlanFacts` from a plan and its spec (pure)."""

from __future__ import annotations

from trainplan.api import Plan, TrainingPlanSpec
from trainplan.eta.model import PlanFacts


def plan_facts(plan: Plan, spec: TrainingPlanSpec | None = None) -> PlanFacts:
    """The figures the ETA engine starts from, taken from the plan in force (and the
    deadline from its spec, when there is one)."""
    reliability = plan.reliability
    # The planner resolved the rate (the spec's, else the catalog's) into the mean time
    # between interruptions; none means a rate of zero.
    mtbi = reliability.mean_seconds_between_interruptions
    rate = 3600.0 / mtbi / plan.gpus if mtbi else 0.0
    return PlanFacts(
        total_steps=plan.total_steps,
        planned_step_seconds=plan.step_seconds,
        gpus=plan.gpus,
        checkpoint_interval_steps=reliability.checkpoint_interval_steps,
        restart_seconds=reliability.restart_seconds,
        interruptions_per_gpu_hour=rate,
        planned_mfu=plan.mfu,
        planned_duration_seconds=plan.duration_seconds,
        deadline_seconds=None if spec is None else spec.objective.deadline_seconds,
        tokens_per_step=float(plan.tokens_per_step),
        checkpoint_seconds=reliability.checkpoint_seconds,
    )
