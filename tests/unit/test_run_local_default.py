"""`trainplan run FILE` runs locally without `--local` (the only mode), which stays accepted."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from trainplan.cli.main import main


def test_local_is_optional_and_still_accepted(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    help_text = CliRunner().invoke(main, ["run", "--help"], env={"COLUMNS": "200"}).output
    local = next(line for line in help_text.splitlines() if "--local" in line)
    assert "required" not in local
    without = CliRunner().invoke(main, ["run", missing])
    with_flag = CliRunner().invoke(main, ["run", missing, "--local"])
    assert "Missing option" not in without.output
    assert without.exit_code == with_flag.exit_code != 0
    assert without.output == with_flag.output
