"""`trainplan run --local` in-process: each environmental problem is one line naming the
fix, exit 2, no traceback and the previous run's files kept (unwritable report directory,
no torch, no disk for checkpoints); the feasibility check refuses a plan that does not fit
the (injected) memory, and `--force` runs it anyway. None of these starts torchrun."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from trainplan.cli import run_command
from trainplan.cli.main import main
from trainplan.local import LocalResult
from trainplan.local.feasibility import GIB
from trainplan.local.machine import Machine, this_machine


def _plan(tmp_path: Path) -> Path:
    document: dict[str, Any] = yaml.safe_load(Path("deploy/examples/tiny-local.yaml").read_text())
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _previous_report(report: Path) -> dict[Path, str]:
    files = {
        report / "summary.json": '{"previous": true}\n',
        report / "eta.png": "previous",
        report / "work" / "checkpoints" / "step-00000010.pt": "previous",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return files


def _invoke(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, ["run", *args, "--local", "--metrics-port", "0"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output.splitlines()


def _one_error(lines: list[str], plan: Path) -> str:
    """The one line that is not the feasibility summary."""
    errors = [line for line in lines if "of memory" not in line]
    assert len(errors) == 1, lines
    assert errors[0].startswith(f"{plan}: ")
    return errors[0].removeprefix(f"{plan}: ")


def test_an_unwritable_report_directory_is_one_line(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, lines = _invoke(str(plan), "--report", str(blocker / "report"))
    assert code == 2
    assert _one_error(lines, plan) == (
        f"cannot write the report directory {blocker / 'report'} (Not a directory): choose "
        f"another with --report"
    )


def test_missing_torch_is_one_line_and_keeps_the_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec

    def without_torch(name: str, package: str | None = None) -> Any:
        return None if name == "torch" else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_torch)
    plan, report = _plan(tmp_path), tmp_path / "report"
    previous = _previous_report(report)
    code, lines = _invoke(str(plan), "--report", str(report))
    assert code == 2
    assert _one_error(lines, plan).startswith("torch is not installed for ")
    for path, text in previous.items():
        assert path.read_text() == text


def test_no_disk_for_checkpoints_is_one_line_and_keeps_the_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 1, 0))
    plan, report = _plan(tmp_path), tmp_path / "report"
    previous = _previous_report(report)
    code, lines = _invoke(str(plan), "--report", str(report))
    assert code == 2
    error = _one_error(lines, plan)
    assert error.startswith(f"not enough disk space for checkpoints in {report / 'work'}: about ")
    assert "give --report a directory on a larger disk" in error
    for path, text in previous.items():
        assert path.read_text() == text


def _machine(available_bytes: int) -> Callable[[], Machine]:
    real = this_machine()
    return lambda: Machine(
        available_memory_bytes=lambda: available_bytes,
        cpu_cores=lambda: 2,
        free_disk_bytes=real.free_disk_bytes,
        module_installed=real.module_installed,
    )


def test_a_plan_that_does_not_fit_memory_is_refused_and_force_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_command, "this_machine", _machine(GIB // 2))
    started: list[str] = []

    def fake_run_local(local: Any, options: Any, **_: Any) -> LocalResult:
        started.append(local.name)
        return LocalResult(0, 0, 256, 256, 1.0, None)

    monkeypatch.setattr(run_command, "run_local", fake_run_local)
    plan = _plan(tmp_path)
    code, lines = _invoke(str(plan))
    assert code == 2
    assert started == []
    assert lines[0] == (
        f"{plan}: does not fit this machine's memory: about 2.6 GiB needed for 2 processes, "
        f"0.5 GiB available (MemAvailable)"
    )
    assert lines[1].startswith("  needs about 2.6 GiB of memory (2 x 1.0 GiB per process")
    assert "of compute on 2 CPU cores (assuming 10 GFLOP/s per process)" in lines[1]
    assert lines[-1].endswith("or give --force to try anyway")

    code, lines = _invoke(str(plan), "--force")
    assert code == 0, lines
    assert started == ["tiny-local"]
    assert "  --force: running anyway" in lines
