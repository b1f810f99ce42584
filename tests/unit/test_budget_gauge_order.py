"""The operator's budget gauges keep the latest computed figures when two revisions of one
budget finish out of order (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainplan.monitor.exposition import BudgetFigures, PlanMetrics

T0 = datetime(2026, 11, 22, tzinfo=UTC)


def _used(metrics: PlanMetrics) -> float:
    for family in metrics.collect():
        for sample in family.samples:
            if sample.name == "trainplan_budget_gpu_hours" and sample.labels["kind"] == "used":
                return float(sample.value)
    raise AssertionError("no budget gauge")


def figures(used: float, at: datetime | None) -> BudgetFigures:
    return BudgetFigures(100.0, used, 0.0, 100.0 - used, computed_at=at)


def test_a_revision_computed_earlier_does_not_replace_a_later_one() -> None:
    """A timer's revision (computed while the job ran: 870 GPU-hours to the wall clock)
    finishing after the completion's revision (8 GPU-hours) leaves the gauge at 8."""
    metrics = PlanMetrics()
    metrics.record_budget("team-a", "gpus", figures(8.0, T0 + timedelta(seconds=2)))
    metrics.record_budget("team-a", "gpus", figures(870.8, T0 + timedelta(seconds=1)))
    assert _used(metrics) == 8.0
    metrics.record_budget("team-a", "gpus", figures(9.0, T0 + timedelta(seconds=3)))
    assert _used(metrics) == 9.0
    # Figures without a time (older callers) are kept as they come.
    metrics.record_budget("team-a", "gpus", figures(7.0, None))
    assert _used(metrics) == 7.0
