"""The operator at scale: PLANS TrainingPlans against kmock's Kubernetes emulator, with
training metrics served on 127.0.0.1 for the running ones.

`python -m benchmarks.operator_scale [--plans N] [--interval S] [--rounds R]` runs
`trainplan operator` as its own process (so its CPU and memory are its own), creates the
plans, and measures:

- the time from the first create until every plan is planned and launched (its Job
  created, phase Launching);
- the operator's CPU per monitor round at steady state, once every plan runs (Job active,
  rank-0 pod Running) and has been revised once: CPU seconds over `rounds` ETA intervals,
  divided by the rounds; as a share of one core at the default 30 s interval;
- the operator's peak resident memory (VmHWM).

Goals on the reference 2-core machine: launched within 60 s; a round under 10% of one
core at 30 s (3 CPU-seconds); under 500 MB resident. The emulator and the metrics server
run in this process and share the machine's cores with the operator. Exits 1 when a goal
is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import yaml
from aiohttp import web

from benchmarks.arguments import benchmark_parser
from benchmarks.reporter_overhead import cpu_model
from tests.integration.harness import (
    JOBS,
    TRAINING_PLANS,
    Cluster,
    VersionedEmulator,
    declare_resources,
)
from trainplan.local.runner import free_port

LAUNCH_GOAL_SECONDS = 60.0
ROUND_GOAL_CORE_RATIO = 0.10
DEFAULT_INTERVAL_SECONDS = 30.0
MEMORY_GOAL_BYTES = 500 * 2**20
CONCURRENCY = 32
"""Requests the benchmark itself has in flight while creating plans and pods."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e10},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0"},
}


@dataclass(frozen=True, slots=True)
class Result:
    plans: int
    launch_seconds: float
    interval_seconds: float
    rounds: int
    round_cpu_seconds: float
    revised_plans: int
    peak_memory_bytes: int

    @property
    def round_core_ratio(self) -> float:
        """A round's CPU as a share of one core over the default 30 s interval."""
        return self.round_cpu_seconds / DEFAULT_INTERVAL_SECONDS


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _peak_memory_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


async def _bounded(jobs: Iterable[Callable[[], Awaitable[Any]]]) -> None:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(job: Callable[[], Awaitable[Any]]) -> None:
        async with limit:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def _wait(check: Callable[[], int], goal: int, what: str, timeout_seconds: float) -> None:
    """Poll `check` (how many are done) until it reaches `goal`, showing progress."""
    started = time.monotonic()
    shown = started
    while (done := check()) < goal:
        now = time.monotonic()
        if now - started > timeout_seconds:
            raise TimeoutError(f"timed out after {timeout_seconds:.0f}s waiting for {what}")
        if now - shown > 10:
            print(f"  {what}: {done}/{goal} after {now - started:.0f} s", flush=True)
            shown = now
        await asyncio.sleep(0.5)


class TrainingMetrics:
    """Every running plan's rank-0 endpoint (they all share 127.0.0.1:port): a step
    that advances with time."""

    def __init__(self, step_seconds: float = 0.5) -> None:
        self.started = time.monotonic()
        self.step_seconds = step_seconds

    async def serve(self, _: web.Request) -> web.Response:
        step = int((time.monotonic() - self.started) / self.step_seconds)
        return web.Response(
            text=(
                "# TYPE trainplan_train_step gauge\n"
                f"trainplan_train_step {step}\n"
                "# TYPE trainplan_train_tokens gauge\n"
                f"trainplan_train_tokens {step * 65536}\n"
                "# TYPE trainplan_train_last_step_timestamp_seconds gauge\n"
                f"trainplan_train_last_step_timestamp_seconds {time.time()}\n"
            )
        )


def _spec(index: int, port: int) -> dict[str, Any]:
    """Each plan its own token count: every plan is planned, none from another's result."""
    return {
        **SPEC,
        "data": {"tokens": SPEC["data"]["tokens"] + index * 1e7},
        "job": {**SPEC["job"], "metricsPort": port},
    }


def _pod(plan: str, job: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-0-bench",
            "namespace": "default",
            "uid": f"pod-{plan}",
            "labels": {"trainplan.dev/plan": plan},
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "containerStatuses": [{"name": "trainer", "restartCount": 0}],
        },
    }


async def _start_operator(
    cluster: Cluster, workdir: Path, interval_seconds: float
) -> asyncio.subprocess.Process:
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": cluster.url}}],
                "users": [{"name": "bench", "user": {"token": "bench"}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "bench"}}],
                "current-context": "kmock",
            }
        )
    )
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    script = Path(sys.executable).parent / "trainplan"
    with (workdir / "operator.log").open("w") as log:  # the child keeps its own handle
        process = await asyncio.create_subprocess_exec(
            str(script),
            "operator",
            "--liveness",
            liveness,
            "--metrics-port",
            "0",
            "--metrics-address",
            "127.0.0.1",
            "--eta-interval",
            str(interval_seconds),
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(workdir)},
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(liveness) as response:
                    if response.status == 200:
                        return process
            if process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the operator did not start: see {workdir / 'operator.log'}")
            await asyncio.sleep(0.2)


