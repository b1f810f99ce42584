"""What a local run runs: the spec adapted to this machine, its plan, and the torchrun
command and environment the launcher would give a pod, for one node of CPU processes.

Pure: no I/O, no clock. The caller picks the ports and directories.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from trainplan.api import Plan, TrainingPlanSpec
from trainplan.launcher import env
from trainplan.launcher.frameworks import launch_for
from trainplan.launcher.render import PlanRef, environment, torchrun_program
from trainplan.planner import Catalog, plan
from trainplan.planner.resolve import resolve_shape
from trainplan.planner.shapes import ModelShape

LOCAL_NAMESPACE: Final = "local"
"""The `namespace` label of a local run's metrics."""

LOCAL_RESTART_SECONDS: Final = 15.0
"""A local restart's cost (a new torchrun, torch import, resume) when the spec gives none:
the cluster default (a rescheduled pod, an image pull) would overstate it."""

TORCHRUN_RESTART_MARK: Final = "attempts left; will restart worker group"
"""What torchrun's agent logs (at INFO, `LOGLEVEL=INFO`) when it restarts its workers."""


@dataclass(frozen=True, slots=True)
class LocalPlan:
    """The spec as run here, its plan and the model shape."""

    name: str
    spec: TrainingPlanSpec
    plan: Plan
    shape: ModelShape


def local_spec(spec: TrainingPlanSpec, nproc: int) -> TrainingPlanSpec:
    """`spec` for `nproc` processes on this machine: `hardware.gpusPerNode` = nproc and
    `objective = {gpus: nproc}`; the parallelism pins and the catalog GPU type are kept,
    so the planned step time is the one of that GPU. Raises pydantic's ValidationError when
    the pins do not fit `nproc`."""
    document: dict[str, Any] = spec.to_document()
    document.setdefault("hardware", {})["gpusPerNode"] = nproc
    document["objective"] = {"gpus": nproc}
    reliability = document.setdefault("reliability", {})
    reliability.setdefault("restartSeconds", LOCAL_RESTART_SECONDS)
    return TrainingPlanSpec.model_validate(document)


def plan_locally(name: str, spec: TrainingPlanSpec, nproc: int, catalog: Catalog) -> LocalPlan:
    """Plan `spec` for `nproc` local processes (planner errors propagate)."""
    adapted = local_spec(spec, nproc)
    planned = plan(adapted, catalog)
    shape, _ = resolve_shape(adapted, catalog)
    return LocalPlan(name, adapted, planned, shape)


@dataclass(frozen=True, slots=True)
class LocalLaunch:
    """The command and the environment additions of one local torchrun."""

    command: tuple[str, ...]
    environment: Mapping[str, str]


def local_launch(
    local: LocalPlan,
    *,
    checkpoint_dir: str,
    metrics_port: int,
    linger_seconds: float,
    data: str | None = None,
    python: str = sys.executable,
) -> LocalLaunch:
    """The launcher's torchrun command, standalone on one node, and the `TRAINPLAN_`
    environment of the plan with a local checkpoint directory and metrics port."""
    spec, planned = local.spec, local.plan
    launch = launch_for(spec, planned, local.shape, checkpoint_dir)
    extra = [
        "--metrics-address",
        "127.0.0.1",
        "--linger-seconds",
        f"{linger_seconds:g}",
    ]
    if data is not None:
        extra += ["--data", data]
    command = (
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={planned.gpus}",
        f"--max-restarts={spec.reliability.max_restarts}",
        *torchrun_program(launch.program),
        *extra,
        *launch.arguments,  # the user's job.args last: they override
    )
    values: dict[str, str] = {}
    for entry in environment(PlanRef(local.name, LOCAL_NAMESPACE), spec, planned, local.shape):
        value = entry.get("value")
        if isinstance(value, str):
            values[str(entry["name"])] = value
    values[env.CHECKPOINT_DIR] = checkpoint_dir
    values[env.METRICS_PORT] = str(metrics_port)
    store_name, store_value = env.TORCHRUN_FRESH_STORE
    values[store_name] = store_value
    values["OMP_NUM_THREADS"] = "1"
    values["PYTHONUNBUFFERED"] = "1"
    values["LOGLEVEL"] = "INFO"
    return LocalLaunch(command, values)
