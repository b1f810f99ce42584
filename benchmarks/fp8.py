"""`python -m benchmarks.fp8`: the planner's fp8 speed-up against published pairs of fp8
and bf16 runs (tests/data/published_fp8.csv), never fitted to them.

Each pair is one model, GPU count and layout (context parallelism included) in both
precisions. A pair is priced when its model is a catalog preset (Llama 3.1 8B/70B/405B,
GPT-3 175B) or a Nemotron-4 shape (`SHAPES`) and its GPU a catalog GPU. Its published
speed-up (bf16 step / fp8 step) is compared with the planner's, and each step time with
the planner's. Prints a markdown table; exits 0 (tolerances: tests/reference/test_fp8.py).

The speed-ups are never fitted. The bf16 step times of NeMo on the catalog's H100
(`fitted_rows`) are: with Megatron-LM's H100 table (`published_benchmarks.csv`) they are
the published measurements of Megatron-Core's kernels on Hopper, and
`benchmarks.fit_calibration` fits Megatron-Core's Hopper efficiencies
(`ArchitectureEfficiency.megatron_gemm_efficiency`, `megatron_flash_attention_efficiency`)
to them.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, cast

from benchmarks.arguments import benchmark_parser
from trainplan.planner import Catalog, load_catalog
from trainplan.planner.calibration import Calibration
from trainplan.planner.frameworks import ANY_FRAMEWORK, FRAMEWORK_LIMITS, with_framework
from trainplan.planner.layout import Checkpointing, Layout, Precision, Workload
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import step_time

DATA: Final = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_fp8.csv"

PRESETS: Final = {
    "Llama 3.1 8B": "llama3-8b",
    "Llama 3.1 70B": "llama3-70b",
    "Llama 3.1 405B": "llama3.1-405b",
    "GPT-3 175B": "gpt3-175b",
    "Llama3-8b": "llama3-8b",
}
"""Published model names that are catalog presets."""


def _nemotron(layers: int, hidden: int, heads: int) -> ModelShape:
    """A Nemotron-4 shape: 8 key/value heads, a squared-ReLU MLP 4x the hidden size,
    untied embeddings, no dropout (NVIDIA/NeMo nemo/collections/llm/gpt/model/nemotron.py
    at 0037ec8c: NemotronConfig, Nemotron4Config15B and Nemotron4Config340B), a vocabulary
    of 256,000 (Parmar et al. 2024, arXiv 2402.16819, section 2)."""
    return ModelShape(
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=8,
        ffn_hidden_size=4 * hidden,
        gated_mlp=False,
        vocab_size=256000,
        sequence_length=4096,
        tied_embeddings=False,
        dropout=False,
    )


SHAPES: Final = {
    "Nemotron-4 15B": _nemotron(32, 6144, 48),
    "Nemotron-4 340B": _nemotron(96, 18432, 96),
}
"""Published models that are no catalog preset."""

FRAMEWORKS: Final = {"nemo": "megatron", "torchtitan": "torchtitan", "torchao": "torchtitan"}
"""The trainplan framework each published framework prices as: NeMo trains with
Megatron-Core (its kernels, distributed optimizer and pipeline schedules); torchao's
float8 benchmarks ran torchtitan."""

TENSOR_COMM_OVERLAP: Final = ("nemo",)
"""Frameworks whose published runs overlap the sequence-parallel collectives with the
matrix multiplies (`Workload.tensor_comm_overlap`): NeMo's H100 configurations turn it on
(the rows' notes: 'TP comm overlap on' in the NeMo 1.0 launcher configs; NeMo 2.0's
performance scripts set `MegatronCommOverlapCallback`'s userbuffer configuration, e.g.
NVIDIA/NeMo scripts/performance/llm/pretrain_llama31_405b.py at 04ecf8dd)."""

ZERO_STAGES: Final = {"torchtitan": 3, "torchao": 3}
"""FSDP shards weights, gradients and optimizer state; NeMo's distributed optimizer is
ZeRO-1 (the default for other frameworks)."""

FITTED_GPU: Final = "H100-SXM5-80GB"
"""NeMo's bf16 rows on this part (DGX H100, the catalog's entry) are fitted."""


@dataclass(frozen=True, slots=True)
class Pair:
    """One published pair and the planner's figures."""

    pair: str
    bf16_seconds: float
    fp8_seconds: float
    planned_bf16_seconds: float
    planned_fp8_seconds: float

    @property
    def speedup(self) -> float:
        return self.bf16_seconds / self.fp8_seconds

    @property
    def planned_speedup(self) -> float:
        return self.planned_bf16_seconds / self.planned_fp8_seconds

    @property
    def speedup_error(self) -> float:
        """planned / published speed-up - 1."""
        return self.planned_speedup / self.speedup - 1.0


def _why_not(catalog: Catalog, record: dict[str, str]) -> str | None:
    if record["model"] not in PRESETS and record["model"] not in SHAPES:
        return "model not a catalog preset"
    try:
        catalog.gpu(record["gpu_type"])
    except LookupError:
        return f"GPU {record['gpu_type']!r} not in the catalog"
    if record["activation_checkpointing"] not in ("none", "selective", "full"):
        return "recompute level not published"
    return None


