"""The ETA chart of a run, one drawing for both of its uses: a local run's `eta.png` and
`trainplan eta replay --plot`.

Two panels over wall-clock time. The top one: the predicted end (a date and time, not a
remaining time) with its 10-90% range shaded, naive extrapolation and any other
baselines, and the actual end marked; its y-limits come from the ETA's estimates, its
range and the actual end, so a baseline's start-up spike is clipped instead of
squashing the axis. The bottom one: the measured step time against the planned one.

`chart_figure` builds the matplotlib figure (tests inspect it); `save_chart` writes the
PNG. matplotlib is imported when a chart is drawn, never at import.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MARGIN: Final = 0.08
"""Room above and below the predicted ends, as a share of their span."""
MIN_SPAN_SECONDS: Final = 60.0
"""The smallest span of the predicted-end axis (a run whose estimates never moved)."""
BAND_REACH: Final = 0.5
"""How far the 10-90% range may widen the view beyond the ETAs, as a share of their span."""
SUBTITLE_WIDTH: Final = 100
"""Characters per line of the subtitle."""
LOG_STEP_RATIO: Final = 20.0
"""Step times further apart than this are drawn on a log scale."""


@dataclass(frozen=True, slots=True)
class ChartPoint:
    """One ETA revision. Times are Unix seconds; ends are the predicted end times."""

    time: float
    end: float
    earliest_end: float
    latest_end: float
    naive_end: float | None = None
    measured_step_seconds: float | None = None
    baselines: tuple[float | None, ...] = ()
    """Predicted ends of `Chart.baseline_labels`, in that order (None: not known)."""


@dataclass(frozen=True, slots=True)
class Chart:
    """What the chart shows. `actual_end` is None for a run that did not finish."""

    name: str
    start: float
    points: Sequence[ChartPoint]
    planned_step_seconds: float
    actual_end: float | None = None
    last_time: float | None = None
    """The right edge of the time axis (default: the last revision or the actual end)."""
    subtitle: str | None = None
    baseline_labels: tuple[str, ...] = field(default=())
    tz: tzinfo = UTC


def end_limits(chart: Chart) -> tuple[float, float]:
    """The predicted-end axis, Unix seconds: every ETA and the actual end, widened by the
    ETA's 10-90% range up to half their span again on either side, with a margin.
    Baselines are left out (they are clipped to this view), and so is the range's far
    edge while it is wide (at the start of a run), so that neither squashes the ETA."""
    core = [p.end for p in chart.points]
    if chart.actual_end is not None:
        core.append(chart.actual_end)
    core = [v for v in core if math.isfinite(v)]
    if not core:
        return chart.start, chart.start + MIN_SPAN_SECONDS
    low, high = min(core), max(core)
    if high - low < MIN_SPAN_SECONDS:
        middle = (low + high) / 2
        low, high = middle - MIN_SPAN_SECONDS / 2, middle + MIN_SPAN_SECONDS / 2
    reach = BAND_REACH * (high - low)
    earliest = [p.earliest_end for p in chart.points if math.isfinite(p.earliest_end)]
    latest = [p.latest_end for p in chart.points if math.isfinite(p.latest_end)]
    low = max(low - reach, min([low, *earliest]))
    high = min(high + reach, max([high, *latest]))
    margin = MARGIN * (high - low)
    return low - margin, high + margin


def _clock(seconds: float, tz: tzinfo) -> datetime:
    return datetime.fromtimestamp(seconds, tz)


def _zone(chart: Chart) -> str:
    return _clock(chart.start, chart.tz).tzname() or "UTC"


def _time_format(low: float, high: float, tz: tzinfo) -> str:
    """Clock times within a day, with the date when the axis runs over more than one."""
    if _clock(low, tz).date() != _clock(high, tz).date():
        return "%b %d %H:%M"
    return "%H:%M:%S" if high - low < 3 * 3600 else "%H:%M"


def chart_figure(chart: Chart) -> Figure:
    """The figure: predicted end over wall time above, step time below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates
    import matplotlib.pyplot as plt

    mdates: Any = matplotlib.dates  # untyped

    tz = chart.tz
    points = list(chart.points)

    def clock(values: Sequence[float | None]) -> list[float]:
        return [
            math.nan if v is None or not math.isfinite(v) else mdates.date2num(_clock(v, tz))
            for v in values
        ]

    x = clock([p.time for p in points])
    figure, (ends, steps) = plt.subplots(
        2,
        1,
        figsize=(10, 7.5),
        sharex=True,
        height_ratios=(2.2, 1),
        layout="constrained",
    )
    started = _clock(chart.start, tz)
    figure.suptitle(
        f"{chart.name}: predicted end, run started {started:%Y-%m-%d %H:%M} {_zone(chart)}"
        + (f"\n{textwrap.fill(chart.subtitle, SUBTITLE_WIDTH)}" if chart.subtitle else ""),
        fontsize=11,
    )
    low, high = end_limits(chart)

    ends.fill_between(
        x,
        clock([p.earliest_end for p in points]),
        clock([p.latest_end for p in points]),
        color="tab:blue",
        alpha=0.25,
        linewidth=0,
        label="ETA 10-90% range",
        zorder=1,
    )
    ends.plot(x, clock([p.end for p in points]), color="tab:blue", linewidth=2, label="ETA")
    styles = ("tab:green", "tab:gray", "tab:purple", "tab:brown")
    lines = [("naive extrapolation", "tab:orange", "-.", [p.naive_end for p in points])]
    for index, name in enumerate(chart.baseline_labels):
        values = [p.baselines[index] if index < len(p.baselines) else None for p in points]
        lines.append((name, styles[index % len(styles)], ":", values))
    for name, color, style, values in lines:
        known = [v for v in values if v is not None and math.isfinite(v)]
        if not known:
            continue
        off = sum(1 for v in known if not low <= v <= high)
        label = f"{name} ({off} of {len(known)} points off the chart)" if off else name
        ends.plot(x, clock(values), color=color, linewidth=1, linestyle=style, label=label)
    now_low = min(chart.start, low)
    now_high = max(high, chart.actual_end or high, *(p.time for p in points))
    ends.plot(
        clock([now_low, now_high]),
        clock([now_low, now_high]),
        color="0.6",
        linewidth=0.8,
        linestyle="--",
        label="now (an end cannot be earlier)",
        zorder=0,
    )
    form = _time_format(low, high, tz)
    if chart.actual_end is not None:
        actual = mdates.date2num(_clock(chart.actual_end, tz))
        ends.axhline(
            actual,
            color="black",
            linewidth=1.2,
            label=f"actual end {_clock(chart.actual_end, tz):%Y-%m-%d %H:%M:%S}",
            zorder=3,
        )
        ends.plot([actual], [actual], marker="*", markersize=14, color="black", zorder=4)
        ends.annotate(
            "finished",
            (actual, actual),
            textcoords="offset points",
            xytext=(-8, 8),
            ha="right",
        )
    else:
        ends.text(
            0.01,
            0.02,
            "the run did not finish: no actual end",
            transform=ends.transAxes,
            color="0.3",
        )
    ends.set_ylim(mdates.date2num(_clock(low, tz)), mdates.date2num(_clock(high, tz)))
    ends.set_ylabel(f"predicted end ({_zone(chart)})")
    ends.yaxis.set_major_locator(mdates.AutoDateLocator(tz=tz))
    ends.yaxis.set_major_formatter(mdates.DateFormatter(form, tz=tz))
    ends.legend(loc="best", fontsize=9)
    ends.grid(alpha=0.3)

    measured: list[tuple[float, float]] = []
    for t, p in zip(x, points, strict=True):
        if p.measured_step_seconds:
            measured.append((t, p.measured_step_seconds))
    if measured:
        steps.plot(
            [t for t, _ in measured],
            [v for _, v in measured],
            color="tab:red",
            linewidth=1.6,
            marker="." if len(measured) < 200 else None,
            label="measured",
            zorder=3,
        )
    steps.axhline(chart.planned_step_seconds, color="tab:gray", linestyle="--", label="planned")
    seconds = [v for _, v in measured] + [chart.planned_step_seconds]
    if max(seconds) / min(seconds) > LOG_STEP_RATIO:
        steps.set_yscale("log")
    steps.set_ylabel("seconds per step")
    steps.set_xlabel(f"wall-clock time ({_zone(chart)})")
    steps.legend(loc="best", fontsize=9)
    steps.grid(alpha=0.3)
    right = chart.last_time or max([p.time for p in points] + [chart.actual_end or chart.start])
    span = max(right - chart.start, 1.0)
    steps.set_xlim(
        mdates.date2num(_clock(chart.start - 0.02 * span, tz)),
        mdates.date2num(_clock(right + 0.03 * span, tz)),
    )
    steps.xaxis.set_major_locator(mdates.AutoDateLocator(tz=tz))
    steps.xaxis.set_major_formatter(
        mdates.DateFormatter(_time_format(chart.start, right, tz), tz=tz)
    )
    return figure


def save_chart(chart: Chart, path: Path, dpi: int = 110) -> Path:
    """Draw the chart to `path` (PNG); the parent directory must exist."""
    import matplotlib.pyplot as plt

    figure = chart_figure(chart)
    try:
        figure.savefig(path, dpi=dpi)
    finally:
        plt.close(figure)
    return path
