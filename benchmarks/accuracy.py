"""Planner accuracy against published measurements (`tests/data/`).

`python -m benchmarks.accuracy` prints every row: predicted, measured, error, and the
same for the simple baseline (6 N D at 40% MFU). The functions here are shared by the
calibration fit and the reference-point tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.arguments import benchmark_parser
from benchmarks.fp8 import fitted_rows, priced_layout
from benchmarks.reference_data import (
    STEP_FIT_RUNS,
    BenchmarkRow,
    RunRow,
    SweepRow,
    benchmark_rows,
    run_rows,
    sweep_free_pins,
    sweep_rows,
)
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, load_catalog
from trainplan.planner.flops import six_n_d_flops
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.reliability import estimate_reliability
from trainplan.planner.search import (
    Evaluation,
    Evaluator,
    LayoutPins,
    RunSettings,
    best_at,
    select_fastest,
)
from trainplan.planner.shapes import parameter_count
from trainplan.planner.steptime import step_time

BASELINE_MFU = 0.40


@dataclass(frozen=True, slots=True)
class Prediction:
    """One row: what the planner predicts against what was measured."""

    row_id: str
    measured: float
    predicted: float
    baseline: float
    layout: str
    in_fit: bool = True
    """False for a row on GPUs other than its catalog entry (shown, never fitted)."""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def baseline_error(self) -> float:
        return self.baseline / self.measured - 1.0


def _step_run(total_steps: int = 1) -> RunSettings:
    return RunSettings(
        total_steps=total_steps,
        interruptions_per_gpu_hour=0.0,
        checkpoint_seconds=0.0,
        restart_seconds=0.0,
    )


def baseline_step_seconds(workload: Workload, gpus: int) -> float:
    """The rule of thumb: 6 N D FLOPs at 40% of the dense peak."""
    flops = six_n_d_flops(parameter_count(workload.shape), workload.tokens_per_step)
    return flops / (gpus * workload.gpu.peak_flops_for(workload.precision) * BASELINE_MFU)


def best_pinned(
    workload: Workload,
    gpus: int,
    pins: LayoutPins,
    calibration: Calibration,
    run: RunSettings | None = None,
) -> Evaluation | None:
    """The planner's fastest layout on `gpus` GPUs under `pins`, priced for one step
    unless `run` is given; None where nothing fits under them."""
    evaluator = Evaluator(workload, calibration, _step_run() if run is None else run)
    return select_fastest(best_at(evaluator, gpus, pins))


def predict_benchmarks(catalog: Catalog, calibration: Calibration) -> list[Prediction]:
    """Every row of `published_benchmarks.csv`, with all its pins applied."""
    predictions = []
    for row in benchmark_rows(catalog):
        choice = best_pinned(row.workload, row.gpus, row.pins, calibration)
        predictions.append(_prediction(row, choice))
    return predictions


def predict_megatron(catalog: Catalog, calibration: Calibration) -> list[Prediction]:
    """NeMo's bf16 rows on H100 (`benchmarks.fp8.fitted_rows`), each on its exact layout
    under Megatron-LM's kernels and schedules; the baseline is 6ND at 40%."""
    predictions = []
    for record in fitted_rows(catalog):
        workload, layout = priced_layout(catalog, record)
        predictions.append(
            Prediction(
                record["id"],
                float(record["step_seconds"]),
                step_time(workload, layout, calibration).step_seconds,
                baseline_step_seconds(workload, layout.gpus),
                layout.describe(),
            )
        )
    return predictions


def _prediction(row: BenchmarkRow, choice: Evaluation | None) -> Prediction:
    predicted = math.inf if choice is None else choice.step_seconds
    layout = "no feasible layout" if choice is None else choice.layout.describe()
    return Prediction(
        row.row_id,
        row.measured_step_seconds,
        predicted,
        baseline_step_seconds(row.workload, row.gpus),
        layout,
        in_fit=row.on_catalog_hardware,
    )


def predict_sweeps(catalog: Catalog, calibration: Calibration) -> list[tuple[SweepRow, float]]:
    """Each vTrain layout, priced exactly as measured (memory is not checked: it ran)."""
    results = []
    for row in sweep_rows(catalog):
        layout = exact_sweep_layout(row)
        results.append((row, step_time(row.workload, layout, calibration).step_seconds))
    return results


