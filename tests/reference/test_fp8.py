"""The planner's fp8 speed-up against published fp8 and bf16 pairs of the same layout
(tests/data/published_fp8.csv, `benchmarks.fp8`); never fitted to them.

The bounds are what the planner achieves (BENCHMARKS.md, "fp8 against bf16"): every
priced pair's speed-up within 9%, 2.6% on average over 14 pairs, context-parallel
layouts included. Running attention and the output layer at the fp8 peak as well (before
this model) put torchtitan's pairs 16-38% off, and pricing their per-op selective
recomputation as Megatron-LM's attention-core recomputation 5-7% (4.7% on average).
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.fp8 import Pair, compare
from trainplan.planner import Catalog

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module")
def pairs(catalog: Catalog) -> list[Pair]:
    priced, left_out = compare(catalog)
    assert len(priced) >= 14
    assert all(reason for _, reason in left_out)
    return priced


def test_speedups(pairs: list[Pair]) -> None:
    errors = [abs(pair.speedup_error) for pair in pairs]
    assert max(errors) < 0.09
    assert statistics.mean(errors) < 0.035
    # fp8 is planned faster than bf16 on every pair, as published, and never 2x.
    assert all(1.0 < pair.planned_speedup < 2.0 for pair in pairs)
