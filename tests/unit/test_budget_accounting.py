"""GPU-hour budgets as pure functions: the ledger over simulated weeks (an injected clock),
the verdict of each enforcement mode with real plans, and the budget's status document
(conditions, Events on crossings, the committed CRD schema)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from statistics import NormalDist
from typing import Any

import pytest

from tests.contract.crd_schema import committed_crd, errors, validator_for
from trainplan.api import (
    BudgetConditionType,
    GPUBudgetSpec,
    Plan,
    PlanUsage,
    TrainingPlanSpec,
    UsageInterval,
    format_duration,
)
from trainplan.controller.budgets import (
    ESTIMATE,
    OVERRUN_HORIZON_SECONDS,
    Budget,
    BudgetSummary,
    Charge,
    Verdict,
    admit,
    admitted_gpu_hours,
    budget_conditions,
    budget_status,
    charge_for,
    committed_gpu_hours,
    find_usage,
    follow_phase,
    judge,
    ledger_from_status,
    phase_for_entry,
    prune,
    release,
    replace_usage,
    summarize,
    used_gpu_hours,
    window_start,
)
from trainplan.planner import (
    Calibration,
    Catalog,
    InfeasiblePlanError,
    PlanInputError,
    duration_quantile_factor,
    plan,
)

T0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
"""A Monday, midnight UTC: the start of the simulated weeks."""

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "x:1"},
}


def _hours(n: float) -> timedelta:
    return timedelta(hours=n)


def _days(n: float) -> timedelta:
    return timedelta(days=n)


def _spec(**changes: Any) -> TrainingPlanSpec:
    return TrainingPlanSpec.model_validate({**SPEC, **changes})


@pytest.fixture(scope="module")
def base_plan(catalog: Catalog) -> Plan:
    """8 GPUs, more than 9 GPU-hours (about an hour and a quarter)."""
    return plan(_spec(), catalog)


def _needs(planned: Plan) -> str:
    """What a refusal at the estimate says the plan needs."""
    return f"needs {planned.gpu_hours:,.0f} GPU-hours at p50 (the estimate)"


def _planned(base: Plan, *, gpus: int | None = None, gpu_hours: float) -> Plan:
    """A real plan with its figures replaced (model_copy does not re-validate)."""
    update: dict[str, Any] = {"gpu_hours": gpu_hours}
    if gpus is not None:
        update["gpus"] = gpus
    return base.model_copy(update=update)


def _usage(
    name: str,
    gpus: int,
    projected: float,
    *intervals: tuple[datetime, datetime | None],
    finished: bool = False,
    uid: str | None = None,
    admitted: datetime = T0,
    admitted_gpu_hours: float | None = None,
) -> PlanUsage:
    """An entry admitted with its projection (unless `admitted_gpu_hours` says otherwise)."""
    return PlanUsage(
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        gpus=gpus,
        projected_gpu_hours=projected,
        admitted_gpu_hours=projected if admitted_gpu_hours is None else admitted_gpu_hours,
        admitted_time=admitted,
        intervals=tuple(UsageInterval(start=start, end=end) for start, end in intervals),
        finished=finished,
    )


def _figures(
    spec: GPUBudgetSpec, ledger: Sequence[PlanUsage], now: datetime
) -> tuple[float, float, float, int, tuple[str, ...]]:
    """(used, committed, remaining, gpusInUse, activePlans), rounded to a millionth."""
    summary = summarize(spec, ledger, now)
    return (
        round(summary.used_gpu_hours, 6),
        round(summary.committed_gpu_hours, 6),
        round(summary.remaining_gpu_hours, 6),
        summary.gpus_in_use,
        summary.active_plans,
    )


def _step(usage: PlanUsage, phase: str | None, now: datetime, **times: Any) -> PlanUsage:
    return follow_phase(
        usage,
        phase=phase,
        start_time=times.get("start_time"),
        end_time=times.get("end_time"),
        projected_gpu_hours=times.get("projected"),
        now=now,
    )


# --- the window ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "length"),
    [("30d", _days(30)), ("7d", _days(7)), ("1h30m", _hours(1.5)), ("P1DT12H", _hours(36))],
)
def test_window_starts_one_period_before_now(period: str, length: timedelta) -> None:
    spec = GPUBudgetSpec(gpu_hours=10, period=period)
    assert window_start(spec, T0) == T0 - length


def test_spec_defaults_to_a_30_day_window_and_reject() -> None:
    spec = GPUBudgetSpec.model_validate({"gpuHours": 5})
    assert (spec.period, spec.enforcement, spec.max_gpus) == ("30d", "Reject", None)


# --- used and committed -------------------------------------------------------------------


def test_used_counts_gpus_times_hours_of_every_interval() -> None:
    usage = _usage("a", 8, 100, (T0, T0 + _hours(2)), (T0 + _hours(5), T0 + _hours(6.5)))
    assert used_gpu_hours(usage, None, T0 + _days(1)) == pytest.approx(8 * 3.5)


def test_open_interval_counts_up_to_now() -> None:
    usage = _usage("a", 4, 100, (T0, None))
    assert used_gpu_hours(usage, None, T0 + _hours(3)) == pytest.approx(12)
    assert used_gpu_hours(usage, None, T0 + _hours(10)) == pytest.approx(40)


def test_used_is_clipped_to_the_window_and_to_now() -> None:
    usage = _usage(
        "a",
        2,
        100,
        (T0, T0 + _hours(10)),  # half of it before the window
        (T0 + _hours(12), T0 + _hours(30)),  # its end is after now
    )
    since, now = T0 + _hours(5), T0 + _hours(20)
    assert used_gpu_hours(usage, since, now) == pytest.approx(2 * (5 + 8))


def test_interval_wholly_before_the_window_or_after_now_counts_nothing() -> None:
    before = _usage("a", 8, 100, (T0, T0 + _hours(1)))
    assert used_gpu_hours(before, T0 + _hours(2), T0 + _hours(3)) == 0.0
    future = _usage("b", 8, 100, (T0 + _hours(5), None))
    assert used_gpu_hours(future, None, T0 + _hours(1)) == 0.0


def test_committed_is_projection_less_whole_life_use() -> None:
    usage = _usage("a", 8, 100, (T0, T0 + _hours(2)), (T0 + _days(8), None))
    # 16 used long ago (out of any 7d window) still counts against the projection.
    assert committed_gpu_hours(usage, T0 + _days(8) + _hours(1)) == pytest.approx(100 - 16 - 8)


def test_committed_never_goes_negative_and_is_zero_once_finished() -> None:
    overrun = _usage("a", 8, 10, (T0, T0 + _hours(5)))  # stopped (suspended) past its hours
    assert committed_gpu_hours(overrun, T0 + _hours(6)) == 0.0
    finished = _usage("b", 8, 100, (T0, T0 + _hours(1)), finished=True)
    assert committed_gpu_hours(finished, T0 + _hours(2)) == 0.0


def test_admitted_plan_not_started_commits_its_projection() -> None:
    spec = GPUBudgetSpec(gpu_hours=500, period="7d")
    ledger = [_usage("a", 8, 120)]
    assert _figures(spec, ledger, T0) == (0.0, 120.0, 380.0, 8, ("a",))


# --- the commitment cannot be talked down (security review, finding 2) ------------------------


def test_a_projection_that_drops_keeps_the_admitted_gpu_hours_committed() -> None:
    """The pod reports its final step one hour in: the ETA projects what was used (8),
    yet the plan was admitted for 100 and its Job still runs."""
    running = _step(_usage("a", 8, 100), "Running", T0, start_time=T0)
    reported_done = _step(running, "Running", T0 + _hours(1), projected=8.0)
    assert reported_done.projected_gpu_hours == 8.0
    assert reported_done.admitted_gpu_hours == 100.0
    assert committed_gpu_hours(reported_done, T0 + _hours(1)) == pytest.approx(100 - 8)


def test_the_bypass_no_longer_admits_a_second_plan_over_the_limit(base_plan: Plan) -> None:
    spec = GPUBudgetSpec(gpu_hours=150, period="7d")
    first = _step(_usage("first", 8, 100), "Running", T0, start_time=T0)
    first = _step(first, "Running", T0 + _hours(1), projected=8.0)  # "done" at once
    budget = _budget(spec, [first], T0 + _hours(1))
    assert budget.summary.remaining_gpu_hours == pytest.approx(150 - 8 - 92)
    second = _planned(base_plan, gpu_hours=100)
    verdict = judge(budget, _spec(), second, _no_replan)
    assert not verdict.allowed
    assert "needs 100 GPU-hours at p50 (the estimate); team-a has 50 of 150 left" in verdict.message


def test_a_projection_above_the_admission_is_committed() -> None:
    slower = _usage("a", 8, 150, (T0, None), admitted_gpu_hours=100)
    assert committed_gpu_hours(slower, T0 + _hours(2)) == pytest.approx(150 - 16)


def test_a_job_past_its_admitted_hours_commits_its_gpus_for_the_horizon() -> None:
    horizon_gpu_hours = 8 * OVERRUN_HORIZON_SECONDS / 3600
    assert horizon_gpu_hours == 8.0  # one hour of its 8 GPUs
    admitted_10 = _usage("a", 8, 10, (T0, None))
    assert committed_gpu_hours(admitted_10, T0 + _hours(1)) == pytest.approx(2.0)  # 10 - 8
    assert committed_gpu_hours(admitted_10, T0 + _hours(1.25)) == pytest.approx(8.0)  # used 10
    assert committed_gpu_hours(admitted_10, T0 + _hours(30)) == pytest.approx(8.0)  # still held
    # Its projection told down to what it used changes nothing.
    told_down = _step(admitted_10, "Running", T0 + _hours(5), projected=40.0)
    assert committed_gpu_hours(told_down, T0 + _hours(5)) == pytest.approx(8.0)
    # Its pods let go (suspended) or it ended: nothing more is committed.
    suspended = _step(admitted_10, "Suspended", T0 + _hours(5))
    assert committed_gpu_hours(suspended, T0 + _hours(6)) == 0.0
    done = _step(admitted_10, "Succeeded", T0 + _hours(6), end_time=T0 + _hours(5))
    assert committed_gpu_hours(done, T0 + _hours(6)) == 0.0


def test_an_entry_from_before_admitted_hours_keeps_its_projection_as_admitted() -> None:
    old = _usage("a", 8, 100, (T0, None)).model_copy(update={"admitted_gpu_hours": None})
    assert admitted_gpu_hours(old) == 100.0
    assert committed_gpu_hours(old, T0 + _hours(1)) == pytest.approx(92.0)
    told_down = _step(old, "Running", T0 + _hours(1), projected=8.0)
    assert told_down.admitted_gpu_hours == 100.0  # recorded before the projection changed
    assert committed_gpu_hours(told_down, T0 + _hours(1)) == pytest.approx(92.0)
    document = old.to_document()
    assert "admittedGPUHours" not in document
    assert PlanUsage.model_validate(document) == old


def test_empty_ledger_leaves_the_whole_allowance() -> None:
    spec = GPUBudgetSpec(gpu_hours=500, max_gpus=16)
    summary = summarize(spec, [], T0)
    assert summary == BudgetSummary(500, 0.0, 0.0, 0, ())
    assert summary.remaining_gpu_hours == 500
    assert summary.used_ratio == 0.0


# --- the ledger: admit, find, replace -------------------------------------------------------


def test_admit_records_the_plan_once(base_plan: Plan) -> None:
    ledger = admit([], name="a", uid="u-a", plan=base_plan, charge=ESTIMATE, now=T0)
    assert ledger == [
        PlanUsage(
            name="a",
            uid="u-a",
            gpus=8,
            projected_gpu_hours=base_plan.gpu_hours,
            admitted_gpu_hours=base_plan.gpu_hours,
            charged_confidence=0.5,
            admitted_time=T0,
        )
    ]
    again = admit(ledger, name="a", uid="u-a", plan=base_plan, charge=ESTIMATE, now=T0 + _hours(1))
    assert again == ledger
    assert again is not ledger  # a new list, the input untouched


def test_recreated_plan_with_a_new_uid_gets_its_own_entry(base_plan: Plan) -> None:
    first = release(
        admit([], name="a", uid="u-1", plan=base_plan, charge=ESTIMATE, now=T0)[0], T0 + _hours(1)
    )
    ledger = admit(
        [first], name="a", uid="u-2", plan=base_plan, charge=ESTIMATE, now=T0 + _hours(2)
    )
    assert [(u.name, u.uid, u.finished) for u in ledger] == [
        ("a", "u-1", True),
        ("a", "u-2", False),
    ]
    assert find_usage(ledger, "a", "u-2") is ledger[1]
    assert find_usage(ledger, "a", "u-1") is ledger[0]


def test_find_usage_matches_by_name_and_uid_when_known() -> None:
    known = _usage("a", 8, 10, uid="u-1")
    unknown_uid = _usage("b", 8, 10).model_copy(update={"uid": None})
    ledger = [known, unknown_uid]
    assert find_usage(ledger, "a", "u-1") is known
    assert find_usage(ledger, "a", None) is known  # no uid given: by name
    assert find_usage(ledger, "a", "u-other") is None  # another plan of the same name
    assert find_usage(ledger, "b", "anything") is unknown_uid  # entry without uid: by name
    assert find_usage(ledger, "c", None) is None


def test_replace_usage_replaces_only_the_matching_entry() -> None:
    a, b = _usage("a", 8, 10), _usage("b", 4, 10)
    closed = release(a, T0)
    assert replace_usage([a, b], closed) == [closed, b]
    stranger = _usage("a", 8, 10, uid="u-other")
    assert replace_usage([a, b], stranger) == [a, b]


# --- follow_phase and release ---------------------------------------------------------------


def test_first_running_opens_at_the_jobs_start_time() -> None:
    usage = _usage("a", 8, 100)
    running = _step(usage, "Running", T0 + _hours(1), start_time=T0 + _hours(0.25))
    assert running.intervals == (UsageInterval(start=T0 + _hours(0.25)),)
    assert not running.finished


def test_start_time_in_the_future_is_clamped_to_now() -> None:
    running = _step(_usage("a", 8, 100), "Running", T0, start_time=T0 + _hours(1))
    assert running.intervals == (UsageInterval(start=T0),)


def test_running_without_start_time_opens_now() -> None:
    running = _step(_usage("a", 8, 100), "Restarting", T0 + _hours(2))
    assert running.intervals == (UsageInterval(start=T0 + _hours(2)),)


def test_phases_that_hold_no_gpus_leave_a_closed_entry_as_it_is() -> None:
    usage = _usage("a", 8, 100)
    for phase in ("Pending", "Planned", "Launching", "Suspended"):
        assert _step(usage, phase, T0 + _hours(1)) == usage
    assert _step(usage, None, T0 + _hours(1)) is usage  # no phase yet


def test_failed_closes_at_the_completion_time() -> None:
    running = _usage("a", 8, 100, (T0, None))
    failed = _step(running, "Failed", T0 + _hours(5), end_time=T0 + _hours(3))
    assert failed.intervals == (UsageInterval(start=T0, end=T0 + _hours(3)),)
    assert failed.finished
    assert committed_gpu_hours(failed, T0 + _hours(5)) == 0.0


def test_ended_without_completion_time_closes_now() -> None:
    running = _usage("a", 8, 100, (T0, None))
    ended = _step(running, "Failed", T0 + _hours(2))
    assert ended.intervals == (UsageInterval(start=T0, end=T0 + _hours(2)),)


def test_suspended_closes_now_even_with_a_completion_time() -> None:
    running = _usage("a", 8, 100, (T0, None))
    suspended = _step(running, "Suspended", T0 + _hours(2), end_time=T0 + _hours(1))
    assert suspended.intervals == (UsageInterval(start=T0, end=T0 + _hours(2)),)
    assert not suspended.finished


def test_completion_before_the_interval_start_closes_it_empty() -> None:
    running = _usage("a", 8, 100, (T0 + _hours(4), None))
    done = _step(running, "Succeeded", T0 + _hours(5), end_time=T0 + _hours(1))
    assert done.intervals == (UsageInterval(start=T0 + _hours(4), end=T0 + _hours(4)),)
    assert used_gpu_hours(done, None, T0 + _hours(5)) == 0.0


def test_rejected_before_running_finishes_without_intervals() -> None:
    rejected = _step(_usage("a", 8, 100), "Rejected", T0)
    assert rejected.finished
    assert rejected.intervals == ()


# --- a Rejected phase older than the entry (security review, finding 6) ----------------------


def _entry_phase(
    phase: str | None,
    *,
    generation: int | None = 2,
    observed: int | None = 2,
    updated: datetime | None = T0 - timedelta(hours=1),
) -> str | None:
    return phase_for_entry(
        _usage("a", 8, 100, admitted=T0),
        phase=phase,
        generation=generation,
        observed_generation=observed,
        updated_time=updated,
    )


def test_a_rejection_of_an_older_spec_leaves_a_fresh_entry_alone() -> None:
    # Rejected at generation 1, fixed (2) and admitted; the status still says Rejected.
    assert _entry_phase("Rejected", generation=2, observed=1, updated=T0 + _hours(1)) is None


def test_a_rejection_written_before_the_admission_leaves_the_entry_alone() -> None:
    # The same spec admitted again (resumed once the budget had room): only the time tells.
    assert _entry_phase("Rejected", generation=2, observed=2, updated=T0 - _hours(1)) is None


def test_a_rejection_after_the_admission_finishes_the_entry() -> None:
    for updated in (T0, T0 + _hours(1), None):
        assert _entry_phase("Rejected", updated=updated) == "Rejected"
    assert _entry_phase("Rejected", generation=None, observed=None, updated=None) == "Rejected"
    finished = _step(_usage("a", 8, 100), _entry_phase("Rejected", updated=T0), T0)
    assert finished.finished


def test_other_phases_are_followed_whatever_the_generation_or_time() -> None:
    for phase in ("Succeeded", "Failed", "Running", "Launching", None):
        assert _entry_phase(phase, observed=1, updated=T0 - _hours(1)) == phase


def test_a_stale_rejection_neither_finishes_nor_prunes_the_entry() -> None:
    spec = GPUBudgetSpec(gpu_hours=500, period="7d")
    admitted = _usage("a", 8, 100, admitted=T0)
    phase = _entry_phase("Rejected", generation=3, observed=2, updated=T0 - _hours(1))
    followed = _step(admitted, phase, T0 + _hours(0.001))
    assert followed == admitted
    assert prune(spec, [followed], T0 + _hours(1)) == [admitted]
    assert _figures(spec, [followed], T0 + _hours(1)) == (0.0, 100.0, 400.0, 8, ("a",))


def test_ended_without_being_seen_running_counts_from_start_to_completion() -> None:
    """The operator was away while it ran (or adopted it after the end): the Job's start
    and completion times say how long its pods held the GPUs."""
    waiting = _usage("a", 8, 100)
    done = _step(waiting, "Succeeded", T0 + _hours(5), start_time=T0, end_time=T0 + _hours(3))
    assert done.intervals == (UsageInterval(start=T0, end=T0 + _hours(3)),)
    assert done.finished
    assert used_gpu_hours(done, None, T0 + _hours(5)) == pytest.approx(24)
    # A failed Job has no completion time: it held them until now.
    failed = _step(waiting, "Failed", T0 + _hours(2), start_time=T0)
    assert failed.intervals == (UsageInterval(start=T0, end=T0 + _hours(2)),)


def test_ended_again_after_release_changes_nothing() -> None:
    released = release(_usage("a", 8, 100), T0)
    again = _step(released, "Succeeded", T0 + _hours(1), start_time=T0, end_time=T0)
    assert again == released


def test_projection_follows_the_eta() -> None:
    running = _usage("a", 8, 100, (T0, None))
    revised = _step(running, "Running", T0 + _hours(1), projected=150.0)
    assert revised.projected_gpu_hours == 150.0
    assert revised.intervals == running.intervals  # still the one open interval
    assert committed_gpu_hours(revised, T0 + _hours(1)) == pytest.approx(150 - 8)


def test_release_closes_the_open_interval_now() -> None:
    running = _usage("a", 8, 100, (T0, T0 + _hours(1)), (T0 + _hours(2), None))
    released = release(running, T0 + _hours(3))
    assert released.intervals == (
        UsageInterval(start=T0, end=T0 + _hours(1)),
        UsageInterval(start=T0 + _hours(2), end=T0 + _hours(3)),
    )
    assert released.finished
    assert committed_gpu_hours(released, T0 + _hours(3)) == 0.0
    assert used_gpu_hours(released, None, T0 + _days(1)) == pytest.approx(16)


def test_release_of_a_plan_that_never_ran_or_already_stopped() -> None:
    never = release(_usage("a", 8, 100), T0)
    assert (never.intervals, never.finished) == ((), True)
    stopped = _usage("b", 8, 100, (T0, T0 + _hours(1)))
    assert release(stopped, T0 + _hours(5)).intervals == stopped.intervals
    clock_behind = release(_usage("c", 8, 100, (T0 + _hours(1), None)), T0)
    assert clock_behind.intervals == (UsageInterval(start=T0 + _hours(1), end=T0 + _hours(1)),)


# --- simulated weeks ------------------------------------------------------------------------


def test_a_plan_through_its_life_over_two_weeks(base_plan: Plan) -> None:
    """Admitted, running, restarting, suspended, resumed, succeeded, and finally out of
    a 7-day window: the figures at every step."""
    spec = GPUBudgetSpec(gpu_hours=1000, period="7d")
    job_start = T0 + _hours(0.5)
    ledger = admit(
        [], name="a", uid="u-a", plan=_planned(base_plan, gpu_hours=100), charge=ESTIMATE, now=T0
    )
    assert _figures(spec, ledger, T0) == (0.0, 100.0, 900.0, 8, ("a",))

    def advance(phase: str | None, now: datetime, **times: Any) -> None:
        nonlocal ledger
        (usage,) = ledger
        ledger = replace_usage(ledger, _step(usage, phase, now, **times))

    advance("Running", T0 + _hours(1), start_time=job_start)
    assert _figures(spec, ledger, T0 + _hours(1)) == (4.0, 96.0, 900.0, 8, ("a",))

    advance("Restarting", T0 + _hours(3), start_time=job_start)
    advance("Running", T0 + _hours(4), start_time=job_start)
    assert len(ledger[0].intervals) == 1
    assert ledger[0].intervals[0].end is None
    assert _figures(spec, ledger, T0 + _hours(4)) == (28.0, 72.0, 900.0, 8, ("a",))

    advance("Suspended", T0 + _hours(6), start_time=job_start)
    assert ledger[0].intervals == (UsageInterval(start=job_start, end=T0 + _hours(6)),)
    # Suspended: nothing more is used, the projection stays committed.
    assert _figures(spec, ledger, T0 + _hours(9)) == (44.0, 56.0, 900.0, 8, ("a",))

    advance("Running", T0 + _hours(10), start_time=job_start)  # resumed: a new interval, now
    assert [i.start for i in ledger[0].intervals] == [job_start, T0 + _hours(10)]
    assert _figures(spec, ledger, T0 + _hours(12)) == (60.0, 40.0, 900.0, 8, ("a",))

    advance("Succeeded", T0 + _hours(20), end_time=T0 + _hours(18))
    assert ledger[0].intervals[-1] == UsageInterval(start=T0 + _hours(10), end=T0 + _hours(18))
    assert ledger[0].finished
    assert _figures(spec, ledger, T0 + _hours(20)) == (108.0, 0.0, 892.0, 0, ())

    # A week later the first interval has left the window; the second is half out.
    now = T0 + _days(7) + _hours(14)
    assert _figures(spec, ledger, now) == (32.0, 0.0, 968.0, 0, ())
    assert prune(spec, ledger, now) == ledger

    # Once its last interval ended before the window, the entry is pruned.
    assert _figures(spec, ledger, T0 + _days(7) + _hours(18)) == (0.0, 0.0, 1000.0, 0, ())
    assert prune(spec, ledger, T0 + _days(7) + _hours(18)) == ledger  # ended exactly at start
    assert prune(spec, ledger, T0 + _days(7) + _hours(18) + timedelta(seconds=1)) == []


def test_several_plans_over_three_weeks(base_plan: Plan) -> None:
    """Three plans share a 7-day window: one runs for a long time (never pruned while
    running), one is deleted mid-run (released), one finishes."""
    spec = GPUBudgetSpec(gpu_hours=5000, period="7d", max_gpus=64)
    ledger: list[PlanUsage] = []

    def put(usage: PlanUsage) -> None:
        nonlocal ledger
        ledger = replace_usage(ledger, usage)

    def entry(name: str) -> PlanUsage:
        found = find_usage(ledger, name, f"u-{name}")
        assert found is not None
        return found

    # Day 0: "long" (16 GPUs, 3000 projected) is admitted and starts at once.
    ledger = admit(
        ledger,
        name="long",
        uid="u-long",
        plan=_planned(base_plan, gpus=16, gpu_hours=3000),
        charge=ESTIMATE,
        now=T0,
    )
    put(_step(entry("long"), "Running", T0, start_time=T0))
    # Day 1: "gone" (8 GPUs, 400) is admitted, runs from 06:00, deleted at 16:00.
    day1 = T0 + _days(1)
    ledger = admit(
        ledger,
        name="gone",
        uid="u-gone",
        plan=_planned(base_plan, gpu_hours=400),
        charge=ESTIMATE,
        now=day1,
    )
    put(_step(entry("gone"), "Running", day1 + _hours(6), start_time=day1 + _hours(6)))
    assert _figures(spec, ledger, day1 + _hours(10)) == (
        16 * 34 + 8 * 4,
        (3000 - 16 * 34) + (400 - 8 * 4),
        5000 - 3000 - 400,
        24,
        ("gone", "long"),
    )
    put(release(entry("gone"), day1 + _hours(16)))
    assert _figures(spec, ledger, day1 + _hours(16)) == (
        16 * 40 + 8 * 10,
        3000 - 16 * 40,
        5000 - 3000 - 80,
        16,
        ("long",),
    )
    # Day 3: "short" (32 GPUs, 64 projected) runs 02:00 to 04:00 and succeeds.
    day3 = T0 + _days(3)
    ledger = admit(
        ledger,
        name="short",
        uid="u-short",
        plan=_planned(base_plan, gpus=32, gpu_hours=64),
        charge=ESTIMATE,
        now=day3,
    )
    put(_step(entry("short"), "Running", day3 + _hours(2), start_time=day3 + _hours(2)))
    put(_step(entry("short"), "Succeeded", day3 + _hours(5), end_time=day3 + _hours(4)))
    now = day3 + _hours(5)
    long_used = 16 * (72 + 5)
    assert _figures(spec, ledger, now) == (
        long_used + 80 + 64,
        3000 - long_used,
        5000 - 3000 - 80 - 64,
        16,
        ("long",),
    )

    # Day 8 17:00: "gone" ended before the window (day 1 16:00) and is pruned, "short"
    # (day 3) still counts, "long" is clipped at the window start and, running longer
    # than admitted, commits its 16 GPUs for the next hour.
    now = T0 + _days(8) + _hours(17)
    kept = prune(spec, ledger, now)
    assert [u.name for u in kept] == ["long", "short"]
    assert _figures(spec, kept, now) == (
        16 * 24 * 7 + 64,
        16.0,
        5000 - 16 * 24 * 7 - 64 - 16,
        16,
        ("long",),
    )
    # Pruning drops only what counts for nothing: the figures are the same either way.
    assert _figures(spec, ledger, now) == _figures(spec, kept, now)

    # Day 20: "short" is gone too; "long" has run 20 days and is never pruned while running.
    now = T0 + _days(20)
    kept = prune(spec, ledger, now)
    assert [u.name for u in kept] == ["long"]
    assert kept[0].intervals == (UsageInterval(start=T0),)
    assert _figures(spec, kept, now) == (16 * 24 * 7, 16.0, 5000 - 16 * 24 * 7 - 16, 16, ("long",))


def test_unfinished_entries_are_never_pruned() -> None:
    spec = GPUBudgetSpec(gpu_hours=100, period="1d")
    suspended = _usage("s", 8, 100, (T0, T0 + _hours(1)))  # closed but not finished
    waiting = _usage("w", 8, 100)  # admitted, never started
    finished_never_ran = _usage("r", 8, 100, finished=True)
    later = T0 + _days(30)
    assert prune(spec, [suspended, waiting, finished_never_ran], later) == [suspended, waiting]


def test_plain_utc_and_offset_clocks_agree() -> None:
    """The same instants written with another offset give the same figures."""
    spec = GPUBudgetSpec(gpu_hours=100, period="7d")
    plus_two = timezone(timedelta(hours=2))
    usage_utc = _usage("a", 4, 100, (T0, T0 + _hours(3)))
    usage_local = _usage(
        "a", 4, 100, (T0.astimezone(plus_two), (T0 + _hours(3)).astimezone(plus_two))
    )
    now = T0 + _hours(5)
    assert _figures(spec, [usage_utc], now) == _figures(
        spec, [usage_local], now.astimezone(plus_two)
    )


# --- judge ---------------------------------------------------------------------------------


def _budget(
    spec: GPUBudgetSpec, ledger: Sequence[PlanUsage] = (), now: datetime = T0, name: str = "team-a"
) -> Budget:
    return Budget(name, spec, summarize(spec, ledger, now))


class _Replan:
    """The planner, recording the specs it was asked to plan."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.calls: list[TrainingPlanSpec] = []

    def __call__(self, spec: TrainingPlanSpec) -> Plan:
        self.calls.append(spec)
        return plan(spec, self.catalog)


