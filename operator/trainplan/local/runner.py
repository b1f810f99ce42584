"""Running a plan on this machine: torchrun as a supervised child process group, its
metrics scraped on localhost, the ETA revised, shown live and exported.

The supervisor restarts torchrun (which resumes from the newest checkpoint) when it exits
non-zero, up to `reliability.maxRestarts` times; torchrun restarts its own workers up to
as many times first (`--max-restarts`). Both count as failures for the ETA: the
supervisor's restarts, plus torchrun's, read from its log. A configuration or usage
error (exit 2 or 3) is not retried.

Before anything of a previous run is deleted, `trainplan.local.preflight` checks this
machine and binds the metrics port (a `LocalSetupError` otherwise).

Signals: the first SIGINT or SIGTERM stops the run's processes (SIGTERM, then SIGKILL
after `_STOP_SECONDS`), waits for them, writes the report of the run so far (marked
interrupted), removes the temporary directories and returns exit code 128 + the signal
(130, 143); a second one kills them at once and exits. torchrun starts each worker in a
session of its own, so the run's processes are found by a mark in their environment
(`RUN_MARK`), not by process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from trainplan.eta import Estimate, EtaState, Observation, plan_facts, revise
from trainplan.launcher.env import FAIL_JOB_EXIT_CODES
from trainplan.local.exporter import MetricsServer, local_snapshot
from trainplan.local.feasibility import model_state_bytes
from trainplan.local.launch import (
    LOCAL_NAMESPACE,
    TORCHRUN_RESTART_MARK,
    LocalPlan,
    local_launch,
)
from trainplan.local.machine import Machine, processes_with_environment, this_machine
from trainplan.local.preflight import (
    DATASET_TOKENS,
    DEFAULT_METRICS_PORT,
    LocalSetupError,
    Prepared,
    prepare,
)
from trainplan.local.report import Revision, summarize, write_plot, write_summary
from trainplan.monitor import ScrapeError, ScrapeLimits, TrainingMetrics, scrape
from trainplan.monitor.exposition import PlanMetrics

__all__ = [
    "DATASET_TOKENS",
    "DEFAULT_METRICS_PORT",
    "Hooks",
    "LocalOptions",
    "LocalResult",
    "LocalSetupError",
    "run_local",
]

_STOP_SECONDS: Final = 10.0
_POLL_SECONDS: Final = 0.05
RUN_MARK: Final = "TRAINPLAN_LOCAL_RUN"
"""The environment variable, with a value unique to each run, that marks its processes."""
REPORT_FILES: Final = ("summary.json", "eta.png")


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """How to run: `metrics_port` None binds `DEFAULT_METRICS_PORT`, or any free port when
    it is taken; 0 any free port; another port exactly (an error when taken).
    `trainer_metrics_port` (the trainer's own series, on 127.0.0.1) 0 takes a free one;
    `report_dir` None writes no report; `work_dir` None uses the report directory, or a
    temporary one."""

    eta_log: Path | None = None
    report_dir: Path | None = None
    work_dir: Path | None = None
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"
    scrape_interval: float = 1.0
    show: bool = True
    trainer_metrics_port: int = 0


@dataclass
class Hooks:
    """Callbacks for tests and embedders: `on_attempt(torchrun_pid)` at each start,
    `on_revision(revision, exporter_url)` after each revision."""

    on_attempt: Callable[[int], None] | None = None
    on_revision: Callable[[Revision, str], None] | None = None


@dataclass
class LocalResult:
    """How the run ended."""

    exit_code: int
    restarts: int
    final_step: int
    total_steps: int
    seconds: float
    final_loss: float | None
    revisions: list[Revision] = field(default_factory=list)
    summary: dict[str, object] | None = None
    log_path: Path | None = None
    interrupted_by: int | None = None
    """The signal that stopped the run, if one did."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _needs_dataset(local: LocalPlan) -> bool:
    """The byte-level model (vocab 256) of the reference trainer trains on the generated
    dataset; other shapes on the trainer's synthetic tokens."""
    from trainplan.launcher.frameworks import DEFAULT_PROGRAMS

    program = DEFAULT_PROGRAMS.get(local.spec.job.framework)
    reference = program is not None and "trainplan.runtime.train" in program
    return reference and local.shape.vocab_size == 256


def _child_environment(additions: dict[str, str]) -> dict[str, str]:
    """This process's environment without a parent job's torchrun and plan variables,
    with `additions`."""
    dropped = ("TRAINPLAN_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC_")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    if Path("/sys/class/net/lo").exists():
        environment.setdefault("GLOO_SOCKET_IFNAME", "lo")
    environment.update(additions)
    return environment


def _signal_processes(mark: str, group: int | None, signum: int) -> None:
    """Send `signum` to torchrun's process group and to every process marked `mark`."""
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
    for pid in processes_with_environment(mark):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


class _Display:
    """The live terminal view (rich)."""

    def __init__(self, local: LocalPlan, console: Console, show: bool) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            console=console,
            disable=not show,
            transient=False,
        )
        self.task = self.progress.add_task(local.name, total=local.plan.total_steps, info="")
        self.planned = local.plan.step_seconds
        self.planned_duration = local.plan.duration_seconds
        self.gpu_type = local.plan.gpu_type

    def update(self, estimate: Estimate, restarts: int) -> None:
        if estimate.waiting_for_first_step:
            # The plan is for its GPU type, not this machine: no remaining time is shown
            # until a step has been measured.
            info = (
                f"waiting for the first step | plan: {_duration(self.planned_duration)}"
                f" on {self.gpu_type} | restarts {restarts}"
            )
            self.progress.update(self.task, completed=0, info=info)
            return
        measured = estimate.measured_step_seconds
        step_text = f"{measured:.3f} s/step" if measured else "-- s/step"
        info = (
            f"{step_text} (plan {self.planned:.3f}) | ETA {_duration(estimate.remaining_seconds)}"
            f" [{_duration(estimate.earliest_seconds)}-{_duration(estimate.latest_seconds)}]"
            f" | restarts {restarts}"
        )
        self.progress.update(self.task, completed=estimate.step, info=info)


