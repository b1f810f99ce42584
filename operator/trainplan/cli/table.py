"""Rich rendering of a plan as tables: layout and batch arithmetic, memory against
capacity, step-time breakdown, duration and cost, the rule-of-thumb cross-check,
alternatives and the explanation."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table

from trainplan.api import PercentileRange, Plan, PlanLayout, format_count, format_duration
from trainplan.planner.layout import RECOMPUTE_WORDS

_GIB = float(1 << 30)


def _gib(value: float) -> str:
    return f"{value / _GIB:,.1f} GiB"


def _percent(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


RECOMPUTATION = {
    "none": "none",
    "selective": "selective (attention)",
    "full": "full (every layer)",
}
"""What `activationCheckpointing` means, in the table's words."""


def _with_range(
    text: str, percentiles: PercentileRange | None, formatted: Callable[[float], str]
) -> str:
    """`text`, then its 10-90% range when the plan has one."""
    if percentiles is None:
        return text
    return f"{text} (10-90%: {formatted(percentiles.p10)} to {formatted(percentiles.p90)})"


def _bar(part: float, whole: float, width: int = 24) -> str:
    filled = 0 if not whole else min(width, round(width * part / whole))
    return "█" * filled + "·" * (width - filled)


def layout_table(plan: Plan) -> Table:
    layout = plan.layout
    table = Table(title="Layout", show_header=False, title_justify="left", expand=False)
    table.add_column(style="bold")
    table.add_column()
    pipeline = str(layout.pipeline)
    if layout.virtual_pipeline_stages > 1:
        pipeline += f" ({layout.virtual_pipeline_stages} interleaved chunks)"
    table.add_row(
        "GPUs",
        f"{plan.gpus:,} = {format_count(plan.nodes, 'node')} x {plan.gpus_per_node:,}",
    )
    table.add_row(
        "Tensor",
        f"{layout.tensor:,}" + (" + sequence parallel" if layout.sequence_parallel else ""),
    )
    table.add_row("Pipeline", pipeline)
    table.add_row("Data", f"{layout.data:,}")
    table.add_row("ZeRO stage", str(layout.zero_stage))
    table.add_row("Activation recomputation", RECOMPUTATION[layout.activation_checkpointing])
    table.add_row(
        "Global batch",
        f"{layout.global_batch_size:,} = micro {layout.micro_batch_size:,} x data"
        f" {layout.data:,} x accumulation {layout.gradient_accumulation_steps:,}",
    )
    table.add_row("Tokens per step", f"{plan.tokens_per_step:,}")
    return table


def memory_table(plan: Plan) -> Table:
    memory = plan.memory
    table = Table(title="Memory per GPU", title_justify="left")
    table.add_column("part")
    table.add_column("size", justify="right")
    table.add_column("of capacity", justify="right")
    table.add_column("fill")
    rows = [
        ("weights", memory.weights_bytes),
        ("gradients", memory.gradients_bytes),
        ("optimizer", memory.optimizer_bytes),
        ("activations", memory.activations_bytes),
        ("logits", memory.logits_bytes),
        ("overhead", memory.overhead_bytes),
    ]
    for name, value in rows:
        table.add_row(name, _gib(value), _percent(value, memory.capacity_bytes), "")
    table.add_row(
        "total",
        _gib(memory.total_bytes),
        _percent(memory.total_bytes, memory.capacity_bytes),
        _bar(memory.total_bytes, memory.capacity_bytes),
        style="bold",
    )
    table.add_row("capacity", _gib(memory.capacity_bytes), "100%", "")
    return table