def _no_replan(spec: TrainingPlanSpec) -> Plan:
    raise AssertionError("judge must not re-plan here")


def _spent(gpu_hours: float) -> PlanUsage:
    """A finished 100-GPU plan that used `gpu_hours` inside a 30-day window."""
    return _usage("spent", 100, gpu_hours, (T0 - _hours(gpu_hours / 100), T0), finished=True)


def _holding(gpus: int) -> PlanUsage:
    """An admitted plan holding `gpus` GPUs and committing nothing more."""
    return _usage("holder", gpus, 0)


def test_fits_is_admitted_as_it_is(base_plan: Plan) -> None:
    spec = _spec()
    verdict = judge(_budget(GPUBudgetSpec(gpu_hours=1000, max_gpus=8)), spec, base_plan, _no_replan)
    assert verdict == Verdict(True, "", plan=base_plan, spec=spec)
    assert not verdict.exceeded


def test_exactly_the_remainder_fits(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=100), [_spent(50)])
    assert budget.summary.remaining_gpu_hours == 50.0
    assert judge(budget, _spec(), _planned(base_plan, gpu_hours=50.0), _no_replan).allowed
    assert not judge(budget, _spec(), _planned(base_plan, gpu_hours=50.001), _no_replan).allowed


def test_reject_gives_the_numbers(base_plan: Plan) -> None:
    big = _planned(base_plan, gpu_hours=12_400)
    budget = _budget(GPUBudgetSpec(gpu_hours=50_000, period="30d"), [_spent(46_900)])
    assert budget.summary.remaining_gpu_hours == pytest.approx(3_100)
    verdict = judge(budget, _spec(), big, _no_replan)
    assert not verdict.allowed
    assert verdict.message == (
        "needs 12,400 GPU-hours at p50 (the estimate); team-a has 3,100 of 50,000 left in"
        " the last 30d"
    )
    assert (verdict.plan, verdict.spec, verdict.warnings, verdict.exceeded) == (
        None,
        None,
        (),
        False,
    )