def _duration(seconds: float) -> str:
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class _Supervisor:
    def __init__(
        self,
        local: LocalPlan,
        *,
        options: LocalOptions,
        hooks: Hooks,
        console: Console,
        prepared: Prepared,
        metrics: PlanMetrics,
    ) -> None:
        self.local = local
        self.options = options
        self.hooks = hooks
        self.console = console
        self.prepared = prepared
        self.work = prepared.work
        self.mark = f"{RUN_MARK}={uuid.uuid4().hex}"
        self.facts = plan_facts(local.plan, local.spec)
        self.state = EtaState()
        self.metrics = metrics
        self.interrupted_by: int | None = None
        self.torchrun_pid: int | None = None
        self._stop_requested: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.restarts = 0
        self.torchrun_restarts = 0
        self.revisions: list[Revision] = []
        self.last_metrics: TrainingMetrics | None = None
        self.started = time.time()
        self.started_at = datetime.fromtimestamp(self.started, UTC)
        self.log_path = self.work / "torchrun.log"
        self._log_offset = 0
        self.display = _Display(local, console, options.show)

    @property
    def failures(self) -> int:
        return self.restarts + self.torchrun_restarts

    def _count_torchrun_restarts(self) -> None:
        """torchrun's own worker restarts so far, from its log (read incrementally)."""
        with contextlib.suppress(OSError), self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            chunk = log.read()
        if not chunk:
            return
        cut = chunk.rfind(b"\n") + 1
        self._log_offset += cut
        self.torchrun_restarts += chunk[:cut].count(TORCHRUN_RESTART_MARK.encode())

    def revise(self, metrics: TrainingMetrics | None, done: bool = False) -> Revision:
        self._count_torchrun_restarts()
        now = datetime.now(UTC)
        step = None if metrics is None else metrics.step
        if done:
            step = self.local.plan.total_steps
        last_step_time = None
        if metrics is not None and metrics.last_step_timestamp_seconds:
            last_step_time = datetime.fromtimestamp(metrics.last_step_timestamp_seconds, UTC)
        observation = Observation(
            time=now,
            step=step,
            tokens=None if metrics is None else metrics.tokens,
            last_step_time=last_step_time,
            failures=self.failures,
            checkpoint_step=None if metrics is None else metrics.checkpoint_step,
            started_at=self.started_at,
        )
        estimate, self.state = revise(self.facts, self.state, observation)
        revision = Revision(
            time=now.timestamp(),
            elapsed=now.timestamp() - self.started,
            step=estimate.step,
            total_steps=estimate.total_steps,
            eta_seconds=estimate.remaining_seconds,
            earliest_seconds=estimate.earliest_seconds,
            latest_seconds=estimate.latest_seconds,
            restarts=self.failures,
            step_seconds=estimate.step_seconds,
            measured_step_seconds=estimate.measured_step_seconds,
            planned_step_seconds=self.facts.planned_step_seconds,
            metrics_available=estimate.metrics_available,
        )
        self.revisions.append(revision)
        snapshot = local_snapshot(
            self.local.plan,
            estimate,
            failures=self.failures,
            planned_step_seconds=self.facts.planned_step_seconds,
            planned_mfu=self.facts.planned_mfu,
            revised_seconds=revision.time,
        )
        self.metrics.record(LOCAL_NAMESPACE, self.local.name, snapshot)
        self.display.update(estimate, self.failures)
        return revision

    # Signals (installed by `_signals` on the main thread).

    def interrupted(self) -> bool:
        """Whether a signal asked to stop (a method: the handler sets it at any await)."""
        return self.interrupted_by is not None

    def on_signal(self, signum: int) -> None:
        """The first signal asks the supervisor to stop the run; a second kills its
        processes at once and exits."""
        if self.interrupted_by is not None:
            self.kill_now(signum)
            return
        self.interrupted_by = signum
        loop, stop = self._loop, self._stop_requested
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(stop.set)

    def kill_now(self, signum: int) -> None:
        _signal_processes(self.mark, self.torchrun_pid, signal.SIGKILL)
        if self.prepared.temporary:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            shutil.rmtree(self.work / "tmp", ignore_errors=True)
        self.console.show_cursor(True)
        self.console.print(f"\n{signal.Signals(signum).name} again: killed", highlight=False)
        os._exit(128 + signum)

    async def _stop_processes(self, waiter: asyncio.Future[int]) -> None:
        """SIGTERM to the run's processes, SIGKILL to those left after `_STOP_SECONDS`,
        then wait (bounded) until none is left."""
        _signal_processes(self.mark, self.torchrun_pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter), _STOP_SECONDS)
        _signal_processes(self.mark, self.torchrun_pid, signal.SIGKILL)
        await self._wait_processes_gone(_STOP_SECONDS)

    async def _wait_processes_gone(self, seconds: float) -> None:
        for _ in range(max(1, round(seconds / _POLL_SECONDS))):
            if not processes_with_environment(self.mark):
                return
            await asyncio.sleep(_POLL_SECONDS)

    async def run(self) -> LocalResult:
        options = self.options
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        if self.interrupted_by is not None:
            self._stop_requested.set()
        checkpoints = self.work / "checkpoints"
        # The checks passed: a fresh run, not a resume, and no stale report.
        shutil.rmtree(checkpoints, ignore_errors=True)
        if options.report_dir is not None:
            for name in REPORT_FILES:
                with contextlib.suppress(FileNotFoundError):
                    (options.report_dir / name).unlink()
        checkpoints.mkdir(parents=True, exist_ok=True)
        child_tmp = self.work / "tmp"  # torchrun's own temporary directories go here
        child_tmp.mkdir(parents=True, exist_ok=True)
        data = None
        if _needs_dataset(self.local):
            from trainplan.runtime.dataset import ensure_dataset

            data = str(ensure_dataset(self.work / "data.bin", DATASET_TOKENS))
        trainer_port = options.trainer_metrics_port or free_port()
        launch = local_launch(
            self.local,
            checkpoint_dir=str(checkpoints),
            metrics_port=trainer_port,
            linger_seconds=max(1.0, 2 * options.scrape_interval),
            data=data,
        )
        mark_name, _, mark_value = self.mark.partition("=")
        environment = _child_environment(
            {**launch.environment, mark_name: mark_value, "TMPDIR": str(child_tmp)}
        )
        trainer_url = f"http://127.0.0.1:{trainer_port}/metrics"
        server = self.prepared.server
        eta_log: IO[str] | None = None
        exit_code = 1
        try:
            if options.eta_log is not None:
                eta_log = options.eta_log.open("w", encoding="utf-8")
            self.console.print(
                f"[bold]{self.local.name}[/]: {self.local.plan.gpus} CPU processes, "
                f"{self.local.plan.total_steps} steps; planned step time "
                f"{self.local.plan.step_seconds:.4f} s is for {self.local.plan.gpu_type}, "
                f"so the measured speed takes over. Metrics: {server.url}",
                highlight=False,
            )
            with self.display.progress, self.log_path.open("w", encoding="utf-8") as log:
                async with aiohttp.ClientSession() as session:
                    while not self.interrupted():
                        exit_code = await self._attempt(
                            launch.command,
                            environment=environment,
                            log=log,
                            session=session,
                            trainer_url=trainer_url,
                            server=server,
                            eta_log=eta_log,
                        )
                        if self.interrupted():
                            break
                        if exit_code == 0 or exit_code in FAIL_JOB_EXIT_CODES:
                            break
                        if self.restarts >= self.local.spec.reliability.max_restarts:
                            break
                        self.restarts += 1
                        self.console.print(
                            f"torchrun exited {exit_code}: restart {self.restarts} of "
                            f"{self.local.spec.reliability.max_restarts} (resumes from the "
                            f"newest checkpoint)",
                            highlight=False,
                        )
                if self.interrupted_by is not None:
                    exit_code = 128 + self.interrupted_by
                final = self.revise(self.last_metrics, done=exit_code == 0)
                self._emit(final, server, eta_log)
        finally:
            if eta_log is not None:
                eta_log.close()
            server.close()
            shutil.rmtree(child_tmp, ignore_errors=True)
        seconds = time.time() - self.started
        # Training ends at its last step, before the final checkpoint and the metrics
        # linger: that is the end the ETA predicts and is judged against.
        trained = next(
            (r.elapsed for r in self.revisions if r.total_steps and r.step >= r.total_steps),
            seconds,
        )
        loss = None if self.last_metrics is None else self.last_metrics.loss
        signal_name = (
            None if self.interrupted_by is None else signal.Signals(self.interrupted_by).name
        )
        result = LocalResult(
            exit_code=exit_code,
            restarts=self.failures,
            final_step=final.step,
            total_steps=final.total_steps,
            seconds=seconds,
            final_loss=loss,
            revisions=self.revisions,
            log_path=self.log_path,
            interrupted_by=self.interrupted_by,
        )
        if options.report_dir is not None:
            result.summary = summarize(
                plan_name=self.local.name,
                gpu_type=self.local.plan.gpu_type,
                nproc=self.local.plan.gpus,
                planned_duration_seconds=self.local.plan.duration_seconds,
                planned_step_seconds=self.local.plan.step_seconds,
                actual_seconds=trained,
                total_steps=final.total_steps,
                final_step=final.step,
                restarts=self.failures,
                final_loss=loss,
                exit_code=exit_code,
                revisions=self.revisions,
                interrupted_by=signal_name,
            )
            write_summary(options.report_dir, result.summary)
            # An interrupted run has no actual end to mark.
            ended = None if self.interrupted_by is not None else seconds
            write_plot(options.report_dir, self.revisions, ended, plan_name=self.local.name)
        return result

    def _emit(self, revision: Revision, server: MetricsServer, eta_log: IO[str] | None) -> None:
        if eta_log is not None:
            eta_log.write(revision.log_line() + "\n")
            eta_log.flush()
        if self.hooks.on_revision is not None:
            self.hooks.on_revision(revision, server.url)

    async def _attempt(
        self,
        command: tuple[str, ...],
        *,
        environment: dict[str, str],
        log: IO[str],
        session: aiohttp.ClientSession,
        trainer_url: str,
        server: MetricsServer,
        eta_log: IO[str] | None,
    ) -> int:
        """One torchrun, supervised to its end (or stopped by a signal); its exit code."""
        assert self._stop_requested is not None
        stop = asyncio.ensure_future(self._stop_requested.wait())
        process = await asyncio.create_subprocess_exec(
            *command,
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        self.torchrun_pid = process.pid
        waiter = asyncio.ensure_future(process.wait())
        try:
            if self.hooks.on_attempt is not None:
                self.hooks.on_attempt(process.pid)
            while not waiter.done() and not stop.done():
                await asyncio.wait(
                    {waiter, stop},
                    timeout=self.options.scrape_interval,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if stop.done():
                    break
                try:
                    metrics: TrainingMetrics | None = await scrape(
                        session, trainer_url, ScrapeLimits(timeout_seconds=2.0)
                    )
                except ScrapeError:
                    metrics = None
                if metrics is not None and metrics.step is not None:
                    self.last_metrics = metrics
                if waiter.done() and metrics is None:
                    break  # the final revision is made by the caller
                self._emit(self.revise(metrics), server, eta_log)
            if stop.done():
                await self._stop_processes(waiter)
            return await waiter
        finally:
            stop.cancel()
            if process.returncode is None:
                _signal_processes(self.mark, process.pid, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter), _STOP_SECONDS)
            # Stray workers of an agent that died first.
            _signal_processes(self.mark, process.pid, signal.SIGKILL)
            await self._wait_processes_gone(_STOP_SECONDS)
            self.torchrun_pid = None


@contextlib.contextmanager
def _signals(supervisor: _Supervisor) -> Iterator[None]:
    """SIGINT and SIGTERM go to the supervisor while the run lasts (main thread only:
    elsewhere, Python cannot install signal handlers and the embedder handles them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.getsignal(signum) for signum in wanted}
    for signum in wanted:
        signal.signal(signum, lambda number, _frame: supervisor.on_signal(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_local(
    local: LocalPlan,
    options: LocalOptions,
    hooks: Hooks | None = None,
    console: Console | None = None,
    machine: Machine | None = None,
) -> LocalResult:
    """Run `local` here to its end, or until SIGINT or SIGTERM (see the module docstring);
    blocks. Raises `LocalSetupError` when this machine cannot start it (nothing of a
    previous run is deleted then)."""
    console = console or Console()
    metrics = PlanMetrics()
    prepared = prepare(
        name=local.name,
        report_dir=options.report_dir,
        work_dir=options.work_dir,
        eta_log=options.eta_log,
        metrics=metrics,
        metrics_port=options.metrics_port,
        metrics_address=options.metrics_address,
        trainer_metrics_port=options.trainer_metrics_port,
        checkpoint_bytes=model_state_bytes(
            local.shape, local.spec.training.precision, local.spec.training.optimizer
        ),
        dataset=_needs_dataset(local),
        machine=machine or this_machine(),
    )
    for note in prepared.notes:
        console.print(note, highlight=False)
    supervisor = _Supervisor(
        local,
        options=options,
        hooks=hooks or Hooks(),
        console=console,
        prepared=prepared,
        metrics=metrics,
    )
    try:
        with _signals(supervisor):
            result = asyncio.run(supervisor.run())
    except BaseException:
        prepared.server.close()
        if prepared.temporary:
            shutil.rmtree(prepared.work, ignore_errors=True)
        raise
    if prepared.temporary and (result.exit_code == 0 or result.interrupted_by is not None):
        shutil.rmtree(prepared.work, ignore_errors=True)
        result.log_path = None
    return result