def _shape(catalog: Catalog, record: dict[str, str]) -> ModelShape:
    model = record["model"]
    preset = SHAPES[model] if model in SHAPES else catalog.model(PRESETS[model]).shape
    return replace(preset, sequence_length=int(record["sequence_length"]))


def priced_layout(catalog: Catalog, record: dict[str, str]) -> tuple[Workload, Layout]:
    """The row's workload, under its framework's kernels and schedules (`FRAMEWORKS`), and
    its exact layout."""
    tensor, pipeline = int(record["tensor_parallel"]), int(record["pipeline_parallel"])
    data, micro = int(record["data_parallel"]), int(record["micro_batch_size"])
    global_batch = int(record["global_batch_size"])
    framework = record["framework"].split()[0].lower()
    layout = Layout(
        tensor=tensor,
        pipeline=pipeline,
        data=data,
        micro_batch_size=micro,
        accumulation_steps=global_batch // (micro * data),
        zero_stage=ZERO_STAGES.get(framework, 1),
        checkpointing=cast(Checkpointing, record["activation_checkpointing"]),
        sequence_parallel=tensor > 1,
        virtual_stages=int(record["virtual_pipeline"] or 1),
        context=int(record["context_parallel"] or 1),
    )
    workload = Workload(
        shape=_shape(catalog, record),
        gpu=catalog.gpu(record["gpu_type"]),
        gpus_per_node=8,
        global_batch_size=global_batch,
        precision=cast(Precision, record["precision"]),
    )
    limits = FRAMEWORK_LIMITS.get(FRAMEWORKS.get(framework, ""), ANY_FRAMEWORK)
    workload = with_framework(workload, limits)
    overlap = framework in TENSOR_COMM_OVERLAP
    return replace(workload, tensor_comm_overlap=overlap), layout


def planned_seconds(
    catalog: Catalog, record: dict[str, str], calibration: Calibration | None = None
) -> float:
    """The planner's step time for the row's exact layout."""
    workload, layout = priced_layout(catalog, record)
    return step_time(workload, layout, calibration or catalog.calibration).step_seconds


def fitted_rows(catalog: Catalog, path: Path = DATA) -> list[dict[str, str]]:
    """The rows whose step times the calibration is fitted to: NeMo in bf16 on
    `FITTED_GPU`, priceable (`_why_not`)."""
    with path.open(newline="") as handle:
        return [
            record
            for record in csv.DictReader(handle)
            if record["framework"] == "NeMo"
            and record["precision"] == "bf16"
            and record["gpu_type"] == FITTED_GPU
            and _why_not(catalog, record) is None
        ]


def compare(catalog: Catalog, path: Path = DATA) -> tuple[list[Pair], list[tuple[str, str]]]:
    """The pairs priced, and (pair, reason) of those left out."""
    rows: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    with path.open(newline="") as handle:
        for record in csv.DictReader(handle):
            if record["pair"]:
                rows[record["pair"]][record["precision"]] = record
    priced, left_out = [], []
    for name, both in rows.items():
        if set(both) != {"bf16", "fp8"}:
            left_out.append((name, "not a bf16 and fp8 pair"))
            continue
        reason = _why_not(catalog, both["bf16"])
        if reason is not None:
            left_out.append((name, reason))
            continue
        priced.append(
            Pair(
                pair=name,
                bf16_seconds=float(both["bf16"]["step_seconds"]),
                fp8_seconds=float(both["fp8"]["step_seconds"]),
                planned_bf16_seconds=planned_seconds(catalog, both["bf16"]),
                planned_fp8_seconds=planned_seconds(catalog, both["fp8"]),
            )
        )
    return priced, left_out


def report(pairs: Sequence[Pair], left_out: Sequence[tuple[str, str]]) -> str:
    lines = [
        "| pair | bf16 s published / planned | fp8 s published / planned | speed-up published"
        " / planned | error |",
        "|---|---|---|---|---:|",
    ]
    for pair in pairs:
        lines.append(
            f"| {pair.pair} | {pair.bf16_seconds:.2f} / {pair.planned_bf16_seconds:.2f}"
            f" | {pair.fp8_seconds:.2f} / {pair.planned_fp8_seconds:.2f}"
            f" | {pair.speedup:.2f} / {pair.planned_speedup:.2f} | {pair.speedup_error:+.1%} |"
        )
    errors = [abs(p.speedup_error) for p in pairs]
    if errors:
        lines += [
            "",
            f"Speed-up: mean absolute error {statistics.mean(errors):.1%} over {len(errors)}"
            " pairs.",
        ]
    lines += ["", "Left out: " + "; ".join(f"{n} ({why})" for n, why in left_out) + "."]
    return "\n".join(lines)


def main() -> int:
    benchmark_parser("benchmarks.fp8", __doc__).parse_args()
    pairs, left_out = compare(load_catalog())
    print(report(pairs, left_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
