"""Published measurements as planner inputs: one loader for the fit, tests and reports.

Reads `tests/data/*.csv` (sources in each row) and turns every row into a `Workload`
and the `LayoutPins` the row fixes (`_pins`, one reader for the step-time benchmarks and
the whole runs; a whole run pins only what its source published and leaves the rest to
the search). What a row does not state is derived from its source, and said here:

- attention kernel: runs published before FlashAttention (Dao et al., May 2022) used
  the materialised-score kernel: Narayanan et al. 2021, Korthikanti et al. 2022, and
  the vTrain sweeps, which replay those Megatron-LM configurations. MosaicML's
  llm-foundry tables and the LLaMA runs used fused attention, and so do torchtitan's
  published runs (`source` starting "pytorch/torchtitan": PyTorch SDPA, flash backend).
- sequence parallelism: on where the row's notes say so, else off.
- interleaved pipeline: the chunk count where the notes give one; searched where they
  say "interleaved" without a count; otherwise one chunk.
- the vTrain sweeps give no vocabulary; Megatron-LM's GPT default of 51,200 is used.
- tied embeddings: Megatron-LM's GPT and MosaicML's MPT share the input and output
  embedding matrices; LLaMA (and the Llama 3.1 models of torchtitan's runs) does not.
  `published_runs.csv` states both the attention kernel and tied embeddings per row
  (`attention`, `tied_embeddings` columns).
- dropout: Megatron-LM's GPT runs (Narayanan et al. 2021, Korthikanti et al. 2022, the
  vTrain sweeps) kept its default hidden and attention dropout of 0.1
  (`megatron/core/transformer/transformer_config.py`); MosaicML's MPT, LLaMA and
  torchtitan's Llama train without. `published_runs.csv` states it per row (`dropout`,
  with the source in the row's notes where it is set).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from trainplan.planner.catalog import Catalog
from trainplan.planner.frameworks import FRAMEWORK_LIMITS, FrameworkLimits, with_framework
from trainplan.planner.layout import AttentionKernel, Checkpointing, SelectiveRecompute, Workload
from trainplan.planner.search import LayoutPins
from trainplan.planner.shapes import ModelShape

DATA_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"
_MEGATRON_GPT_SOURCES = ("Narayanan", "Korthikanti", "vTrain")
"""Megatron-LM's GPT runs of 2021-2022 (and the sweeps that replay them): materialised
attention scores and Megatron-LM's default dropout (module docstring)."""
_MEGATRON_README = "NVIDIA/Megatron-LM"
"""Megatron-LM's H100 scaling table of 2024 (README): fused attention, Megatron-LM's
default dropout and untied embeddings (its parameter counts: 1.7B = 24 x 12 x 2048^2 +
2 x 131,072 x 2048)."""
_VTRAIN_VOCAB = 51200
_UNTIED_SOURCES = ("Touvron", "pytorch/torchtitan", _MEGATRON_README)
TENSOR_COMM_OVERLAP_NOTE: Final = "--tp-comm-overlap"
"""A benchmark row whose notes name Megatron-Core's `--tp-comm-overlap` ran it
(`Workload.tensor_comm_overlap`)."""
OFF_CATALOG_SOURCES: Final = ("pytorch/torchtitan",)
"""Sources whose GPUs differ from the catalog entry they are priced on: torchtitan's H100
runs used Meta's Grand Teton H100 (96 GB HBM2e at 2.4 TB/s, 500 W power limit, a peak
"between SXM and NVL" that its footnote does not give), priced as H100-SXM5-80GB (HBM3 at
3.35 TB/s, 700 W). Such rows are shown and held out, never fitted."""
STEP_FIT_RUNS = frozenset({"llama1-7b", "llama1-65b"})
"""Whole runs the step-time constants are fitted to, priced as steady steps (goodput 1):
LLaMA-1's Table 15 prices steady throughput (65B: 1.4T tokens at 380 tokens/s/GPU).
The other rows of `published_runs.csv` fit only the whole-run goodput."""


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    """A published step-time measurement with every pin the row states."""

    row_id: str
    source: str
    workload: Workload
    gpus: int
    pins: LayoutPins
    measured_step_seconds: float
    measured_mfu: float | None

    @property
    def on_catalog_hardware(self) -> bool:
        """Whether the row ran on the GPU its catalog entry describes (`OFF_CATALOG_SOURCES`)."""
        return not self.source.startswith(OFF_CATALOG_SOURCES)


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One layout of a vTrain sweep (full recompute, 1F1B, no ZeRO)."""

    model: str
    workload: Workload
    gpus: int
    pins: LayoutPins
    measured_step_seconds: float


HoursBasis = Literal["elapsed", "steps"]


@dataclass(frozen=True, slots=True)
class RunRow:
    """A whole published training run."""

    row_id: str
    source: str
    workload: Workload
    gpus: int
    tokens: float
    published_gpu_hours: float
    hours_basis: HoursBasis
    """How the source counted its GPU-hours: "elapsed" (GPUs x wall-clock or billed time,
    every overhead included) or "steps" (computed from steady throughput or logged
    iteration time, so without the run's overheads)."""
    hours_basis_stated: bool
    """Whether the source says so; where it does not (`hours_basis_stated` false in the
    file, the reason in the row's notes), `hours_basis` is a reading, and
    `benchmarks.whole_runs` also reports the other one (`other_reading`)."""
    group: str
    """The publication the row comes from (one organisation's report): the unit left out
    together by the leave-one-source-out evaluation."""
    pins: LayoutPins
    """The layout the run published (paper, model card or released training config,
    cited in the row's notes); what it did not publish is searched."""


def _attention_for(source: str) -> AttentionKernel:
    return "standard" if source.startswith(_MEGATRON_GPT_SOURCES) else "flash"


def _flag(row: dict[str, str], column: str, default: bool) -> bool:
    """A true/false column of the row, `default` where it is empty or absent."""
    text = (row.get(column) or "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise ValueError(f"unknown {column} {text!r}")
    return text == "true"


def _tied(row: dict[str, str], source: str) -> bool:
    """The row's `tied_embeddings` column where it has one, else the source's family."""
    return _flag(row, "tied_embeddings", not source.startswith(_UNTIED_SOURCES))


def _dropout(row: dict[str, str], source: str) -> bool:
    """The row's `dropout` column where it has one, else the source's family."""
    return _flag(row, "dropout", source.startswith((*_MEGATRON_GPT_SOURCES, _MEGATRON_README)))


def _shape(row: dict[str, str], source: str, vocab: int | None = None) -> ModelShape:
    heads = int(row["attention_heads"])
    hidden = int(row["hidden_size"])
    return ModelShape(
        layers=int(row["layers"]),
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=int(row.get("kv_heads") or heads),
        ffn_hidden_size=int(row.get("ffn_hidden_size") or 4 * hidden),
        gated_mlp=row.get("gated_mlp", "false").strip().lower() == "true",
        vocab_size=vocab if vocab is not None else int(row["vocab_size"]),
        sequence_length=int(row["sequence_length"]),
        tied_embeddings=_tied(row, source),
        dropout=_dropout(row, source),
    )


def _optional_int(text: str) -> int | None:
    return int(text) if text.strip() else None


def _read(name: str) -> list[dict[str, str]]:
    with (DATA_DIR / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def _virtual_stages(notes: str, pipeline: int) -> int | None:
    if pipeline == 1:
        return 1
    match = re.search(r"interleaved pipeline \((\d+) chunks\)", notes)
    if match:
        return int(match.group(1))
    return None if "interleaved" in notes else 1


def benchmark_rows(catalog: Catalog) -> Iterator[BenchmarkRow]:
    """Rows of `published_benchmarks.csv`."""
    for row in _read("published_benchmarks.csv"):
        gpus = int(row["gpus"])
        batch = int(row["global_batch_size"])
        seq = int(row["sequence_length"])
        workload = Workload(
            shape=_shape(row, row["source"]),
            gpu=catalog.gpu(row["gpu_type"]),
            gpus_per_node=8,
            global_batch_size=batch,
            attention=_attention_for(row["source"]),
            selective_recompute=_selective_recompute(row["notes"]),
        )
        workload = _with_framework(workload, row)
        if TENSOR_COMM_OVERLAP_NOTE in row["notes"]:
            workload = replace(workload, tensor_comm_overlap=True)
        pins = _framework_pins(row)
        if row["measured_step_seconds"].strip():
            measured = float(row["measured_step_seconds"])
        else:
            tokens_per_second = float(row["measured_tokens_per_second_per_gpu"]) * gpus
            measured = batch * seq / tokens_per_second
        mfu = float(row["measured_mfu"]) if row["measured_mfu"].strip() else None
        yield BenchmarkRow(row["id"], row["source"], workload, gpus, pins, measured, mfu)


def _framework(row: dict[str, str]) -> FrameworkLimits | None:
    """The row's `framework` column (its kernels, overlaps, schedules and what it can
    run), None where the row gives none (the planner's defaults)."""
    framework = (row.get("framework") or "").strip()
    if not framework:
        return None
    if framework not in FRAMEWORK_LIMITS:
        raise ValueError(f"{row['id']}: unknown framework {framework!r}")
    return FRAMEWORK_LIMITS[framework]


def _with_framework(workload: Workload, row: dict[str, str]) -> Workload:
    """`workload` as the row's framework runs it (`_framework`)."""
    limits = _framework(row)
    return workload if limits is None else with_framework(workload, limits)


def _framework_pins(row: dict[str, str]) -> LayoutPins:
    """`_pins`, searched within what the row's framework runs (`_framework`)."""
    pins, limits = _pins(row), _framework(row)
    return pins if limits is None else replace(pins, framework=limits)


def _selective_recompute(notes: str) -> SelectiveRecompute:
    """torchtitan's per-op policy where the row's notes say it ran it, else the attention
    core (Megatron-LM's)."""
    return "every-other-matmul" if "per-op" in notes else "attention"


def _checkpointing(text: str) -> Checkpointing | None:
    value = text.strip()
    if not value:
        return None
    if value not in ("none", "selective", "full"):
        raise ValueError(f"unknown activation_checkpointing {value!r}")
    return value  # type: ignore[return-value]


def _pins(row: dict[str, str]) -> LayoutPins:
    """The layout a row of `published_benchmarks.csv` or `published_runs.csv` states
    (`tensor_parallel`, `pipeline_parallel`, `data_parallel`, `micro_batch_size`,
    `zero_stage`, `activation_checkpointing`); an empty cell is left to the search.
    Sequence parallelism and interleaving follow the notes (module docstring) once the
    tensor or pipeline degree is pinned."""
    tensor = _optional_int(row["tensor_parallel"])
    pipeline = _optional_int(row["pipeline_parallel"])
    return LayoutPins(
        tensor=tensor,
        pipeline=pipeline,
        data=_optional_int(row["data_parallel"]),
        micro_batch_size=_optional_int(row["micro_batch_size"]),
        zero_stage=_optional_int(row["zero_stage"]),
        checkpointing=_checkpointing(row["activation_checkpointing"]),
        sequence_parallel=(
            None if tensor is None else tensor > 1 and "sequence parallel" in row["notes"]
        ),
        virtual_stages=None if pipeline is None else _virtual_stages(row["notes"], pipeline),
    )


def sweep_rows(catalog: Catalog) -> Iterator[SweepRow]:
    """Rows of `vtrain_layout_sweeps_a100.csv`."""
    gpu = catalog.gpu("A100-SXM4-80GB")
    for row in _read("vtrain_layout_sweeps_a100.csv"):
        workload = Workload(
            shape=_shape(row, "vTrain", vocab=_VTRAIN_VOCAB),
            gpu=gpu,
            gpus_per_node=8,
            global_batch_size=int(row["global_batch"]),
            attention=_attention_for("vTrain"),
        )
        tensor = int(row["tensor_parallel"])
        pins = LayoutPins(
            tensor=tensor,
            pipeline=int(row["pipeline_parallel"]),
            data=int(row["data_parallel"]),
            micro_batch_size=int(row["micro_batch"]),
            zero_stage=0,
            checkpointing="full",
            sequence_parallel=False,
            virtual_stages=1,
        )
        yield SweepRow(
            model=f"{row['params_billion']}B",
            workload=workload,
            gpus=int(row["gpus"]),
            pins=pins,
            measured_step_seconds=float(row["iteration_ms"]) / 1000.0,
        )


def sweep_free_pins() -> LayoutPins:
    """What the vTrain sweeps hold fixed; the planner chooses the rest."""
    return LayoutPins(zero_stage=0, checkpointing="full", sequence_parallel=False, virtual_stages=1)


def run_group(row_id: str) -> str:
    """The source group of a whole-run row: its id up to the first '-' ("llama2-70b" ->
    "llama2"), one publication each (see the `source` column)."""
    return row_id.split("-", 1)[0]


def _run_attention(row: dict[str, str]) -> AttentionKernel:
    text = (row.get("attention") or "").strip()
    if not text:
        return _attention_for(row["source"])
    if text not in ("standard", "flash"):
        raise ValueError(f"unknown attention {text!r}")
    return text  # type: ignore[return-value]


def _hours_basis(text: str) -> HoursBasis:
    value = text.strip()
    if value not in ("elapsed", "steps"):
        raise ValueError(f"unknown hours_basis {value!r}")
    return value  # type: ignore[return-value]


def other_reading(row: RunRow) -> RunRow:
    """`row` with its GPU-hours read the other way ("elapsed" <-> "steps")."""
    basis: HoursBasis = "steps" if row.hours_basis == "elapsed" else "elapsed"
    return replace(row, hours_basis=basis)


RUN_GPUS_PER_NODE = 8
"""GPUs per node of every published run's cluster (8 on each: DGX-class A100 and H100
servers, p4d.24xlarge)."""


def run_rows(catalog: Catalog) -> Iterator[RunRow]:
    """Rows of `published_runs.csv`."""
    for row in _read("published_runs.csv"):
        gpu = catalog.gpu(row["gpu_type"])
        network = (row.get("network_gbps_per_node") or "").strip()
        if network:
            # The cluster's own network where the source states it (the row's notes).
            gpu = gpu.with_node_network(float(network), RUN_GPUS_PER_NODE)
        workload = Workload(
            shape=_shape(row, row["source"]),
            gpu=gpu,
            gpus_per_node=RUN_GPUS_PER_NODE,
            global_batch_size=int(row["global_batch_size"]),
            attention=_run_attention(row),
        )
        workload = _with_framework(workload, row)
        yield RunRow(
            row_id=row["id"],
            source=row["source"],
            workload=workload,
            gpus=int(row["gpus"]),
            tokens=float(row["tokens"]),
            published_gpu_hours=float(row["published_gpu_hours"]),
            hours_basis=_hours_basis(row["hours_basis"]),
            hours_basis_stated=_flag(row, "hours_basis_stated", True),
            group=run_group(row["id"]),
            pins=_framework_pins(row),
        )
