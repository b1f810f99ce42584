"""`trainplan plan --calibration none`: the plan from the published constants, as
`hardware.calibration: none` gives it, with no kubeconfig read and no file named none;
a spec that names a ClusterCalibration is refused, as it is with another one's file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from trainplan.cli.main import main

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
}


def run_plan(tmp_path: Path, spec: dict[str, Any], *options: str) -> Result:
    """`trainplan plan OPTIONS plan.yaml` in `tmp_path`, with a kubeconfig that cannot be
    read: any look-up in a cluster fails."""
    spec_file = tmp_path / "plan.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    env = {"KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path)}
    return CliRunner().invoke(main, ["plan", *options, "-o", "json", str(spec_file)], env=env)


def _spec(calibration: str | None) -> dict[str, Any]:
    hardware = {} if calibration is None else {"calibration": calibration}
    return {**SPEC, "hardware": {"gpuType": "A100-SXM4-80GB", **hardware}}


@pytest.mark.parametrize("spec_calibration", [None, "none"])
def test_none_plans_from_the_published_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec_calibration: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("none").write_text("not a ClusterCalibration")  # a file of that name is not read
    spec = _spec(spec_calibration)
    without = run_plan(tmp_path, spec, "--calibration", "none")
    plain = run_plan(tmp_path, spec)
    assert without.exit_code == 0, without.output
    assert without.stderr == ""
    assert json.loads(without.stdout) == json.loads(plain.stdout)
    assert "calibration" not in json.loads(without.stdout)


def test_a_spec_naming_a_calibration_is_refused_with_none(tmp_path: Path) -> None:
    result = run_plan(tmp_path, _spec("a100-east"), "--calibration", "none")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line == (
        f"{tmp_path / 'plan.yaml'}: hardware.calibration: names ClusterCalibration"
        " 'a100-east', but --calibration none plans without one: drop one of them"
    )
    document = json.loads(result.stdout)
    assert document["error"].startswith("invalid input")
    assert document["reasons"] == [line.split(": ", 1)[1]]


def test_a_file_named_none_is_given_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("none").write_text("kind: ClusterCalibration\n")
    result = run_plan(tmp_path, _spec(None), "--calibration", "./none")
    assert result.exit_code == 2
    assert result.stderr.startswith("none: ")


def test_help_says_what_none_means() -> None:
    result = CliRunner().invoke(main, ["plan", "--help"])
    assert result.exit_code == 0
    assert "FILE|NAME|none" in result.output
    assert "'none' plans from the published constants" in " ".join(result.output.split())
