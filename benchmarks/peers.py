"""The planner's step times beside a published peer's on the same rows and layouts.

`python -m benchmarks.peers` prices every row of `published_benchmarks.csv` (the fitted
rows and torchtitan's never-fitted Grand Teton H100 rows) with llm-analysis 0.2.2
(github.com/cli99/llm-analysis, on PyPI; installed without its dependencies by `make
setup`, as its analysis needs none of them) on the very layout trainplan prices for the
row (`accuracy.best_pinned`: every published pin, the rest trainplan's choice), so that
only the models differ. llm-analysis takes one FLOP efficiency for every kernel: at its
default (1.0), at 0.5, and at the one value that minimises its mean absolute error on
these rows (in sample, as trainplan's constants are; trainplan's held-out figures are
`benchmarks.holdout`'s). It knows no interleaved pipeline, so its bubble is (p - 1) / m.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
from llm_analysis.config import (
    ModelConfig,
    ParallelismConfig,
    get_dtype_config_by_name,
    get_gpu_config_by_name,
)

from benchmarks import whole_runs
from benchmarks.accuracy import best_pinned
from benchmarks.arguments import benchmark_parser
from benchmarks.reference_data import BenchmarkRow, RunRow, benchmark_rows, run_rows
from trainplan.planner.catalog import Catalog, load_catalog
from trainplan.planner.layout import Layout, Workload

PEER_GPUS = {
    "A100-SXM4-80GB": "a100-sxm-80gb",
    "A100-SXM4-40GB": "a100-sxm-40gb",
    "H100-SXM5-80GB": "h100-sxm-80gb",
}
"""llm-analysis's own GPU entries for the catalog's GPUs of the published rows."""
_RECOMPUTE = {
    "none": ActivationRecomputation.NONE,
    "selective": ActivationRecomputation.SELECTIVE,
    "full": ActivationRecomputation.FULL,
}
EFFICIENCY_GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(71))
"""llm-analysis FLOP efficiencies tried for its in-sample fit: 0.30 to 1.00."""


@dataclass(frozen=True, slots=True)
class PeerRow:
    """One published row: measured, trainplan's and llm-analysis's step seconds."""

    row_id: str
    measured: float
    trainplan: float
    layout: str
    peer_default: float
    peer_half: float
    peer_seconds_by_efficiency: tuple[float, ...]
    """llm-analysis at each efficiency of `EFFICIENCY_GRID`."""


def llm_analysis_step_seconds(row: BenchmarkRow, layout: Layout, efficiency: float | None) -> float:
    """llm-analysis's latency per iteration of `row` on `layout` (bf16 weights,
    activations and embeddings), at `efficiency` (None: its default)."""
    summary = _llm_analysis(row.row_id, row.workload, layout, efficiency)
    return float(summary["latency_per_iter"])


def llm_analysis_gpu_hours(run: RunRow, layout: Layout, efficiency: float | None) -> float:
    """llm-analysis's GPU-hours of a whole run: its latency per iteration times its own
    iteration count for the run's tokens, on the run's GPUs (no failures, no overheads);
    NaN where its memory model refuses the layout (it asserts that the micro-batch fits)."""
    try:
        summary = _llm_analysis(run.row_id, run.workload, layout, efficiency, run.tokens)
    except AssertionError:
        return math.nan
    return float(summary["gpu_hours"])


def _llm_analysis(
    name: str,
    workload: Workload,
    layout: Layout,
    efficiency: float | None,
    total_tokens: float | None = None,
) -> dict[str, Any]:
    shape = workload.shape
    model = ModelConfig(
        name=name,
        num_layers=shape.layers,
        n_head=shape.attention_heads,
        hidden_dim=shape.hidden_size,
        vocab_size=shape.vocab_size,
        max_seq_len=shape.sequence_length,
        num_key_value_heads=shape.kv_heads,
        ffn_embed_dim=shape.ffn_hidden_size,
        expansion_ratio=shape.ffn_hidden_size / shape.hidden_size,
    )
    parallelism = ParallelismConfig(
        tp_size=layout.tensor,
        pp_size=layout.pipeline,
        dp_size=layout.data,
        sp_size=layout.tensor if layout.sequence_parallel else 1,
    )
    options = {} if efficiency is None else {"flops_efficiency": efficiency}
    analysis = LLMAnalysis(
        model,
        get_gpu_config_by_name(PEER_GPUS[workload.gpu.name]),
        get_dtype_config_by_name("w16a16e16"),
        parallelism,
        **options,
    )
    summary: dict[str, Any] = analysis.training(
        batch_size_per_gpu=layout.micro_batch_size,
        gradient_accumulation_steps=layout.accumulation_steps,
        seq_len=shape.sequence_length,
        total_num_tokens=None if total_tokens is None else int(total_tokens),
        activation_recomputation=_RECOMPUTE[layout.checkpointing],
        ds_zero=DSZeRO(layout.zero_stage),
        flash_attn=workload.attention == "flash",
        mlp_gated_linear_units=shape.gated_mlp,
    )
    return summary


@dataclass(frozen=True, slots=True)
class PeerRun:
    """One whole run: published, trainplan's held-out and llm-analysis's GPU-hours."""

    row_id: str
    published: float
    trainplan_held_out: float
    peer_default: float
    peer_half: float


def evaluate_runs(catalog: Catalog) -> list[PeerRun]:
    """Every whole run of `published_runs.csv` that trainplan prices, each on the layout
    trainplan prices it on (`whole_runs`), beside its held-out GPU-hours."""
    runs = {run.row_id: run for run in run_rows(catalog)}
    return [
        PeerRun(
            row_id=result.row_id,
            published=result.published,
            trainplan_held_out=result.held_out,
            peer_default=llm_analysis_gpu_hours(runs[result.row_id], result.chosen, None),
            peer_half=llm_analysis_gpu_hours(runs[result.row_id], result.chosen, 0.5),
        )
        for result in whole_runs.evaluate(catalog)
        if result.chosen is not None
    ]


def evaluate(catalog: Catalog) -> list[PeerRow]:
    """Every published step-time row with a feasible layout under its pins."""
    calibration = catalog.calibration
    rows = []
    for row in benchmark_rows(catalog):
        choice = best_pinned(row.workload, row.gpus, row.pins, calibration)
        if choice is None:
            continue
        layout = choice.layout
        rows.append(
            PeerRow(
                row_id=row.row_id,
                measured=row.measured_step_seconds,
                trainplan=choice.step_seconds,
                layout=layout.describe(),
                peer_default=llm_analysis_step_seconds(row, layout, None),
                peer_half=llm_analysis_step_seconds(row, layout, 0.5),
                peer_seconds_by_efficiency=tuple(
                    llm_analysis_step_seconds(row, layout, e) for e in EFFICIENCY_GRID
                ),
            )
        )
    return rows


def _errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    return [p / m - 1.0 for p, m in zip(predicted, measured, strict=True)]


def best_efficiency(rows: Sequence[PeerRow]) -> int:
    """Index into `EFFICIENCY_GRID` of llm-analysis's least mean absolute error."""
    measured = [r.measured for r in rows]

    def mean_error(index: int) -> float:
        predicted = [r.peer_seconds_by_efficiency[index] for r in rows]
        return statistics.mean(abs(e) for e in _errors(predicted, measured))

    return min(range(len(EFFICIENCY_GRID)), key=mean_error)


