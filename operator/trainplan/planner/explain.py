"""Human explanations of a plan and of infeasibility (pure).

Each line is a sentence a user can act on: why this layout won, where memory and step
time go, what the runner-ups cost, and, when nothing works, exactly what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainplan.api import TrainingPlanSpec, format_count, format_duration
from trainplan.planner.calibration import Calibration
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.resolve import ResolvedSpec, trainable_parameters
from trainplan.planner.search import Evaluation
from trainplan.planner.shapes import active_parameter_count, parameter_count
from trainplan.planner.stages import interleaved_placement, split_counts

_GIB = float(1 << 30)


def gib(value_bytes: float) -> str:
    """Bytes as GiB with one decimal."""
    return f"{value_bytes / _GIB:.1f} GiB"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "0%"


def describe_layout(layout: Layout, workload: Workload) -> str:
    """The layout in words: degrees, where collectives run, sharding and recompute."""
    t, p, d = layout.tensor, layout.pipeline, layout.data
    fabric = workload.gpu.link_name
    link = f"over {fabric} inside a node" if t <= workload.gpus_per_node else "across nodes"
    if t > workload.gpus_per_node and t <= workload.nvlink_domain_gpus:
        link = f"over NVLink across nodes (a {workload.nvlink_domain_gpus}-GPU NVLink domain)"
    if workload.gpu.intra_node_link == "pcie" and t <= workload.gpus_per_node:
        link = "over PCIe inside a node"
    bridge = workload.gpu.nvlink_domain_gpus
    if bridge is not None and bridge < t <= workload.gpus_per_node:
        link = f"inside a node, over PCIe between its {bridge}-GPU NVLink bridge groups"
    parts = []
    if t > 1:
        sp = " with sequence parallelism" if layout.sequence_parallel else ""
        parts.append(f"{t}-way tensor parallelism {link}{sp}")
    if layout.context > 1:
        inside = t * layout.context <= workload.nvlink_domain_gpus
        ring = f"over {workload.gpu.link_name}" if inside else "across nodes"
        parts.append(
            f"{layout.context}-way context parallelism (each sequence split, keys and values"
            f" passed around a ring {ring})"
        )
    if p > 1:
        details = []
        split = split_counts(workload.shape.layers, p)
        if split is not None and workload.shape.layers % p:
            first, middle, last = split
            details.append(
                f"{first} layers on the first, {last} on the last"
                + (f", {middle} on each other" if p > 2 else "")
            )
        v = layout.virtual_stages
        if v > 1:
            placement = interleaved_placement(workload.shape.layers, p, v)
            counted = (
                ", the embedding and the loss counted as layers"
                if placement == "embedding-loss"
                else ""
            )
            details.append(f"{v} interleaved chunks each{counted}")
        parts.append(f"{p} pipeline stages" + (f" ({'; '.join(details)})" if details else ""))
    parts.append(f"{d} data-parallel replica{'s' if d > 1 else ''}")
    experts = workload.shape.experts
    if experts is not None:
        parts.append(_describe_experts(layout, workload, experts.routed))
    zero = {
        0: "no ZeRO sharding",
        1: "ZeRO-1 (optimizer states sharded)",
        2: "ZeRO-2 (optimizer states and gradients sharded)",
        3: "ZeRO-3 (weights, gradients and optimizer states sharded)",
    }[layout.zero_stage]
    recompute = {
        "none": "no activation recomputation",
        "selective": (
            "selective recomputation of every other matrix multiply and the elementwise"
            " ops (torchtitan's per-op policy)"
            if workload.selective_recompute == "every-other-matmul"
            else "selective recomputation of attention"
        ),
        "full": "full activation recomputation",
    }[layout.checkpointing]
    return ", ".join(parts) + f"; {zero}; {recompute}"


def _describe_experts(layout: Layout, workload: Workload, routed: int) -> str:
    """Where a mixture-of-experts model's experts live and how tokens reach them."""
    if layout.expert == 1:
        return f"all {routed} experts of each MoE layer on every rank"
    spread = layout.expert * layout.expert_tensor
    inside = spread <= workload.nvlink_domain_gpus
    reach = f"over {workload.gpu.link_name}" if inside else "across nodes"
    split = f", each split over {layout.expert_tensor} ranks" if layout.expert_tensor > 1 else ""
    return (
        f"{layout.expert}-way expert parallelism ({routed // layout.expert} of {routed}"
        f" experts per rank{split}; tokens dispatched and combined by all-to-all {reach})"
    )


def _expert_rule(workload: Workload) -> str:
    """The expert degree's rule, for an MoE model (else nothing)."""
    experts = workload.shape.experts
    if experts is None:
        return ""
    return (
        f"expert x expertTensor must divide tensor x context x data and expert the experts"
        f" ({experts.routed}), "
    )


def _dropout_note(workload: Workload) -> str:
    """Says when the activations count dropout masks, which a model without dropout does
    not keep (`model.dropout`; true by default for a shape without a preset)."""
    return " with dropout masks (model.dropout)" if workload.shape.dropout else ""


