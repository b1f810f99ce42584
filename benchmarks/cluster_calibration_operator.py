"""The simulated cluster of `benchmarks.cluster_calibration`, learnt by the operator itself.

`python -m benchmarks.cluster_calibration_operator [--checkpoints 0,1,3,10] [--sequences 3]`
(about two minutes) runs the real Kopf operator in-process against kmock's Kubernetes
emulator (the integration tests' harness, on 127.0.0.1), with one ClusterCalibration
marked `spec.default` for the GPU type and no records. The cluster is the one
`benchmarks.cluster_calibration` simulates (`make_truth`): true step time 1 / 0.75 of the
catalog's, 3x the fleet failure rate, 3% run-to-run scatter of the step time and 5% more
of the GPU-hours.

Runs of different sizes (`RUNS`) finish one after another, each as the cluster would run
it: the TrainingPlan (naming no calibration) is applied, its Job goes active, and its
rank-0 pod serves metrics from the simulated truth: a start-up (what a whole run spends
beyond its steady steps, the planner's goodput), then steps at the run's true step time,
a checkpoint of the plan's seconds every checkpoint interval, and the last-step timestamp
the ETA engine times intervals by. Interruptions come at the true rate over the run's
GPU-hours: the trainer's container restarts (the pod's restart count), its metrics are
gone for the restart time, and it resumes from its last checkpoint. The operator's ETA
loop measures all of it; the Job completes at the end of the last step, and the operator
writes the run's record into the ClusterCalibration.

The operator's clock is simulated (`SimulatedClock`): one step every `STEP_WALL_SECONDS`
of wall time (75-350x), jumping ahead over the start-up, the middle of each run and each
restart once the operator has seen where it was, so a run of days takes seconds; the pod
reads the same clock. After 0, 1, 3 and 10 finished runs, new plans of other sizes
(`NEW_PLANS`) are applied, planned by the operator with the records so far, compared with
the truth (the error of their step time, duration and GPU-hours, and how often a fresh
run's step time and GPU-hours fall inside their 10-90% ranges), and deleted. `SEQUENCES`
sequences of runs (seeds 0, 1, ..., each its own operator and emulator) are pooled, where
`benchmarks.cluster_calibration` pools 20 seeds of simulated records.

Exits 1 when a goal is missed: errors above 5% after three runs, an operator-measured step
time more than 1% off the served one, an interruption not recorded, a new plan not
corrected by all the records so far, or a record missing.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kmock
import numpy as np
from aiohttp import web

from benchmarks.arguments import benchmark_parser
from benchmarks.cluster_calibration import (
    CHECKPOINTS,
    FAILURE_RATE_MULTIPLE,
    GPU,
    NEW_PLANS,
    RUN_SCATTER_LOG,
    RUNS,
    TRUE_STEP_FACTOR,
    WHOLE_RUN_SCATTER_LOG,
    Truth,
    make_truth,
    spec,
)
from benchmarks.reporter_overhead import cpu_model
from tests.integration.harness import (
    Cluster,
    OperatorProcess,
    VersionedEmulator,
    declare_resources,
)
from trainplan.controller import OperatorConfig
from trainplan.controller.calibration import RECORD_MIN_STEPS
from trainplan.local.runner import free_port
from trainplan.planner import Catalog, load_catalog

CALIBRATION = "a100-simulated"
STEP_WALL_SECONDS = 0.04
"""Wall seconds of one served step: the clock runs step_seconds / this times faster."""
ETA_INTERVAL_SECONDS = 0.1
"""The operator's ETA revision interval (wall seconds)."""
MEASURED_STEPS = RECORD_MIN_STEPS + 20
"""Steps the ETA loop watches at the clock's pace before the clock jumps ahead."""
SERVE_LAG_WALL_SECONDS = 0.25
"""The pod serves the run as it was this long ago (wall), so its last-step time is never
after the `now` of the revision that scrapes it (the engine ignores a future one)."""
COVERAGE_DRAWS = 50
"""Fresh runs of each new plan drawn to count how often its ranges hold one."""
MAX_INTERRUPTIONS = 5
"""Interruptions of one run at most (each takes a few wall seconds); the rate gives ~1."""
SEQUENCES = 3
"""Sequences of runs (each its own operator and emulator, seeds 0, 1, ...), pooled."""
ERROR_GOAL = 0.05
"""New plans' mean error after three runs at most."""
MEASURED_GOAL = 0.01
"""The operator's measured step time within this of the served one."""
WAIT_SECONDS = 30.0
PLANNING_WAIT_SECONDS = 120.0
DELETION_WAIT_SECONDS = 90.0
"""Longer than Kopf's default retry delay of a failed deletion handler (60 s)."""
IMAGE = "registry.example/train:1.0"