def exact_sweep_layout(row: SweepRow) -> Layout:
    """The layout a sweep row measured."""
    pins = row.pins
    assert pins.tensor and pins.pipeline and pins.data and pins.micro_batch_size
    per_rank = row.workload.global_batch_size // pins.data
    return Layout(
        tensor=pins.tensor,
        pipeline=pins.pipeline,
        data=pins.data,
        micro_batch_size=pins.micro_batch_size,
        accumulation_steps=per_rank // pins.micro_batch_size,
        zero_stage=0,
        checkpointing="full",
        sequence_parallel=False,
        virtual_stages=1,
    )


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""

    def ranks(values: Sequence[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2.0
            i = j + 1
        return result

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy)


RUN_CHECKPOINT_SECONDS = 60.0


def run_settings(row: RunRow, calibration: Calibration) -> RunSettings:
    """A whole run's settings: its steps, the calibrated failure rate and restart time,
    and a checkpoint of `RUN_CHECKPOINT_SECONDS`."""
    return RunSettings(
        total_steps=math.ceil(row.tokens / row.workload.tokens_per_step),
        interruptions_per_gpu_hour=calibration.interruptions_per_gpu_hour,
        checkpoint_seconds=RUN_CHECKPOINT_SECONDS,
        restart_seconds=calibration.restart_seconds,
    )


def run_choice(row: RunRow, calibration: Calibration) -> Evaluation | None:
    """The planner's fastest layout on the run's GPUs under the layout the run published
    (`row.pins`, applied as a benchmark row's pins are: `best_pinned`); what the run did
    not publish is the planner's own choice. None where nothing fits under the published
    pins: such a run is reported as not fitting, not priced on another layout. Its step
    time does not depend on the whole-run constants, so a fit of those may reuse it."""
    return best_pinned(
        row.workload, row.gpus, row.pins, calibration, run_settings(row, calibration)
    )


def run_gpu_hours_of(
    row: RunRow,
    choice: Evaluation | None,
    calibration: Calibration,
    goodput: float | None = None,
) -> float:
    """GPU-hours of `row` on `choice`'s layout: steady steps, the whole-run goodput
    (`calibration.run_goodput` unless given) and the failure model
    (`reliability.estimate_reliability`). A run whose source counted steady steps only
    (`hours_basis` "steps": logged iteration time or steady throughput) is priced the same
    way: steps x step time, no goodput and no failures."""
    if choice is None or choice.step is None:
        return math.inf
    run = run_settings(row, calibration)
    if row.hours_basis == "steps":
        return choice.step.step_seconds * run.total_steps * choice.layout.gpus / 3600.0
    goodput = calibration.run_goodput if goodput is None else goodput
    reliability = estimate_reliability(
        compute_seconds=choice.step.step_seconds * run.total_steps,
        step_seconds=choice.step.step_seconds,
        total_steps=run.total_steps,
        gpus=row.gpus,
        interruptions_per_gpu_hour=run.interruptions_per_gpu_hour,
        checkpoint_seconds=run.checkpoint_seconds,
        restart_seconds=run.restart_seconds,
        goodput=goodput,
    )
    return reliability.duration_seconds * choice.layout.gpus / 3600.0


def run_gpu_hours(row: RunRow, calibration: Calibration) -> tuple[float, Evaluation | None]:
    """GPU-hours of a whole published run: the planner's layout on the run's GPUs under
    the run's published pins (`run_choice`), with its failure model and whole-run
    goodput."""
    choice = run_choice(row, calibration)
    return run_gpu_hours_of(row, choice, calibration), choice


def run_baseline_gpu_hours(row: RunRow) -> float:
    """The rule of thumb for a whole run: 6 N D FLOPs at 40% of the dense peak."""
    six_n_d = six_n_d_flops(parameter_count(row.workload.shape), row.tokens)
    peak = row.workload.gpu.peak_flops_for(row.workload.precision)
    return six_n_d / (peak * BASELINE_MFU) / 3600.0


def _markdown_predictions(title: str, predictions: list[Prediction], unit: str) -> list[str]:
    lines = [
        f"### {title}",
        "",
        f"| row | measured {unit} | trainplan {unit} | error | 6ND at 40% {unit} | error |"
        " trainplan layout |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in predictions:
        lines.append(
            f"| {p.row_id} | {p.measured:,.2f} | {p.predicted:,.2f} | {p.error:+.1%} |"
            f" {p.baseline:,.2f} | {p.baseline_error:+.1%} | {p.layout} |"
        )
    mae = sum(abs(p.error) for p in predictions) / len(predictions)
    base = sum(abs(p.baseline_error) for p in predictions) / len(predictions)
    worst = max(predictions, key=lambda p: abs(p.error))
    lines += [
        "",
        f"Mean absolute error: trainplan {mae:.1%}, baseline {base:.1%}; worst trainplan row"
        f" {worst.row_id} ({worst.error:+.1%}).",
        "",
    ]
    return lines


def report(catalog: Catalog) -> str:
    """The accuracy section of BENCHMARKS.md, as markdown."""
    calibration = catalog.calibration
    predictions = predict_benchmarks(catalog, calibration)
    lines = _markdown_predictions(
        "Step time, published_benchmarks.csv (every pin of the row applied)",
        [p for p in predictions if p.in_fit],
        "s",
    )
    lines += _markdown_predictions(
        "Step time of Megatron-Core on H100: NeMo's bf16 rows of published_fp8.csv (every"
        " layout as published)",
        predict_megatron(catalog, calibration),
        "s",
    )
    off_catalog = [p for p in predictions if not p.in_fit]
    if off_catalog:
        lines += _markdown_predictions(
            "Step time on GPUs unlike their catalog entry (torchtitan on Grand Teton H100,"
            " priced as H100-SXM5-80GB; never fitted)",
            off_catalog,
            "s",
        )
    runs = []
    for row in run_rows(catalog):
        if row.row_id not in STEP_FIT_RUNS:
            continue  # the others: python -m benchmarks.whole_runs
        choice = run_choice(row, calibration)
        gpu_hours = run_gpu_hours_of(row, choice, calibration, goodput=1.0)
        six_n_d = six_n_d_flops(parameter_count(row.workload.shape), row.tokens)
        peak = row.workload.gpu.peak_flops_for(row.workload.precision)
        baseline = six_n_d / (peak * BASELINE_MFU) / 3600.0
        layout = "none" if choice is None else choice.layout.describe()
        runs.append(Prediction(row.row_id, row.published_gpu_hours, gpu_hours, baseline, layout))
    lines += _markdown_predictions(
        "GPU-hours of the LLaMA-1 runs in the step-time fit (the planner's own layout, failure"
        " model included, priced as steady steps)",
        runs,
        "GPU-h",
    )
    lines += ["### Layout ranking, vtrain_layout_sweeps_a100.csv", ""]
    lines += [
        "| model | layouts | Spearman rho | mean abs error | free choice | its time |"
        " fastest measured | best measured layout among the planner's ranking |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    by_model: dict[str, list[tuple[SweepRow, float]]] = {}
    for sweep_row, sweep_seconds in predict_sweeps(catalog, calibration):
        by_model.setdefault(sweep_row.model, []).append((sweep_row, sweep_seconds))
    for model, pairs in by_model.items():
        measured = [row.measured_step_seconds for row, _ in pairs]
        predicted_seconds = [value for _, value in pairs]
        rho = spearman(measured, predicted_seconds)
        mae = sum(abs(p / m - 1) for m, p in zip(measured, predicted_seconds, strict=True)) / len(
            pairs
        )
        first = pairs[0][0]
        fastest = min(measured)
        choice = best_pinned(first.workload, first.gpus, sweep_free_pins(), calibration)
        table = {exact_sweep_layout(r): r.measured_step_seconds for r, _ in pairs}
        if choice is None:
            free, seconds = "none", "-"
        elif choice.layout in table:
            free = choice.layout.describe() + " (measured)"
            seconds = (
                f"{table[choice.layout]:.2f} s measured ({table[choice.layout] / fastest - 1:+.1%})"
            )
        else:
            free = choice.layout.describe() + " (not measured)"
            seconds = (
                f"{choice.step_seconds:.2f} s predicted ({choice.step_seconds / fastest - 1:+.1%})"
            )
        top = min(pairs, key=lambda pair: pair[1])[0]
        lines.append(
            f"| {model} | {len(pairs)} | {rho:.2f} | {mae:.1%} | {free} | {seconds} |"
            f" {fastest:.2f} s | {exact_sweep_layout(top).describe()}:"
            f" {top.measured_step_seconds:.2f} s"
            f" ({top.measured_step_seconds / fastest - 1:+.1%}) |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    benchmark_parser("benchmarks.accuracy", __doc__).parse_args()
    print(report(load_catalog()))


if __name__ == "__main__":
    main()
