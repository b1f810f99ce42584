"""Helpers of the reference-trainer tests: run it as one process or under torchrun.

Every process is started in its own session and killed (the whole group) in `finally`;
every wait is bounded; ports are free ones on 127.0.0.1, gloo stays on the loopback
interface, and each process runs one OpenMP thread (CI machines have 2 cores).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client.parser import text_string_to_metric_families


def flags(**values: object) -> list[str]:
    """Trainer flags from keyword arguments: `flags(micro_batch_size=2, gated_mlp=True)`
    is `["--micro-batch-size", "2", "--gated-mlp", "true"]`."""
    args: list[str] = []
    for name, value in values.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        args += [f"--{name.replace('_', '-')}", text]
    return args


TINY_MODEL: Final = flags(
    layers=2, hidden_size=64, attention_heads=4, vocab_size=256, sequence_length=64
)
"""The tiny model every test trains (vocab 256: the generated dataset's bytes)."""

SEQUENCE_LENGTH: Final = 64
DATASET_TOKENS: Final = 200_000

SHARE_STORE_SWITCH: Final = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
"""Set to 1: torchrun gives each restart a fresh store instead of its own shared one."""

SINGLE_TIMEOUT_SECONDS: Final = 90.0
TORCHRUN_TIMEOUT_SECONDS: Final = 180.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def trainer_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without launcher or torchrun variables, plus settings
    that keep the trainer small and local."""
    dropped = ("TRAINPLAN_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC_")
    env = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    env.update(extra or {})
    return env


@dataclass
class Finished:
    """A finished trainer process."""

    returncode: int
    stdout: str
    stderr: str


def _kill_group(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def run_single(
    args: Sequence[str],
    env: dict[str, str] | None = None,
    timeout_seconds: float = SINGLE_TIMEOUT_SECONDS,
) -> Finished:
    """`python -m trainplan.runtime.train ARGS` as one process (world size 1)."""
    command = [sys.executable, "-m", "trainplan.runtime.train", *args]
    process = subprocess.Popen(
        command,
        env=trainer_environment(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_seconds)
    finally:
        _kill_group(process)
    return Finished(process.returncode, stdout, stderr)


def torchrun_command(
    nproc: int, args: Sequence[str], torchrun_args: Sequence[str] = ()
) -> list[str]:
    """The torchrun command line of a one-node run of the reference trainer.

    `--standalone` rendezvous on localhost with a free port. No `--master-addr`: with
    `--standalone` torchrun ignores it for the first attempt (workers get
    MASTER_ADDR=localhost) but the workers of a restart then hang in rendezvous
    (torch 2.13).
    """
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        *torchrun_args,
        "-m",
        "trainplan.runtime.train",
        *args,
    ]


@contextlib.contextmanager
def torchrun(
    nproc: int,
    args: Sequence[str],
    output: Path,
    torchrun_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """A running torchrun (agent and workers in one new session), output to `output`;
    the whole session is killed on exit from the block."""
    environment = trainer_environment(env)
    # Restarted workers reuse the agent's shared store and read the previous attempt's
    # gloo addresses: they fail or hang (pytorch/pytorch#135712, still so in 2.13).
    environment[SHARE_STORE_SWITCH] = "1"
    with output.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            torchrun_command(nproc, args, torchrun_args),
            env=environment,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            _kill_group(process)


def run_torchrun(
    nproc: int,
    args: Sequence[str],
    output: Path,
    torchrun_args: Sequence[str] = (),
    timeout_seconds: float = TORCHRUN_TIMEOUT_SECONDS,
) -> Finished:
    """A torchrun run to completion; its combined output."""
    with torchrun(nproc, args, output, torchrun_args) as process:
        process.wait(timeout=timeout_seconds)
    text = output.read_text(encoding="utf-8")
    return Finished(process.returncode, text, text)


def wait_for(
    condition: Callable[[], bool],
    timeout_seconds: float,
    what: str,
    process: subprocess.Popen[str] | None = None,
) -> None:
    """Poll `condition` every 50 ms; AssertionError after the timeout or when `process`
    exits first."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            if condition():
                return
            raise AssertionError(f"process exited ({process.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_seconds} s waiting for {what}")


@dataclass(frozen=True)
class StepLine:
    """One line of `--step-log`."""

    step: int
    loss: float
    micro_batches: int
    sequences: int


def read_step_log(path: Path) -> list[StepLine]:
    """The complete lines of a step log (a line being written is left out)."""
    if not path.exists():
        return []
    lines: list[StepLine] = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        step, loss, micro_batches, sequences = line.split()
        lines.append(StepLine(int(step), float(loss), int(micro_batches), int(sequences)))
    return lines


def children(pid: int) -> list[int]:
    """The child processes of `pid` (Linux `/proc`, standard library only)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found.extend(int(word) for word in task.read_text().split())
    return found


def process_environment(pid: int) -> dict[str, str]:
    """The environment a process started with (our own processes only)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(): value.decode(errors="replace") for key, value in pairs}


def worker_pids(agent_pid: int) -> dict[int, int]:
    """{local rank: pid} of torchrun's current workers."""
    workers: dict[int, int] = {}
    for pid in children(agent_pid):
        with contextlib.suppress(OSError):
            environment = process_environment(pid)
            if "LOCAL_RANK" in environment:
                workers[int(environment["LOCAL_RANK"])] = pid
    return workers


def scrape(url: str, timeout_seconds: float = 5.0) -> dict[str, dict[str, float]]:
    """{family name: {sample name: value}} of a /metrics endpoint (unlabelled samples;
    a histogram's `_count`, `_sum` and the `+Inf` bucket)."""
    with urllib.request.urlopen(url, timeout=timeout_seconds) as response:
        text = response.read().decode("utf-8")
    metrics: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        samples = metrics.setdefault(family.name, {})
        for sample in family.samples:
            if sample.labels and sample.labels.get("le") != "+Inf":
                continue
            samples[sample.name] = sample.value
    return metrics
