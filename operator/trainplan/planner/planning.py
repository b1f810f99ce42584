"""`plan(spec, catalog)`: the planner's entry point (pure).

Resolves the spec, searches layouts for the objective (a pinned GPU count, a deadline,
or a GPU ceiling), and returns the plan object of DESIGN.md with runner-up alternatives
and a line-by-line explanation; or raises `InfeasiblePlanError` saying exactly why not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from statistics import NormalDist

from pydantic import ValidationError

from trainplan.api import (
    Alternative,
    MemoryBreakdown,
    PercentileRange,
    Plan,
    PlanLayout,
    PlanReliability,
    StepBreakdown,
    TrainingPlanSpec,
    format_count,
    format_duration,
)
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, UnknownGPUError
from trainplan.planner.cluster_fit import ClusterEvidence, apply_cluster_fit
from trainplan.planner.errors import InfeasiblePlanError, PlanInputError
from trainplan.planner.explain import explain, infeasibility_reasons
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.resolve import ResolvedSpec, resolve, trainable_parameters
from trainplan.planner.search import (
    MAX_LAYOUT_EVALUATIONS,
    Evaluation,
    Evaluator,
    best_at,
    candidate_gpu_counts,
    feasible_sorted,
    select_fastest,
    select_fewest_gpus_for_deadline,
)
from trainplan.planner.shapes import active_parameter_count, parameter_count

DEFAULT_GPU_CEILING = 16384
_Z_90 = 1.2815515655446004
"""The standard normal quantile at 0.9."""


def duration_quantile_factor(calibration: Calibration, confidence: float) -> float:
    """How much longer than the estimate the duration quantile `confidence` is: 1 at 0.5
    (the estimate taken as the median), the stored 90th-percentile ratio of held-out whole
    runs (`gpu_hours_ratio_p90`) at 0.9, and a log-normal tail through both in between
    and up to 0.95: ratio ** (z(c) / z(0.9))."""
    z = NormalDist().inv_cdf(confidence)
    return float(calibration.gpu_hours_ratio_p90 ** (z / _Z_90))


def _range_spread(workload: Workload, calibration: Calibration) -> tuple[float, float]:
    """What widens a plan's 10-90% ranges beyond the dense planner's: the published
    mixture-of-experts rows' wider step-time errors for an MoE model (`benchmarks/moe.py`),
    nothing for a dense one."""
    if workload.shape.experts is None:
        return 1.0, 1.0
    return calibration.moe_range_spread_p10, calibration.moe_range_spread_p90


def _range(value: float, low_ratio: float, high_ratio: float) -> PercentileRange:
    return PercentileRange(p10=value * low_ratio, p90=value * high_ratio)


"""Largest GPU count a deadline search considers when the spec sets no maxGPUs."""

FASTEST_TOLERANCE = 0.02
"""With only a ceiling, plans within 2% of the fastest count as equally fast; the one
with the fewest GPU-hours among them wins."""

ALTERNATIVES = 3
"""Runner-up plans reported beside the chosen one."""

RULE_OF_THUMB_GPU_HOURS_PER_PARAMETER_TOKEN = 13.3
"""A100-80GB GPU-hours per (billion parameters x billion tokens) at about 40% MFU:
6 x 1e18 / (0.4 x 312e12 x 3600) = 13.35."""

_RULE_OF_THUMB_PEAK_FLOPS = 312e12  # A100 dense bf16, the rule's reference


def plan(
    spec: TrainingPlanSpec,
    catalog: Catalog,
    *,
    cluster: ClusterEvidence | None = None,
    max_layout_evaluations: int = MAX_LAYOUT_EVALUATIONS,
) -> Plan:
    """The best plan for `spec`. Raises `PlanInputError` (bad input for this catalog or
    model, or a search wider than `max_layout_evaluations` layouts: the planning-time
    bound) or `InfeasiblePlanError` (no layout works), and nothing else: figures that
    leave the arithmetic's range (an overflow, a plan whose numbers its own API refuses)
    are a `PlanInputError` of the spec.

    With `cluster` (a ClusterCalibration's fitted records, `planner.cluster_fit`) the
    plan's step time, its range, the failure rate and the restart cost are the cluster's,
    unless the spec opts out (`hardware.calibration: none`); `status.plan.calibration`
    then names it."""
    try:
        if cluster is not None and spec.hardware.calibration != "none":
            return _calibrated_plan(spec, catalog, cluster, max_layout_evaluations)
        return _plan(spec, catalog, max_layout_evaluations)
    except (PlanInputError, InfeasiblePlanError):
        raise
    except (ArithmeticError, ValidationError) as error:
        raise PlanInputError(
            [("spec", f"its figures take the plan out of range ({type(error).__name__})")]
        ) from error


def _calibrated_plan(
    spec: TrainingPlanSpec,
    catalog: Catalog,
    cluster: ClusterEvidence,
    max_layout_evaluations: int,
) -> Plan:
    problems = []
    if spec.hardware.calibration is not None and spec.hardware.calibration != cluster.name:
        problems.append(
            (
                "hardware.calibration",
                f"names ClusterCalibration {spec.hardware.calibration!r}, not the given"
                f" {cluster.name!r}",
            )
        )
    try:
        gpu = catalog.gpu(spec.hardware.gpu_type).name
        if catalog.gpu(cluster.gpu_type).name != gpu:
            problems.append(
                (
                    "hardware.gpuType",
                    f"is {gpu}; ClusterCalibration {cluster.name!r} describes {cluster.gpu_type}",
                )
            )
    except UnknownGPUError:
        pass  # resolve() reports an unknown gpuType; an unknown calibration GPU matches none.
    if problems:
        raise PlanInputError(problems)
    corrected = replace(catalog, calibration=apply_cluster_fit(catalog.calibration, cluster.fit))
    result = _plan(spec, corrected, max_layout_evaluations)
    fit = cluster.fit
    note = (
        f"Calibrated by ClusterCalibration {cluster.name} ({format_count(fit.runs, 'run')}):"
        f" step time x {fit.step_seconds_factor:.3f},"
        f" {fit.interruptions_per_gpu_hour:.3g} interruptions per GPU-hour"
    )
    if fit.down_weighted:
        note += f", {format_count(fit.down_weighted, 'outlier run')} down-weighted"
    return result.model_copy(
        update={
            "calibration": cluster.reference(),
            "explanation": (*result.explanation, note + "."),
        }
    )


def _plan(spec: TrainingPlanSpec, catalog: Catalog, max_layout_evaluations: int) -> Plan:
    resolved = resolve(spec, catalog)
    evaluator = Evaluator(
        resolved.workload,
        catalog.calibration,
        resolved.run,
        max_evaluations=max_layout_evaluations,
    )
    objective = spec.objective
    ceiling = objective.max_gpus
    if objective.gpus is not None:
        evaluated = best_at(evaluator, objective.gpus, resolved.pins)
        choice = select_fastest(evaluated)
        goal = f"the fastest layout on exactly {objective.gpus} GPUs (objective.gpus)"
        counts = [objective.gpus]
    elif objective.deadline is not None:
        deadline_seconds = objective.deadline_seconds
        assert deadline_seconds is not None
        counts = candidate_gpu_counts(
            resolved.workload, resolved.pins, ceiling or DEFAULT_GPU_CEILING
        )
        # At confidence c the plan's duration quantile c, not the estimate, must fit.
        factor = duration_quantile_factor(catalog.calibration, objective.confidence_level)
        choice, seen = select_fewest_gpus_for_deadline(
            evaluator, counts, resolved.pins, deadline_seconds / factor
        )
        evaluated = [e for results in seen.values() for e in results]
        goal = (
            f"the fewest GPUs that finish within {format_duration(deadline_seconds)}"
            f" (objective.deadline: {objective.deadline})"
        )
        if objective.confidence_level > 0.5:
            goal += (
                f" with {objective.confidence_level:.0%} confidence (the estimate x {factor:.2f}"
                " must fit)"
            )
        if choice is not None:
            goal += _next_smaller_note(evaluator, counts, choice, resolved, seen)
        if choice is None and counts:
            evaluated += best_at(evaluator, counts[-1], resolved.pins)
    else:
        assert ceiling is not None
        counts = candidate_gpu_counts(resolved.workload, resolved.pins, ceiling)
        evaluated = _near_ceiling(evaluator, counts, resolved)
        choice = _fastest_without_waste(evaluated)
        goal = f"the fastest plan within {ceiling} GPUs (objective.maxGPUs)"
    if choice is None:
        raise InfeasiblePlanError(
            infeasibility_reasons(spec, resolved, evaluated, counts, catalog.calibration)
        )
    alternatives = _alternatives(choice, evaluated, spec)
    return _plan_object(
        choice=choice,
        resolved=resolved,
        alternatives=alternatives,
        goal=goal,
        evaluated_count=len(evaluated),
        spec=spec,
        calibration=catalog.calibration,
    )


def _next_smaller_note(
    evaluator: Evaluator,
    counts: list[int],
    choice: Evaluation,
    resolved: ResolvedSpec,
    seen: dict[int, list[Evaluation]],
) -> str:
    """What the next smaller legal GPU count would take: why the choice is the fewest."""
    smaller = [count for count in counts if count < choice.layout.gpus]
    if not smaller:
        return f"; {choice.layout.gpus} GPUs is the smallest count a legal layout reaches"
    count = smaller[-1]
    results = seen.get(count) or best_at(evaluator, count, resolved.pins)
    best = select_fastest(results)
    if best is None:
        return f"; no layout on {count} GPUs (the next smaller count) fits"
    return (
        f"; the next smaller count, {count} GPUs, would take"
        f" {format_duration(best.duration_seconds)}"
    )


def _near_ceiling(
    evaluator: Evaluator, counts: list[int], resolved: ResolvedSpec
) -> list[Evaluation]:
    """Evaluations on the largest feasible GPU count and every count above half of it.

    More GPUs rarely slow the best plan, so the fastest plan lies near the largest count
    with a feasible layout; counts are taken from the top down until half of that one.
    """
    evaluated: list[Evaluation] = []
    largest_feasible: int | None = None
    for count in reversed(counts):
        if largest_feasible is not None and count * 2 <= largest_feasible:
            break
        results = best_at(evaluator, count, resolved.pins)
        evaluated += results
        if largest_feasible is None and any(e.feasible for e in results):
            largest_feasible = count
    return evaluated


def _fastest_without_waste(evaluated: Iterable[Evaluation]) -> Evaluation | None:
    ranked = feasible_sorted(evaluated)
    if not ranked:
        return None
    limit = ranked[0].duration_seconds * (1 + FASTEST_TOLERANCE)
    close = [e for e in ranked if e.duration_seconds <= limit]
    return min(close, key=lambda e: (e.gpu_hours, e.duration_seconds))


def _signature(layout: Layout) -> tuple[int, int, int, int, int, int, str]:
    return (
        layout.tensor,
        layout.context,
        layout.pipeline,
        layout.data,
        layout.expert,
        layout.zero_stage,
        layout.checkpointing,
    )


def _alternatives(
    choice: Evaluation, evaluated: list[Evaluation], spec: TrainingPlanSpec
) -> list[tuple[Evaluation, str]]:
    """The best runner-ups of other shapes (tensor, pipeline, data, ZeRO, recompute)."""
    seen = {_signature(choice.layout)}
    result: list[tuple[Evaluation, str]] = []
    deadline = spec.objective.deadline_seconds
    for candidate in feasible_sorted(evaluated):
        if _signature(candidate.layout) in seen:
            continue
        seen.add(_signature(candidate.layout))
        result.append((candidate, _loss_note(choice, candidate, deadline)))
        if len(result) == ALTERNATIVES:
            break
    return result


def _loss_note(choice: Evaluation, other: Evaluation, deadline: float | None) -> str:
    slower = other.duration_seconds / choice.duration_seconds - 1
    costlier = other.gpu_hours / choice.gpu_hours - 1
    parts = [f"{slower:+.1%} duration", f"{costlier:+.1%} GPU-hours"]
    if other.layout.gpus != choice.layout.gpus:
        parts.append(f"{other.layout.gpus} GPUs instead of {choice.layout.gpus}")
    if deadline is not None and other.duration_seconds > deadline:
        parts.append("misses the deadline")
    return ", ".join(parts)


def plan_layout(layout: Layout) -> PlanLayout:
    """The API form of a layout."""
    return PlanLayout(
        tensor=layout.tensor,
        pipeline=layout.pipeline,
        data=layout.data,
        zero_stage=layout.zero_stage,
        activation_checkpointing=layout.checkpointing,
        micro_batch_size=layout.micro_batch_size,
        gradient_accumulation_steps=layout.accumulation_steps,
        global_batch_size=layout.global_batch_size,
        virtual_pipeline_stages=layout.virtual_stages,
        sequence_parallel=layout.sequence_parallel,
        context=layout.context,
        expert=layout.expert,
        expert_tensor=layout.expert_tensor,
    )


def nodes_for(gpus: int, gpus_per_node: int) -> int:
    """Whole nodes a job of `gpus` GPUs occupies."""
    return math.ceil(gpus / gpus_per_node)


def rule_of_thumb_gpus(
    parameters: float, tokens: float, duration_seconds: float, workload: Workload
) -> int:
    """GPUs = tokens(B) x params(B) x 13.3 / hours, scaled from the A100's bf16 peak to
    this GPU's peak at the plan's precision (6 N D at about 40% MFU)."""
    hours = duration_seconds / 3600.0
    a100_gpus = parameters / 1e9 * tokens / 1e9 * RULE_OF_THUMB_GPU_HOURS_PER_PARAMETER_TOKEN
    peak = workload.gpu.peak_flops_for(workload.precision)
    return max(1, math.ceil(a100_gpus / hours * _RULE_OF_THUMB_PEAK_FLOPS / peak))


def _plan_object(
    *,
    choice: Evaluation,
    resolved: ResolvedSpec,
    alternatives: list[tuple[Evaluation, str]],
    goal: str,
    evaluated_count: int,
    spec: TrainingPlanSpec,
    calibration: Calibration,
) -> Plan:
    workload = resolved.workload
    step = choice.step
    reliability = choice.reliability
    assert step is not None and reliability is not None
    layout = choice.layout
    gpus = layout.gpus
    memory = choice.memory
    compute_seconds = step.step_seconds * resolved.run.total_steps
    tokens_per_step = workload.tokens_per_step
    low, high = _range_spread(workload, calibration)
    return Plan(
        gpu_type=workload.gpu.name,
        gpus=gpus,
        nodes=nodes_for(gpus, workload.gpus_per_node),
        gpus_per_node=workload.gpus_per_node,
        layout=plan_layout(layout),
        memory=MemoryBreakdown(
            capacity_bytes=memory.capacity_bytes,
            total_bytes=memory.total_bytes,
            weights_bytes=memory.weights_bytes,
            gradients_bytes=memory.gradients_bytes,
            optimizer_bytes=memory.optimizer_bytes,
            activations_bytes=memory.activations_bytes,
            logits_bytes=memory.logits_bytes,
            overhead_bytes=memory.overhead_bytes,
        ),
        parameters=round(parameter_count(workload.shape)),
        trainable_parameters=(
            round(trainable_parameters(workload.shape, resolved.parameters, workload.tuning))
            if workload.tuning.adapters
            else None
        ),
        active_parameters=(
            round(active_parameter_count(workload.shape))
            if workload.shape.experts is not None
            else None
        ),
        flops_per_step=choice.model_flops_per_step,
        step_seconds=step.step_seconds,
        step_breakdown=StepBreakdown(
            compute_seconds=step.compute_seconds,
            tensor_comm_seconds=step.tensor_comm_seconds,
            context_comm_seconds=step.context_comm_seconds,
            expert_comm_seconds=step.expert_comm_seconds,
            data_comm_seconds=step.data_comm_seconds,
            pipeline_bubble_seconds=step.pipeline_bubble_seconds,
            pipeline_comm_seconds=step.pipeline_comm_seconds,
            optimizer_seconds=step.optimizer_seconds,
        ),
        tokens_per_step=tokens_per_step,
        total_steps=resolved.run.total_steps,
        compute_seconds=compute_seconds,
        overhead_seconds=reliability.duration_seconds - compute_seconds,
        duration_seconds=reliability.duration_seconds,
        gpu_hours=choice.gpu_hours,
        step_seconds_range=_range(
            step.step_seconds,
            calibration.step_seconds_ratio_p10 * low,
            calibration.step_seconds_ratio_p90 * high,
        ),
        duration_seconds_range=_range(
            reliability.duration_seconds,
            calibration.gpu_hours_ratio_p10 * low,
            calibration.gpu_hours_ratio_p90 * high,
        ),
        gpu_hours_range=_range(
            choice.gpu_hours,
            calibration.gpu_hours_ratio_p10 * low,
            calibration.gpu_hours_ratio_p90 * high,
        ),
        mfu=choice.mfu,
        tokens_per_second_per_gpu=tokens_per_step / step.step_seconds / gpus,
        reliability=PlanReliability(
            expected_interruptions=reliability.expected_interruptions,
            checkpoint_interval_steps=reliability.checkpoint_interval_steps,
            restart_seconds=reliability.restart_seconds,
            checkpoint_seconds=reliability.checkpoint_seconds,
            checkpoint_bytes=resolved.run.checkpoint_bytes,
            mean_seconds_between_interruptions=reliability.mean_seconds_between_interruptions
            if math.isfinite(reliability.mean_seconds_between_interruptions)
            else None,
            lost_work_seconds=reliability.lost_work_seconds,
        ),
        rule_of_thumb_gpus=rule_of_thumb_gpus(
            resolved.parameters, resolved.tokens_total, reliability.duration_seconds, workload
        ),
        alternatives=tuple(
            Alternative(
                gpus=other.layout.gpus,
                nodes=nodes_for(other.layout.gpus, workload.gpus_per_node),
                layout=plan_layout(other.layout),
                step_seconds=other.step_seconds,
                duration_seconds=other.duration_seconds,
                gpu_hours=other.gpu_hours,
                mfu=other.mfu,
                memory_total_bytes=other.memory.total_bytes,
                note=note,
            )
            for other, note in alternatives
        ),
        explanation=tuple(
            explain(
                choice=choice,
                resolved=resolved,
                alternatives=alternatives,
                goal=goal,
                evaluated_count=evaluated_count,
                spec=spec,
            )
        ),
    )
