"""`trainplan eta replay TRACE --plan PLAN`: backtest the ETA on a recorded run.

TRACE is JSON Lines, one object per scrape: `{"time": ISO 8601 or epoch seconds, "step":
int or null (no metrics), "failures": cumulative interruptions Kubernetes reported,
"tokens": optional}` ("-" reads standard input). PLAN is a TrainingPlan file (planned
here), a plan object (`trainplan plan -o json`, or a resource's `status.plan`), or a
TrainingPlan resource with `status.plan` (the stored plan is used). Every revision the
operator would have made (one per `--interval` seconds, or one per scrape) is revised
and scored against the trace's real end (the first scrape at the plan's total work).

Output: a summary table (`-o table`), or one JSON object per revision (`-o jsonl`);
`--plot FILE.png` draws the predicted end over time with its 10-90% range, the
baselines and the real end (matplotlib).

Exit status: 0, or 2 for an unreadable trace or plan (the line and field named, the
content never echoed), 3 when the spec has no feasible plan.
Does I/O: reads the files, writes to stdout, stderr and the plot.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import click
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainplan.api import Plan, format_validation_errors, parse_training_plan_spec
from trainplan.cli.common import EXIT_INFEASIBLE, EXIT_INVALID
from trainplan.eta import PlanFacts, plan_facts
from trainplan.eta.backtest import (
    METHODS,
    PROGRESS_POINTS,
    Replay,
    ReplayedRevision,
    TraceError,
    TraceRow,
    parse_trace,
    real_end,
    revisions,
    score,
)
from trainplan.planner import InfeasiblePlanError, PlanInputError, load_catalog, plan

METHOD_TITLES = {
    "engine": "ETA",
    "naive": "naive",
    "measured": "measured x left",
    "plan": "plan alone",
}
MAX_PLAN_BYTES = 4 * 1024 * 1024


class InputFileError(Exception):
    """A trace or plan that cannot be used; exit status 2 (3 when infeasible)."""

    def __init__(self, message: str, exit_code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@click.group("eta")
def group() -> None:
    """The ETA engine on recorded runs."""


def _load_document(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise InputFileError(f"{path}: larger than {MAX_PLAN_BYTES // (1024 * 1024)} MiB")
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except OSError as error:
        raise InputFileError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not a text file (UTF-8 expected)") from None
    except yaml.YAMLError:
        raise InputFileError(f"{path}: not YAML or JSON") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise InputFileError(f"{path}: expected one mapping (a TrainingPlan or a plan)")
    return documents[0]


PLAN_LABELS = frozenset({"name", "source", "document"})
"""The keys `trainplan plan -o json` adds before a plan's own."""


def _is_plan(document: dict[str, Any]) -> bool:
    return {"gpuType", "stepSeconds", "totalSteps"} <= document.keys()


def _validated_plan(path: Path, source: Any) -> Plan:
    try:
        return Plan.model_validate(source)
    except ValidationError as error:
        lines = "\n".join(f"  plan.{line}" for line in format_validation_errors(error))
        raise InputFileError(f"{path}: invalid plan:\n{lines}") from None


def load_plan_facts(path: Path) -> tuple[PlanFacts, str]:
    """The ETA figures of PLAN and a label for it: a resource's stored `status.plan`, a
    plan object, or the plan of a TrainingPlan spec (planned with the catalog)."""
    document = _load_document(path)
    metadata = document.get("metadata")
    name = str(metadata.get("name") or path.stem) if isinstance(metadata, dict) else path.stem
    status = document.get("status")
    if isinstance(status, dict) and status.get("plan") is not None:
        stored = _validated_plan(path, status["plan"])
        try:
            spec = parse_training_plan_spec(document)
        except ValidationError:
            spec = None  # the deadline is then unknown; the stored plan is enough
        return plan_facts(stored, spec), name
    if _is_plan(document):
        # `trainplan plan -o json` leads the plan with its name and source file.
        if isinstance(document.get("name"), str):
            name = document["name"]
        plan_only = {key: value for key, value in document.items() if key not in PLAN_LABELS}
        return plan_facts(_validated_plan(path, plan_only)), name
    try:
        spec = parse_training_plan_spec(document)
    except ValidationError as error:
        lines = "\n".join(f"  {line}" for line in format_validation_errors(error))
        raise InputFileError(f"{path}: not a TrainingPlan or a plan:\n{lines}") from None
    try:
        found = plan(spec, load_catalog())
    except PlanInputError as error:
        lines = "\n".join(f"  spec.{field}: {message}" for field, message in error.problems)
        raise InputFileError(f"{path}: invalid spec:\n{lines}") from None
    except InfeasiblePlanError as error:
        reasons = "\n".join(f"  {reason}" for reason in error.reasons)
        raise InputFileError(f"{path}: no feasible plan:\n{reasons}", EXIT_INFEASIBLE) from None
    return plan_facts(found, spec), name


