"""The operator-driven cluster-calibration benchmark, run small: two simulated runs
through the real operator, their records, and new plans corrected by them (the full run
is `python -m benchmarks.cluster_calibration_operator`, results in BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from benchmarks.cluster_calibration_operator import report, simulate

pytestmark = pytest.mark.asyncio


async def test_benchmark_learns_from_two_runs(capsys: pytest.CaptureFixture[str]) -> None:
    result = await simulate(checkpoints=(2,))
    assert result.records == 2
    assert len(result.runs) == 2
    (checkpoint,) = result.checkpoints
    assert checkpoint.runs == 2
    assert checkpoint.calibration_runs == (2, 2, 2)
    assert all(run.measured_error < 0.01 for run in result.runs)
    assert checkpoint.step_error < 0.05
    missed = report([result])
    table = capsys.readouterr().out
    assert "| finished runs | step-time error |" in table
    assert "\n| 2 | " in table
    assert missed == []
