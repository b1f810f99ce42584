"""`python -m benchmarks.finetuning`: the planner against published full, LoRA and QLoRA
fine-tuning runs (tests/data/published_finetuning.csv), never fitted to them.

Only rows the planner can price exactly are compared: a catalog GPU, a model whose shape
is known (a catalog preset, or Qwen-1.8B and Qwen-7B from their config.json, `SHAPES`),
a fixed sequence length for step time, and the adapters' rank and targets. Each is priced
on its own layout (one GPU, ZeRO-0, its micro-batch and recompute level): its peak memory
against `planner.memory.estimate_memory`, its step time against `planner.steptime`.
Rows left out say why. Prints a markdown table; exits 0 (no goal: the tolerances are in
tests/reference/test_finetuning.py).
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, cast

from benchmarks.arguments import benchmark_parser
from trainplan.planner import Catalog, load_catalog
from trainplan.planner.finetune import FineTuning, LoraTargets, Method
from trainplan.planner.layout import Checkpointing, Layout, Workload
from trainplan.planner.memory import estimate_memory
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import step_time

DATA: Final = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_finetuning.csv"

SHAPES: Final = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b",
    "meta-llama/Llama-2-13b-hf": "llama2-13b",
}
"""Published base models that are catalog presets (the row's base_model, first word)."""

QWEN_SHAPES: Final = {
    # Qwen/Qwen-1_8B and Qwen/Qwen-7B config.json on Hugging Face: QWen's intermediate_size
    # (11008, 22016) counts both halves of its SwiGLU, so the FFN width is half of it; its
    # attn_dropout_prob and emb_dropout_prob are 0.0 (also configuration_qwen.py's
    # defaults), and the model has no other dropout: no masks.
    "Qwen/Qwen-1_8B": ModelShape(24, 2048, 16, 16, 5504, True, 151936, 2048, False, dropout=False),
    "Qwen/Qwen-7B": ModelShape(32, 4096, 32, 32, 11008, True, 151936, 2048, False, dropout=False),
}
"""Bases outside the catalog, with their published shapes (sequence set per row)."""

GPUS: Final = {"A100-SXM4-40GB": "A100-SXM4-40GB", "A100-SXM4-80GB": "A100-SXM4-80GB"}

TARGETS: Final[dict[str, LoraTargets]] = {
    "q,v": "query-value",
    "all-linear": "all-linear",
}

QWEN_ACCUMULATION: Final = 8
"""Qwen's profiling reports seconds per optimizer step of 8 micro-batches (its tokens per
second are length x 8 / seconds per step)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One published run and the planner's figures for it."""

    id: str
    method: str
    measured_gib: float | None
    planned_gib: float
    measured_step_seconds: float | None
    planned_step_seconds: float

    @property
    def memory_error(self) -> float | None:
        if self.measured_gib is None:
            return None
        return self.planned_gib / self.measured_gib - 1.0

    @property
    def step_error(self) -> float | None:
        if self.measured_step_seconds is None:
            return None
        return self.planned_step_seconds / self.measured_step_seconds - 1.0


def _float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _shape(catalog: Catalog, base: str, sequence_length: int) -> ModelShape | None:
    name = base.split(maxsplit=1)[0]
    if name in SHAPES:
        shape = catalog.model(SHAPES[name]).shape
    elif name in QWEN_SHAPES:
        shape = QWEN_SHAPES[name]
    else:
        return None
    return replace(shape, sequence_length=sequence_length)


def _why_not(record: dict[str, str]) -> str | None:
    """Why a row cannot be priced exactly, or None."""
    if record["base_model"].split()[0] not in {**SHAPES, **QWEN_SHAPES}:
        return "base model's shape not known here"
    if record["gpu_type"] not in GPUS:
        return f"GPU {record['gpu_type']!r} not in the catalog"
    if record["gpus"] != "1":
        return "more than one GPU (sharding not published)"
    if record["method"] == "qlora" and not record["precision"].startswith("nf4"):
        return "4-bit GPTQ base, not NF4"
    if record["method"] in ("lora", "qlora") and record["lora_targets"] not in TARGETS:
        return f"adapter targets {record['lora_targets']!r} not expressible"
    if record["activation_checkpointing"] not in ("none", "full"):
        return "recompute level not published"
    return None


def price(catalog: Catalog, record: dict[str, str]) -> Row:
    """The planner's memory and step time for a row `_why_not` accepts."""
    shape = _shape(catalog, record["base_model"], int(record["sequence_length"]))
    assert shape is not None
    method = cast(Method, record["method"])
    tuning = FineTuning(
        method=method,
        lora_rank=int(record["lora_rank"] or 16),
        lora_targets=TARGETS.get(record["lora_targets"], "all-linear"),
    )
    qwen = record["base_model"].startswith("Qwen/")
    accumulation = QWEN_ACCUMULATION if qwen else 1
    micro = int(record["micro_batch_size"])
    layout = Layout(
        tensor=1,
        pipeline=1,
        data=1,
        micro_batch_size=micro,
        accumulation_steps=accumulation,
        zero_stage=0,
        checkpointing=cast(Checkpointing, record["activation_checkpointing"]),
    )
    workload = Workload(
        shape=shape,
        gpu=catalog.gpu(GPUS[record["gpu_type"]]),
        gpus_per_node=1,
        global_batch_size=micro * accumulation,
        precision="bf16",
        optimizer="adamw",
        attention="flash",
        tuning=tuning,
    )
    memory = estimate_memory(workload, layout, catalog.calibration)
    step = step_time(workload, layout, catalog.calibration)
    # Step time only where every sequence has the stated length (Qwen's profiling);
    # litgpt's tables train on Alpaca's variable lengths, so only their peak (the longest
    # sample) is comparable.
    measured_step = _float(record["step_seconds"]) if qwen else None
    return Row(
        id=record["id"],
        method=record["method"],
        measured_gib=_float(record["peak_memory_gib_per_gpu"]),
        planned_gib=memory.total_bytes / 2**30,
        measured_step_seconds=measured_step,
        planned_step_seconds=step.step_seconds,
    )


def compare(catalog: Catalog, path: Path = DATA) -> tuple[list[Row], list[tuple[str, str]]]:
    """The rows priced, and (id, reason) of those left out."""
    priced, left_out = [], []
    with path.open(newline="") as handle:
        for record in csv.DictReader(handle):
            reason = _why_not(record)
            if reason is None:
                priced.append(price(catalog, record))
            else:
                left_out.append((record["id"], reason))
    return priced, left_out


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:+.1%}"


