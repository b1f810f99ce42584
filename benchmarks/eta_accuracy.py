"""ETA accuracy of a real local run with a failure: `python -m benchmarks.eta_accuracy`.

Runs the tiny plan locally (2 CPU processes, gloo) for `STEPS` steps with a checkpoint
every `CHECKPOINT_INTERVAL` steps, kills one worker at about 30% of the steps (torchrun
restarts the group, which resumes from the last checkpoint), and scores every ETA
revision against the actual end of training (the first revision that sees the last
step). Goals: the error of the predicted total duration at 25%, 50% and 75% of progress
below 10%, 5% and 3%, and below naive extrapolation's (elapsed / progress) at each.
Prints a table and exits 1 when a goal is missed.

The plan states the failure process the benchmark injects, as a team would from its
cluster's history: one interruption per run of about `NOMINAL_RUN_SECONDS` on 2 processes
(`reliability.interruptionsPerGPUHour`) and a restart of about `RESTART_SECONDS`.
`--fleet-prior` runs with the defaults instead (the fleet's rate, which for 2 processes
expects no failure at all).
"""

from __future__ import annotations

import io
import os
import platform
import signal
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from benchmarks.arguments import benchmark_parser
from tests.runtime.train_harness import worker_pids
from trainplan.api import parse_training_plan_spec
from trainplan.eta import naive_remaining_seconds
from trainplan.local.launch import LocalPlan, plan_locally
from trainplan.local.report import Revision
from trainplan.local.runner import Hooks, LocalOptions, run_local
from trainplan.planner import load_catalog

STEPS = 400
CHECKPOINT_INTERVAL = 20
KILL_AT = 0.30
GOALS = {0.25: 0.10, 0.50: 0.05, 0.75: 0.03}
NOMINAL_RUN_SECONDS = 75.0
RESTART_SECONDS = 5.0
PROCESSES = 2
EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "examples" / "tiny-local.yaml"


def _document(fleet_prior: bool) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    spec = document["spec"]
    spec["data"] = {"samples": 16 * STEPS, "epochs": 1}
    spec["reliability"] = {
        "checkpointIntervalSteps": CHECKPOINT_INTERVAL,
        "checkpointSeconds": 1,
        "maxRestarts": 3,
    }
    if not fleet_prior:
        spec["reliability"]["restartSeconds"] = RESTART_SECONDS
    document["metadata"] = {"name": "eta-accuracy"}
    return document


def _local_plan(fleet_prior: bool) -> LocalPlan:
    """The plan run here; unless `fleet_prior`, with the failure rate the benchmark injects:
    one interruption per run of about `NOMINAL_RUN_SECONDS` (24 per process-hour on 2
    processes). That is above the spec's bound of 1 per GPU-hour (meant for clusters,
    whose published rates are about 2e-5), so it is set on the plan the ETA starts from,
    not on the spec; the planned duration leaves the interruption out."""
    spec = parse_training_plan_spec(_document(fleet_prior))
    local = plan_locally("eta-accuracy", spec, PROCESSES, load_catalog())
    if fleet_prior:
        return local
    reliability = local.plan.reliability.model_copy(
        update={"mean_seconds_between_interruptions": NOMINAL_RUN_SECONDS}
    )
    return replace(local, plan=local.plan.model_copy(update={"reliability": reliability}))


def score(revisions: list[Revision]) -> tuple[float, list[tuple[float, float, float, float]]]:
    """The actual training time and, per goal progress, (progress seen, engine error,
    naive error), errors relative to the actual duration."""
    end = next(r.elapsed for r in revisions if r.total_steps and r.step >= r.total_steps)
    rows = []
    for goal in GOALS:
        seen = next(r for r in revisions if r.total_steps and r.step / r.total_steps >= goal)
        progress = seen.step / seen.total_steps
        naive = naive_remaining_seconds(seen.elapsed, progress) or 0.0
        engine_error = abs(seen.elapsed + seen.eta_seconds - end) / end
        naive_error = abs(seen.elapsed + naive - end) / end
        rows.append((goal, progress, engine_error, naive_error))
    return end, rows


def main() -> int:
    parser = benchmark_parser("benchmarks.eta_accuracy", __doc__)
    parser.add_argument(
        "--fleet-prior",
        action="store_true",
        help="plan with the fleet's default failure rate instead of the injected one",
    )
    fleet_prior = bool(parser.parse_args().fleet_prior)
    local = _local_plan(fleet_prior)
    agents: list[int] = []
    killed: list[int] = []

    def on_revision(revision: Revision, _: str) -> None:
        if not killed and revision.total_steps and revision.step >= KILL_AT * revision.total_steps:
            workers = worker_pids(agents[-1])
            if 1 in workers:
                os.kill(workers[1], signal.SIGKILL)
                killed.append(revision.step)

    with tempfile.TemporaryDirectory() as work:
        result = run_local(
            local,
            LocalOptions(
                work_dir=Path(work),
                metrics_port=0,
                metrics_address="127.0.0.1",
                scrape_interval=1.0,
                show=False,
            ),
            Hooks(on_attempt=agents.append, on_revision=on_revision),
            Console(file=io.StringIO()),
        )
    if result.exit_code != 0 or not killed:
        print(f"run failed: exit {result.exit_code}, killed at {killed}")
        return 1
    end, rows = score(result.revisions)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    prior = "fleet prior" if fleet_prior else "the plan states the injected failure rate"
    print(
        f"{STEPS} steps ({prior}), worker killed at step {killed[0]},"
        f" {result.restarts} restart(s), training took {end:.1f} s"
    )
    print("| progress | ETA error | naive error | goal |")
    print("|---:|---:|---:|---:|")
    status = 0
    for goal, progress, engine, naive in rows:
        print(
            f"| {goal:.0%} (seen at {progress:.1%}) | {engine:.1%} | {naive:.1%} |"
            f" < {GOALS[goal]:.0%} and < naive |"
        )
        if engine >= GOALS[goal] or engine >= naive:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
