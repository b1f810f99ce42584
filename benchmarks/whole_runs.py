"""Whole-run GPU-hours: in sample and leaving out each source in turn.

`python -m benchmarks.whole_runs` prices every row of `published_runs.csv` on the run's
GPUs with the layout the run published (`RunRow.pins`: the planner chooses only what the
source left out, and a run whose published layout does not fit the planner's memory model
is reported as such, not priced on another layout), the failure model and the whole-run
goodput:
once with `calibration.yaml`'s goodput (in sample), and once per source group with the
goodput refitted without that group (`fit_calibration.fit_goodput`), predicting the
group's rows (leave one source out). The step-time constants are those of
`calibration.yaml` in both; they were fitted to the LLaMA-1 7B and 65B rows as steady
steps, so the LLaMA-1 group is not fully out of sample. The baseline is 6 N D at 40% MFU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from benchmarks.accuracy import (
    run_baseline_gpu_hours,
    run_choice,
    run_gpu_hours_of,
    run_settings,
)
from benchmarks.arguments import benchmark_parser
from benchmarks.fit_calibration import fit_goodput
from benchmarks.reference_data import RunRow, other_reading, run_rows
from trainplan.api import format_count
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, load_catalog
from trainplan.planner.layout import Layout
from trainplan.planner.search import Evaluator, LayoutPins, best_at

_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class RunResult:
    """One whole run: published, in-sample and held-out GPU-hours, and the baseline."""

    row_id: str
    group: str
    published: float
    in_sample: float
    held_out: float
    held_out_goodput: float
    baseline: float
    published_layout: str
    layout: str
    chosen: Layout | None
    """The layout priced (None where nothing fits under the published one)."""

    @staticmethod
    def error(value: float, published: float) -> float:
        return value / published - 1.0


def evaluate(catalog: Catalog, rows: Sequence[RunRow] | None = None) -> list[RunResult]:
    """Every row (of `published_runs.csv`, or `rows`), in sample and with its source group
    left out of the goodput fit."""
    calibration = catalog.calibration
    rows = list(run_rows(catalog)) if rows is None else list(rows)
    choices = {row.row_id: run_choice(row, calibration) for row in rows}
    goodput_without = {
        group: fit_goodput(catalog, calibration, frozenset({group}), rows)
        for group in dict.fromkeys(row.group for row in rows)
    }
    results = []
    for row in rows:
        choice = choices[row.row_id]
        held = goodput_without[row.group]
        results.append(
            RunResult(
                row_id=row.row_id,
                group=row.group,
                published=row.published_gpu_hours,
                in_sample=run_gpu_hours_of(row, choice, calibration),
                held_out=run_gpu_hours_of(row, choice, calibration, held),
                held_out_goodput=held,
                baseline=run_baseline_gpu_hours(row),
                published_layout=describe_pins(row.pins),
                layout=(
                    why_nothing_fits(row, calibration)
                    if choice is None
                    else choice.layout.describe()
                ),
                chosen=None if choice is None else choice.layout,
            )
        )
    return results


def describe_pins(pins: LayoutPins) -> str:
    """The published part of a layout, e.g. `TP4 PP12 DP8 mb2 ZeRO-1 full-recompute`;
    `-` where the run published none."""
    parts = [
        f"{name}{value}"
        for name, value in (
            ("TP", pins.tensor),
            ("PP", pins.pipeline),
            ("DP", pins.data),
            ("mb", pins.micro_batch_size),
            ("ZeRO-", pins.zero_stage),
        )
        if value is not None
    ]
    if pins.checkpointing is not None:
        parts.append(f"{pins.checkpointing}-recompute")
    return " ".join(parts) or "-"


def why_nothing_fits(row: RunRow, calibration: Calibration) -> str:
    """Why no layout under the run's pins fits: the least memory per GPU any of them
    needs, against the GPU's capacity (or that the pins admit no layout at all)."""
    evaluator = Evaluator(row.workload, calibration, run_settings(row, calibration))
    evaluations = best_at(evaluator, row.gpus, row.pins)
    if not evaluations:
        return "published layout not possible (degrees or batch do not divide)"
    least = min(evaluations, key=lambda e: e.memory.total_bytes)
    return (
        f"published layout does not fit: {least.layout.describe()} needs"
        f" {least.memory.total_bytes / _GIB:.0f} of {least.memory.capacity_bytes / _GIB:.0f}"
        " GiB per GPU"
    )