def test_reject_counts_committed_hours_of_running_plans(base_plan: Plan) -> None:
    """Used in the window plus what admitted plans still commit."""
    spec = GPUBudgetSpec(gpu_hours=100, period="7d")
    running = _usage("other", 8, 96, (T0 - _hours(1), None))  # 8 used, 88 committed
    budget = _budget(spec, [running])
    assert budget.summary.remaining_gpu_hours == pytest.approx(4)
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert verdict.message == f"{_needs(base_plan)}; team-a has 4 of 100 left in the last 7d"


def test_remaining_below_zero_reads_as_none_left(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=100), [_spent(150)])
    assert budget.summary.remaining_gpu_hours == pytest.approx(-50)
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert "team-a has 0 of 100 left in the last 30d" in verdict.message


def test_reject_on_the_concurrent_ceiling(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=10_000, max_gpus=16), [_holding(12)])
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert not verdict.allowed
    assert verdict.message == "needs 8 GPUs at once; team-a allows 16 and 12 are in use"


def test_ceiling_exactly_reached_fits(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=10_000, max_gpus=16), [_holding(8)])
    assert judge(budget, _spec(), base_plan, _no_replan).allowed


def test_finished_plans_hold_no_gpus(base_plan: Plan) -> None:
    done = _usage("done", 16, 10, (T0 - _hours(1), T0), finished=True)
    budget = _budget(GPUBudgetSpec(gpu_hours=10_000, max_gpus=8), [done])
    assert budget.summary.gpus_in_use == 0
    assert judge(budget, _spec(), base_plan, _no_replan).allowed


