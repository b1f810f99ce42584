"""`PlanFacts` from a plan and its spec (pure)."""

from __future__ import annotations

from trainplan.api import Plan, TrainingPlanSpec
from trainplan.eta.model import PlanFacts

DEFAULT_INTERRUPTIONS_PER_GPU_HOUR = 1.973e-5
"""Used when the plan states no interruption count: 419 in 54 days on 16,384 GPUs."""


def plan_facts(plan: Plan, spec: TrainingPlanSpec) -> PlanFacts:
    """The figures the ETA engine starts from, taken from the plan in force."""
    reliability = plan.reliability
    if reliability.mean_seconds_between_interruptions:
        rate = 3600.0 / reliability.mean_seconds_between_interruptions / plan.gpus
    elif spec.reliability.interruptions_per_gpu_hour is not None:
        rate = spec.reliability.interruptions_per_gpu_hour
    else:
        rate = (
            0.0 if reliability.expected_interruptions == 0 else (DEFAULT_INTERRUPTIONS_PER_GPU_HOUR)
        )
    return PlanFacts(
        total_steps=plan.total_steps,
        planned_step_seconds=plan.step_seconds,
        gpus=plan.gpus,
        checkpoint_interval_steps=reliability.checkpoint_interval_steps,
        restart_seconds=reliability.restart_seconds,
        interruptions_per_gpu_hour=rate,
        planned_mfu=plan.mfu,
        planned_duration_seconds=plan.duration_seconds,
        deadline_seconds=spec.objective.deadline_seconds,
    )
