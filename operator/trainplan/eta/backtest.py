"""Backtesting the ETA on a recorded run (pure): a trace of scrapes in, every revision
the engine would have made out, each scored against the run's real end.

A trace is a sequence of `TraceRow`s, one per scrape: the time, the step (None when no
metrics could be read), the cumulative failures Kubernetes reported and, optionally,
the tokens. `replay` thins it to the revision interval (keeping a row once the interval
since the last kept row has passed), feeds each kept row to `revise` exactly as the
operator would, and scores the predicted end against:

- naive extrapolation: elapsed / progress x (1 - progress) (`naive_remaining_seconds`);
- measured step time x work left: the time per unit of work over the last
  `MEASURED_CHANGES` step changes, leaving out any gap between two of them longer than
  `MEASURED_GAP_FACTOR` times their median (what a step-time panel shows: the pace of
  the steps, outages and restarts left out);
- the plan alone: the run's start plus the planned duration, never revised.

The real end is the first row at which the run reached its total work. Errors are
relative to the real duration (end - start); the range's coverage is the share of
revisions, between the first step and the end, whose 10-90% range holds the real end.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from trainplan.eta.engine import StallPolicy, naive_remaining_seconds, revise, work_of
from trainplan.eta.model import Estimate, EtaState, Observation, PlanFacts

MEASURED_CHANGES = 40
"""Step changes the measured-speed baseline is taken over."""
MEASURED_GAP_FACTOR = 5.0
PROGRESS_POINTS = (0.10, 0.25, 0.50, 0.75, 0.90)
"""Where the summary compares the estimates."""
MAX_TRACE_ROWS = 5_000_000
"""A trace longer than this is refused (about 5 years of scrapes at 30 s)."""
_MAX_STEP = 2**53
_MAX_TIME = 4.0e9  # epoch seconds: the year 2096


class TraceError(ValueError):
    """A trace line that cannot be read; the message names the line and the field."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One scrape of a run."""

    time: datetime
    step: int | None
    failures: int = 0
    tokens: int | None = None


def _time(value: object, where: str) -> datetime:
    if isinstance(value, bool):
        raise TraceError(f"{where}: time: expected ISO 8601 text or epoch seconds")
    if isinstance(value, int | float):
        if not (math.isfinite(value) and 0 <= value <= _MAX_TIME):
            raise TraceError(f"{where}: time: epoch seconds out of range")
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, str) and len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise TraceError(f"{where}: time: not ISO 8601") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise TraceError(f"{where}: time: expected ISO 8601 text or epoch seconds")


def _count(value: object, where: str, name: str, *, nullable: bool) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an integer or null" if nullable else "an integer"
        raise TraceError(f"{where}: {name}: expected {kind}")
    if not 0 <= value <= _MAX_STEP:
        raise TraceError(f"{where}: {name}: out of range (0 to 2^53)")
    return value


def parse_trace(lines: Iterable[str], source: str = "trace") -> list[TraceRow]:
    """Rows of a JSON Lines trace; blank lines are skipped. Raises `TraceError` naming the
    first bad line (its content is never quoted)."""
    rows: list[TraceRow] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        if len(rows) >= MAX_TRACE_ROWS:
            raise TraceError(f"{where}: more than {MAX_TRACE_ROWS:,} rows")
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise TraceError(f"{where}: not a JSON object") from None
        if not isinstance(item, dict):
            raise TraceError(f"{where}: not a JSON object")
        if "time" not in item:
            raise TraceError(f"{where}: time: missing")
        if "step" not in item:
            raise TraceError(f"{where}: step: missing (null when no metrics were read)")
        failures = _count(item.get("failures", 0), where, "failures", nullable=False)
        rows.append(
            TraceRow(
                time=_time(item["time"], where),
                step=_count(item["step"], where, "step", nullable=True),
                failures=failures or 0,
                tokens=_count(item.get("tokens"), where, "tokens", nullable=True),
            )
        )
    if not rows:
        raise TraceError(f"{source}: no rows")
    return rows


def thinned(rows: Sequence[TraceRow], interval_seconds: float | None) -> Iterator[TraceRow]:
    """The rows a revision every `interval_seconds` would have seen (all rows if None)."""
    next_time: float | None = None
    for row in rows:
        at = row.time.timestamp()
        if interval_seconds is None or next_time is None or at >= next_time:
            next_time = at + (interval_seconds or 0.0)
            yield row


@dataclass(frozen=True, slots=True)
class ReplayedRevision:
    """One revision of a replay and the baselines' predicted ends (epoch seconds)."""

    row: TraceRow
    estimate: Estimate
    elapsed_seconds: float
    progress_ratio: float
    engine_end: float
    earliest_end: float
    latest_end: float
    naive_end: float | None
    measured_end: float | None
    plan_end: float


@dataclass(frozen=True, slots=True)
class Replay:
    """Every revision of a replay, the run's start and its real end (None: not reached)."""

    revisions: tuple[ReplayedRevision, ...]
    start: float
    end: float | None

    @property
    def duration_seconds(self) -> float | None:
        return None if self.end is None else self.end - self.start