async def measure(*, plans: int, interval_seconds: float, rounds: int, workdir: Path) -> Result:
    """Run the whole benchmark once."""
    metrics = TrainingMetrics()
    app = web.Application()
    app.router.add_get("/metrics", metrics.serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    metrics_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", metrics_port).start()
    emulator = VersionedEmulator(forget_served=True)
    declare_resources(emulator)
    async with emulator, kmock.Server(emulator):
        cluster = Cluster(emulator)
        process = await _start_operator(cluster, workdir, interval_seconds)
        try:
            return await _run(
                cluster,
                process.pid,
                plans=plans,
                port=metrics_port,
                interval_seconds=interval_seconds,
                rounds=rounds,
            )
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
            await runner.cleanup()


async def _run(
    cluster: Cluster, pid: int, *, plans: int, port: int, interval_seconds: float, rounds: int
) -> Result:
    names = [f"plan-{index:04d}" for index in range(plans)]
    started = time.monotonic()
    await _bounded(
        lambda name=name, index=index: cluster.apply_plan(  # type: ignore[misc]
            {
                "apiVersion": "trainplan.dev/v1alpha1",
                "kind": "TrainingPlan",
                "metadata": {"name": name},
                "spec": _spec(index, port),
            }
        )
        for index, name in enumerate(names)
    )

    def launched() -> int:
        found = cluster.objects(TRAINING_PLANS)
        ready = [p for p in found.values() if p.get("status", {}).get("jobName")]
        return min(len(ready), len(cluster.objects(JOBS)))

    await _wait(launched, plans, "plans launched", timeout_seconds=600)
    launch_seconds = time.monotonic() - started
    print(f"{plans} plans planned and launched in {launch_seconds:.1f} s", flush=True)

    statuses = cluster.objects(TRAINING_PLANS)
    jobs = {name: statuses[name]["status"]["jobName"] for name in names}
    await _bounded(
        lambda name=name: cluster._call(  # type: ignore[misc]
            "POST", "/api/v1/namespaces/default/pods", _pod(name, jobs[name])
        )
        for name in names
    )
    await _bounded(
        lambda name=name: cluster.write_job_status(  # type: ignore[misc]
            jobs[name], {"active": 1, "startTime": "2026-11-22T00:00:00Z"}
        )
        for name in names
    )

    def revised() -> dict[str, str]:
        """Each revised plan's last revision time, by name."""
        return {
            name: str(p["status"].get("lastUpdatedTime"))
            for name, p in cluster.objects(TRAINING_PLANS).items()
            if p.get("status", {}).get("progress", {}).get("step")
        }

    await _wait(lambda: len(revised()), plans, "plans revised once", 600)
    print("steady state: every plan runs and has been revised", flush=True)
    before = revised()
    cpu_before = _cpu_seconds(pid)
    await asyncio.sleep(rounds * interval_seconds)
    cpu_seconds = _cpu_seconds(pid) - cpu_before
    after = revised()
    return Result(
        plans=plans,
        launch_seconds=launch_seconds,
        interval_seconds=interval_seconds,
        rounds=rounds,
        round_cpu_seconds=cpu_seconds / rounds,
        revised_plans=sum(1 for name in names if after.get(name) != before.get(name)),
        peak_memory_bytes=_peak_memory_bytes(pid),
    )


def report(result: Result) -> bool:
    """Print the table; True when every goal is met."""
    print(
        f"machine: {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()}"
    )
    rows = [
        (
            f"{result.plans:,} plans planned and launched",
            f"{result.launch_seconds:.1f} s",
            f"< {LAUNCH_GOAL_SECONDS:.0f} s",
            result.launch_seconds < LAUNCH_GOAL_SECONDS,
        ),
        (
            f"monitor round, {result.plans:,} running plans"
            f" ({result.revised_plans:,} revised in {result.rounds} rounds of"
            f" {result.interval_seconds:.0f} s)",
            f"{result.round_cpu_seconds:.2f} CPU-s = {result.round_core_ratio:.1%} of a core"
            f" at {DEFAULT_INTERVAL_SECONDS:.0f} s",
            f"< {ROUND_GOAL_CORE_RATIO:.0%}",
            result.round_core_ratio < ROUND_GOAL_CORE_RATIO
            and result.revised_plans == result.plans,
        ),
        (
            "operator peak resident memory",
            f"{result.peak_memory_bytes / 2**20:.0f} MB",
            f"< {MEMORY_GOAL_BYTES / 2**20:.0f} MB",
            result.peak_memory_bytes < MEMORY_GOAL_BYTES,
        ),
    ]
    print("| measure | result | goal | met |")
    print("|---|---:|---:|:---:|")
    for what, value, goal, met in rows:
        print(f"| {what} | {value} | {goal} | {'yes' if met else 'NO'} |")
    return all(met for *_, met in rows)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("benchmarks.operator_scale", __doc__)
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0, help="ETA interval, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the operator's log here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trainplan-scale-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(
            measure(
                plans=args.plans,
                interval_seconds=args.interval,
                rounds=args.rounds,
                workdir=workdir,
            )
        )
    met = report(result)
    if args.json is not None:
        args.json.write_text(json.dumps({**asdict(result), "goals_met": met}, indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