class SimulatedClock:
    """The operator's and the pod's clock: `speed` simulated seconds per wall second
    from `start`, and jumps ahead. Read from the operator's thread too."""

    def __init__(self, start: datetime, speed: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._origin_seconds = start.timestamp()
        self._wall_seconds = time.monotonic()
        self._speed = speed

    def seconds(self) -> float:
        """Simulated now, as a POSIX timestamp."""
        with self._lock:
            return self._origin_seconds + (time.monotonic() - self._wall_seconds) * self._speed

    def __call__(self) -> datetime:
        return datetime.fromtimestamp(self.seconds(), tz=UTC)

    @property
    def speed(self) -> float:
        return self._speed

    def _rebase(self, jump_to_seconds: float, speed: float) -> None:
        with self._lock:
            wall = time.monotonic()
            now = self._origin_seconds + (wall - self._wall_seconds) * self._speed
            self._origin_seconds = max(now, jump_to_seconds)
            self._wall_seconds, self._speed = wall, speed

    def set_speed(self, speed: float) -> None:
        """Go on from now at `speed`."""
        self._rebase(-math.inf, speed)

    def jump_to(self, seconds: float) -> None:
        """Jump ahead to `seconds` (never back)."""
        self._rebase(seconds, self._speed)


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a run without interruption: from `first_step` (a checkpoint) at
    `start_seconds` until its trainer fails at `failed_seconds` (None: the last)."""

    start_seconds: float
    first_step: int
    failed_seconds: float | None


@dataclass(frozen=True, slots=True)
class SimulatedRun:
    """A run as the cluster runs it: a start-up, steps of `step_seconds`, a checkpoint
    of `checkpoint_seconds` after every `interval_steps` steps, segments between
    restarts."""

    started_seconds: float
    """When its Job started; the first segment begins after the start-up."""
    step_seconds: float
    checkpoint_seconds: float
    interval_steps: int
    total_steps: int
    tokens_per_step: int
    segments: tuple[Segment, ...]

    def done_seconds(self, segment: Segment, step: int) -> float:
        """When `step` completes in `segment`: a checkpoint written after every multiple
        of the interval delays the step after it."""
        checkpoints = max(
            0, (step - 1) // self.interval_steps - segment.first_step // self.interval_steps
        )
        return (
            segment.start_seconds
            + (step - segment.first_step) * self.step_seconds
            + checkpoints * self.checkpoint_seconds
        )

    def state_at(self, seconds: float) -> tuple[int, float | None] | None:
        """(step, when it completed) at `seconds`: step 0 with no time while the run
        starts up, None before it and while the trainer restarts (no metrics)."""
        if seconds < self.started_seconds:
            return None
        if seconds < self.segments[0].start_seconds:
            return 0, None
        for segment in self.segments:
            if seconds < segment.start_seconds:
                return None
            if segment.failed_seconds is not None and seconds >= segment.failed_seconds:
                continue
            steps = range(segment.first_step, self.total_steps + 1)
            found = bisect.bisect_right(
                steps, seconds, key=lambda step: self.done_seconds(segment, step)
            )
            step = steps[max(0, found - 1)]
            return step, self.done_seconds(segment, step)
        return None

    @property
    def end_seconds(self) -> float:
        return self.done_seconds(self.segments[-1], self.total_steps)

    @property
    def mean_step_seconds(self) -> float:
        """The step time with the checkpoints averaged in, as a ratio estimator sees it."""
        return self.step_seconds + self.checkpoint_seconds / self.interval_steps


def simulated_run(
    *,
    start_seconds: float,
    startup_seconds: float,
    step_seconds: float,
    checkpoint_seconds: float,
    interval_steps: int,
    total_steps: int,
    tokens_per_step: int,
    failure_steps: Sequence[int],
    restart_seconds: float,
) -> SimulatedRun:
    """The run's segments: it fails just after each of `failure_steps` (increasing) is
    first reached, and resumes `restart_seconds` later from its last checkpoint."""
    run = SimulatedRun(
        start_seconds,
        step_seconds,
        checkpoint_seconds,
        interval_steps,
        total_steps,
        tokens_per_step,
        (),
    )
    segments: list[Segment] = []
    segment = Segment(start_seconds + startup_seconds, 0, None)
    for failure in failure_steps:
        failed = run.done_seconds(segment, failure) + step_seconds / 2
        segments.append(Segment(segment.start_seconds, segment.first_step, failed))
        resumed = failure // interval_steps * interval_steps
        segment = Segment(failed + restart_seconds, resumed, None)
    return SimulatedRun(
        start_seconds,
        step_seconds,
        checkpoint_seconds,
        interval_steps,
        total_steps,
        tokens_per_step,
        (*segments, segment),
    )


class TrainingPod:
    """The running plan's rank-0 metrics endpoint, served from its simulated run as it
    was `SERVE_LAG_WALL_SECONDS` ago on the simulated clock."""

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock
        self.run: SimulatedRun | None = None

    async def metrics(self, _: web.Request) -> web.Response:
        run = self.run
        served = self.clock.seconds() - SERVE_LAG_WALL_SECONDS * self.clock.speed
        state = None if run is None else run.state_at(served)
        if run is None or state is None:
            return web.Response(status=503, text="restarting")
        step, done = state
        written = step // run.interval_steps
        page = (
            "# TYPE trainplan_train_step gauge\n"
            f"trainplan_train_step {step}\n"
            "# TYPE trainplan_train_tokens gauge\n"
            f"trainplan_train_tokens {step * run.tokens_per_step}\n"
        )
        if done is not None:
            page += (
                "# TYPE trainplan_train_last_step_timestamp_seconds gauge\n"
                f"trainplan_train_last_step_timestamp_seconds {done}\n"
            )
        if written:
            page += (
                "# TYPE trainplan_train_checkpoint_step gauge\n"
                f"trainplan_train_checkpoint_step {written * run.interval_steps}\n"
                "# TYPE trainplan_train_checkpoint_seconds histogram\n"
                f'trainplan_train_checkpoint_seconds_bucket{{le="+Inf"}} {written}\n'
                f"trainplan_train_checkpoint_seconds_count {written}\n"
                f"trainplan_train_checkpoint_seconds_sum {written * run.checkpoint_seconds}\n"
            )
        return web.Response(text=page)


@dataclass(frozen=True, slots=True)
class RunReport:
    """One finished run: what the pod served and what the operator recorded."""

    preset: str
    gpus: int
    served_step_seconds: float
    served_mean_step_seconds: float
    """With the checkpoints averaged in."""
    measured_step_seconds: float
    """Measured by the ETA loop after `MEASURED_STEPS` steps at the clock's pace (before
    any checkpoint of the runs here)."""
    recorded_step_seconds: float
    """In the ClusterCalibration record, at the end of the run (the checkpoint seconds
    averaged into the run's mean step taken out again)."""
    interruptions: int
    recorded_interruptions: int
    recorded_restart_seconds: float | None
    """Measured by the ETA loop (the cluster's restarts take the catalog's)."""
    simulated_gpu_hours: float
    recorded_gpu_hours: float

    @property
    def measured_error(self) -> float:
        """The larger error of the measured and of the recorded step time, each against
        the served one (the steady step, without checkpoints)."""
        return max(
            abs(self.measured_step_seconds / self.served_step_seconds - 1),
            abs(self.recorded_step_seconds / self.served_step_seconds - 1),
        )


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """New plans after `runs` finished runs, against the truth."""

    runs: int
    calibration_runs: tuple[int, ...]
    """The run count each new plan's `status.plan.calibration` names (0: none)."""
    step_error: float
    duration_error: float
    gpu_hours_error: float
    step_inside: float
    gpu_hours_inside: float


@dataclass(frozen=True, slots=True)
class Result:
    runs: tuple[RunReport, ...]
    checkpoints: tuple[CheckpointReport, ...]
    records: int
    wall_seconds: float
    restart_seconds: float
    """What the cluster's restarts take."""


def _truth_of(truth: object, preset: str, gpus: int) -> Truth:
    found: Truth = truth(preset, gpus)  # type: ignore[operator]
    return found


def _document(name: str, preset: str, gpus: int, job: dict[str, Any]) -> dict[str, Any]:
    body = spec(preset, gpus).model_dump(mode="json", by_alias=True, exclude_unset=True)
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": {**body, "job": {"image": IMAGE, **job}},
    }


