"""`trainplan run FILE --local`: run a plan on this machine (`trainplan.local`).

There is no GPU here, so the plan is made for `--nproc` CPU processes (default 2) with
the catalog's GPU type kept: the planned step time is the one of that GPU, the ETA starts
from it and the measured speed takes over within a few revisions.

Before it starts, the plan's memory for the local processes is checked against this
machine's available memory, and the CPU time its FLOPs imply is shown; a plan that cannot
fit (or would take absurdly long) is refused unless `--force` is given. Every
environmental problem (a busy port, an unwritable directory, no torch, no disk for the
checkpoints) is one line naming the flag that fixes it, before anything of a previous run
is deleted.

Exit status: torchrun's final exit code (0 done), 2 for invalid input, a spec that cannot
run locally or this machine cannot start it, 3 when no plan is feasible, 130 or 143 when
SIGINT or SIGTERM stopped the run (its processes stopped and its report written).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
from pydantic import ValidationError
from rich.console import Console

from trainplan.api import format_validation_errors
from trainplan.cli.common import EXIT_INFEASIBLE, EXIT_INVALID
from trainplan.cli.inputs import read_plan_inputs
from trainplan.launcher import LauncherError
from trainplan.local import LocalOptions, LocalPlan, plan_locally, run_local
from trainplan.local.feasibility import assess_local
from trainplan.local.machine import Machine, this_machine
from trainplan.local.runner import DEFAULT_METRICS_PORT, LocalSetupError
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, load_catalog


@click.command("run")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--local", "local", is_flag=True, default=True, help="Run on this machine (the default)."
)
@click.option(
    "--nproc",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="CPU processes (torchrun --nproc-per-node).",
)
@click.option(
    "--eta-log",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write one JSON line per ETA revision to this file.",
)
@click.option(
    "--report",
    "report",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write summary.json and eta.png (with matplotlib) to this directory.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help=f"Port of the plan's metrics (0: any free port). Default {DEFAULT_METRICS_PORT}, or "
    "a free port (said) when that one is taken; a port given here that is taken is an error.",
)
@click.option(
    "--trainer-metrics-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port of the trainer's series on 127.0.0.1, for a local Prometheus (0: any free port).",
)
@click.option(
    "--scrape-interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    help="Seconds between scrapes of the trainer's metrics.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Run even when the plan does not fit this machine's memory or would take absurdly "
    "long on its CPUs.",
)
def command(
    *,
    file: Path,
    local: bool,
    nproc: int,
    eta_log: Path | None,
    report: Path | None,
    metrics_port: int | None,
    trainer_metrics_port: int,
    scrape_interval: float,
    force: bool,
) -> None:
    """Run the TrainingPlan in FILE locally: torchrun with NPROC CPU processes, restarted
    on failure, with a live ETA."""
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    inputs = read_plan_inputs(file)
    if len(inputs) != 1:
        errors.print(f"{file}: one TrainingPlan expected, found {len(inputs)}", markup=False)
        sys.exit(EXIT_INVALID)
    item = inputs[0]
    if item.spec is None:
        for problem in item.problems:
            errors.print(f"{item.label}: {problem}", markup=False)
        sys.exit(EXIT_INVALID)
    catalog = load_catalog()
    try:
        planned = plan_locally(item.name, item.spec, nproc, catalog)
    except ValidationError as error:
        for line in format_validation_errors(error):
            errors.print(f"{item.label} (with --nproc {nproc}): {line}", markup=False)
        sys.exit(EXIT_INVALID)
    except PlanInputError as error:
        for field, message in error.problems:
            errors.print(f"{item.label}: {item.spec_path}{field}: {message}", markup=False)
        sys.exit(EXIT_INVALID)
    except InfeasiblePlanError as error:
        errors.print(f"{item.label}: no feasible plan", markup=False)
        for reason in error.reasons:
            errors.print(f"  {reason}", markup=False)
        sys.exit(EXIT_INFEASIBLE)
    machine = this_machine()
    if not _feasible_here(planned, catalog, machine, errors, label=item.label, force=force):
        sys.exit(EXIT_INVALID)
    options = LocalOptions(
        eta_log=eta_log,
        report_dir=report,
        metrics_port=metrics_port,
        trainer_metrics_port=trainer_metrics_port,
        scrape_interval=scrape_interval,
    )
    try:
        result = run_local(planned, options, machine=machine)
    except LauncherError as error:
        for field, message in error.problems:
            errors.print(f"{item.label}: {item.spec_path}{field}: {message}", markup=False)
        sys.exit(EXIT_INVALID)
    except LocalSetupError as error:
        errors.print(f"{item.label}: {error}", markup=False)
        sys.exit(EXIT_INVALID)
    console = Console(highlight=False)
    if result.interrupted_by is not None:
        outcome = f"interrupted by {signal.Signals(result.interrupted_by).name}"
    elif result.exit_code == 0:
        outcome = "done"
    else:
        outcome = f"failed (exit {result.exit_code})"
    console.print(
        f"{outcome}: "
        f"step {result.final_step}/{result.total_steps} in {result.seconds:.1f} s, "
        f"{result.restarts} restarts"
        + (f", final loss {result.final_loss:.4f}" if result.final_loss is not None else "")
        + (f"; report in {report}" if report is not None else "")
    )
    if result.exit_code != 0 and result.log_path is not None and report is None:
        console.print(f"torchrun's output was in {result.log_path}")
    sys.exit(result.exit_code)


def _feasible_here(
    planned: LocalPlan,
    catalog: Catalog,
    machine: Machine,
    errors: Console,
    *,
    label: str,
    force: bool,
) -> bool:
    """Show the local check's numbers; False (after saying why) when the plan cannot run
    here and `force` is not given. Without /proc/meminfo the memory is not checked."""
    available = machine.available_memory_bytes()
    if available is None:
        return True
    training = planned.spec.training
    check = assess_local(
        planned.plan,
        planned.shape,
        precision=training.precision,
        optimizer=training.optimizer,
        gpu_overhead_bytes=catalog.calibration.memory_overhead_bytes,
        available_memory_bytes=available,
        cpu_cores=machine.cpu_cores(),
    )
    problems = check.problems()
    if not problems:
        errors.print(f"{label}: {check.summary()}", markup=False)
        return True
    for problem in problems:
        errors.print(f"{label}: {problem}", markup=False)
    errors.print(f"  {check.summary()}", markup=False)
    if force:
        errors.print("  --force: running anyway", markup=False)
        return True
    errors.print(
        "  lower --nproc, plan a smaller model or fewer steps, or give --force to try anyway",
        markup=False,
    )
    return False