def test_reject_with_both_problems_names_both(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=100, max_gpus=8), [_holding(4), _spent(95)])
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert verdict.message == (
        f"{_needs(base_plan)}; team-a has 5 of 100 left in the last 30d;"
        " needs 8 GPUs at once; team-a allows 8 and 4 are in use"
    )


def test_warn_admits_over_budget_with_a_warning(base_plan: Plan) -> None:
    big = _planned(base_plan, gpu_hours=12_400)
    budget = _budget(GPUBudgetSpec(gpu_hours=50_000, enforcement="Warn"), [_spent(46_900)])
    spec = _spec()
    verdict = judge(budget, spec, big, _no_replan)
    assert verdict.allowed
    assert verdict.exceeded
    assert verdict.plan is big
    assert verdict.spec is spec
    expected = (
        "needs 12,400 GPU-hours at p50 (the estimate); team-a has 3,100 of 50,000 left in"
        " the last 30d"
    )
    assert verdict.message == expected
    assert verdict.warnings == (f"over budget: {expected}",)


def test_warn_over_the_ceiling(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=10_000, max_gpus=8, enforcement="Warn"), [_holding(8)])
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert (verdict.allowed, verdict.exceeded) == (True, True)
    assert verdict.warnings == (
        "over budget: needs 8 GPUs at once; team-a allows 8 and 8 are in use",
    )


