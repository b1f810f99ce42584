"""The plan's 10-90% ranges, from the planner's errors on published rows held out of the fit.

`python -m benchmarks.plan_ranges [--write]` collects two held-out error distributions:

- step time: each row of `published_benchmarks.csv` predicted by constants refitted
  without its publication (`benchmarks.holdout`'s groups, from its neutral start), as the
  ratio measured / planned;
- GPU-hours: each whole run of `published_runs.csv` priced with the goodput refitted
  without its source (`benchmarks.whole_runs`), as the ratio published / planned.

It prints the 10th and 90th percentile of each ratio (linear interpolation between order
statistics, Hyndman and Fan 1996 definition 7, numpy's default) and the share of rows
inside the resulting ranges; `--write` stores the four ratios in `calibration.yaml`, where
`plan()` scales a plan's step time, duration and GPU-hours by them. Each range keeps the
plan's own figure inside it (p10 <= 1 <= p90). About 3 minutes (one refit per group of
benchmark rows).
"""

from __future__ import annotations

import re
from importlib import resources

from benchmarks.accuracy import predict_benchmarks
from benchmarks.arguments import benchmark_parser
from benchmarks.fit_calibration import fit
from benchmarks.holdout import _neutral, groups
from benchmarks.reference_data import benchmark_rows
from benchmarks.whole_runs import evaluate
from trainplan.planner.catalog import Catalog, load_catalog

RATIO_KEYS = (
    "step_seconds_ratio_p10",
    "step_seconds_ratio_p90",
    "gpu_hours_ratio_p10",
    "gpu_hours_ratio_p90",
)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values` by linear interpolation between order statistics."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def step_ratios(catalog: Catalog) -> list[float]:
    """Measured / planned step time of every benchmark row, its publication held out."""
    start = _neutral(catalog.calibration)
    benchmark_ids = {row.row_id for row in benchmark_rows(catalog)}
    ratios: list[float] = []
    for ids in groups(catalog).values():
        if not ids & benchmark_ids:
            continue  # a group of other rows (whole runs, NeMo's) adds no ratio: no refit
        fitted = fit(catalog, start, held_out=ids)
        ratios += [
            p.measured / p.predicted for p in predict_benchmarks(catalog, fitted) if p.row_id in ids
        ]
    return ratios


def gpu_hours_ratios(catalog: Catalog) -> list[float]:
    """Published / planned GPU-hours of every whole run with a layout, its source held out."""
    return [r.published / r.held_out for r in evaluate(catalog) if r.held_out != float("inf")]


def ranges(step: list[float], hours: list[float]) -> dict[str, float]:
    """The four stored ratios; each range keeps the plan's own figure inside it."""
    return {
        "step_seconds_ratio_p10": min(1.0, quantile(step, 0.1)),
        "step_seconds_ratio_p90": max(1.0, quantile(step, 0.9)),
        "gpu_hours_ratio_p10": min(1.0, quantile(hours, 0.1)),
        "gpu_hours_ratio_p90": max(1.0, quantile(hours, 0.9)),
    }


def coverage(ratios: list[float], low: float, high: float) -> float:
    """Share of the ratios within [low, high]."""
    return sum(low <= ratio <= high for ratio in ratios) / len(ratios)


def _write(values: dict[str, float]) -> None:
    path = resources.files("trainplan.planner") / "data" / "calibration.yaml"
    with resources.as_file(path) as file:
        text = file.read_text()
        for key, value in values.items():
            line = f"{key}: {value:.4g}"
            pattern = re.compile(rf"^{key}: .*$", re.MULTILINE)
            text = pattern.sub(line, text) if pattern.search(text) else text + line + "\n"
        file.write_text(text)
    print(f"wrote {path}")


def main() -> None:
    parser = benchmark_parser("benchmarks.plan_ranges", __doc__)
    parser.add_argument("--write", action="store_true", help="store the ratios")
    args = parser.parse_args()
    catalog = load_catalog()
    step, hours = step_ratios(catalog), gpu_hours_ratios(catalog)
    values = ranges(step, hours)
    for key in RATIO_KEYS:
        print(f"{key:28s} {values[key]:.4g}")
    step_inside = coverage(step, values["step_seconds_ratio_p10"], values["step_seconds_ratio_p90"])
    hours_inside = coverage(hours, values["gpu_hours_ratio_p10"], values["gpu_hours_ratio_p90"])
    print(f"step-time rows inside the range: {step_inside:.0%} of {len(step)}")
    print(f"whole runs inside the range: {hours_inside:.0%} of {len(hours)}")
    if args.write:
        _write(values)


if __name__ == "__main__":
    main()