def _read_trace(trace: str) -> list[TraceRow]:
    try:
        if trace == "-":
            return parse_trace(sys.stdin, "<stdin>")
        with open(trace, encoding="utf-8") as lines:
            return parse_trace(lines, trace)
    except TraceError as error:
        raise InputFileError(str(error)) from None
    except OSError as error:
        raise InputFileError(f"{trace}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{trace}: not a text file (UTF-8 expected)") from None


def _iso(seconds: float | None) -> str | None:
    if seconds is None or not math.isfinite(seconds):
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()


def revision_document(
    revision: ReplayedRevision, end: float | None, duration: float | None
) -> dict[str, Any]:
    """One revision as JSON (`-o jsonl`)."""
    estimate = revision.estimate
    document: dict[str, Any] = {
        "time": revision.row.time.isoformat(),
        "elapsedSeconds": revision.elapsed_seconds,
        "step": estimate.step,
        "progress": revision.progress_ratio,
        "remainingSeconds": estimate.remaining_seconds,
        "estimatedEnd": _iso(revision.engine_end),
        "earliestEnd": _iso(revision.earliest_end),
        "latestEnd": _iso(revision.latest_end),
        "naiveEnd": _iso(revision.naive_end),
        "measuredEnd": _iso(revision.measured_end),
        "planEnd": _iso(revision.plan_end),
        "interruptions": estimate.interruptions,
        "outageSeconds": estimate.outage_seconds,
        "metricsAvailable": estimate.metrics_available,
    }
    if end is not None and duration and revision.row.time.timestamp() < end:
        document["errors"] = {
            method: None if predicted is None else (predicted - end) / duration
            for method, predicted in (
                ("engine", revision.engine_end),
                ("naive", revision.naive_end),
                ("measured", revision.measured_end),
                ("plan", revision.plan_end),
            )
        }
        document["inRange"] = revision.earliest_end <= end <= revision.latest_end
    return document


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def print_summary(console: Console, replayed: Replay, label: str) -> None:
    """The summary table: errors at each progress point, over 10-90%, and coverage."""
    figures = score(replayed)
    if replayed.end is None or replayed.duration_seconds is None:
        console.print(
            f"{label}: {len(replayed.revisions):,} revisions; the trace never reaches the "
            "plan's total work, so there is no real end to score against (use "
            "--total-steps, or a trace that runs to the end).",
            highlight=False,
        )
        return
    days = replayed.duration_seconds / 86400
    table = Table(
        title=f"{label}: {len(replayed.revisions):,} revisions, real duration {days:.2f} days"
    )
    table.add_column("progress")
    for method in METHODS:
        table.add_column(METHOD_TITLES[method], justify="right")
    for point in PROGRESS_POINTS:
        cells = figures.at_progress[point]
        table.add_row(f"{point:.0%}", *(_percent(cells[m]) for m in METHODS))
    table.add_row("mean 10-90%", *(_percent(figures.mean_error[m]) for m in METHODS))
    console.print(table)
    console.print(
        "Errors: |predicted end - real end| / real duration. The ETA's 10-90% range held the "
        f"real end in {_percent(figures.coverage)} of {figures.revisions:,} revisions.",
        highlight=False,
    )


