"""The planner's step time beside the reference trainer's, measured on one GPU.

`python -m benchmarks.reference_gpu_compare DIR/reference_gpu.json` (or the directory)
reads what `benchmarks.reference_gpu` measured and prices each shape exactly as it ran:
the same model shape, micro-batch, sequence, precision, optimizer and recompute level on
TP1 PP1 DP1, ZeRO 0, no accumulation, one GPU of the catalog type the device name is
(`Catalog.gpu` knows nvidia-smi's names: "NVIDIA H200" is H200-SXM-141GB, "NVIDIA H100
80GB HBM3" H100-SXM5-80GB; `--gpu` names another). The prediction is
`planner.steptime.step_time` for that layout, as `benchmarks.accuracy` prices the vTrain
sweeps' exact layouts, with fused attention (the trainer's
`scaled_dot_product_attention` runs the flash kernel on Hopper in bf16); its 10-90% range
is the plan's `stepSecondsRange` (the step time times the catalog's held-out
`step_seconds_ratio_p10` and `_p90`). The planner's memory estimate is shown beside the
peak NVML saw (which includes the CUDA context and PyTorch's cache).

Prints a table (rich, or `--markdown`): measured median and 10-90% of the steady steps,
planned step and range, the error planned / measured - 1, whether the measurement lies in
the range, model TFLOP/s and MFU against the catalog's dense peak. With `--kinds`, for
a run of `benchmarks.reference_gpu --profile`, it prints instead where each shape's step
went, kind by kind (`KIND_GROUPS`): the profiled kernels' seconds beside the planner's
terms for the same work (`planned_kinds`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, cast

from rich.console import Console, JustifyMethod
from rich.table import Table

from benchmarks.reference_gpu import OUTPUT_NAME, SCHEMA
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, GPUSpec, UnknownGPUError, load_catalog
from trainplan.planner.flops import model_flops_per_token
from trainplan.planner.layout import Checkpointing, Layout, Optimizer, Precision, Workload
from trainplan.planner.memory import estimate_memory
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import (
    layer_pass_seconds,
    logits_pass,
    optimizer_seconds,
    step_time,
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One shape: measured against planned."""

    name: str
    layout: str
    status: str
    measured_seconds: float | None = None
    measured_p10: float | None = None
    measured_p90: float | None = None
    planned_seconds: float | None = None
    planned_p10: float | None = None
    planned_p90: float | None = None
    measured_mfu: float | None = None
    planned_mfu: float | None = None
    measured_tflops: float | None = None
    planned_memory_bytes: int | None = None
    planned_fits: bool | None = None
    measured_memory_bytes: int | None = None

    @property
    def error(self) -> float | None:
        """planned / measured - 1 (negative: the planner is optimistic)."""
        if self.measured_seconds is None or self.planned_seconds is None:
            return None
        return self.planned_seconds / self.measured_seconds - 1.0

    @property
    def inside_range(self) -> bool | None:
        """Whether the measured median lies in the planned 10-90% range."""
        if self.measured_seconds is None or self.planned_p10 is None or self.planned_p90 is None:
            return None
        return self.planned_p10 <= self.measured_seconds <= self.planned_p90


def load(path: Path) -> dict[str, Any]:
    """The measurement document at `path` (or `path/reference_gpu.json`)."""
    file = path / OUTPUT_NAME if path.is_dir() else path
    document = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ValueError(f"{file} is not a {SCHEMA} document")
    return cast(dict[str, Any], document)


def catalog_gpu(catalog: Catalog, document: Mapping[str, Any], name: str | None) -> GPUSpec:
    """The catalog entry of `name`, else of the measured device's name."""
    wanted = name if name is not None else str(document.get("device", {}).get("name", ""))
    return catalog.gpu(wanted)