def test_warn_within_budget_is_not_exceeded(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=10_000, enforcement="Warn"))
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert (verdict.allowed, verdict.exceeded, verdict.warnings) == (True, False, ())


def test_downsize_replans_under_the_free_gpus(base_plan: Plan, catalog: Catalog) -> None:
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=8, enforcement="Downsize"), [_holding(4)]
    )
    replan = _Replan(catalog)
    verdict = judge(budget, _spec(), base_plan, replan)
    assert verdict.allowed
    assert not verdict.exceeded
    assert verdict.plan is not None
    assert verdict.plan.gpus == 4
    assert verdict.plan.gpu_hours == pytest.approx(
        plan(_spec(objective={"maxGPUs": 4}), catalog).gpu_hours
    )
    assert verdict.spec is not None
    assert (verdict.spec.objective.gpus, verdict.spec.objective.max_gpus) == (None, 4)
    assert verdict.spec.objective.deadline is None
    assert verdict.spec.model == _spec().model  # everything but the objective as it was
    expected = (
        "downsized to 4 GPUs to fit team-a (needs 8 GPUs at once; team-a allows 8 and 4 are in use)"
    )
    assert verdict.message == expected
    assert verdict.warnings == (expected,)
    assert len(replan.calls) == 1


def test_downsize_drops_a_pinned_data_degree(
    catalog: Catalog,
) -> None:
    spec = _spec(objective={"maxGPUs": 8}, parallelism={"data": 8})
    original = plan(spec, catalog)
    assert original.gpus == 8
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=10, enforcement="Downsize"), [_holding(6)]
    )
    verdict = judge(budget, spec, original, _Replan(catalog))
    assert verdict.allowed
    assert verdict.spec is not None
    assert verdict.spec.parallelism.data is None
    assert verdict.spec.objective.max_gpus == 4
    assert verdict.plan is not None
    assert verdict.plan.gpus == 4


