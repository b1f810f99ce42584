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
the range, model TFLOP/s and MFU against the catalog's dense peak.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rich.console import Console, JustifyMethod
from rich.table import Table

from benchmarks.reference_gpu import OUTPUT_NAME, SCHEMA
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, GPUSpec, UnknownGPUError, load_catalog
from trainplan.planner.flops import model_flops_per_token
from trainplan.planner.layout import Checkpointing, Layout, Optimizer, Precision, Workload
from trainplan.planner.memory import estimate_memory
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import step_time


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