def workload_and_layout(record: Mapping[str, Any], gpu: GPUSpec) -> tuple[Workload, Layout]:
    """The planner's inputs for one measured shape, exactly as it ran."""
    model = record["model"]
    shape = ModelShape(
        layers=int(model["layers"]),
        hidden_size=int(model["hidden_size"]),
        attention_heads=int(model["attention_heads"]),
        kv_heads=int(model["kv_heads"]),
        ffn_hidden_size=int(model["ffn_hidden_size"]),
        gated_mlp=bool(model["gated_mlp"]),
        vocab_size=int(model["vocab_size"]),
        sequence_length=int(model["sequence_length"]),
        tied_embeddings=bool(model["tied_embeddings"]),
    )
    split = record["layout"]
    layout = Layout(
        tensor=int(split["tensor_parallel"]),
        pipeline=int(split["pipeline_parallel"]),
        data=int(split["data_parallel"]),
        micro_batch_size=int(split["micro_batch_size"]),
        accumulation_steps=int(split["gradient_accumulation_steps"]),
        zero_stage=int(split["zero_stage"]),
        checkpointing=cast(Checkpointing, record["activation_checkpointing"]),
        sequence_parallel=False,
        virtual_stages=1,
    )
    workload = Workload(
        shape=shape,
        gpu=gpu,
        gpus_per_node=max(layout.gpus, 1),
        global_batch_size=layout.global_batch_size,
        precision=cast(Precision, record["precision"]),
        optimizer=cast(Optimizer, record["optimizer"]),
        attention="flash",
    )
    return workload, layout


def compare_record(record: Mapping[str, Any], gpu: GPUSpec, calibration: Calibration) -> Comparison:
    """Measured against planned for one shape (planned even where nothing was measured)."""
    workload, layout = workload_and_layout(record, gpu)
    step = step_time(workload, layout, calibration).step_seconds
    memory = estimate_memory(workload, layout, calibration)
    peak = workload.gpu.peak_flops_for(workload.precision) * layout.gpus
    flops_per_step = model_flops_per_token(workload.shape) * workload.tokens_per_step
    common: dict[str, Any] = {
        "name": str(record["name"]),
        "layout": layout.describe(),
        "status": str(record.get("status", "missing")),
        "planned_seconds": step,
        "planned_p10": step * calibration.step_seconds_ratio_p10,
        "planned_p90": step * calibration.step_seconds_ratio_p90,
        "planned_mfu": flops_per_step / step / peak,
        "planned_memory_bytes": memory.total_bytes,
        "planned_fits": memory.fits,
        "measured_memory_bytes": record.get("nvml_peak_memory_used_bytes"),
    }
    seconds = record.get("step_seconds")
    if record.get("status") != "ok" or not isinstance(seconds, Mapping):
        return Comparison(**common)
    measured = float(seconds["median"])
    return Comparison(
        **common,
        measured_seconds=measured,
        measured_p10=float(seconds["p10"]),
        measured_p90=float(seconds["p90"]),
        measured_mfu=flops_per_step / measured / peak,
        measured_tflops=flops_per_step / measured / 1e12,
    )


KIND_GROUPS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        # The planner's terms, each with the profiled kinds (`benchmarks.trainer_profile`)
        # that do that work: a layer's memory-bound kernels are one term of the planner
        # (`elementwise_bytes_per_hidden` and the MLP activation's bytes).
        "matrix multiplies": ("matrix multiplies",),
        "attention core": ("attention",),
        "softmax and cross-entropy": ("softmax and cross-entropy",),
        "norms, casts and other elementwise": (
            "layer norms",
            "embedding",
            "copies and casts",
            "other elementwise",
        ),
        "optimizer": ("optimizer (multi-tensor)",),
        "collectives": ("collectives",),
    }
)


