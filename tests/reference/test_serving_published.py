"""`planner.serving` against TensorRT-LLM's published serving measurements
(tests/data/published_serving.csv, `benchmarks.serving`); never fitted to them.

The bounds are what the planner achieves (BENCHMARKS.md, "Serving capacity"): time to
first token within 15%, maximum throughput per GPU within 15% at the median, every row
within a factor of two.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.serving import Row, compare
from trainplan.planner import Catalog

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module")
def rows(catalog: Catalog) -> list[Row]:
    priced, _ = compare(catalog)
    assert len(priced) >= 30
    return priced


def test_time_to_first_token(rows: list[Row]) -> None:
    ttft = [abs(row.error) for row in rows if row.kind == "ttft"]
    assert len(ttft) == 4
    assert max(ttft) < 0.15


def test_throughput(rows: list[Row]) -> None:
    throughput = [abs(row.error) for row in rows if row.kind == "throughput"]
    assert statistics.median(throughput) < 0.15
    assert all(-0.5 < row.error < 1.0 for row in rows)