def revisions(
    facts: PlanFacts,
    rows: Sequence[TraceRow],
    *,
    interval_seconds: float | None = None,
    started_at: datetime | None = None,
    stall: StallPolicy | None = None,
) -> Iterator[ReplayedRevision]:
    """Feed the trace to the engine as the operator would, revision by revision."""
    stall = stall or StallPolicy()
    start = (started_at or rows[0].time).timestamp()
    started = datetime.fromtimestamp(start, tz=UTC)
    state = EtaState()
    changes: list[tuple[float, float]] = []  # (seconds, work) between successive step changes
    last_change: tuple[float, float] | None = None  # (time first seen, work)
    measured_rate: float | None = None  # seconds per work
    total = facts.total_work
    for row in thinned(rows, interval_seconds):
        observation = Observation(
            time=row.time,
            step=row.step,
            tokens=row.tokens,
            failures=row.failures,
            started_at=started,
        )
        estimate, state = revise(facts, state, observation, stall)
        now = row.time.timestamp()
        if row.step is not None:
            work = work_of(facts, row.step, row.tokens)
            if last_change is None or work < last_change[1]:
                last_change = (now, work)
            elif work > last_change[1]:
                if now > last_change[0]:
                    changes.append((now - last_change[0], work - last_change[1]))
                    del changes[:-MEASURED_CHANGES]
                    measured_rate = _pace(changes)
                last_change = (now, work)
        elapsed = now - start
        progress = estimate.progress_ratio
        naive = naive_remaining_seconds(elapsed, progress)
        left = max(0.0, total - estimate.work_done)
        yield ReplayedRevision(
            row=row,
            estimate=estimate,
            elapsed_seconds=elapsed,
            progress_ratio=progress,
            engine_end=now + estimate.remaining_seconds,
            earliest_end=now + estimate.earliest_seconds,
            latest_end=now + estimate.latest_seconds,
            naive_end=None if naive is None else now + naive,
            measured_end=now + left * measured_rate if measured_rate else None,
            plan_end=start + facts.planned_duration_seconds,
        )


def _pace(changes: Sequence[tuple[float, float]]) -> float:
    """Seconds per unit of work over the changes, gaps far longer than the usual left out."""
    usual = statistics.median(seconds for seconds, _ in changes)
    kept = [(s, w) for s, w in changes if s <= MEASURED_GAP_FACTOR * usual]
    return sum(s for s, _ in kept) / sum(w for _, w in kept)


def replay(
    facts: PlanFacts,
    rows: Sequence[TraceRow],
    *,
    interval_seconds: float | None = None,
    started_at: datetime | None = None,
    stall: StallPolicy | None = None,
) -> Replay:
    """Every revision of the trace (`revisions`), its start and its real end."""
    found = revisions(
        facts, rows, interval_seconds=interval_seconds, started_at=started_at, stall=stall
    )
    start = (started_at or rows[0].time).timestamp()
    return Replay(tuple(found), start, real_end(facts, rows))


def real_end(facts: PlanFacts, rows: Sequence[TraceRow]) -> float | None:
    """When the run first reached its total work (every row counts, not only those a
    revision kept), or None."""
    total = facts.total_work
    for row in rows:
        if row.step is not None and total > 0 and work_of(facts, row.step, row.tokens) >= total:
            return row.time.timestamp()
    return None


METHODS = ("engine", "naive", "measured", "plan")


def _predicted(revision: ReplayedRevision, method: str) -> float | None:
    return {
        "engine": revision.engine_end,
        "naive": revision.naive_end,
        "measured": revision.measured_end,
        "plan": revision.plan_end,
    }[method]


def relative_error(replayed: Replay, revision: ReplayedRevision, method: str) -> float | None:
    """|predicted end - real end| / real duration, or None where it cannot be told."""
    duration = replayed.duration_seconds
    predicted = _predicted(revision, method)
    if duration is None or duration <= 0 or predicted is None or replayed.end is None:
        return None
    return abs(predicted - replayed.end) / duration


def scored(replayed: Replay) -> list[ReplayedRevision]:
    """The revisions that can be scored: a step done, the real end not yet seen."""
    if replayed.end is None:
        return []
    return [
        r
        for r in replayed.revisions
        if 0 < r.progress_ratio < 1 and r.row.time.timestamp() < replayed.end
    ]


@dataclass(frozen=True, slots=True)
class Score:
    """A replay's figures: errors at `PROGRESS_POINTS` and over 10-90% per method, and
    the range's coverage."""

    at_progress: dict[float, dict[str, float | None]]
    mean_error: dict[str, float | None]
    coverage: float | None
    revisions: int


def score(replayed: Replay) -> Score:
    """Errors at each progress point (the first revision at or past it), the mean error
    over 10-90% of progress, and the range's coverage."""
    candidates = scored(replayed)
    at_progress: dict[float, dict[str, float | None]] = {}
    for point in PROGRESS_POINTS:
        seen = next((r for r in candidates if r.progress_ratio >= point), None)
        at_progress[point] = {
            method: None if seen is None else relative_error(replayed, seen, method)
            for method in METHODS
        }
    middle = [r for r in candidates if 0.10 <= r.progress_ratio <= 0.90]
    mean_error: dict[str, float | None] = {}
    for method in METHODS:
        errors = [e for r in middle if (e := relative_error(replayed, r, method)) is not None]
        mean_error[method] = sum(errors) / len(errors) if errors else None
    coverage = None
    if candidates and replayed.end is not None:
        inside = sum(1 for r in candidates if r.earliest_end <= replayed.end <= r.latest_end)
        coverage = inside / len(candidates)
    return Score(at_progress, mean_error, coverage, len(candidates))
