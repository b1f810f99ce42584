"""The record of a local run: one `Revision` per ETA revision (the `--eta-log` lines), and
at the end `summary.json` (plan vs actual, ETA errors) and `eta.png` (with matplotlib).

`summarize` is pure; `write_summary` and `write_plot` write files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainplan.eta import naive_remaining_seconds

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
) -> dict[str, Any]:
    """The `summary.json` document."""
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


def write_plot(
    directory: Path, revisions: Sequence[Revision], actual_seconds: float
) -> Path | None:
    """`eta.png`: step time (measured, planned) and remaining time (ETA with its 10-90%
    range, naive, actual) over the run; None without matplotlib or revisions."""
    if not revisions:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    elapsed = [r.elapsed for r in revisions]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    measured = [(r.elapsed, r.measured_step_seconds) for r in revisions if r.measured_step_seconds]
    if measured:
        top.plot([x for x, _ in measured], [y for _, y in measured], label="measured")
    top.plot(elapsed, [r.step_seconds for r in revisions], label="used by the ETA")
    top.axhline(revisions[0].planned_step_seconds, linestyle="--", color="grey", label="planned")
    top.set_ylabel("seconds per step")
    top.set_yscale("log")
    top.legend()
    bottom.fill_between(
        elapsed,
        [r.earliest_seconds for r in revisions],
        [r.latest_seconds for r in revisions],
        alpha=0.3,
        label="10-90%",
    )
    bottom.plot(elapsed, [r.eta_seconds for r in revisions], label="ETA")
    naive = [(r.elapsed, naive_remaining_seconds(r.elapsed, r.progress)) for r in revisions]
    known = [(x, y) for x, y in naive if y is not None]
    if known:
        bottom.plot([x for x, _ in known], [y for _, y in known], ":", label="naive")
    bottom.plot(elapsed, [max(0.0, actual_seconds - x) for x in elapsed], "k--", label="actual")
    bottom.set_ylabel("remaining seconds")
    bottom.set_xlabel("elapsed seconds")
    bottom.legend()
    figure.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "eta.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