def planned_kinds(workload: Workload, layout: Layout, calibration: Calibration) -> dict[str, float]:
    """The planner's step on one GPU (TP1 PP1 DP1, no accumulation) by `KIND_GROUPS`:
    every layer's forward, backward (twice the forward's matrix and elementwise work) and,
    with full recompute, one more forward (selective: the attention core and the modules
    it rebuilds); the output layer and loss; the optimizer."""
    if layout.gpus != 1 or layout.accumulation_steps != 1:
        raise ValueError("kinds are planned for one GPU without accumulation")
    layer = layer_pass_seconds(workload, layout, calibration)
    forwards = 4.0 if layout.checkpointing == "full" else 3.0  # forward, 2x backward, redo
    attention = layer.attention_forward_seconds + layer.attention_backward_seconds
    redone = 0.0  # what selective recomputation redoes beyond the attention core
    if layout.checkpointing in ("full", "selective"):
        attention += layer.attention_forward_seconds
    if layout.checkpointing == "selective":
        redone = layer.module_recompute_seconds
    logits = logits_pass(workload, layout, calibration)
    layers = workload.shape.layers
    return {
        "matrix multiplies": layers * forwards * layer.matrix_forward_seconds
        + logits.matrix_seconds,
        "attention core": layers * attention,
        "softmax and cross-entropy": logits.loss_seconds,
        "norms, casts and other elementwise": layers
        * (forwards * layer.elementwise_forward_seconds + redone),
        "optimizer": optimizer_seconds(workload, layout, calibration),
        "collectives": 0.0,
    }


def measured_kinds(profile: Mapping[str, Any]) -> dict[str, float]:
    """A profile's kernel seconds per step by `KIND_GROUPS`."""
    kinds = profile.get("kinds", {})
    return {
        group: sum(float(kinds.get(kind, {}).get("seconds_per_step", 0.0)) for kind in members)
        for group, members in KIND_GROUPS.items()
    }


def kinds_markdown(
    document: Mapping[str, Any], gpu: GPUSpec, calibration: Calibration
) -> list[str]:
    """Two Markdown tables, one row per profiled shape and one column per planner term
    (`KIND_GROUPS`) that any shape's kernels or plan has: planned / measured seconds with
    the kind's share of the measured kernels' time in brackets, then the measured
    seconds per step themselves (to set two devices' profiles side by side)."""
    profiled = []
    for record in document.get("shapes", []):
        profile = record.get("kernel_profile")
        if not isinstance(profile, Mapping) or not profile.get("complete"):
            continue
        workload, layout = workload_and_layout(record, gpu)
        label = f"{record['name']}, mb{layout.micro_batch_size}"
        planned = planned_kinds(workload, layout, calibration)
        profiled.append((label, planned, measured_kinds(profile)))
    groups = [
        group
        for group in KIND_GROUPS
        if any(planned[group] > 0.0 or measured[group] > 0.0 for _, planned, measured in profiled)
    ]
    header = ["| shape | " + " | ".join(groups) + " |", "|---|" + "---:|" * len(groups)]
    ratios, seconds = list(header), list(header)
    for label, planned, measured in profiled:
        total = sum(measured.values())
        cells = []
        for group in groups:
            share = f"({measured[group] / total:.0%})" if total > 0.0 else ""
            ratio = f"{planned[group] / measured[group]:.2f}" if measured[group] > 0.0 else "-"
            cells.append(f"{ratio} {share}")
        ratios.append(f"| {label} | " + " | ".join(cells) + " |")
        seconds.append(
            f"| {label} | " + " | ".join(_seconds(measured[group]) for group in groups) + " |"
        )
    return [
        "Planned / measured seconds by kind (share of the measured kernels' time):",
        "",
        *ratios,
        "",
        "Measured kernel seconds per step by kind:",
        "",
        *seconds,
    ]


def compare(
    document: Mapping[str, Any], gpu: GPUSpec, calibration: Calibration
) -> list[Comparison]:
    """Every shape of the document that has a model (skipped shapes have none)."""
    return [
        compare_record(record, gpu, calibration)
        for record in document.get("shapes", [])
        if "model" in record
    ]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f}"


