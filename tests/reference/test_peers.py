"""The planner beside llm-analysis on the published step-time rows (`benchmarks.peers`):
the adapter gives the peer the row's layout and efficiency, and the planner is the more
accurate on these rows at any single efficiency the peer could be given."""

from __future__ import annotations

import math
import statistics

import pytest

from benchmarks.peers import EFFICIENCY_GRID, best_efficiency, evaluate, evaluate_runs
from trainplan.planner import Catalog

pytestmark = pytest.mark.reference


def test_the_peer_prices_every_row_and_takes_its_efficiency(catalog: Catalog) -> None:
    rows = evaluate(catalog)
    assert len(rows) >= 24
    for row in rows:
        assert math.isfinite(row.peer_default)
        assert row.peer_default > 0
        # Halving the FLOP efficiency slows the peer's step, but by less than 2x on rows
        # whose communication, bubble or memory-bound work its efficiency does not touch.
        assert row.peer_default < row.peer_half <= 2 * row.peer_default * (1 + 1e-9)
        assert len(row.peer_seconds_by_efficiency) == len(EFFICIENCY_GRID)


def test_the_planner_is_more_accurate_than_the_peer_at_any_efficiency(catalog: Catalog) -> None:
    rows = evaluate(catalog)
    measured = [r.measured for r in rows]

    def mean_error(predicted: list[float]) -> float:
        return statistics.mean(abs(p / m - 1) for p, m in zip(predicted, measured, strict=True))

    best = best_efficiency(rows)
    peer = mean_error([r.peer_seconds_by_efficiency[best] for r in rows])
    assert peer == min(
        mean_error([r.peer_seconds_by_efficiency[i] for r in rows])
        for i in range(len(EFFICIENCY_GRID))
    )
    assert mean_error([r.trainplan for r in rows]) < 0.5 * peer


def test_whole_runs_held_out_beat_the_peer_on_the_runs_it_prices(catalog: Catalog) -> None:
    runs = evaluate_runs(catalog)
    priced = [r for r in runs if math.isfinite(r.peer_default) and math.isfinite(r.peer_half)]
    assert len(priced) >= 20

    def median_error(values: list[float]) -> float:
        pairs = zip(values, priced, strict=True)
        return statistics.median(abs(v / r.published - 1) for v, r in pairs)

    planner = median_error([r.trainplan_held_out for r in priced])
    assert planner < median_error([r.peer_half for r in priced])
    assert planner < median_error([r.peer_default for r in priced])