def test_downsize_warns_when_the_deadline_is_then_missed(catalog: Catalog) -> None:
    spec = _spec(objective={"deadline": "1h"})
    original = plan(spec, catalog)
    assert original.gpus == 16  # the fewest GPUs that finish within the hour
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=16, enforcement="Downsize"), [_holding(8)]
    )
    replan = _Replan(catalog)
    verdict = judge(budget, spec, original, replan)
    assert verdict.allowed
    assert verdict.plan is not None
    assert verdict.plan.gpus == 8
    assert verdict.plan.duration_seconds > 3600
    assert verdict.warnings == (
        "downsized to 8 GPUs to fit team-a"
        " (needs 16 GPUs at once; team-a allows 16 and 8 are in use)",
        f"with 8 GPUs the run takes {format_duration(verdict.plan.duration_seconds)}, past the"
        " deadline of 1h",
    )
    # First with the deadline kept (infeasible within 8 GPUs), then without it.
    assert [s.objective.deadline for s in replan.calls] == ["1h", None]
    assert verdict.spec is not None
    assert verdict.spec.objective.deadline is None


def test_downsize_keeps_the_deadline_when_the_smaller_plan_meets_it(
    base_plan: Plan, catalog: Catalog
) -> None:
    """With a generous deadline the first re-plan, deadline kept, is the one admitted."""
    spec = _spec(objective={"deadline": "4h", "maxGPUs": 8})
    original = base_plan  # as if an earlier catalog had picked 8 GPUs for it
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=8, enforcement="Downsize"), [_holding(4)]
    )
    replan = _Replan(catalog)
    verdict = judge(budget, spec, original, replan)
    assert verdict.allowed
    assert verdict.plan is not None
    assert verdict.plan.gpus == 4
    assert verdict.plan.duration_seconds < 4 * 3600
    assert len(verdict.warnings) == 1  # no deadline warning
    assert verdict.spec is not None
    assert verdict.spec.objective.deadline == "4h"
    assert len(replan.calls) == 1


def test_downsize_denies_when_the_smaller_plan_still_exceeds_the_hours(
    base_plan: Plan, catalog: Catalog
) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=9, max_gpus=8, enforcement="Downsize"), [_holding(4)])
    replan = _Replan(catalog)
    verdict = judge(budget, _spec(), base_plan, replan)
    assert not verdict.allowed
    assert verdict.plan is None
    (smaller_spec,) = replan.calls
    smaller = plan(smaller_spec, catalog)
    assert smaller.gpus == 4
    assert verdict.message == (
        f"{_needs(base_plan)}; team-a has 9 of 9 left in the last 30d;"
        " needs 8 GPUs at once; team-a allows 8 and 4 are in use;"
        f" downsized to 4 GPUs it {_needs(smaller)}; team-a has 9 of 9 left in the last 30d"
    )


def test_downsize_denies_when_no_gpu_is_free(base_plan: Plan) -> None:
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=8, enforcement="Downsize"), [_holding(8)]
    )
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert not verdict.allowed
    assert verdict.message == (
        "needs 8 GPUs at once; team-a allows 8 and 8 are in use; no GPU is free to downsize to"
    )


def test_downsize_denies_when_the_planner_cannot_plan_within_the_ceiling(
    catalog: Catalog,
) -> None:
    spec = _spec(objective={"gpus": 16}, parallelism={"tensor": 8})
    original = plan(spec, catalog)
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=16, enforcement="Downsize"), [_holding(12)]
    )
    verdict = judge(budget, spec, original, _Replan(catalog))
    assert not verdict.allowed
    assert verdict.message.startswith(
        "needs 16 GPUs at once; team-a allows 16 and 12 are in use;"
        " no plan fits within 4 GPUs: No layout fits any GPU count up to 4"
    )


def test_downsize_reports_planner_input_errors(base_plan: Plan) -> None:
    def refuse(spec: TrainingPlanSpec) -> Plan:
        raise PlanInputError([("parallelism.tensor", "3 does not divide attentionHeads (8)")])

    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=8, enforcement="Downsize"), [_holding(6)]
    )
    verdict = judge(budget, _spec(), base_plan, refuse)
    assert not verdict.allowed
    assert verdict.message.endswith(
        "no plan fits within 2 GPUs: parallelism.tensor: 3 does not divide attentionHeads (8)"
    )


def test_downsize_reports_every_failed_attempt(catalog: Catalog) -> None:
    reasons = iter([["kept the deadline: too slow"], ["no deadline: too big"]])

    def refuse(spec: TrainingPlanSpec) -> Plan:
        raise InfeasiblePlanError(next(reasons))

    spec = _spec(objective={"deadline": "1h"})
    budget = _budget(
        GPUBudgetSpec(gpu_hours=1000, max_gpus=16, enforcement="Downsize"), [_holding(8)]
    )
    verdict = judge(budget, spec, plan(spec, catalog), refuse)
    assert not verdict.allowed
    assert verdict.message.endswith(
        "no plan fits within 8 GPUs: kept the deadline: too slow; no deadline: too big"
    )


def test_downsize_over_hours_alone_is_denied_without_replanning(base_plan: Plan) -> None:
    """Fewer GPUs do not save GPU-hours: under the ceiling, Downsize denies like Reject."""
    budget = _budget(
        GPUBudgetSpec(gpu_hours=100, max_gpus=64, enforcement="Downsize"), [_spent(95)]
    )
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert not verdict.allowed
    assert verdict.message == f"{_needs(base_plan)}; team-a has 5 of 100 left in the last 30d"


def test_downsize_without_a_ceiling_is_denied_without_replanning(base_plan: Plan) -> None:
    budget = _budget(GPUBudgetSpec(gpu_hours=5, enforcement="Downsize"))
    verdict = judge(budget, _spec(), base_plan, _no_replan)
    assert not verdict.allowed
    assert verdict.message.startswith(f"{_needs(base_plan)}; team-a has 5 of 5")


# --- the charge: a quantile of the plan's GPU-hours -------------------------------------------


def _charge(calibration: Calibration, floor: float = 0.5, **objective: Any) -> Charge:
    spec = _spec(objective={"gpus": 8, **objective})
    return charge_for(GPUBudgetSpec(gpu_hours=100, charge_confidence=floor), spec, calibration)


def test_the_charge_at_p50_is_the_estimate(base_plan: Plan, calibration: Calibration) -> None:
    charge = _charge(calibration)
    assert charge == ESTIMATE == Charge(0.5, 1.0)
    assert charge.gpu_hours(base_plan) == base_plan.gpu_hours
    assert charge.describe(base_plan) == (
        f"{base_plan.gpu_hours:,.0f} GPU-hours at p50 (the estimate)"
    )


def test_the_charge_at_p90_is_the_top_of_the_plans_gpu_hours_range(
    base_plan: Plan, calibration: Calibration
) -> None:
    charge = _charge(calibration, 0.9)
    assert (charge.confidence, charge.quantile) == (0.9, "p90")
    assert charge.factor == pytest.approx(calibration.gpu_hours_ratio_p90)
    assert base_plan.gpu_hours_range is not None
    assert charge.gpu_hours(base_plan) == pytest.approx(base_plan.gpu_hours_range.p90)
    assert charge.describe(base_plan) == (
        f"{base_plan.gpu_hours_range.p90:,.0f} GPU-hours at p90"
        f" (estimate {base_plan.gpu_hours:,.0f})"
    )