def rows(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """The table's cells, one list per shape."""
    table = []
    for c in comparisons:
        spread = f"{_seconds(c.measured_p10)}-{_seconds(c.measured_p90)}"
        measured = (
            f"{_seconds(c.measured_seconds)} ({spread})"
            if c.measured_seconds is not None
            else c.status
        )
        inside = c.inside_range
        table.append(
            [
                c.name,
                c.layout,
                measured,
                _seconds(c.planned_seconds),
                f"{_seconds(c.planned_p10)}-{_seconds(c.planned_p90)}",
                _percent(c.error),
                "-" if inside is None else ("yes" if inside else "no"),
                "-" if c.measured_tflops is None else f"{c.measured_tflops:.1f}",
                "-" if c.measured_mfu is None else f"{c.measured_mfu:.1%}",
                "-" if c.planned_mfu is None else f"{c.planned_mfu:.1%}",
                _gib(c.measured_memory_bytes),
                f"{_gib(c.planned_memory_bytes)}{'' if c.planned_fits else ' (no fit)'}",
            ]
        )
    return table


TABLE_WIDTH = 220
"""Columns the rich table gets at least, so that it wraps no cell on a narrow terminal."""

HEADERS = (
    "shape",
    "layout",
    "measured s (p10-p90)",
    "planned s",
    "planned 10-90%",
    "error",
    "in range",
    "TFLOP/s",
    "MFU",
    "planned MFU",
    "NVML peak GiB",
    "planned GiB",
)


def summary(comparisons: Sequence[Comparison]) -> str:
    """Mean absolute error, the worst row and how many fell inside their range."""
    measured = [c for c in comparisons if c.error is not None]
    if not measured:
        return "no shape was measured"
    errors = [abs(c.error) for c in measured if c.error is not None]
    worst = max(measured, key=lambda c: abs(c.error or 0.0))
    inside = sum(1 for c in measured if c.inside_range)
    return (
        f"{len(measured)} shapes: mean absolute error {sum(errors) / len(errors):.1%}, "
        f"worst {worst.name} ({_percent(worst.error)}); {inside} of {len(measured)} inside "
        f"the planned 10-90% range"
    )


def markdown(comparisons: Sequence[Comparison]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows(comparisons)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reference_gpu_compare",
        description="Planned against measured step time of benchmarks.reference_gpu.",
    )
    parser.add_argument("path", type=Path, help=f"{OUTPUT_NAME} or its directory")
    parser.add_argument("--gpu", default=None, help="catalog GPU (default: the device name)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    parser.add_argument(
        "--kinds",
        action="store_true",
        help="where each profiled shape's step went, against the planner (Markdown)",
    )
    args = parser.parse_args(argv)
    document = load(args.path)
    catalog = load_catalog()
    try:
        gpu = catalog_gpu(catalog, document, args.gpu)
    except UnknownGPUError as error:
        print(f"{error}; name the catalog GPU with --gpu", file=sys.stderr)
        return 2
    comparisons = compare(document, gpu, catalog.calibration)
    device = document.get("device", {})
    nvml = device.get("nvml", {})
    heading = (
        f"{device.get('name')} (catalog {gpu.name}), driver {nvml.get('driver_version')}, "
        f"torch {device.get('torch_version')}, measured {document.get('created')}"
    )
    if args.kinds:
        print(heading + "\n")
        print("\n".join(kinds_markdown(document, gpu, catalog.calibration)))
        return 0
    if args.markdown:
        print(heading + "\n")
        print(markdown(comparisons))
        print("\n" + summary(comparisons))
        return 0
    table = Table(title=heading)
    for header in HEADERS:
        justify: JustifyMethod = "left" if header in ("shape", "layout") else "right"
        table.add_column(header, justify=justify, no_wrap=True)
    for cells in rows(comparisons):
        table.add_row(*cells)
    console = Console(width=max(Console().width, TABLE_WIDTH))
    console.print(table)
    console.print(summary(comparisons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
