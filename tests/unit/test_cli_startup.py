"""Start-up: each command imports only what it uses (issue 16, item 5).

`trainplan --help` imports no command; `trainplan plan` never imports the operator stack
(kopf, aiohttp, trainplan.controller, trainplan.cluster), the dashboard SDK or torch, not
even with a calibration file (only a calibration NAME reads the cluster). Each
case runs the CLI in a fresh interpreter and reads back the modules it imported. The
listing of `trainplan --help` uses summaries stored beside the lazy entries: they must be
what each command's own help says.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from trainplan.cli.main import COMMANDS, load_command, main

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "megatron-1t.yaml"

# Runs the CLI with argv[2:] and writes every module it imported, one a line, to argv[1].
_PROBE = """
import sys
from trainplan.cli.main import main
try:
    main(sys.argv[2:], prog_name="trainplan")
except SystemExit as exit:
    code = exit.code
with open(sys.argv[1], "w", encoding="utf-8") as file:
    file.write("\\n".join(sorted(sys.modules)))
sys.exit(code)
"""

NEVER_FOR_PLAN = (
    "kopf",
    "aiohttp",
    "torch",
    "grafana_foundation_sdk",
    "trainplan.controller",
    "trainplan.cluster",
    "trainplan.local",
    "trainplan.dashboards",
    "matplotlib",
)


def imported_by(tmp_path: Path, *args: str) -> set[str]:
    """The modules a fresh `trainplan ARGS` imports (it must exit 0)."""
    listing = tmp_path / "modules.txt"
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE, str(listing), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return set(listing.read_text(encoding="utf-8").splitlines())


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(f"{package}."))


def test_help_imports_no_command(tmp_path: Path) -> None:
    modules = imported_by(tmp_path, "--help")

    for package in (*NEVER_FOR_PLAN, "trainplan.api", "trainplan.planner", "pydantic", "yaml"):
        assert not loaded(modules, package), package
    assert not [m for m in modules if m.startswith("trainplan.cli.") and m != "trainplan.cli.main"]


def test_plan_imports_neither_the_operator_nor_the_dashboards_nor_torch(tmp_path: Path) -> None:
    modules = imported_by(tmp_path, "plan", "-o", "json", str(EXAMPLE))

    assert "trainplan.cli.plan_command" in modules
    assert "trainplan.planner" in modules
    for package in NEVER_FOR_PLAN:
        assert not loaded(modules, package), package


def test_plan_with_a_calibration_file_imports_no_operator_stack(tmp_path: Path) -> None:
    calibration = tmp_path / "a100-east.yaml"
    calibration.write_text(
        "apiVersion: trainplan.dev/v1alpha1\nkind: ClusterCalibration\n"
        "metadata: {name: a100-east}\nspec: {gpuType: A100-SXM4-80GB}\n"
    )
    modules = imported_by(tmp_path, "plan", "--calibration", str(calibration), str(EXAMPLE))

    assert "trainplan.cli.calibration_source" in modules
    for package in NEVER_FOR_PLAN:
        assert not loaded(modules, package), package


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_stored_summary_is_the_commands_own(name: str) -> None:
    command = load_command(name)
    stored = click.Command(name, help=COMMANDS[name].summary)

    assert command.name == name
    for limit in (45, 80, 1000):
        assert stored.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_every_command_is_listed_and_loads() -> None:
    context = click.Context(main)

    assert main.list_commands(context) == sorted(COMMANDS)
    for name in COMMANDS:
        assert main.get_command(context, name) is load_command(name)