def test_charges_in_between_follow_the_log_normal_tail_of_the_deadline_search(
    calibration: Calibration,
) -> None:
    assert calibration.gpu_hours_ratio_p90 > 1
    confidences = (0.5, 0.75, 0.9, 0.925, 0.95)
    charges = [_charge(calibration, c) for c in confidences]
    factors = [charge.factor for charge in charges]
    assert factors == sorted(set(factors))  # rising with the confidence
    assert factors == [duration_quantile_factor(calibration, c) for c in confidences]
    z = NormalDist().inv_cdf
    assert math.log(factors[1]) / math.log(factors[2]) == pytest.approx(z(0.75) / z(0.9))
    assert [charge.quantile for charge in charges] == ["p50", "p75", "p90", "p92.5", "p95"]


@pytest.mark.parametrize(
    ("floor", "plan_confidence", "charged"),
    [(0.5, None, 0.5), (0.9, None, 0.9), (0.9, 0.75, 0.9), (0.5, 0.9, 0.9), (0.9, 0.95, 0.95)],
)
def test_the_budget_sets_the_least_quantile_and_a_plan_may_raise_it(
    calibration: Calibration, floor: float, plan_confidence: float | None, charged: float
) -> None:
    charge = _charge(calibration, floor, confidence=plan_confidence)
    assert charge == Charge(charged, duration_quantile_factor(calibration, charged))


def test_charge_confidence_is_bounded() -> None:
    for confidence in (0.49, 0.96, 1.0):
        with pytest.raises(ValueError, match="chargeConfidence"):
            GPUBudgetSpec.model_validate({"gpuHours": 10, "chargeConfidence": confidence})
    assert GPUBudgetSpec(gpu_hours=10).charge_confidence == 0.5


def test_a_plan_that_fits_at_p50_is_refused_at_p90(
    base_plan: Plan, calibration: Calibration
) -> None:
    big = _planned(base_plan, gpu_hours=12_400)
    ledger = [_spent(34_000)]
    spec = GPUBudgetSpec(gpu_hours=50_000, period="30d")
    at_p50 = judge(_budget(spec, ledger), _spec(), big, _no_replan)
    assert at_p50.allowed
    assert at_p50.charged == "12,400 GPU-hours at p50 (the estimate)"

    cautious = spec.model_copy(update={"charge_confidence": 0.9})
    p90 = _charge(calibration, 0.9)
    budget = Budget("team-a", cautious, summarize(cautious, ledger, T0), p90)
    at_p90 = judge(budget, _spec(), big, _no_replan)
    assert not at_p90.allowed
    assert at_p90.message == (
        f"needs {12_400 * calibration.gpu_hours_ratio_p90:,.0f} GPU-hours at p90"
        " (estimate 12,400); team-a has 16,000 of 50,000 left in the last 30d"
    )


def test_admit_records_the_charge_beside_the_projection(
    base_plan: Plan, calibration: Calibration
) -> None:
    p90 = _charge(calibration, 0.9)
    (entry,) = admit([], name="a", uid="u-a", plan=base_plan, charge=p90, now=T0)
    assert entry.projected_gpu_hours == base_plan.gpu_hours
    assert entry.admitted_gpu_hours == pytest.approx(base_plan.gpu_hours * p90.factor)
    assert entry.charged_confidence == 0.9
    # The charge stays committed until used, whatever the (lower) projection says.
    assert committed_gpu_hours(entry, T0) == entry.admitted_gpu_hours


def test_overcommitted_figures_name_the_budgets_quantile() -> None:
    _, events = budget_conditions(
        _overcommitted(50, 60), {}, generation=1, now=T0, charge_confidence=0.9
    )
    assert events == [
        (
            "Warning",
            "BudgetOvercommitted",
            "50 of 100 GPU-hours used (50%) and 60 committed (charged at p90 or above):"
            " 10 over the allowance",
        )
    ]


# --- conditions, Events, the status document -----------------------------------------------


def _summary(used: float, limit: float = 50_000) -> BudgetSummary:
    return BudgetSummary(limit, used, 0.0, 0, ())


def _types(conditions: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in conditions}


def test_conditions_below_80_percent() -> None:
    conditions, events = budget_conditions(_summary(10_000), {}, generation=3, now=T0)
    assert _types(conditions) == {
        "Valid": ("True", "Accounted"),
        "NearlyExhausted": ("False", "Within"),
        "Exhausted": ("False", "Within"),
    }
    assert events == []
    assert {c["message"] for c in conditions} == {"10,000 of 50,000 GPU-hours used (20%)"}
    assert {c["observedGeneration"] for c in conditions} == {3}
    assert {c["lastTransitionTime"] for c in conditions} == {T0.isoformat()}


def test_nearly_exhausted_at_80_percent_with_one_event() -> None:
    conditions, events = budget_conditions(_summary(40_000), {}, generation=1, now=T0)
    assert _types(conditions)[BudgetConditionType.NEARLY_EXHAUSTED] == (
        "True",
        "NearlyExhausted",
    )
    assert _types(conditions)[BudgetConditionType.EXHAUSTED] == ("False", "Within")
    assert events == [("Warning", "BudgetNearlyExhausted", "40,000 of 50,000 GPU-hours used (80%)")]


def test_just_below_80_percent_is_within() -> None:
    conditions, events = budget_conditions(_summary(39_999), {}, generation=1, now=T0)
    assert _types(conditions)["NearlyExhausted"] == ("False", "Within")
    assert events == []


def test_events_only_when_crossing() -> None:
    first, events = budget_conditions(_summary(40_000), {}, generation=1, now=T0)
    assert [e[1] for e in events] == ["BudgetNearlyExhausted"]

    later = T0 + _hours(1)
    second, events = budget_conditions(
        _summary(45_000), {"conditions": first}, generation=1, now=later
    )
    assert events == []  # still nearly exhausted: no second Event
    nearly = next(c for c in second if c["type"] == "NearlyExhausted")
    assert nearly["lastTransitionTime"] == T0.isoformat()  # kept while the status holds
    assert nearly["message"] == "45,000 of 50,000 GPU-hours used (90%)"

    third, events = budget_conditions(
        _summary(50_000), {"conditions": second}, generation=1, now=later + _hours(1)
    )
    assert events == [("Warning", "BudgetExhausted", "50,000 of 50,000 GPU-hours used (100%)")]
    exhausted = next(c for c in third if c["type"] == "Exhausted")
    assert (exhausted["status"], exhausted["reason"]) == ("True", "Exhausted")
    assert exhausted["lastTransitionTime"] == (later + _hours(1)).isoformat()

    fourth, events = budget_conditions(
        _summary(60_000), {"conditions": third}, generation=1, now=later + _hours(2)
    )
    assert events == []
    assert _types(fourth)["Exhausted"] == ("True", "Exhausted")

    # The window slides, use drops: both go False quietly, and crossing again is news.
    fifth, events = budget_conditions(
        _summary(1_000), {"conditions": fourth}, generation=1, now=later + _hours(3)
    )
    assert events == []
    assert _types(fifth)["NearlyExhausted"] == ("False", "Within")
    assert _types(fifth)["Exhausted"] == ("False", "Within")
    _, events = budget_conditions(
        _summary(41_000), {"conditions": fifth}, generation=1, now=later + _hours(4)
    )
    assert [e[1] for e in events] == ["BudgetNearlyExhausted"]