def report(catalog: Catalog) -> str:
    """The side-by-side table and its summaries, as markdown."""
    rows = evaluate(catalog)
    fitted = best_efficiency(rows)
    lines = [
        "| row | measured s | trainplan s | error | llm-analysis default s | error"
        f" | at 0.5 s | error | at {EFFICIENCY_GRID[fitted]:.2f} (fitted) s | error | layout |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        fit = r.peer_seconds_by_efficiency[fitted]
        cells = [
            f"{value:.2f} | {value / r.measured - 1:+.1%}"
            for value in (r.trainplan, r.peer_default, r.peer_half, fit)
        ]
        lines.append(f"| {r.row_id} | {r.measured:.2f} | {' | '.join(cells)} | {r.layout} |")
    measured = [r.measured for r in rows]
    lines.append("")
    for name, predicted in (
        (
            "trainplan (stored constants: in sample but for torchtitan's three rows)",
            [r.trainplan for r in rows],
        ),
        ("llm-analysis at its default efficiency", [r.peer_default for r in rows]),
        ("llm-analysis at efficiency 0.5", [r.peer_half for r in rows]),
        (
            f"llm-analysis at {EFFICIENCY_GRID[fitted]:.2f}, fitted to these rows",
            [r.peer_seconds_by_efficiency[fitted] for r in rows],
        ),
    ):
        absolute = [abs(e) for e in _errors(predicted, measured)]
        lines.append(
            f"- {name}: mean absolute error {statistics.mean(absolute):.1%},"
            f" median {statistics.median(absolute):.1%}, worst {max(absolute):.1%}"
            f" over {len(rows)} rows"
        )
    lines += ["", *_runs_report(evaluate_runs(catalog))]
    return "\n".join(lines)


def _runs_report(runs: Sequence[PeerRun]) -> list[str]:
    lines = [
        "| run | published GPU-h | trainplan held out | error | llm-analysis default"
        " | error | at 0.5 | error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        cells = [
            f"{value:,.0f} | {value / r.published - 1:+.1%}"
            if math.isfinite(value)
            else "refused | -"
            for value in (r.trainplan_held_out, r.peer_default, r.peer_half)
        ]
        lines.append(f"| {r.row_id} | {r.published:,.0f} | {' | '.join(cells)} |")
    priced = [r for r in runs if math.isfinite(r.peer_default) and math.isfinite(r.peer_half)]
    refused = [r.row_id for r in runs if r not in priced]
    lines.append("")
    if refused:
        layouts = "layout" if len(refused) == 1 else "layouts"
        lines.append(
            f"- llm-analysis's memory model refuses {len(refused)} {layouts} that trainplan"
            f" prices ({', '.join(refused)}); the summaries are over the other"
            f" {len(priced)} runs."
        )
    for name, values in (
        ("trainplan, leave one source out", [r.trainplan_held_out for r in priced]),
        ("llm-analysis at its default efficiency", [r.peer_default for r in priced]),
        ("llm-analysis at efficiency 0.5", [r.peer_half for r in priced]),
    ):
        absolute = [abs(v / r.published - 1) for v, r in zip(values, priced, strict=True)]
        lines.append(
            f"- whole runs, {name}: median absolute error {statistics.median(absolute):.1%},"
            f" mean {statistics.mean(absolute):.1%} over {len(priced)} runs"
        )
    return lines


def main() -> None:
    benchmark_parser("benchmarks.peers", __doc__).parse_args()
    # llm-analysis logs every summary at INFO and warns of what it does not model.
    logging.getLogger("llm_analysis").setLevel(logging.ERROR)
    logging.disable(logging.WARNING)
    print(report(load_catalog()))


if __name__ == "__main__":
    main()
