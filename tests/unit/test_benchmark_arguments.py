"""Every benchmark's command line: `--help` describes it and exits at once, and an
argument it does not know is refused (exit 2) before any work starts, so a mistyped flag
never starts a run of many minutes that ignores it."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest

import benchmarks

MODULES = sorted(
    ["benchmarks.__main__"]
    + [
        f"benchmarks.{info.name}"
        for info in pkgutil.iter_modules(benchmarks.__path__)
        if info.name != "__main__"
    ]
)


def _main(module: str) -> Callable[[], Any] | None:
    main = getattr(importlib.import_module(module), "main", None)
    return main if callable(main) else None


COMMANDS = [module for module in MODULES if _main(module) is not None]


def test_the_benchmarks_with_a_command_are_found() -> None:
    assert {"benchmarks.__main__", "benchmarks.holdout", "benchmarks.eta_real_scale"} <= set(
        COMMANDS
    )
    assert len(COMMANDS) >= 20


def _exit_code(module: str, argument: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """The exit code of `python -m <module> <argument>`, run in this process."""
    main = _main(module)
    assert main is not None
    monkeypatch.setattr("sys.argv", [module, argument])
    with pytest.raises(SystemExit) as stopped:
        main()
    return stopped.value.code


@pytest.mark.parametrize("module", COMMANDS)
def test_help_describes_the_benchmark_and_runs_nothing(
    module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(module, "--help", monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m ")
    assert len(out.splitlines()) >= 3  # the usage line and a description


@pytest.mark.parametrize("module", COMMANDS)
def test_an_unknown_argument_is_refused(
    module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(module, "--no-such-option", monkeypatch) == 2
    # the unknown option, or first a required one that is missing
    assert f"python -m {module.removesuffix('.__main__')}: error:" in capsys.readouterr().err
