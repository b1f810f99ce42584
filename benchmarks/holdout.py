"""Out-of-sample accuracy: refit without one source of measurements, predict it.

`python -m benchmarks.holdout` refits the efficiency constants once per group of rows
(grouped by publication, so no group is predicted by constants fitted to it) and prints
the held-out errors beside the in-sample ones. Hopper has three fitted groups: MosaicML's
H100 rows (PyTorch's kernels), and two of Megatron-Core's kernels, NeMo's
(`MEGATRON_GROUP`) and Megatron-LM's own H100 scaling table (`MEGATRON_README_GROUP`),
each predicted by the Megatron-Core constants the other sets; torchtitan's Grand Teton
rows are never fitted. A constant that no row outside the held-out group prices (PyTorch's
Hopper matrix efficiency, with MosaicML's H100 rows out) is set as the planner sets one
it has no measurement of (`fit_calibration.unmeasured_parameters`): the `default`
architecture's value.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.accuracy import Prediction, predict_benchmarks, predict_megatron, run_gpu_hours
from benchmarks.arguments import benchmark_parser
from benchmarks.fit_calibration import fit
from benchmarks.fp8 import fitted_rows
from benchmarks.reference_data import STEP_FIT_RUNS, benchmark_rows, run_rows
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, load_catalog

MEGATRON_GROUP = "NeMo on DGX H100 (Megatron-Core)"
MEGATRON_README_GROUP = "Megatron-LM README, H100 (Megatron-Core)"

NEUTRAL_START = {
    "gemm_efficiency": 0.7,
    "hbm_efficiency": 0.8,
    "flash_attention_efficiency": 0.5,
    "kernel_overhead_seconds_per_layer": 0.0002,
}


def _neutral_megatron(calibration: Calibration) -> Calibration:
    """`calibration` without Megatron-Core values of its own (PyTorch's stand in)."""
    architectures = tuple(
        (
            name,
            replace(entry, megatron_gemm_efficiency=None, megatron_flash_attention_efficiency=None),
        )
        for name, entry in calibration.architectures
    )
    return replace(calibration, architectures=architectures)


def _neutral(calibration: Calibration) -> Calibration:
    """A start that knows nothing of the fit: round guesses for every constant."""
    # Megatron-Core's own values start from PyTorch's (`_neutral_megatron`).
    architectures = tuple(
        (name, replace(entry, **NEUTRAL_START))
        for name, entry in _neutral_megatron(calibration).architectures
    )
    return replace(
        calibration,
        architectures=architectures,
        elementwise_bytes_per_hidden=40.0,
        standard_attention_bytes_per_score=12.0,
        nvlink_efficiency=0.75,
        network_efficiency=0.6,
        data_parallel_overlap=0.5,
        zero3_overlap=0.8,
        pipeline_p2p_exposed=0.5,
    )


def groups(catalog: Catalog) -> dict[str, frozenset[str]]:
    """Row ids by source group."""
    result: dict[str, set[str]] = {}
    for row in benchmark_rows(catalog):
        if row.source.startswith("Narayanan"):
            key = "Narayanan et al. 2021"
        elif row.source.startswith("Korthikanti"):
            key = "Korthikanti et al. 2022"
        elif row.source.startswith("pytorch/torchtitan"):
            key = "torchtitan, Grand Teton H100 (never fitted)"
        elif row.source.startswith("NVIDIA/Megatron-LM"):
            key = MEGATRON_README_GROUP
        else:
            key = f"MosaicML {row.workload.gpu.name}"
        result.setdefault(key, set()).add(row.row_id)
    result[MEGATRON_GROUP] = {record["id"] for record in fitted_rows(catalog)}
    result["LLaMA runs (GPU-hours)"] = set(STEP_FIT_RUNS)
    return {key: frozenset(ids) for key, ids in result.items()}


def _predictions(catalog: Catalog, calibration: Calibration) -> list[Prediction]:
    return [*predict_benchmarks(catalog, calibration), *predict_megatron(catalog, calibration)]


def main() -> None:
    benchmark_parser("benchmarks.holdout", __doc__).parse_args()
    catalog = load_catalog()
    in_sample = {p.row_id: p for p in _predictions(catalog, catalog.calibration)}
    for row in run_rows(catalog):
        if row.row_id not in STEP_FIT_RUNS:
            continue
        hours, _ = run_gpu_hours(row, replace(catalog.calibration, run_goodput=1.0))
        in_sample[row.row_id] = Prediction(row.row_id, row.published_gpu_hours, hours, 0, "")
    start = _neutral(catalog.calibration)
    print(
        "| held-out group | rows | held-out mean abs error | worst held-out row |"
        " in-sample mean abs error |"
    )
    print("|---|---:|---:|---|---:|")
    step_errors: list[float] = []
    for name, ids in groups(catalog).items():
        fitted = fit(catalog, start, held_out=ids)
        held: list[Prediction] = [p for p in _predictions(catalog, fitted) if p.row_id in ids]
        for row in run_rows(catalog):
            if row.row_id in ids:
                hours, _ = run_gpu_hours(row, replace(fitted, run_goodput=1.0))
                held.append(Prediction(row.row_id, row.published_gpu_hours, hours, 0, ""))
        mae = sum(abs(p.error) for p in held) / len(held)
        worst = max(held, key=lambda p: abs(p.error))
        inside = sum(abs(in_sample[p.row_id].error) for p in held) / len(held)
        print(
            f"| {name} | {len(held)} | {mae:.1%} | {worst.row_id} {worst.error:+.1%} |"
            f" {inside:.1%} |"
        )
        step_errors += [abs(p.error) for p in held if p.row_id not in STEP_FIT_RUNS]
    print(
        f"\nEvery step-time row, each with its group held out: mean absolute error"
        f" {sum(step_errors) / len(step_errors):.2%} over {len(step_errors)} rows."
    )


if __name__ == "__main__":
    main()
