"""Before a local run starts: everything of this machine it needs is checked (torch, the
report and work directories, disk for its checkpoints, its ports) and the metrics port is
bound, so that an environmental problem is one `LocalSetupError` sentence naming the flag
that fixes it, raised before anything of a previous run is deleted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trainplan.local.exporter import MetricsServer
from trainplan.local.feasibility import checkpoint_disk_bytes, gib
from trainplan.local.machine import Machine
from trainplan.monitor.exposition import PlanMetrics

DEFAULT_METRICS_PORT: Final = 9401
DATASET_TOKENS: Final = 1_000_000
DATASET_TOKEN_BYTES: Final = 2  # uint16 tokens (`trainplan.runtime.dataset`)


class LocalSetupError(Exception):
    """This machine cannot start the run: one sentence naming the problem and the fix."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the checks set up: the work directory (`temporary` when made under TMPDIR),
    the bound metrics server and sentences to show (a port chosen instead of another)."""

    work: Path
    temporary: bool
    server: MetricsServer
    notes: tuple[str, ...]


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _writable_directory(directory: Path, flag: str, what: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".trainplan-write-test-", dir=directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise LocalSetupError(
            f"cannot write {what} {directory} ({_reason(error)}): choose another with {flag}"
        ) from None


def _writable_file(path: Path, flag: str) -> None:
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass  # appends nothing: a previous file is kept until the run starts
    except OSError as error:
        raise LocalSetupError(
            f"cannot write {path} ({_reason(error)}): choose another file with {flag}"
        ) from None
    if not existed:
        with contextlib.suppress(OSError):
            path.unlink()


def _tree_bytes(directory: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for path in directory.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file():
                    total += path.stat().st_size
    return total


def _check_disk(
    machine: Machine, where: Path, checkpoint_bytes: int, dataset: bool, reclaimed_bytes: int
) -> None:
    extra = DATASET_TOKENS * DATASET_TOKEN_BYTES if dataset else 0
    needed = checkpoint_disk_bytes(checkpoint_bytes, extra)
    try:
        free = machine.free_disk_bytes(where) + reclaimed_bytes
    except OSError:
        return  # unknown: the run finds out
    if free < needed:
        raise LocalSetupError(
            f"not enough disk space for checkpoints in {where}: about {gib(needed)} needed "
            f"(3 checkpoints of {gib(checkpoint_bytes)}), {gib(free)} free: give --report a "
            f"directory on a larger disk (checkpoints go to its work/) or set TMPDIR"
        )


def _port_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def _bind_metrics(
    metrics: PlanMetrics, port: int | None, address: str
) -> tuple[MetricsServer, tuple[str, ...]]:
    """The metrics server on `port`; None: `DEFAULT_METRICS_PORT`, or any free port when
    that one is taken (said in a note). An explicit busy port is an error."""
    wanted = DEFAULT_METRICS_PORT if port is None else port
    try:
        return MetricsServer(metrics, wanted, address), ()
    except OSError as error:
        if port is not None or error.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise LocalSetupError(
                f"metrics port {wanted} on {address} is in use ({_reason(error)}): choose "
                f"another with --metrics-port (0 picks a free one)"
            ) from None
    try:
        server = MetricsServer(metrics, 0, address)
    except OSError as error:
        raise LocalSetupError(
            f"cannot serve the metrics on {address} ({_reason(error)}): choose a port with "
            f"--metrics-port"
        ) from None
    note = (
        f"metrics port {DEFAULT_METRICS_PORT} is in use: serving the metrics on port "
        f"{server.port} instead (--metrics-port chooses one)"
    )
    return server, (note,)


def prepare(
    *,
    name: str,
    report_dir: Path | None,
    work_dir: Path | None,
    eta_log: Path | None,
    metrics: PlanMetrics,
    metrics_port: int | None,
    metrics_address: str,
    trainer_metrics_port: int,
    checkpoint_bytes: int,
    dataset: bool,
    machine: Machine,
) -> Prepared:
    """Check this machine for the run and bind its metrics port (see the module
    docstring). Deletes nothing; creates the report and work directories, and a
    temporary work directory (`trainplan-<name>-*` under TMPDIR) when neither is given."""
    if not machine.module_installed("torch"):
        raise LocalSetupError(
            f"torch is not installed for {sys.executable}: install it (pip install torch, "
            f"or `make setup`); a local run starts torchrun"
        )
    if report_dir is not None:
        _writable_directory(report_dir, "--report", "the report directory")
    if eta_log is not None:
        _writable_file(eta_log, "--eta-log")
    work = work_dir
    if work is None and report_dir is not None:
        work = report_dir / "work"
    if work is not None:
        _writable_directory(work, "--report", "the work directory")
        disk_at = work
    else:
        disk_at = Path(tempfile.gettempdir())
    reclaimed = 0 if work is None else _tree_bytes(work / "checkpoints")
    _check_disk(machine, disk_at, checkpoint_bytes, dataset, reclaimed)
    if trainer_metrics_port and not _port_free("127.0.0.1", trainer_metrics_port):
        raise LocalSetupError(
            f"trainer metrics port {trainer_metrics_port} on 127.0.0.1 is in use: choose "
            f"another with --trainer-metrics-port (0 picks a free one)"
        )
    server, notes = _bind_metrics(metrics, metrics_port, metrics_address)
    if work is not None:
        return Prepared(work, False, server, notes)
    try:
        temporary = Path(tempfile.mkdtemp(prefix=f"trainplan-{name}-"))
    except OSError as error:
        server.close()
        raise LocalSetupError(
            f"cannot create a temporary directory ({_reason(error)}): set TMPDIR, or give "
            f"--report a directory"
        ) from None
    return Prepared(temporary, True, server, notes)
