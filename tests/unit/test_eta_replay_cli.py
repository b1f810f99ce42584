"""`trainplan eta replay`: a recorded run backtested from the command line, with every
kind of plan it takes, its outputs, and the errors it must give without a traceback."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from benchmarks.eta_runs import Failures, Regime, simulate
from trainplan.cli.main import main
from trainplan.eta.backtest import TraceRow

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
CLI_ENV: dict[str, str | None] = {"COLUMNS": "200", "NO_COLOR": "1", "FORCE_COLOR": None}
REGIME = Regime(
    name="replay",
    total_steps=3000,
    step_seconds=20.0,
    tokens_per_step=4_194_304,
    gpus=64,
    checkpoint_interval_steps=100,
    failures=Failures(per_hour=0.2, restart_median_seconds=600.0),
)


def _write_trace(path: Path, rows: tuple[TraceRow, ...] | list[TraceRow]) -> Path:
    lines = []
    for index, row in enumerate(rows):
        item: dict[str, Any] = {"step": row.step, "failures": row.failures}
        # Both time forms the format allows.
        item["time"] = row.time.isoformat() if index % 2 else row.time.timestamp()
        if row.tokens is not None:
            item["tokens"] = row.tokens
        lines.append(json.dumps(item))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _plan_object(tmp_path: Path) -> Path:
    """`trainplan plan -o json` of an example: a plan object."""
    result = CliRunner().invoke(
        main, ["plan", str(EXAMPLES / "llama2-7b-deadline.yaml"), "-o", "json"], env=CLI_ENV
    )
    assert result.exit_code == 0, result.output
    path = tmp_path / "plan.json"
    path.write_text(result.stdout, encoding="utf-8")
    return path


def _replay(*args: str) -> Result:
    return CliRunner().invoke(main, ["eta", "replay", *args], env=CLI_ENV)


def _matching(tmp_path: Path) -> tuple[Path, list[str]]:
    """A trace of REGIME and the overrides that make the plan object describe it."""
    run = simulate(REGIME, seed=1)
    trace = _write_trace(tmp_path / "trace.jsonl", run.rows)
    overrides = [
        "--total-steps",
        str(REGIME.total_steps),
        "--step-seconds",
        "20",
        "--tokens-per-step",
        str(REGIME.tokens_per_step),
        "--failure-rate",
        str(0.2 / 64),
    ]
    return trace, overrides


def test_the_summary_scores_every_method_at_every_progress_point(tmp_path: Path) -> None:
    trace, overrides = _matching(tmp_path)
    result = _replay(trace.as_posix(), "--plan", str(_plan_object(tmp_path)), *overrides)
    assert result.exit_code == 0, result.output
    for label in ("ETA", "naive", "measured x left", "plan alone", "10%", "90%", "mean 10-90%"):
        assert label in result.stdout
    assert "range held the real end in" in result.stdout


def test_jsonl_has_one_scored_revision_per_interval(tmp_path: Path) -> None:
    trace, overrides = _matching(tmp_path)
    result = _replay(
        str(trace), "--plan", str(_plan_object(tmp_path)), *overrides,
        "--interval", "300", "-o", "jsonl",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    spacing = [b["elapsedSeconds"] - a["elapsedSeconds"] for a, b in itertools.pairwise(lines)]
    assert min(spacing) >= 300
    scored = [line for line in lines if "errors" in line]
    assert len(scored) > 50
    first = scored[len(scored) // 2]
    assert set(first["errors"]) == {"engine", "naive", "measured", "plan"}
    assert isinstance(first["inRange"], bool)
    assert first["earliestEnd"] <= first["estimatedEnd"] <= first["latestEnd"]
    # Half-way through, the engine knows the run better than the plan does.
    assert abs(first["errors"]["engine"]) < abs(first["errors"]["plan"])


def test_a_training_plan_file_is_planned_and_a_stored_plan_used(tmp_path: Path) -> None:
    trace, overrides = _matching(tmp_path)
    spec = _replay(str(trace), "--plan", str(EXAMPLES / "llama2-7b-deadline.yaml"), *overrides)
    assert spec.exit_code == 0, spec.output
    resource = yaml.safe_load((EXAMPLES / "llama2-7b-deadline.yaml").read_text())
    printed = json.loads(_plan_object(tmp_path).read_text())
    # status.plan holds the plan alone, without the name and source `plan -o json` adds.
    resource["status"] = {"plan": {k: v for k, v in printed.items() if k not in {"name", "source"}}}
    stored = tmp_path / "resource.yaml"
    stored.write_text(yaml.safe_dump(resource), encoding="utf-8")
    result = _replay(str(trace), "--plan", str(stored), *overrides)
    assert result.exit_code == 0, result.output
    assert result.stdout == spec.stdout.replace("llama2-7b-deadline", resource["metadata"]["name"])


def test_the_plot_is_written(tmp_path: Path) -> None:
    trace, overrides = _matching(tmp_path)
    plot = tmp_path / "eta.png"
    result = _replay(
        str(trace), "--plan", str(_plan_object(tmp_path)), *overrides, "--plot", str(plot)
    )
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.stat().st_size > 20_000


def test_a_trace_from_standard_input(tmp_path: Path) -> None:
    trace, overrides = _matching(tmp_path)
    result = CliRunner().invoke(
        main,
        ["eta", "replay", "-", "--plan", str(_plan_object(tmp_path)), *overrides],
        input=trace.read_text(),
        env=CLI_ENV,
    )
    assert result.exit_code == 0, result.output
    assert "mean 10-90%" in result.stdout


def test_a_trace_that_never_ends_says_so(tmp_path: Path) -> None:
    run = simulate(REGIME, seed=1)
    trace = _write_trace(tmp_path / "short.jsonl", run.rows[:200])
    result = _replay(str(trace), "--plan", str(_plan_object(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "never reaches the plan's total work" in result.stdout


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"time": 1.7e9, "step": "secret-token"}', "trace.jsonl:2: step: expected an integer"),
        ('{"time": "not a date", "step": 1}', "trace.jsonl:2: time: not ISO 8601"),
        ('{"step": 1}', "trace.jsonl:2: time: missing"),
        ('{"time": 1.7e9}', "trace.jsonl:2: step: missing"),
        ('{"time": 1.7e9, "step": -4}', "trace.jsonl:2: step: out of range"),
        ('{"time": 1.7e9, "step": 1, "failures": true}', "trace.jsonl:2: failures"),
        ("[1, 2, 3]", "trace.jsonl:2: not a JSON object"),
        ("secret-token {", "trace.jsonl:2: not a JSON object"),
        ('{"time": 1e300, "step": 1}', "trace.jsonl:2: time: epoch seconds out of range"),
    ],
)
def test_a_bad_trace_line_is_named_and_never_echoed(
    tmp_path: Path, line: str, expected: str
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"time": 1.7e9, "step": 0}\n' + line + "\n", encoding="utf-8")
    result = _replay(str(trace), "--plan", str(_plan_object(tmp_path)))
    assert result.exit_code == 2
    assert expected in result.stderr
    assert "secret-token" not in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("just: [a, list", "not YAML or JSON"),
        ("- 1\n- 2\n", "expected one mapping"),
        ("gpuType: A100-SXM4-80GB\nstepSeconds: 1\ntotalSteps: 2\n", "invalid plan"),
        ("model: {preset: llama2-7b}\n", "data: Field required"),
    ],
)
def test_a_bad_plan_is_an_input_error(tmp_path: Path, content: str, expected: str) -> None:
    trace = _write_trace(tmp_path / "trace.jsonl", simulate(REGIME, seed=1).rows[:10])
    plan = tmp_path / "plan.yaml"
    plan.write_text(content, encoding="utf-8")
    result = _replay(str(trace), "--plan", str(plan))
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert "Traceback" not in result.output


def test_a_missing_trace_is_an_input_error(tmp_path: Path) -> None:
    result = _replay(str(tmp_path / "absent.jsonl"), "--plan", str(_plan_object(tmp_path)))
    assert result.exit_code == 2
    assert "cannot read" in result.stderr
