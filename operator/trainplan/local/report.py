"""The record of a local run: one `Revision` per ETA revision (the `--eta-log` lines), and
at the end `summary.json` (plan vs actual, ETA errors) and `eta.png` (with matplotlib, drawn
by `trainplan.local.chart`).

`summarize` is pure; `write_summary` and `write_plot` write files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, Final

from trainplan.eta import naive_remaining_seconds
from trainplan.local.chart import Chart, ChartPoint, save_chart

CHECKPOINTS: Final = (0.25, 0.5, 0.75)
"""Progress ratios at which the ETA is judged against the actual end."""


@dataclass(frozen=True, slots=True)
class Revision:
    """One ETA revision. `time` is Unix seconds; `elapsed` seconds since the start."""

    time: float
    elapsed: float
    step: int
    total_steps: int
    eta_seconds: float
    earliest_seconds: float
    latest_seconds: float
    restarts: int
    step_seconds: float
    measured_step_seconds: float | None
    planned_step_seconds: float
    metrics_available: bool

    def log_line(self) -> str:
        """The `--eta-log` JSON line."""
        return json.dumps(
            {
                "time": self.time,
                "step": self.step,
                "totalSteps": self.total_steps,
                "etaSeconds": self.eta_seconds,
                "earliestSeconds": self.earliest_seconds,
                "latestSeconds": self.latest_seconds,
                "restarts": self.restarts,
                "measuredStepSeconds": self.measured_step_seconds,
                "metricsAvailable": self.metrics_available,
            }
        )

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else 1.0


def eta_errors(
    revisions: Sequence[Revision], actual_seconds: float
) -> dict[str, dict[str, float | None]]:
    """For each of `CHECKPOINTS`: at the first revision at or past that progress, the ETA's
    error (predicted end - actual end, seconds; positive: too late) and the naive
    estimate's (elapsed / progress x (1 - progress)). None where no revision got there."""
    errors: dict[str, dict[str, float | None]] = {}
    for ratio in CHECKPOINTS:
        found = next((r for r in revisions if r.progress >= ratio), None)
        key = f"{round(ratio * 100)}%"
        if found is None:
            errors[key] = {"eta": None, "naive": None, "progress": None}
            continue
        actual_remaining = actual_seconds - found.elapsed
        naive = naive_remaining_seconds(found.elapsed, found.progress)
        errors[key] = {
            "progress": found.progress,
            "elapsedSeconds": found.elapsed,
            "eta": found.eta_seconds - actual_remaining,
            "naive": None if naive is None else naive - actual_remaining,
        }
    return errors


def summarize(
    *,
    plan_name: str,
    gpu_type: str,
    nproc: int,
    planned_duration_seconds: float,
    planned_step_seconds: float,
    actual_seconds: float,
    total_steps: int,
    final_step: int,
    restarts: int,
    final_loss: float | None,
    exit_code: int,
    revisions: Sequence[Revision],
    interrupted_by: str | None = None,
) -> dict[str, Any]:
    """The `summary.json` document; `interrupted_by` names the signal that stopped the
    run ("SIGINT"), if one did."""
    measured = [r.measured_step_seconds for r in revisions if r.measured_step_seconds]
    return {
        "plan": plan_name,
        "gpuType": gpu_type,
        "note": (
            f"the planned step time is for {gpu_type}; this run used {nproc} CPU processes, "
            f"so the ETA starts from the plan and the measured speed takes over"
        ),
        "processes": nproc,
        "exitCode": exit_code,
        "succeeded": exit_code == 0,
        "interrupted": interrupted_by is not None,
        "signal": interrupted_by,
        "plannedDurationSeconds": planned_duration_seconds,
        "actualDurationSeconds": actual_seconds,
        "plannedStepSeconds": planned_step_seconds,
        "measuredStepSeconds": measured[-1] if measured else None,
        "totalSteps": total_steps,
        "finalStep": final_step,
        "restarts": restarts,
        "finalLoss": final_loss,
        "revisions": len(revisions),
        "etaErrorSeconds": eta_errors(revisions, actual_seconds),
    }


def write_summary(directory: Path, summary: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def chart_of(
    revisions: Sequence[Revision],
    actual_seconds: float | None = None,
    *,
    plan_name: str | None = None,
    subtitle: str | None = None,
    tz: tzinfo | None = None,
) -> Chart:
    """The chart of a local run (see `trainplan.local.chart`): the predicted end of each
    revision, its range, naive extrapolation, the measured and planned step times. The
    actual end is the first revision at the last step (None when the run did not get
    there); `actual_seconds`, the run's whole length, is the right edge of the time axis."""
    first = revisions[0]
    start = first.time - first.elapsed
    points = []
    for r in revisions:
        naive = naive_remaining_seconds(r.elapsed, r.progress)
        points.append(
            ChartPoint(
                time=r.time,
                end=r.time + r.eta_seconds,
                earliest_end=r.time + r.earliest_seconds,
                latest_end=r.time + r.latest_seconds,
                naive_end=None if naive is None else r.time + naive,
                measured_step_seconds=r.measured_step_seconds,
            )
        )
    finished = next((r for r in revisions if r.total_steps and r.step >= r.total_steps), None)
    return Chart(
        name=plan_name or "local run",
        start=start,
        points=points,
        planned_step_seconds=first.planned_step_seconds,
        actual_end=None if finished is None else finished.time,
        last_time=None if actual_seconds is None else start + actual_seconds,
        subtitle=subtitle,
        tz=tz or datetime.now().astimezone().tzinfo or UTC,
    )


def write_plot(
    directory: Path,
    revisions: Sequence[Revision],
    actual_seconds: float | None = None,
    *,
    plan_name: str | None = None,
    subtitle: str | None = None,
) -> Path | None:
    """`eta.png`, the chart of `chart_of` in this machine's time zone; None without
    matplotlib or revisions. `plan_name` and `subtitle` default to the `plan` and `note`
    of the directory's `summary.json` when `write_summary` wrote it first."""
    if not revisions:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    if plan_name is None:
        summary = _read_summary(directory)
        plan_name = summary.get("plan") if isinstance(summary.get("plan"), str) else None
        if subtitle is None and isinstance(summary.get("note"), str):
            subtitle = summary["note"]
    chart = chart_of(revisions, actual_seconds, plan_name=plan_name, subtitle=subtitle)
    return save_chart(chart, directory / "eta.png", dpi=100)


def _read_summary(directory: Path) -> dict[str, Any]:
    try:
        found = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
