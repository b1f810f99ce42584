"""Fit the planner's efficiency constants to the published measurements.

`python -m benchmarks.fit_calibration [--write]` minimises, by bounded least squares
(scipy), the log errors of predicted step time on `published_benchmarks.csv` (every pin
of each row applied) and on NeMo's bf16 rows on H100 of `published_fp8.csv`
(`benchmarks.fp8.fitted_rows`, which with Megatron-LM's H100 table of
`published_benchmarks.csv` set Megatron-Core's Hopper efficiencies), and of GPU-hours
of the two LLaMA-1 runs priced as steady steps
(`STEP_FIT_RUNS`), plus, for the vTrain sweeps, each layout's log error relative to its
model's mean (so the sweeps shape the ranking of layouts, and the benchmarks and runs the
level). Then, with those constants fixed, the whole-run goodput (`fit_goodput`) on every
row of `published_runs.csv`.
With `--write` it stores the result in `trainplan/planner/data/calibration.yaml`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from benchmarks.accuracy import (
    predict_benchmarks,
    predict_megatron,
    predict_sweeps,
    run_choice,
    run_gpu_hours_of,
)
from benchmarks.arguments import benchmark_parser
from benchmarks.reference_data import STEP_FIT_RUNS, RunRow, run_rows
from trainplan.planner.calibration import (
    ArchitectureEfficiency,
    Calibration,
    calibration_to_mapping,
)
from trainplan.planner.catalog import Catalog, load_catalog

SWEEP_WEIGHT = 0.5
GOODPUT_GRID = np.round(np.arange(0.30, 1.00001, 0.0005), 4)


@dataclass(frozen=True)
class Parameter:
    """One fitted constant: how to read it from and write it into a Calibration, and what
    the planner uses where no measurement sets it (`unmeasured`)."""

    name: str
    low: float
    high: float
    get: Callable[[Calibration], float]
    set: Callable[[Calibration, float], Calibration]
    unmeasured: Callable[[Calibration], Calibration]


def _arch_parameter(
    arch: str, field: str, low: float, high: float, also: tuple[str, ...] = ()
) -> Parameter:
    """A per-architecture constant; `also` names architectures without measurements of
    their own, which take the same value."""

    def get(calibration: Calibration) -> float:
        return float(getattr(dict(calibration.architectures)[arch], field))

    def set_(calibration: Calibration, value: float) -> Calibration:
        architectures = dict(calibration.architectures)
        for name in (arch, *also):
            entry: ArchitectureEfficiency = replace(architectures[name], **{field: value})
            architectures[name] = entry
        return replace(calibration, architectures=tuple(architectures.items()))

    def unmeasured(calibration: Calibration) -> Calibration:
        # An architecture without measurements takes the `default` entry's value, as
        # the planner prices one without an entry of its own (docs/planner.md).
        return set_(calibration, float(getattr(calibration.architecture("default"), field)))

    return Parameter(f"{arch}.{field}", low, high, get, set_, unmeasured)


def _megatron_parameter(arch: str, field: str, low: float, high: float) -> Parameter:
    """Megatron-Core's own value of `field` (`gemm_efficiency` or
    `flash_attention_efficiency`) on `arch`, starting from the PyTorch kernels' where the
    calibration has none yet; unmeasured, it has none again (PyTorch's value stands in, as
    the planner reads it)."""

    def get(calibration: Calibration) -> float:
        entry = calibration.architecture(arch)
        own = getattr(entry, f"megatron_{field}")
        return float(getattr(entry, field) if own is None else own)

    def own(calibration: Calibration, value: float | None) -> Calibration:
        architectures = dict(calibration.architectures)
        changes: dict[str, Any] = {f"megatron_{field}": value}
        architectures[arch] = replace(architectures[arch], **changes)
        return replace(calibration, architectures=tuple(architectures.items()))

    return Parameter(
        f"{arch}.megatron_{field}", low, high, get, own, lambda calibration: own(calibration, None)
    )


def _parameter(field: str, low: float, high: float) -> Parameter:
    def set_(calibration: Calibration, value: float) -> Calibration:
        changes: dict[str, Any] = {field: value}
        return replace(calibration, **changes)

    # A shared constant has no other value to fall back on: unmeasured, it keeps its start.
    return Parameter(field, low, high, lambda c: float(getattr(c, field)), set_, lambda c: c)


PARAMETERS = (
    # Only A100 and H100 have published measurements here: other architectures take the
    # A100 values, and the H100 its own matrix-multiply efficiency, for PyTorch's kernels
    # (MosaicML's rows) and for Megatron-Core's (NeMo's rows and Megatron-LM's table).
    # On the A100, Megatron-LM's and MosaicML's rows share one value (no published gap
    # between the two there).
    _arch_parameter("ampere", "gemm_efficiency", 0.5, 0.95, also=("default",)),
    _arch_parameter("ampere", "hbm_efficiency", 0.4, 0.95, also=("default", "hopper")),
    _arch_parameter("ampere", "flash_attention_efficiency", 0.2, 0.8, also=("default", "hopper")),
    _arch_parameter(
        "ampere", "kernel_overhead_seconds_per_layer", 0.0, 0.002, also=("default", "hopper")
    ),
    _arch_parameter("hopper", "gemm_efficiency", 0.4, 0.95),
    _megatron_parameter("hopper", "gemm_efficiency", 0.4, 0.95),
    _megatron_parameter("hopper", "flash_attention_efficiency", 0.2, 0.8),
    _parameter("elementwise_bytes_per_hidden", 4.0, 120.0),
    _parameter("standard_attention_bytes_per_score", 2.0, 40.0),
    _parameter("nvlink_efficiency", 0.3, 0.95),
    _parameter("network_efficiency", 0.1, 0.95),
    _parameter("data_parallel_overlap", 0.0, 1.0),
    _parameter("zero3_overlap", 0.0, 1.0),
    _parameter("pipeline_p2p_exposed", 0.0, 1.0),
)


def apply(
    calibration: Calibration,
    values: np.ndarray,
    parameters: Sequence[Parameter] = PARAMETERS,
) -> Calibration:
    for parameter, value in zip(parameters, values, strict=True):
        calibration = parameter.set(calibration, float(value))
    return calibration


def residuals(
    catalog: Catalog, calibration: Calibration, held_out: frozenset[str] = frozenset()
) -> np.ndarray:
    """Log errors to minimise; rows whose id is in `held_out` are left out."""
    errors = [
        math.log(p.predicted / p.measured) if math.isfinite(p.predicted) else 3.0
        for p in (
            *predict_benchmarks(catalog, calibration),
            *predict_megatron(catalog, calibration),
        )
        if p.row_id not in held_out and p.in_fit
    ]
    by_model: dict[str, list[float]] = defaultdict(list)
    for row, predicted in predict_sweeps(catalog, calibration):
        by_model[row.model].append(math.log(predicted / row.measured_step_seconds))
    for values in by_model.values():
        mean = sum(values) / len(values)
        errors += [SWEEP_WEIGHT * (v - mean) for v in values]
    for run in run_rows(catalog):
        if run.row_id not in STEP_FIT_RUNS or run.row_id in held_out:
            continue
        gpu_hours = run_gpu_hours_of(run, run_choice(run, calibration), calibration, goodput=1.0)
        errors.append(math.log(gpu_hours / run.published_gpu_hours))
    return np.array(errors)


def fit_goodput(
    catalog: Catalog,
    calibration: Calibration,
    held_out_groups: frozenset[str] = frozenset(),
    rows: Sequence[RunRow] | None = None,
) -> float:
    """The whole-run goodput minimising the sum of absolute log errors of GPU-hours over
    the rows of `published_runs.csv` (or `rows`) outside `held_out_groups` that count
    elapsed time (rows counting steady steps only carry no overhead to fit) (their median,
    in effect: robust to rows whose steady step time is off, which goodput must not
    absorb). The step-time constants stay as given; rows with no feasible layout are
    skipped."""
    pairs: list[tuple[RunRow, Any]] = []
    for row in run_rows(catalog) if rows is None else rows:
        if row.group in held_out_groups or row.hours_basis == "steps":
            continue
        choice = run_choice(row, calibration)
        if choice is not None:
            pairs.append((row, choice))
    best, best_loss = 1.0, math.inf
    for goodput in GOODPUT_GRID:
        loss = sum(
            abs(
                math.log(
                    run_gpu_hours_of(row, choice, calibration, float(goodput))
                    / row.published_gpu_hours
                )
            )
            for row, choice in pairs
        )
        if loss < best_loss - 1e-12:
            best, best_loss = float(goodput), loss
    return best


def unmeasured_parameters(
    catalog: Catalog, start: Calibration, held_out: frozenset[str] = frozenset()
) -> list[Parameter]:
    """The constants no row outside `held_out` prices: set to either end of its range, one
    changes no residual (say, Hopper's matrix efficiency for PyTorch's kernels with
    MosaicML's two H100 rows held out). Every constant is first written as a value of its
    own (Megatron-Core's start from PyTorch's), so none is read through another."""
    start = apply(start, np.array([p.get(start) for p in PARAMETERS]))
    base = residuals(catalog, start, held_out)
    return [
        parameter
        for parameter in PARAMETERS
        if all(
            np.array_equal(residuals(catalog, parameter.set(start, end), held_out), base)
            for end in (parameter.low, parameter.high)
        )
    ]


def fit(
    catalog: Catalog, start: Calibration, held_out: frozenset[str] = frozenset()
) -> Calibration:
    """Constants minimising `residuals`, starting from `start`. A constant no fitted row
    prices (`unmeasured_parameters`) is not fitted, which would leave it wherever the
    solver's steps took it, but set as the planner sets an unmeasured one
    (`Parameter.unmeasured`: the `default` architecture's value, or PyTorch's kernels'
    for Megatron-Core's)."""
    unmeasured = {p.name for p in unmeasured_parameters(catalog, start, held_out)}
    free = [p for p in PARAMETERS if p.name not in unmeasured]
    x0 = np.array([p.get(start) for p in free])
    lows = np.array([p.low for p in free])
    highs = np.array([p.high for p in free])
    x0 = np.clip(x0, lows + 1e-9, highs - 1e-9)
    scale = highs - lows

    result = least_squares(
        lambda x: residuals(catalog, apply(start, x, free), held_out),
        x0,
        bounds=(lows, highs),
        x_scale=scale,
        diff_step=1e-3,
        max_nfev=200,
    )
    fitted = apply(start, result.x, free)
    for parameter in PARAMETERS:
        if parameter.name in unmeasured:
            fitted = parameter.unmeasured(fitted)
    return fitted


def _rounded(value: float) -> float:
    return float(f"{value:.4g}")


def main() -> None:
    parser = benchmark_parser("benchmarks.fit_calibration", __doc__)
    parser.add_argument("--write", action="store_true", help="store the fitted constants")
    args = parser.parse_args()
    catalog = load_catalog()
    fitted = fit(catalog, catalog.calibration)
    fitted = replace(fitted, run_goodput=fit_goodput(catalog, fitted))
    for parameter in PARAMETERS:
        print(f"{parameter.name:45s} {parameter.get(fitted):.4g}")
    print(f"{'run_goodput':45s} {fitted.run_goodput:.4g}")
    if args.write:
        document = calibration_to_mapping(fitted)
        for entry in document["architectures"].values():
            for key, value in entry.items():
                entry[key] = _rounded(value)
        for key, value in document.items():
            if isinstance(value, float):
                document[key] = _rounded(value)
        path = resources.files("trainplan.planner") / "data" / "calibration.yaml"
        with resources.as_file(path) as file:
            file.write_text(_with_comments(path.read_text(), document))
        print(f"wrote {path}")


def _with_comments(previous: str, document: dict[str, Any]) -> str:
    """`document` as YAML, each top-level key keeping the comment lines that preceded it
    in `previous` (and the file's leading comments), so that sources stay beside values."""
    comments: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in previous.splitlines(keepends=True):
        if line.startswith("#"):
            pending.append(line)
        elif line[:1].isalpha():
            comments[line.split(":", 1)[0]] = pending
            pending = []
    parts = []
    for key, value in document.items():
        parts += comments.get(key, [])
        parts.append(yaml.safe_dump({key: value}, sort_keys=False))
    return "".join(parts)


if __name__ == "__main__":
    main()