def _calibration() -> dict[str, Any]:
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "ClusterCalibration",
        "metadata": {"name": CALIBRATION},
        "spec": {"gpuType": GPU, "default": True},
    }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()


@dataclass
class Simulation:
    """The cluster, the operator on the simulated clock and the running pod."""

    cluster: Cluster
    clock: SimulatedClock
    pod: TrainingPod
    pod_port: int
    catalog: Catalog
    truth: object
    rng: np.random.Generator
    reports: list[RunReport] = field(default_factory=list)

    def status(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.cluster.plan(name).get("status", {}) or {}
        return found

    def planned(self, name: str) -> bool:
        return self.status(name).get("phase") in ("Launching", "Rejected")

    def finalized(self, name: str) -> bool:
        return bool(self.cluster.plan(name).get("metadata", {}).get("finalizers"))

    def gone(self, name: str) -> bool:
        return self.cluster.plan(name) == {}

    def failures_counted(self, name: str, count: int) -> bool:
        return int(self.status(name).get("failures", {}).get("count", 0)) >= count

    def progress_step(self, name: str) -> int:
        return int(self.status(name).get("progress", {}).get("step", -1))

    def records(self) -> list[dict[str, Any]]:
        status = self.cluster.cluster_calibration(CALIBRATION).get("status", {}) or {}
        return list(status.get("records", []) or [])

    async def wait(
        self, check: Callable[[], bool], what: str, timeout_seconds: float = WAIT_SECONDS
    ) -> None:
        await self.cluster.wait_for(check, what, timeout_seconds)

    async def wait_gone(self, name: str) -> None:
        """Wait for a deleted plan to go; if it stays, say what holds it."""
        try:
            await self.wait(
                functools.partial(self.gone, name), f"{name} to go", DELETION_WAIT_SECONDS
            )
        except AssertionError as error:
            meta = self.cluster.plan(name).get("metadata", {})
            held = {
                key: meta.get(key)
                for key in ("finalizers", "deletionTimestamp", "resourceVersion", "annotations")
            }
            raise AssertionError(f"{error}; the plan's metadata: {held}") from error

    async def revised_after(self, name: str, seconds: float) -> None:
        """Wait for an ETA revision whose clock read at least `seconds`."""

        def revised() -> bool:
            stamp = self.status(name).get("lastUpdatedTime")
            return isinstance(stamp, str) and datetime.fromisoformat(stamp).timestamp() >= seconds

        await self.wait(revised, f"a revision of {name} after {_iso(seconds)}")

    async def _patch_pod(self, pod: str, status: dict[str, Any]) -> None:
        code, answer = await self.cluster._call(
            "PATCH", f"/api/v1/namespaces/default/pods/{pod}/status", {"status": status}
        )
        assert code == 200, answer

    async def run(self, index: int, preset: str, gpus: int) -> RunReport:
        """One run from apply to its record."""
        name = f"run-{index:02d}-{preset.replace('.', '-')}-{gpus}"
        real = _truth_of(self.truth, preset, gpus)
        records_before = len(self.records())
        await self.cluster.apply_plan(_document(name, preset, gpus, {"metricsPort": self.pod_port}))
        await self.wait(
            functools.partial(self.planned, name),
            f"{name} to be planned",
            PLANNING_WAIT_SECONDS,
        )
        status = self.status(name)
        assert status["phase"] == "Launching", status.get("conditions")
        planned, job = status["plan"], status["jobName"]
        # The truth for the layout the plan runs: the catalog's step time of that layout
        # (the plan's, less the calibration that corrected it) times the true factor.
        factor = (planned.get("calibration") or {}).get("stepSecondsFactor", 1.0)
        true_ratio = real.step_seconds / real.catalog_step_seconds
        scatter = math.exp(self.rng.normal(0.0, RUN_SCATTER_LOG))
        step_seconds = planned["stepSeconds"] / factor * true_ratio * scatter
        reliability = planned["reliability"]
        interval = int(reliability["checkpointIntervalSteps"])
        total = int(planned["totalSteps"])
        # What a whole run spends beyond its steady steps (start-up, evaluations, data
        # stalls: the planner's goodput, with the whole-run scatter), before its first
        # step, where the ETA's speed and interruptions leave it out and its GPU-hours
        # count it.
        whole = math.exp(self.rng.normal(0.0, WHOLE_RUN_SCATTER_LOG))
        goodput = self.catalog.calibration.run_goodput
        startup = max(0.0, total * step_seconds * (whole / goodput - 1))
        # The trainer checkpoints at the plan's interval, at the cluster's true write rate.
        checkpoint_seconds = real.checkpoint_seconds
        up_seconds = startup + total * step_seconds + total // interval * checkpoint_seconds
        rate = FAILURE_RATE_MULTIPLE * self.catalog.calibration.interruptions_per_gpu_hour
        count = min(int(self.rng.poisson(rate * gpus * up_seconds / 3600.0)), MAX_INTERRUPTIONS)
        low, high = 3 * MEASURED_STEPS, total - 20
        failures = sorted(
            int(step) for step in self.rng.choice(np.arange(low, high), count, replace=False)
        )
        self.clock.set_speed(step_seconds / STEP_WALL_SECONDS)
        lag = SERVE_LAG_WALL_SECONDS * self.clock.speed
        start = self.clock.seconds() + lag
        run = simulated_run(
            start_seconds=start,
            startup_seconds=startup,
            step_seconds=step_seconds,
            checkpoint_seconds=checkpoint_seconds,
            interval_steps=interval,
            total_steps=total,
            tokens_per_step=int(planned["tokensPerStep"]),
            failure_steps=failures,
            restart_seconds=self.catalog.calibration.restart_seconds,
        )
        self.pod.run = run
        pod = f"{job}-0-sim"
        container: dict[str, Any] = {"name": "trainer", "restartCount": 0, "ready": True}
        code, answer = await self.cluster._call(
            "POST",
            "/api/v1/namespaces/default/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "namespace": "default",
                    "uid": f"pod-{name}",
                    "labels": {"trainplan.dev/plan": name},
                    "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
                },
                "status": {
                    "phase": "Running",
                    "podIP": "127.0.0.1",
                    "containerStatuses": [container],
                },
            },
        )
        assert code in (200, 201), answer
        await self.cluster.write_job_status(job, {"active": 1, "startTime": _iso(start)})
        await self.wait(lambda: self.status(name).get("phase") == "Running", f"{name} running")
        await self.revised_after(name, start + lag)
        self.clock.jump_to(run.segments[0].start_seconds + lag)
        await self.wait(
            lambda: (
                self.progress_step(name) >= MEASURED_STEPS
                and "measuredStepSeconds" in self.status(name).get("progress", {})
            ),
            f"{name} to be measured over {MEASURED_STEPS} steps",
        )
        measured = float(self.status(name)["progress"]["measuredStepSeconds"])
        for number, (failure, segment) in enumerate(zip(failures, run.segments[1:], strict=True)):
            failed = run.segments[number].failed_seconds
            assert failed is not None
            self.clock.jump_to(failed - 5 * step_seconds + lag)
            await self.revised_after(name, failed - 5 * step_seconds + lag)
            self.clock.jump_to(failed + lag)
            container = {
                "name": "trainer",
                "restartCount": number + 1,
                "ready": True,
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
            }
            await self._patch_pod(pod, {"phase": "Running", "containerStatuses": [container]})
            await self.wait(
                functools.partial(self.failures_counted, name, number + 1),
                f"{name}'s interruption {number + 1} to be counted",
            )
            self.clock.jump_to(segment.start_seconds + lag)
            await self.revised_after(name, segment.start_seconds + lag)
            regained = run.done_seconds(segment, min(total, failure + 10)) + lag
            self.clock.jump_to(regained)
            await self.revised_after(name, regained)
        self.clock.jump_to(run.end_seconds - 10 * step_seconds + lag)
        await self.wait(lambda: self.progress_step(name) >= total, f"{name} to reach its end")
        await self.cluster.complete_job(job, _iso(run.end_seconds))
        await self.wait(lambda: self.status(name).get("phase") == "Succeeded", f"{name} done")
        await self.wait(
            lambda: len(self.records()) > records_before, f"{name}'s calibration record"
        )
        self.pod.run = None
        record = self.records()[-1]
        report = RunReport(
            preset=preset,
            gpus=gpus,
            served_step_seconds=step_seconds,
            served_mean_step_seconds=run.mean_step_seconds,
            measured_step_seconds=measured,
            recorded_step_seconds=float(record["measuredStepSeconds"]),
            interruptions=count,
            recorded_interruptions=int(record.get("interruptions", 0)),
            recorded_restart_seconds=record.get("restartSeconds"),
            simulated_gpu_hours=gpus * (run.end_seconds - start) / 3600.0,
            recorded_gpu_hours=float(record.get("gpuHours", 0.0)),
        )
        self.reports.append(report)
        return report

    async def new_plans(self, runs: int) -> CheckpointReport:
        """The new plans after `runs` finished runs, against the truth; deleted after."""
        names = {
            f"new-after-{runs}-{preset.replace('.', '-')}-{gpus}": (preset, gpus)
            for preset, gpus in NEW_PLANS
        }
        for name, (preset, gpus) in names.items():
            await self.cluster.apply_plan(_document(name, preset, gpus, {}))
        step, duration, hours, step_in, hours_in, counted = [], [], [], [], [], []
        for name, (preset, gpus) in names.items():
            await self.wait(
                functools.partial(self.planned, name),
                f"{name} to be planned",
                PLANNING_WAIT_SECONDS,
            )
            status = self.status(name)
            assert status["phase"] == "Launching", status.get("conditions")
            planned = status["plan"]
            real = _truth_of(self.truth, preset, gpus)
            step.append(abs(planned["stepSeconds"] / real.step_seconds - 1))
            duration.append(abs(planned["durationSeconds"] / real.duration_seconds - 1))
            hours.append(abs(planned["gpuHours"] / real.gpu_hours - 1))
            counted.append(int((planned.get("calibration") or {}).get("runs", 0)))
            step_range, hours_range = planned["stepSecondsRange"], planned["gpuHoursRange"]
            scatters = np.exp(self.rng.normal(0.0, RUN_SCATTER_LOG, COVERAGE_DRAWS))
            wholes = np.exp(self.rng.normal(0.0, WHOLE_RUN_SCATTER_LOG, COVERAGE_DRAWS))
            for scatter, whole in zip(scatters, wholes, strict=True):
                fresh_step = real.step_seconds * float(scatter)
                fresh_hours = real.gpu_hours * float(scatter * whole)
                step_in.append(step_range["p10"] <= fresh_step <= step_range["p90"])
                hours_in.append(hours_range["p10"] <= fresh_hours <= hours_range["p90"])
        for name in names:
            # Deleted only once Kopf holds its finalizer, as a user's delete would find it.
            await self.wait(functools.partial(self.finalized, name), f"{name}'s finalizer")
            job = self.status(name).get("jobName")
            code, answer = await self.cluster._call(
                "DELETE", f"/apis/trainplan.dev/v1alpha1/namespaces/default/trainingplans/{name}"
            )
            assert code in (200, 202), answer
            await self.wait_gone(name)
            if job:  # the garbage collector's part
                await self.cluster._call("DELETE", f"/apis/batch/v1/namespaces/default/jobs/{job}")
        return CheckpointReport(
            runs=runs,
            calibration_runs=tuple(counted),
            step_error=statistics.mean(step),
            duration_error=statistics.mean(duration),
            gpu_hours_error=statistics.mean(hours),
            step_inside=sum(step_in) / len(step_in),
            gpu_hours_inside=sum(hours_in) / len(hours_in),
        )