def _summary(errors: list[float]) -> tuple[float, float]:
    absolute = [abs(e) for e in errors]
    return statistics.median(absolute), sum(absolute) / len(absolute)


def other_reading_summary(catalog: Catalog, rows: Sequence[RunRow]) -> str:
    """The held-out median and mean with every row of `rows` whose source does not say
    how it counted its GPU-hours (`RunRow.hours_basis_stated`) read the other way."""
    unstated = [row.row_id for row in rows if not row.hours_basis_stated]
    if not unstated:
        return "Every source says how it counted its GPU-hours."
    flipped = [row if row.hours_basis_stated else other_reading(row) for row in rows]
    held = [
        RunResult.error(r.held_out, r.published)
        for r in evaluate(catalog, flipped)
        if math.isfinite(r.held_out)
    ]
    median, mean = _summary(held)
    return (
        f"With the {len(unstated)} rows whose source does not say how it counted"
        f" ({', '.join(unstated)}) read the other way: leave one source out, median"
        f" absolute error {median:.1%}, mean {mean:.1%}."
    )


def by_gpu(results: Sequence[RunResult], rows: Sequence[RunRow]) -> list[str]:
    """The held-out errors of the rows priced, per GPU: how many runs, the median absolute
    error and the median signed error (positive: planned above the published hours)."""
    gpu_of = {row.row_id: row.workload.gpu.name for row in rows}
    errors: dict[str, list[float]] = {}
    for r in results:
        if math.isfinite(r.held_out):
            errors.setdefault(gpu_of[r.row_id], []).append(RunResult.error(r.held_out, r.published))
    return [
        f"{gpu}: {format_count(len(found), 'run')}, median absolute error"
        f" {statistics.median(map(abs, found)):.1%}, median error {statistics.median(found):+.1%}"
        for gpu, found in sorted(errors.items())
    ]


def report(catalog: Catalog) -> str:
    """The whole-run table of BENCHMARKS.md, as markdown."""
    rows = list(run_rows(catalog))
    results = evaluate(catalog, rows)
    lines = [
        "| row | published GPU-h | trainplan in sample | error | trainplan held out"
        " (goodput) | error | 6ND at 40% | error | published layout | trainplan layout |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.row_id} | {r.published:,.0f} | {r.in_sample:,.0f} |"
            f" {RunResult.error(r.in_sample, r.published):+.1%} |"
            f" {r.held_out:,.0f} ({r.held_out_goodput:.3f}) |"
            f" {RunResult.error(r.held_out, r.published):+.1%} | {r.baseline:,.0f} |"
            f" {RunResult.error(r.baseline, r.published):+.1%} | {r.published_layout} |"
            f" {r.layout} |"
        )
    feasible = [r for r in results if math.isfinite(r.in_sample)]
    left_out = [r.row_id for r in results if not math.isfinite(r.in_sample)]
    pinned = sum(r.published_layout != "-" for r in results)
    rows_in = f"{len(feasible)} rows with a feasible layout" + (
        f" ({', '.join(left_out)}: nothing fits under the published layout)" if left_out else ""
    )
    for name, values in (
        ("trainplan in sample", [RunResult.error(r.in_sample, r.published) for r in feasible]),
        (
            "trainplan, leave one source out",
            [RunResult.error(r.held_out, r.published) for r in feasible],
        ),
        ("6ND at 40% MFU", [RunResult.error(r.baseline, r.published) for r in feasible]),
        ("6ND at 40% MFU, all rows", [RunResult.error(r.baseline, r.published) for r in results]),
    ):
        median, mean = _summary(values)
        lines.append("")
        lines.append(f"- {name}: median absolute error {median:.1%}, mean {mean:.1%}")
    lines.append("")
    lines.append("- trainplan, leave one source out, by GPU: " + "; ".join(by_gpu(results, rows)))
    lines.append("")
    lines.append(f"- {other_reading_summary(catalog, rows)}")
    lines.insert(
        0,
        f"{len(results)} runs ({pinned} with a published layout); summaries over {rows_in}.\n",
    )
    return "\n".join(lines)


def main() -> None:
    benchmark_parser("benchmarks.whole_runs", __doc__).parse_args()
    catalog = load_catalog()
    print(report(catalog))
    calibration = replace(catalog.calibration)
    print(
        f"\nrun_goodput in calibration.yaml: {calibration.run_goodput};"
        f" fitted to these rows: {fit_goodput(catalog, calibration)}"
    )


if __name__ == "__main__":
    main()
