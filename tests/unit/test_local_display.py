"""The live view of `trainplan run --local` before and after the first step."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from rich.console import Console

from trainplan.api import parse_training_plan_spec
from trainplan.eta import EtaState, Observation, plan_facts, revise
from trainplan.local.launch import plan_locally
from trainplan.local.runner import _Display
from trainplan.planner import load_catalog

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "tiny-local.yaml"
T0 = datetime(2026, 11, 23, tzinfo=UTC)


def _view(step_seconds: list[tuple[float, int]]) -> str:
    spec = parse_training_plan_spec(yaml.safe_load(EXAMPLE.read_text()))
    local = plan_locally("tiny", spec, 2, load_catalog())
    out = io.StringIO()
    display = _Display(local, Console(file=out, width=200, force_terminal=False), show=True)
    facts, state = plan_facts(local.plan, local.spec), EtaState()
    with display.progress:
        for seconds, step in step_seconds:
            estimate, state = revise(
                facts,
                state,
                Observation(time=T0 + timedelta(seconds=seconds), step=step, started_at=T0),
            )
            display.update(estimate, 0)
    return out.getvalue()


def test_no_remaining_time_is_shown_before_the_first_step() -> None:
    # Two minutes of start-up on a CPU: the plan (for an A100) would say seconds.
    text = _view([(second, 0) for second in range(0, 121, 10)])
    assert "waiting for the first step" in text
    assert "A100" in text
    assert "ETA" not in text


def test_the_measured_speed_takes_over_after_the_first_steps() -> None:
    text = _view([(0, 0), (60, 0), *((60 + 5 * k, 10 * k) for k in range(1, 20))])
    assert "ETA" in text
    assert "s/step" in text