def test_jumping_straight_past_100_percent_gives_both_events() -> None:
    _, events = budget_conditions(_summary(70_000), {}, generation=None, now=T0)
    assert [e[1] for e in events] == ["BudgetNearlyExhausted", "BudgetExhausted"]
    assert events[0][2] == "70,000 of 50,000 GPU-hours used (140%)"


def _overcommitted(used: float, committed: float, limit: float = 100) -> BudgetSummary:
    return BudgetSummary(limit, used, committed, 8, ("a",))


def test_used_and_committed_over_the_allowance_is_exhausted_overcommitted() -> None:
    conditions, events = budget_conditions(_overcommitted(50, 60), {}, generation=1, now=T0)
    assert _types(conditions) == {
        "Valid": ("True", "Accounted"),
        "NearlyExhausted": ("False", "Within"),
        "Exhausted": ("True", "Overcommitted"),
    }
    message = "50 of 100 GPU-hours used (50%) and 60 committed: 10 over the allowance"
    assert events == [("Warning", "BudgetOvercommitted", message)]

    # Still overcommitted: no second Event; then used up: Exhausted says so, once.
    later, events = budget_conditions(
        _overcommitted(70, 40), {"conditions": conditions}, generation=1, now=T0 + _hours(1)
    )
    assert events == []
    used_up, events = budget_conditions(
        _overcommitted(100, 8), {"conditions": later}, generation=1, now=T0 + _hours(2)
    )
    assert _types(used_up)["Exhausted"] == ("True", "Exhausted")
    assert [e[1] for e in events] == ["BudgetNearlyExhausted", "BudgetExhausted"]


def test_exactly_the_allowance_committed_is_not_overcommitted() -> None:
    conditions, events = budget_conditions(_overcommitted(40, 60), {}, generation=1, now=T0)
    assert _types(conditions)["Exhausted"] == ("False", "Within")
    assert events == []
    assert {c["message"] for c in conditions} == {"40 of 100 GPU-hours used (40%)"}


def test_a_job_outliving_its_admission_is_judged_again_at_every_revision() -> None:
    """Admitted for the whole remainder (92 of 100), the Job runs past it: the budget's
    status turns Exhausted (Overcommitted) while it runs, then Exhausted."""
    spec = GPUBudgetSpec(gpu_hours=100, period="7d")
    running = _usage("a", 8, 92, (T0, None))
    status, events, _ = budget_status(spec, [running], {}, generation=1, now=T0 + _hours(1))
    assert _types(status["conditions"])["Exhausted"] == ("False", "Within")
    status, events, _ = budget_status(spec, [running], status, generation=1, now=T0 + _hours(12))
    assert status["usedGPUHours"] == 96
    assert status["committedGPUHours"] == 8
    assert _types(status["conditions"])["Exhausted"] == ("True", "Overcommitted")
    assert [e[1] for e in events] == ["BudgetNearlyExhausted", "BudgetOvercommitted"]
    status, events, _ = budget_status(spec, [running], status, generation=1, now=T0 + _hours(13))
    assert _types(status["conditions"])["Exhausted"] == ("True", "Exhausted")
    assert [e[1] for e in events] == ["BudgetExhausted"]


def test_other_conditions_are_kept() -> None:
    foreign = {
        "type": "Other",
        "status": "True",
        "reason": "X",
        "message": "",
        "lastTransitionTime": T0.isoformat(),
    }
    conditions, _ = budget_conditions(_summary(0), {"conditions": [foreign]}, generation=1, now=T0)
    assert conditions[0] == foreign
    assert [c["type"] for c in conditions] == ["Other", "Valid", "NearlyExhausted", "Exhausted"]


def _ledger_for_status(base_plan: Plan) -> list[PlanUsage]:
    running = _usage("running", 8, 200, (T0 - _hours(10), None), uid="u-r")
    suspended = _usage(
        "paused", 4, 100, (T0 - _days(2), T0 - _days(2) + _hours(5)), admitted=T0 - _days(2)
    )
    done = _usage(
        "done", 16, 50, (T0 - _days(3), T0 - _days(3) + _hours(3)), finished=True
    ).model_copy(update={"uid": None})
    ancient = _usage(
        "ancient", 8, 50, (T0 - _days(40), T0 - _days(39)), finished=True, admitted=T0 - _days(40)
    )
    waiting = admit([], name="waiting", uid="u-w", plan=base_plan, charge=ESTIMATE, now=T0)[0]
    return [running, suspended, done, ancient, waiting]


def test_budget_status_document(base_plan: Plan) -> None:
    spec = GPUBudgetSpec(gpu_hours=1000, period="30d", max_gpus=64)
    ledger = _ledger_for_status(base_plan)
    status, events, summary = budget_status(spec, ledger, {}, generation=2, now=T0)
    used = 8 * 10 + 4 * 5 + 16 * 3
    committed = (200 - 80) + (100 - 20) + base_plan.gpu_hours
    assert status["usedGPUHours"] == pytest.approx(used)
    assert status["committedGPUHours"] == pytest.approx(committed, abs=1e-3)
    assert status["remainingGPUHours"] == pytest.approx(1000 - used - committed, abs=1e-3)
    assert status["activePlans"] == ["paused", "running", "waiting"]
    assert status["gpusInUse"] == 8 + 4 + 8
    assert [entry["name"] for entry in status["ledger"]] == [
        "running",
        "paused",
        "done",
        "waiting",
    ]  # "ancient" left the window
    assert status["ledger"][0]["intervals"] == [{"start": "2026-03-01T14:00:00Z"}]
    assert "uid" not in status["ledger"][2]
    assert status["observedGeneration"] == 2
    assert status["lastUpdatedTime"] == T0.isoformat()
    assert _types(status["conditions"])["Valid"] == ("True", "Accounted")
    assert events == []
    assert summary.used_gpu_hours == pytest.approx(used)
    # Figures are rounded to the thousandth for the document.
    assert status["committedGPUHours"] == round(summary.committed_gpu_hours, 3)
    json.dumps(status)  # plain JSON, as the API takes it

    validator = validator_for(committed_crd("gpubudgets"), "status")
    assert errors(validator, status) == []


def test_budget_status_over_budget_validates_with_negative_remaining(base_plan: Plan) -> None:
    spec = GPUBudgetSpec(gpu_hours=50, period="7d")
    ledger = _ledger_for_status(base_plan)
    status, events, _ = budget_status(spec, ledger, {}, generation=None, now=T0)
    assert status["remainingGPUHours"] < 0
    assert "observedGeneration" not in status
    assert all("observedGeneration" not in c for c in status["conditions"])
    assert [e[1] for e in events] == ["BudgetNearlyExhausted", "BudgetExhausted"]
    validator = validator_for(committed_crd("gpubudgets"), "status")
    assert errors(validator, status) == []

    # The next revision carries no Events for the same state.
    _, again, _ = budget_status(spec, ledger, status, generation=None, now=T0 + _hours(1))
    assert again == []


def test_ledger_round_trips_through_the_status(base_plan: Plan) -> None:
    spec = GPUBudgetSpec(gpu_hours=1000)
    ledger = _ledger_for_status(base_plan)
    status, _, _ = budget_status(spec, ledger, {}, generation=1, now=T0)
    read_back = ledger_from_status(json.loads(json.dumps(status)))
    assert read_back == prune(spec, ledger, T0)
    assert ledger_from_status({}) == []
    assert ledger_from_status({"ledger": None}) == []