async def simulate(checkpoints: Sequence[int] = CHECKPOINTS, seed: int = 0) -> Result:
    """Runs one after another, new plans after each of `checkpoints` finished runs."""
    started = time.monotonic()
    catalog = load_catalog()
    truth = make_truth(catalog)
    clock = SimulatedClock(datetime.now(tz=UTC))
    pod = TrainingPod(clock)
    app = web.Application()
    app.router.add_get("/metrics", pod.metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        pod_port = free_port()
        await web.TCPSite(runner, "127.0.0.1", pod_port).start()
        emulator = VersionedEmulator()
        declare_resources(emulator)
        async with emulator, kmock.Server(emulator, host="127.0.0.1"):
            cluster = Cluster(emulator)
            await cluster.create_cluster_calibration(_calibration())
            config = OperatorConfig(
                metrics_port=0,
                metrics_address="127.0.0.1",
                eta_interval_seconds=ETA_INTERVAL_SECONDS,
            )
            operator = OperatorProcess(cluster, catalog, config, clock=clock)
            await operator.start()
            try:
                # kmock matches each request against its whole history: drop it once the
                # operator's watches are up (nothing below asserts on requests).
                emulator.forget_served = True
                simulation = Simulation(
                    cluster, clock, pod, pod_port, catalog, truth, np.random.default_rng(seed)
                )
                reports = []
                for index in range(max(checkpoints, default=0) + 1):
                    if index in checkpoints:
                        reports.append(await simulation.new_plans(index))
                    if index < max(checkpoints, default=0):
                        preset, gpus = RUNS[index % len(RUNS)]
                        await simulation.run(index, preset, gpus)
                return Result(
                    runs=tuple(simulation.reports),
                    checkpoints=tuple(reports),
                    records=len(simulation.records()),
                    wall_seconds=time.monotonic() - started,
                    restart_seconds=catalog.calibration.restart_seconds,
                )
            finally:
                await operator.stop()
    finally:
        await runner.cleanup()


def pooled(checkpoints: Sequence[CheckpointReport]) -> CheckpointReport:
    """Checkpoints of several sequences after the same number of runs, averaged (each
    holds the same number of plans and draws)."""
    return CheckpointReport(
        runs=checkpoints[0].runs,
        calibration_runs=tuple(n for c in checkpoints for n in c.calibration_runs),
        step_error=statistics.mean(c.step_error for c in checkpoints),
        duration_error=statistics.mean(c.duration_error for c in checkpoints),
        gpu_hours_error=statistics.mean(c.gpu_hours_error for c in checkpoints),
        step_inside=statistics.mean(c.step_inside for c in checkpoints),
        gpu_hours_inside=statistics.mean(c.gpu_hours_inside for c in checkpoints),
    )


def _run_line(run: RunReport) -> str:
    restart = (
        ""
        if run.recorded_restart_seconds is None
        else f", restart {run.recorded_restart_seconds:.0f} s"
    )
    return (
        f"{run.preset} on {run.gpus} GPUs, served {run.served_step_seconds:.3f} s/step"
        f" ({run.served_mean_step_seconds:.3f} with checkpoints), measured"
        f" {run.measured_step_seconds:.3f}, recorded {run.recorded_step_seconds:.3f};"
        f" {run.interruptions} interruptions ({run.recorded_interruptions} recorded{restart});"
        f" {run.simulated_gpu_hours:,.0f} GPU-hours ({run.recorded_gpu_hours:,.0f} recorded)"
    )


def report(results: Sequence[Result]) -> list[str]:
    """Print the runs and the table (the sequences pooled); the goals missed."""
    missed = []
    print(
        f"machine: {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()}"
    )
    print(
        f"Simulated cluster: true step time x {TRUE_STEP_FACTOR:.3f} of the catalog's,"
        f" {FAILURE_RATE_MULTIPLE:g}x the fleet failure rate, {RUN_SCATTER_LOG:.0%} run-to-run"
        f" scatter of step time and {WHOLE_RUN_SCATTER_LOG:.0%} more of GPU-hours, restarts of"
        f" {results[0].restart_seconds:.0f} s; the operator against kmock, {len(results)}"
        f" sequence{'s' if len(results) > 1 else ''} of runs, {len(NEW_PLANS)} new plans x"
        f" {COVERAGE_DRAWS} fresh runs per checkpoint.\n"
    )
    for sequence, result in enumerate(results):
        for number, run in enumerate(result.runs, 1):
            where = f"sequence {sequence}, run {number}"
            print(f"{where}: {_run_line(run)}")
            if run.measured_error > MEASURED_GOAL:
                missed.append(f"{where}'s measured step time off by {run.measured_error:.1%}")
            if run.recorded_interruptions != run.interruptions:
                missed.append(f"{where}'s interruptions not all recorded")
        if result.records != len(result.runs):
            missed.append(f"sequence {sequence}: {result.records} records, {len(result.runs)} runs")
    print(
        "\n| finished runs | step-time error | duration error | GPU-hours error |"
        " step inside 10-90% | GPU-hours inside 10-90% |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for at in zip(*(result.checkpoints for result in results), strict=True):
        c = pooled(at)
        print(
            f"| {c.runs} | {c.step_error:.1%} | {c.duration_error:.1%} |"
            f" {c.gpu_hours_error:.1%} | {c.step_inside:.0%} | {c.gpu_hours_inside:.0%} |"
        )
        if c.runs >= 3 and max(c.step_error, c.duration_error, c.gpu_hours_error) > ERROR_GOAL:
            missed.append(f"errors above {ERROR_GOAL:.0%} after {c.runs} runs")
        if any(counted != c.runs for counted in c.calibration_runs):
            missed.append(f"new plans after {c.runs} runs planned with {c.calibration_runs} runs")
    runs = sum(len(result.runs) for result in results)
    records = sum(result.records for result in results)
    wall = sum(result.wall_seconds for result in results)
    print(f"\n{runs} runs and {records} records in {wall:.0f} s.")
    if missed:
        print("Missed: " + "; ".join(missed) + ".")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("benchmarks.cluster_calibration_operator", __doc__)
    parser.add_argument(
        "--checkpoints",
        default=",".join(str(c) for c in CHECKPOINTS),
        help="finished-run counts after which new plans are made (comma-separated)",
    )
    parser.add_argument(
        "--sequences", type=int, default=SEQUENCES, help="sequences of runs (seeds 0, 1, ...)"
    )
    args = parser.parse_args(argv)
    checkpoints = tuple(sorted({int(c) for c in args.checkpoints.split(",")}))
    try:
        results = [asyncio.run(simulate(checkpoints, seed)) for seed in range(args.sequences)]
    except KeyboardInterrupt:  # the operator, the emulator and the pod were stopped
        print("interrupted", file=sys.stderr)
        return 130
    return 1 if report(results) else 0


if __name__ == "__main__":
    sys.exit(main())
