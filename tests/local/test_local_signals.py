"""`trainplan run --local` as a real process: SIGINT mid-run stops torchrun and its workers
(which torchrun starts in sessions of their own), writes the report marked interrupted and
exits 130; a second SIGTERM kills at once (143) and removes the temporary directory; a busy
default metrics port is replaced by a free one; an explicitly given busy port is one line
and exit 2, with the previous report untouched."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainplan.local.preflight import DEFAULT_METRICS_PORT

TRAINPLAN = str(Path(sys.executable).with_name("trainplan"))
WAIT_SECONDS = 90.0


def _plan_file(directory: Path, name: str) -> Path:
    """tiny-local under a unique name, long enough to be interrupted."""
    document: dict[str, Any] = yaml.safe_load(Path("deploy/examples/tiny-local.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["data"] = {"samples": 16 * 5000, "epochs": 1}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _run_processes(name: str) -> list[int]:
    """Live processes of the run: the plan's name in their environment or command line
    (zombies have neither)."""
    needle = name.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _workers(name: str) -> list[int]:
    workers = []
    for pid in _run_processes(name):
        with contextlib.suppress(OSError):
            if b"\0LOCAL_RANK=" in b"\0" + Path(f"/proc/{pid}/environ").read_bytes():
                workers.append(pid)
    return workers


def _wait(condition: Any, what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"exited {process.returncode} before {what}: {process.communicate()[0]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {WAIT_SECONDS} s")
        time.sleep(0.1)


@contextlib.contextmanager
def _trainplan(args: list[str], tmp: Path, name: str) -> Iterator[subprocess.Popen[str]]:
    """`trainplan ARGS` with TMPDIR=tmp; whatever of the run is left is killed at the end."""
    environment = {**os.environ, "TMPDIR": str(tmp), "COLUMNS": "200"}
    process = subprocess.Popen(
        [TRAINPLAN, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        for pid in [process.pid, *_run_processes(name)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.communicate()


def _assert_gone(name: str) -> None:
    left = _run_processes(name)
    for _ in range(20):  # bounded: reparented workers are reaped by init
        if not left:
            break
        time.sleep(0.1)
        left = _run_processes(name)
    assert not left, f"processes of the run survived: {left}"


def test_sigint_stops_the_workers_writes_the_report_and_exits_130(tmp_path: Path) -> None:
    name = f"sigint-{uuid.uuid4().hex[:8]}"
    tmp, report = tmp_path / "tmp", tmp_path / "report"
    tmp.mkdir()
    plan = _plan_file(tmp_path, name)
    eta_log = report / "eta.jsonl"
    args = ["run", str(plan), "--local", "--report", str(report), "--eta-log", str(eta_log)]
    args += ["--metrics-port", "0", "--scrape-interval", "0.5"]

    def stepped() -> bool:
        with contextlib.suppress(OSError, ValueError):
            return any(json.loads(line)["step"] > 0 for line in eta_log.read_text().splitlines())
        return False

    with _trainplan(args, tmp, name) as process:
        _wait(lambda: len(_workers(name)) == 2, "two workers", process)
        _wait(stepped, "a measured step", process)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 130, output
    _assert_gone(name)
    assert "interrupted by SIGINT" in output
    assert "Traceback" not in output
    summary = json.loads((report / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["signal"] == "SIGINT"
    assert summary["exitCode"] == 130
    assert summary["finalStep"] > 0
    if importlib.util.find_spec("matplotlib") is not None:
        assert (report / "eta.png").stat().st_size > 0
    assert not (report / "work" / "tmp").exists()  # torchrun's temporary directories
    assert list(tmp.iterdir()) == []


def test_a_second_sigterm_kills_at_once_and_a_busy_default_port_is_replaced(
    tmp_path: Path,
) -> None:
    name = f"sigterm-{uuid.uuid4().hex[:8]}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    plan = _plan_file(tmp_path, name)
    with contextlib.ExitStack() as stack:
        holder = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        with contextlib.suppress(OSError):  # else someone else holds it: busy all the same
            holder.bind(("0.0.0.0", DEFAULT_METRICS_PORT))
            holder.listen()
        args = ["run", str(plan), "--local", "--scrape-interval", "0.5"]
        with _trainplan(args, tmp, name) as process:
            _wait(lambda: len(_workers(name)) == 2, "two workers", process)
            assert any(path.name.startswith(f"trainplan-{name}-") for path in tmp.iterdir())
            process.send_signal(signal.SIGTERM)
            time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=60)
            assert process.returncode == 143, output
    _assert_gone(name)
    assert f"metrics port {DEFAULT_METRICS_PORT} is in use: serving the metrics on port" in output
    assert "SIGTERM again: killed" in output
    assert "Traceback" not in output
    assert list(tmp.iterdir()) == []


def test_an_explicit_busy_port_is_one_line_and_keeps_the_previous_report(
    tmp_path: Path,
) -> None:
    name = f"port-{uuid.uuid4().hex[:8]}"
    plan = _plan_file(tmp_path, name)
    report = tmp_path / "report"
    previous = {
        report / "summary.json": '{"previous": true}\n',
        report / "eta.png": "previous",
        report / "work" / "checkpoints" / "step-00000010.pt": "previous",
    }
    for path, text in previous.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = ["run", str(plan), "--local", "--report", str(report), "--metrics-port", str(port)]
        with _trainplan(args, tmp_path, name) as process:
            output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    lines = [line for line in output.splitlines() if f"port {port}" in line]
    assert lines == [
        f"{plan}: metrics port {port} on 0.0.0.0 is in use (Address already in use): choose "
        f"another with --metrics-port (0 picks a free one)"
    ], output
    assert "Traceback" not in output
    for path, text in previous.items():
        assert path.read_text() == text
