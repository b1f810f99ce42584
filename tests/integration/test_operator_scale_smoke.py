"""The operator-scale benchmark, run small: it drives a real `trainplan operator`
process through launch and steady state and measures it (the full run is
`python -m benchmarks.operator_scale`, results in BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.operator_scale import measure, report

pytestmark = pytest.mark.asyncio


async def test_benchmark_measures_a_small_fleet(tmp_path: Path) -> None:
    result = await measure(plans=4, interval_seconds=1.0, rounds=2, workdir=tmp_path)
    assert result.plans == 4
    assert 0 < result.launch_seconds < 60
    assert result.revised_plans == 4
    assert result.round_cpu_seconds > 0
    assert 50 * 2**20 < result.peak_memory_bytes < 500 * 2**20
    assert report(result)