def _work(workload: Workload, resolved: ResolvedSpec, steps: int) -> str:
    tokens = (
        f"{format_count(steps * workload.tokens_per_step, 'token')}"
        f" ({format_count(steps, 'step')} of {workload.tokens_per_step:,} tokens)"
    )
    tuning = workload.tuning
    if not tuning.adapters:
        trained_all = format_count(parameter_count(workload.shape), "parameter")
        experts = workload.shape.experts
        if experts is not None:
            active = format_count(active_parameter_count(workload.shape), "parameter")
            trained_all += (
                f" ({active} active per token: {experts.per_token} of {experts.routed}"
                f" routed experts"
                + (f" and {experts.shared} shared" if experts.shared else "")
                + f" in {format_count(workload.shape.moe_layers, 'MoE layer')})"
            )
        return f"Work: {trained_all} trained on {tokens}."
    trained = trainable_parameters(workload.shape, resolved.parameters, tuning)
    base = "a 4-bit NormalFloat base" if tuning.method == "qlora" else "a frozen base"
    return (
        f"Work: {tuning.describe()}: {format_count(trained, 'adapter parameter')} on"
        f" {base} of {format_count(parameter_count(workload.shape), 'parameter')},"
        f" trained on {tokens}; frozen weights keep no gradients or optimizer state and"
        " their backward computes input gradients only."
    )


def explain(
    *,
    choice: Evaluation,
    resolved: ResolvedSpec,
    alternatives: Sequence[tuple[Evaluation, str]],
    goal: str,
    evaluated_count: int,
    spec: TrainingPlanSpec,
) -> list[str]:
    """Why `choice` was planned, one sentence per line."""
    workload = resolved.workload
    layout = choice.layout
    step = choice.step
    reliability = choice.reliability
    assert step is not None and reliability is not None
    memory = choice.memory
    steps = resolved.run.total_steps
    lines = [
        f"Goal: {goal}; {format_count(evaluated_count, 'layout')} priced.",
        _work(workload, resolved, steps),
        f"Chosen: {layout.describe()}: {describe_layout(layout, workload)}.",
        (
            f"Global batch {layout.global_batch_size:,} = micro-batch"
            f" {layout.micro_batch_size:,} x {format_count(layout.data, 'data-parallel rank')}"
            f" x {format_count(layout.accumulation_steps, 'accumulation step')}"
            f" ({workload.tokens_per_step:,} tokens per step)."
        ),
        (
            f"Memory per GPU: {gib(memory.total_bytes)} of {gib(memory.capacity_bytes)}"
            f" ({_share(memory.total_bytes, memory.capacity_bytes)}): weights, gradients and"
            f" optimizer {gib(memory.model_state_bytes)}, activations"
            f" {gib(memory.activations_bytes)}{_dropout_note(workload)}, logits"
            f" {gib(memory.logits_bytes)}, overhead {gib(memory.overhead_bytes)}."
        ),
    ]
    total = step.step_seconds
    pieces = [
        ("compute", step.compute_seconds),
        ("exposed tensor-parallel communication", step.tensor_comm_seconds),
        ("exposed context-parallel ring exchange", step.context_comm_seconds),
        ("exposed expert all-to-all", step.expert_comm_seconds),
        ("pipeline bubble", step.pipeline_bubble_seconds),
        ("exposed pipeline transfers", step.pipeline_comm_seconds),
        ("exposed data-parallel communication", step.data_comm_seconds),
        ("optimizer", step.optimizer_seconds),
    ]
    spent = ", ".join(f"{name} {_share(value, total)}" for name, value in pieces if value > 0)
    lines.append(
        f"Step {format_duration(total)}: {spent}; {choice.mfu:.1%} MFU"
        f" ({workload.tokens_per_step / total / layout.gpus:,.0f} tokens/s per GPU)."
    )
    compute = total * resolved.run.total_steps
    lines.append(
        f"{format_count(steps, 'step')} x {format_duration(total)} ="
        f" {format_duration(compute)} of training; whole-run overheads (evaluation,"
        " warm-up, stalls), checkpoints and"
        f" {reliability.expected_interruptions:.1f} expected interruptions add"
        f" {format_duration(max(0.0, reliability.duration_seconds - compute))}:"
        f" {format_duration(reliability.duration_seconds)} and {choice.gpu_hours:,.0f} GPU-hours."
    )
    if spec.hardware.network_gbps_per_node is not None:
        per_gpu = workload.gpu.network_bandwidth_bytes_per_second
        lines.append(
            f"Network: {spec.hardware.network_gbps_per_node:,g} Gb/s per node"
            f" (hardware.networkGbpsPerNode), {per_gpu / 1e9:,.2f} GB/s per GPU for"
            " collectives and transfers between nodes."
        )
    if spec.reliability.checkpoint_interval_steps is not None:
        lines.append(
            f"Checkpoint every {format_count(reliability.checkpoint_interval_steps, 'step')}"
            " (pinned by"
            " reliability.checkpointIntervalSteps)."
        )
    elif math.isfinite(reliability.mean_seconds_between_interruptions):
        lines.append(
            f"Checkpoint every {format_count(reliability.checkpoint_interval_steps, 'step')}"
            f" ({format_duration(reliability.checkpoint_interval_steps * total)} of work): the"
            f" Young/Daly optimum sqrt(2 x {format_duration(reliability.checkpoint_seconds)}"
            " checkpoint x "
            f"{format_duration(reliability.mean_seconds_between_interruptions)} between"
            f" interruptions on {format_count(layout.gpus, 'GPU')})."
        )
    for other, note in alternatives:
        lines.append(f"Runner-up {other.layout.describe()}: {note}.")
    return lines