def write_plot(replayed: Replay, path: Path, label: str, planned_step_seconds: float) -> None:
    """The chart of `trainplan.local.chart`: the predicted end over time with its range,
    the baselines and the real end; measured against planned step time (UTC)."""
    from trainplan.local.chart import Chart, ChartPoint, save_chart

    points = [
        ChartPoint(
            time=r.row.time.timestamp(),
            end=r.engine_end,
            earliest_end=r.earliest_end,
            latest_end=r.latest_end,
            naive_end=r.naive_end,
            measured_step_seconds=r.estimate.measured_step_seconds,
            baselines=(r.measured_end, r.plan_end),
        )
        for r in replayed.revisions
    ]
    chart = Chart(
        name=f"ETA backtest of {label}",
        start=replayed.start,
        points=points,
        planned_step_seconds=planned_step_seconds,
        actual_end=replayed.end,
        baseline_labels=("measured step x work left", "plan alone"),
    )
    save_chart(chart, path)


@group.command("replay")
@click.argument("trace", type=str)
@click.option(
    "--plan",
    "plan_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A TrainingPlan file, a plan object, or a resource with status.plan.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=1.0, max=86400.0),
    default=None,
    help="Seconds between revisions (default: one per scrape).",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "jsonl"]), default="table", show_default=True
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Draw the predicted end over time to this PNG file.",
)
@click.option(
    "--total-steps",
    type=click.IntRange(1, 2**53),
    default=None,
    help="Override the plan's total steps.",
)
@click.option(
    "--step-seconds",
    type=click.FloatRange(min=1e-6, max=1e7),
    default=None,
    help="Override the planned step time.",
)
@click.option(
    "--failure-rate",
    type=click.FloatRange(min=0.0, max=1.0),
    default=None,
    help="Override the interruptions per GPU-hour.",
)
@click.option(
    "--restart-seconds",
    type=click.FloatRange(min=0.0, max=1e7),
    default=None,
    help="Override the restart time.",
)
@click.option(
    "--tokens-per-step",
    type=click.FloatRange(min=1.0, max=1e12),
    default=None,
    help="Override the tokens per full step (counts progress in tokens).",
)
def replay_command(
    *,
    trace: str,
    plan_path: Path,
    interval: float | None,
    output: str,
    plot: Path | None,
    total_steps: int | None,
    step_seconds: float | None,
    failure_rate: float | None,
    restart_seconds: float | None,
    tokens_per_step: float | None,
) -> None:
    """Replay TRACE through the ETA engine as the operator would and score every revision
    against the run's real end, beside naive extrapolation, measured step time x work
    left, and the plan alone."""
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        facts, label = load_plan_facts(plan_path)
        rows = _read_trace(trace)
    except InputFileError as error:
        errors.print(error.message, markup=False)
        sys.exit(error.exit_code)
    facts = replace(
        facts,
        total_steps=total_steps or facts.total_steps,
        planned_step_seconds=step_seconds or facts.planned_step_seconds,
        interruptions_per_gpu_hour=(
            facts.interruptions_per_gpu_hour if failure_rate is None else failure_rate
        ),
        restart_seconds=facts.restart_seconds if restart_seconds is None else restart_seconds,
        tokens_per_step=tokens_per_step or facts.tokens_per_step,
    )
    end = real_end(facts, rows)
    start = rows[0].time.timestamp()
    duration = None if end is None else end - start
    found: list[ReplayedRevision] = []
    out: IO[str] = sys.stdout
    progress = Progress(
        TextColumn("replaying"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} scrapes"),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
        disable=not errors.is_terminal,
    )
    with progress:
        task = progress.add_task("replay", total=len(rows))
        for index, revision in enumerate(revisions(facts, rows, interval_seconds=interval)):
            found.append(revision)
            if output == "jsonl":
                out.write(json.dumps(revision_document(revision, end, duration)) + "\n")
            if index % 500 == 0:
                progress.update(task, completed=_position(rows, revision.row))
        progress.update(task, completed=len(rows))
    replayed = Replay(tuple(found), start, end)
    if output == "table":
        print_summary(Console(), replayed, label)
    if plot is not None:
        try:
            write_plot(replayed, plot, label, facts.planned_step_seconds)
        except OSError as error:
            errors.print(f"{plot}: cannot write: {error.strerror}", markup=False)
            sys.exit(EXIT_INVALID)


def _position(rows: list[TraceRow], row: TraceRow) -> int:
    """Roughly how far into the trace a row is (for the progress bar)."""
    first, last = rows[0].time.timestamp(), rows[-1].time.timestamp()
    if last <= first:
        return len(rows)
    return int(len(rows) * (row.time.timestamp() - first) / (last - first))