def step_table(plan: Plan) -> Table:
    step = plan.step_breakdown
    table = Table(
        title="Step time",
        title_justify="left",
        caption="exposed: communication that compute does not hide",
        caption_justify="left",
    )
    table.add_column("part")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    rows = [
        ("compute", step.compute_seconds),
        ("exposed tensor-parallel communication", step.tensor_comm_seconds),
        ("pipeline bubble", step.pipeline_bubble_seconds),
        ("exposed pipeline transfers", step.pipeline_comm_seconds),
        ("exposed data-parallel communication", step.data_comm_seconds),
        ("optimizer", step.optimizer_seconds),
    ]
    for name, value in rows:
        table.add_row(name, f"{value:.3f}", _percent(value, plan.step_seconds))
    table.add_row("step", f"{plan.step_seconds:.3f}", "100%", style="bold")
    if plan.step_seconds_range is not None:
        span = plan.step_seconds_range
        table.add_row("step, 10-90%", f"{span.p10:.3f}-{span.p90:.3f}", "")
    return table


def run_table(plan: Plan) -> Table:
    reliability = plan.reliability
    table = Table(title="Run", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if plan.parameters is not None:
        table.add_row(
            "Parameters", f"{plan.parameters:,} ({format_count(plan.parameters, 'parameter')})"
        )
    tokens = plan.total_steps * plan.tokens_per_step
    table.add_row("Tokens", f"{tokens:,} ({format_count(tokens, 'token')})")
    table.add_row("Steps", f"{plan.total_steps:,}")
    table.add_row("Training time", format_duration(plan.compute_seconds))
    table.add_row(
        "Overhead",
        f"{format_duration(plan.overhead_seconds)} (whole-run overheads, checkpoints,"
        f" {reliability.expected_interruptions:,.1f} expected interruptions)",
    )
    table.add_row(
        "Duration",
        _with_range(
            format_duration(plan.duration_seconds), plan.duration_seconds_range, format_duration
        ),
    )
    table.add_row(
        "GPU-hours",
        _with_range(f"{plan.gpu_hours:,.0f}", plan.gpu_hours_range, lambda v: f"{v:,.0f}"),
    )
    table.add_row("MFU", f"{plan.mfu:.1%}")
    table.add_row("Tokens per second per GPU", f"{plan.tokens_per_second_per_gpu:,.0f}")
    table.add_row("Checkpoint every", format_count(reliability.checkpoint_interval_steps, "step"))
    table.add_row(
        "Rule of thumb",
        f"{plan.rule_of_thumb_gpus:,} GPUs for the same duration (6ND at ~40% MFU);"
        f" this plan: {plan.gpus:,}",
    )
    return table


def _layout_words(plan_layout: PlanLayout) -> str:
    words = [
        plan_layout.summary,
        f"mb{plan_layout.micro_batch_size}",
        f"ZeRO-{plan_layout.zero_stage}",
        RECOMPUTE_WORDS[plan_layout.activation_checkpointing],
    ]
    return " ".join(words)


def alternatives_table(plan: Plan) -> Table:
    table = Table(title="Alternatives", title_justify="left")
    table.add_column("GPUs", justify="right")
    table.add_column("layout")
    table.add_column("step", justify="right")
    table.add_column("duration", justify="right")
    table.add_column("vs chosen")
    for other in plan.alternatives:
        table.add_row(
            f"{other.gpus:,}",
            _layout_words(other.layout),
            format_duration(other.step_seconds),
            format_duration(other.duration_seconds),
            other.note,
        )
    return table


def print_plan_table(console: Console, name: str, plan: Plan) -> None:
    """Print one plan with every table and the explanation."""
    title = (
        f"{name}: {plan.gpus:,} x {plan.gpu_type}, {format_duration(plan.duration_seconds)},"
        f" {plan.gpu_hours:,.0f} GPU-hours"
    )
    tables: list[Table] = [
        layout_table(plan),
        memory_table(plan),
        step_table(plan),
        run_table(plan),
    ]
    if plan.alternatives:
        tables.append(alternatives_table(plan))
    console.print(Panel(Group(*tables), title=title, title_align="left"))
    for line in plan.explanation:
        console.print(f"  • {line}", highlight=False)
    console.print()