def infeasibility_reasons(
    spec: TrainingPlanSpec,
    resolved: ResolvedSpec,
    evaluated: Sequence[Evaluation],
    counts: Sequence[int],
    calibration: Calibration,
) -> list[str]:
    """Why no plan exists, as specific as the evaluated layouts allow."""
    workload = resolved.workload
    gpu = workload.gpu
    batch = workload.global_batch_size
    if not evaluated:
        where = (
            f"{spec.objective.gpus} GPUs"
            if spec.objective.gpus is not None
            else f"any GPU count up to {counts[-1] if counts else spec.objective.max_gpus}"
        )
        return [
            f"No layout fits {where}: tensor x pipeline x data must equal the GPU count, "
            f"data must divide globalBatchSize ({batch}), tensor must divide the heads "
            f"({workload.shape.attention_heads}), pipeline the layers "
            f"({workload.shape.layers}), {_expert_rule(workload)}and every pin in"
            " spec.parallelism and spec.batch must hold; whole nodes of "
            f"{workload.gpus_per_node} GPUs beyond one node."
        ]
    fitting = [e for e in evaluated if e.memory.fits]
    if not fitting:
        smallest = min(evaluated, key=lambda e: e.memory.total_bytes)
        memory = smallest.memory
        reasons = []
        states = memory.model_state_bytes
        most_gpus = max(e.layout.gpus for e in evaluated)
        if states > memory.capacity_bytes:
            reasons.append(
                f"Weights, gradients and optimizer states alone need {gib(states)} per GPU"
                f" even in the most sharded layout ({smallest.layout.describe()}, up to"
                f" {format_count(most_gpus, 'GPU')}); {gpu.name} has {gib(memory.capacity_bytes)}."
            )
        reasons.append(
            f"The smallest footprint among {format_count(len(evaluated), 'layout')} is"
            f" {gib(memory.total_bytes)} per GPU ({smallest.layout.describe()}): weights,"
            f" gradients and optimizer {gib(states)}, activations"
            f" {gib(memory.activations_bytes)}, logits {gib(memory.logits_bytes)}, overhead"
            f" {gib(memory.overhead_bytes)}; {gpu.name} has {gib(memory.capacity_bytes)},"
            f" {gib(memory.total_bytes - memory.capacity_bytes)} short."
        )
        reasons.append(
            "Allow more GPUs, free a pinned degree, use a smaller micro-batch or a"
            " GPU with more memory."
        )
        return reasons
    feasible = [e for e in fitting if e.feasible]
    if not feasible:
        worst = min(fitting, key=lambda e: e.layout.gpus)
        rel = worst.reliability
        assert rel is not None
        return [
            f"At {worst.layout.gpus} GPUs an interruption is expected every"
            f" {format_duration(rel.mean_seconds_between_interruptions)}, and each costs"
            f" {format_duration(rel.restart_seconds)} to restart plus half a checkpoint"
            " interval of lost work: the run would not make progress. Lower"
            " reliability.restartSeconds or checkpointSeconds, or use fewer GPUs."
        ]
    fastest = min(feasible, key=lambda e: e.duration_seconds)
    deadline = spec.objective.deadline_seconds
    if deadline is not None and fastest.step_seconds >= deadline:
        return [
            f"One optimizer step of the global batch ({batch:,} sequences,"
            f" {workload.tokens_per_step:,} tokens) takes"
            f" {format_duration(fastest.step_seconds)} even in the fastest plan"
            f" ({fastest.layout.gpus} GPUs, {fastest.layout.describe()}), longer than the"
            f" whole deadline of {format_duration(deadline)}. Lower batch.globalBatchSize"
            " or allow a later deadline."
        ]
    if deadline is not None:
        ceiling = spec.objective.max_gpus
        within = f"within {ceiling:,} GPUs (objective.maxGPUs)" if ceiling else "found"
        return [
            f"The fastest plan {within} uses {fastest.layout.gpus} GPUs"
            f" ({fastest.layout.describe()}) and takes"
            f" {format_duration(fastest.duration_seconds)}; the deadline is"
            f" {format_duration(deadline)}."
            " Allow more GPUs or a later deadline."
        ]
    return ["No feasible plan was found."]
