"""The ETA chart (`eta.png` of a local run, `trainplan eta replay --plot`) as matplotlib
objects: two panels, a title naming the plan and the date, the 10-90% range shaded, the
naive start-up spike clipped out of the view, and the actual end marked."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib.dates
import matplotlib.pyplot as plt
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from trainplan.local import report
from trainplan.local.chart import Chart, chart_figure, end_limits
from trainplan.local.report import Revision, chart_of, write_plot, write_summary

mdates: Any = matplotlib.dates  # untyped
START = datetime(2025, 6, 3, 14, 5, tzinfo=UTC).timestamp()
TOTAL = 100
STEP = 2.0
FIRST_STEP = 30.0


def _revisions(finished: bool = True) -> list[Revision]:
    """A run of TOTAL steps of STEP seconds after FIRST_STEP seconds of start-up, revised
    every 5 s; the ETA knows the speed from the first step on. Naive extrapolation, which
    counts the start-up as training, predicts an end hours away right after the first step."""
    revisions = []
    elapsed = 0.0
    last = FIRST_STEP + TOTAL * STEP
    while elapsed < last:
        elapsed += 5.0
        step = min(TOTAL, max(0, int((elapsed - FIRST_STEP) / STEP)))
        if not finished and step >= TOTAL:
            break
        remaining = (TOTAL - step) * STEP if step else last - elapsed
        revisions.append(
            Revision(
                time=START + elapsed,
                elapsed=elapsed,
                step=step,
                total_steps=TOTAL,
                eta_seconds=remaining,
                earliest_seconds=0.9 * remaining,
                latest_seconds=1.2 * remaining,
                restarts=0,
                step_seconds=STEP,
                measured_step_seconds=STEP * 1.05 if step else None,
                planned_step_seconds=0.02,
                metrics_available=True,
            )
        )
    return revisions


@pytest.fixture
def figure() -> Iterator[Figure]:
    drawn = chart_figure(chart_of(_revisions(), plan_name="tiny-local", tz=UTC))
    yield drawn
    plt.close(drawn)


def _end() -> float:
    return float(mdates.date2num(datetime.fromtimestamp(START + FIRST_STEP + TOTAL * STEP, UTC)))


def test_two_panels_and_a_title_with_the_plan_and_the_date(figure: Figure) -> None:
    assert len(figure.axes) == 2
    title = figure.get_suptitle()
    assert "tiny-local" in title
    assert "2025-06-03 14:05" in title
    ends, steps = figure.axes
    assert "predicted end" in ends.get_ylabel()
    assert "seconds per step" in steps.get_ylabel()
    labels = {line.get_label() for line in steps.get_lines()}
    assert {"measured", "planned"} <= labels


def test_the_range_is_shaded_and_visible(figure: Figure) -> None:
    bands = [c for c in figure.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1
    assert bands[0].get_label() == "ETA 10-90% range"
    alpha = bands[0].get_alpha()
    assert alpha is not None
    assert alpha > 0


def test_the_naive_spike_is_clipped_out_of_the_view(figure: Figure) -> None:
    ends = figure.axes[0]
    low, high = ends.get_ylim()
    naive = next(line for line in ends.get_lines() if "naive" in str(line.get_label()))
    ydata: Any = naive.get_ydata()
    values = [float(v) for v in ydata if not math.isnan(v)]  # NaN: no naive estimate yet
    assert max(values) > high  # the spike exists, and is off the chart
    assert "off the chart" in str(naive.get_label())
    assert low < _end() < high


def test_the_actual_end_is_marked(figure: Figure) -> None:
    ends = figure.axes[0]
    end = _end()
    labelled = [line for line in ends.get_lines() if "actual end" in str(line.get_label())]
    assert len(labelled) == 1
    line: Any = labelled[0]
    assert line.get_ydata()[0] == pytest.approx(end)
    assert "2025-06-03 14:08:50" in str(labelled[0].get_label())
    stars = [line for line in ends.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 1
    star: Any = stars[0]
    assert star.get_xdata()[0] == pytest.approx(end)


def test_a_run_that_did_not_finish_has_no_end_marker() -> None:
    drawn = chart_figure(chart_of(_revisions(finished=False), plan_name="tiny-local", tz=UTC))
    try:
        ends = drawn.axes[0]
        assert not [line for line in ends.get_lines() if "actual end" in str(line.get_label())]
        assert any("did not finish" in text.get_text() for text in ends.texts)
    finally:
        plt.close(drawn)


def test_the_view_holds_the_etas_and_the_end_but_not_a_wide_range_far_edge() -> None:
    chart = chart_of(_revisions(), plan_name="tiny-local", tz=UTC)
    low, high = end_limits(chart)
    ends = [p.end for p in chart.points]
    assert low < min(ends)
    assert max(ends) < high
    assert chart.actual_end is not None
    assert low < chart.actual_end < high
    naive = [p.naive_end for p in chart.points if p.naive_end is not None]
    assert max(naive) > high


def test_write_plot_writes_a_png(tmp_path: Path) -> None:
    path = write_plot(tmp_path / "report", _revisions(), 250.0, plan_name="tiny-local")
    assert path == tmp_path / "report" / "eta.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert write_plot(tmp_path, [], 1.0) is None


def test_the_plan_name_and_note_come_from_the_summary_written_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_summary(tmp_path, {"plan": "tiny-local", "note": "the planned step time is for H100"})
    captured: list[Chart] = []
    monkeypatch.setattr(report, "save_chart", lambda chart, path, dpi: captured.append(chart))
    write_plot(tmp_path, _revisions(), 250.0)
    assert captured[0].name == "tiny-local"
    assert captured[0].subtitle == "the planned step time is for H100"