def report(rows: Sequence[Row], left_out: Sequence[tuple[str, str]]) -> str:
    lines = [
        "| row | method | peak GiB measured / planned | error | step s measured / planned"
        " | error |",
        "|---|---|---|---:|---|---:|",
    ]
    for row in rows:
        memory = f"{row.measured_gib:.1f} / {row.planned_gib:.1f}" if row.measured_gib else ""
        step = (
            f"{row.measured_step_seconds:.2f} / {row.planned_step_seconds:.2f}"
            if row.measured_step_seconds
            else ""
        )
        lines.append(
            f"| {row.id} | {row.method} | {memory} | {_percent(row.memory_error)} | {step}"
            f" | {_percent(row.step_error)} |"
        )
    memory_errors = [abs(e) for r in rows if (e := r.memory_error) is not None]
    step_errors = [abs(e) for r in rows if (e := r.step_error) is not None]
    lines.append("")
    if memory_errors:
        lines.append(
            f"Peak memory: mean absolute error {statistics.mean(memory_errors):.1%} over"
            f" {len(memory_errors)} rows."
        )
    if step_errors:
        lines.append(
            f"Step time: mean absolute error {statistics.mean(step_errors):.1%} over"
            f" {len(step_errors)} rows."
        )
    lines.append("")
    lines.append("Left out: " + "; ".join(f"{name} ({why})" for name, why in left_out) + ".")
    return "\n".join(lines)


def main() -> int:
    benchmark_parser("benchmarks.finetuning", __doc__).parse_args()
    rows, left_out = compare(load_catalog())
    print(report(rows, left_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
