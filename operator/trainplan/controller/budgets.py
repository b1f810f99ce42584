"""GPU-hour budgets as pure functions: the ledger of admitted plans, what they used in
the rolling window and still commit, and whether a new plan fits (with the downsized plan
when the budget says Downsize). The handlers read and write the GPUBudget; nothing here
does I/O or reads a clock (`now` is passed in).

Accounting: a plan uses `gpus x hours` for every interval its Job's pods hold GPUs
(phases Running and Restarting), clipped to the window `[now - period, now]`. What remains
is the allowance less the used and the committed.

Charge: a plan is admitted with its GPU-hours quantile at the larger of the budget's
`chargeConfidence` and the plan's `objective.confidence` (0.5: the estimate), the
planner's log-normal error model (`duration_quantile_factor`, the one behind the plan's
`gpuHoursRange` and its deadline search); its entry records the quantile.

Commitment: a plan that is not finished commits `max(projected, admitted) - used` (at
least 0), `used` over its whole life. `admitted` is the GPU-hours it was admitted with,
recorded in its entry; `projected` is the ETA's revision, which follows what the pods
report and may drop, so it can never shrink the commitment below the admission. While its
pods hold GPUs (an open interval) and it has used at least its admitted GPU-hours, it
commits at least `gpus x OVERRUN_HORIZON_SECONDS`: a Job that outlives its reported or
planned end keeps counting, and the budget's figures (and its Exhausted condition) are
judged again at every revision. A finished plan commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from trainplan.api import (
    NEARLY_EXHAUSTED_RATIO,
    BudgetConditionType,
    GPUBudgetSpec,
    Phase,
    Plan,
    PlanUsage,
    TrainingPlanSpec,
    UsageInterval,
    format_duration,
    parse_duration_seconds,
)
from trainplan.controller.conditions import make_condition, merge_conditions
from trainplan.planner import (
    Calibration,
    InfeasiblePlanError,
    PlanInputError,
    duration_quantile_factor,
)

HOLDING_PHASES = frozenset({Phase.RUNNING.value, Phase.RESTARTING.value})
"""Phases in which a plan's pods hold their GPUs."""
ENDED_PHASES = frozenset({Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.REJECTED.value})
"""Phases after which a plan holds no GPUs again."""
OVERRUN_HORIZON_SECONDS: Final = 3600.0
"""How far ahead a plan that used its admitted GPU-hours and still holds its GPUs is
committed: its GPUs for one more hour. Long against the budget's revision interval (60 s
by default), so the figures never lag a running Job; short against a run, so an overrun is
not charged far ahead of its use."""


def _hours(seconds: float) -> float:
    return seconds / 3600.0


def window_start(spec: GPUBudgetSpec, now: datetime) -> datetime:
    """The start of the rolling window that ends now."""
    return now - timedelta(seconds=parse_duration_seconds(spec.period))


def used_gpu_hours(usage: PlanUsage, since: datetime | None, now: datetime) -> float:
    """GPU-hours a plan used after `since` (None: over its whole life) up to `now`."""
    total_seconds = 0.0
    for interval in usage.intervals:
        start = interval.start if since is None else max(interval.start, since)
        end = min(interval.end or now, now)
        total_seconds += max(0.0, (end - start).total_seconds())
    return usage.gpus * _hours(total_seconds)


def admitted_gpu_hours(usage: PlanUsage) -> float:
    """GPU-hours the plan was admitted with (its projection in an entry written before
    they were recorded)."""
    if usage.admitted_gpu_hours is None:
        return usage.projected_gpu_hours
    return usage.admitted_gpu_hours


def _holding_now(usage: PlanUsage) -> bool:
    return bool(usage.intervals) and usage.intervals[-1].end is None


def committed_gpu_hours(usage: PlanUsage, now: datetime) -> float:
    """What a plan not finished still commits (0 once it ended): the larger of its
    projected and admitted GPU-hours less what it used, at least 0; and while its pods
    hold GPUs past its admitted GPU-hours, at least its GPUs for OVERRUN_HORIZON_SECONDS."""
    if usage.finished:
        return 0.0
    used = used_gpu_hours(usage, None, now)
    admitted = admitted_gpu_hours(usage)
    committed = max(0.0, max(usage.projected_gpu_hours, admitted) - used)
    if _holding_now(usage) and used >= admitted:
        committed = max(committed, usage.gpus * _hours(OVERRUN_HORIZON_SECONDS))
    return committed


def holds_gpus(usage: PlanUsage) -> bool:
    """Whether an admitted plan holds, or is about to hold, its GPUs."""
    return not usage.finished


@dataclass(frozen=True, slots=True)
class BudgetSummary:
    """A budget's figures at one moment."""

    limit_gpu_hours: float
    used_gpu_hours: float
    committed_gpu_hours: float
    gpus_in_use: int
    active_plans: tuple[str, ...]

    @property
    def remaining_gpu_hours(self) -> float:
        """Allowance less used and committed; negative when over."""
        return self.limit_gpu_hours - self.used_gpu_hours - self.committed_gpu_hours

    @property
    def used_ratio(self) -> float:
        return self.used_gpu_hours / self.limit_gpu_hours


def summarize(spec: GPUBudgetSpec, ledger: Sequence[PlanUsage], now: datetime) -> BudgetSummary:
    """The budget's used, committed and in-use figures from its ledger."""
    since = window_start(spec, now)
    active = [usage for usage in ledger if holds_gpus(usage)]
    return BudgetSummary(
        limit_gpu_hours=spec.gpu_hours,
        used_gpu_hours=sum(used_gpu_hours(usage, since, now) for usage in ledger),
        committed_gpu_hours=sum(committed_gpu_hours(usage, now) for usage in ledger),
        gpus_in_use=sum(usage.gpus for usage in active),
        active_plans=tuple(sorted(usage.name for usage in active)),
    )


def prune(spec: GPUBudgetSpec, ledger: Sequence[PlanUsage], now: datetime) -> list[PlanUsage]:
    """The ledger without the finished plans whose every interval left the window."""
    since = window_start(spec, now)
    kept = []
    for usage in ledger:
        ends = [interval.end for interval in usage.intervals]
        gone = usage.finished and all(end is not None and end < since for end in ends)
        if not gone:
            kept.append(usage)
    return kept


def _same_plan(usage: PlanUsage, name: str, uid: str | None) -> bool:
    return usage.name == name and (uid is None or usage.uid in (None, uid))


def find_usage(ledger: Sequence[PlanUsage], name: str, uid: str | None) -> PlanUsage | None:
    """The plan's ledger entry, if it was admitted."""
    return next((usage for usage in ledger if _same_plan(usage, name, uid)), None)


def quantile_name(confidence: float) -> str:
    """`p50` for 0.5, `p90`, `p92.5`."""
    return f"p{confidence * 100:.3g}"


@dataclass(frozen=True, slots=True)
class Charge:
    """The quantile of its GPU-hours a plan is charged: `confidence` (0.5: the estimate)
    and `factor`, that quantile over the estimate."""

    confidence: float = 0.5
    factor: float = 1.0

    def gpu_hours(self, plan: Plan) -> float:
        """What the plan is charged."""
        return plan.gpu_hours * self.factor

    @property
    def quantile(self) -> str:
        """`p50`, `p90`, `p92.5`."""
        return quantile_name(self.confidence)

    def describe(self, plan: Plan) -> str:
        """`12,400 GPU-hours at p50 (the estimate)`, `18,600 GPU-hours at p90 (estimate
        12,400)`."""
        estimate = (
            "the estimate" if self.factor == 1.0 else f"estimate {_hours_text(plan.gpu_hours)}"
        )
        return f"{_hours_text(self.gpu_hours(plan))} GPU-hours at {self.quantile} ({estimate})"


ESTIMATE: Final = Charge()
"""The charge of the estimate itself (the median of the error model)."""


def charge_for(budget: GPUBudgetSpec, spec: TrainingPlanSpec, calibration: Calibration) -> Charge:
    """The plan's charge: its GPU-hours quantile at the budget's `chargeConfidence` or
    the plan's `objective.confidence`, whichever is higher."""
    confidence = max(budget.charge_confidence, spec.objective.confidence_level)
    return Charge(confidence, duration_quantile_factor(calibration, confidence))


def admit(
    ledger: Sequence[PlanUsage],
    *,
    name: str,
    uid: str | None,
    plan: Plan,
    charge: Charge,
    now: datetime,
) -> list[PlanUsage]:
    """The ledger with the plan admitted at `charge` (once: a plan already there is left
    as it is)."""
    if find_usage(ledger, name, uid) is not None:
        return list(ledger)
    entry = PlanUsage(
        name=name,
        uid=uid,
        gpus=plan.gpus,
        projected_gpu_hours=plan.gpu_hours,
        admitted_gpu_hours=charge.gpu_hours(plan),
        charged_confidence=charge.confidence,
        admitted_time=now,
    )
    return [*ledger, entry]


def phase_for_entry(
    usage: PlanUsage,
    *,
    phase: str | None,
    generation: int | None,
    observed_generation: int | None,
    updated_time: datetime | None,
) -> str | None:
    """The plan's phase as its ledger entry should follow it: None (leave the entry as it
    is) for a Rejected phase older than the entry. A Rejected plan is judged again when its
    spec changes (or when the operator resumes it), and when admitted its entry is written
    before its status says so; a revision in that gap must not finish the entry. The
    Rejected phase is stale when the spec changed after it (`observed_generation` below
    `generation`: no clock involved), or when the entry was admitted after the status was
    last written (`updated_time` before the admission: an unchanged spec admitted again,
    e.g. once the budget has room). Succeeded and Failed are final and always count."""
    if phase != Phase.REJECTED.value:
        return phase
    respecified = (
        generation is not None
        and observed_generation is not None
        and observed_generation < generation
    )
    admitted_since = updated_time is not None and updated_time < usage.admitted_time
    return None if respecified or admitted_since else phase


def follow_phase(
    usage: PlanUsage,
    *,
    phase: str | None,
    start_time: datetime | None,
    end_time: datetime | None,
    projected_gpu_hours: float | None,
    now: datetime,
) -> PlanUsage:
    """The plan's entry after its status changed: an interval opens when its pods start
    holding GPUs (at the Job's start time, the first time) and closes when they stop
    (suspended or ended); a plan first seen ended held them from the Job's start to its
    end. A plan with no phase yet is left as it is."""
    if phase is None:
        return usage
    intervals = list(usage.intervals)
    is_open = bool(intervals) and intervals[-1].end is None
    holding = phase in HOLDING_PHASES
    if holding and not is_open:
        start = start_time if (start_time is not None and not intervals) else now
        intervals.append(UsageInterval(start=min(start, now)))
    elif not holding and is_open:
        end = end_time if (end_time is not None and phase in ENDED_PHASES) else now
        intervals[-1] = UsageInterval(start=intervals[-1].start, end=max(end, intervals[-1].start))
    elif phase in ENDED_PHASES and not intervals and start_time is not None and not usage.finished:
        # Ended without ever being seen holding GPUs (the operator was away, or adopted
        # after the end): its pods held them from the Job's start to its end.
        start = min(start_time, now)
        end = end_time if end_time is not None else now
        intervals.append(UsageInterval(start=start, end=max(end, start)))
    projected = usage.projected_gpu_hours if projected_gpu_hours is None else projected_gpu_hours
    return usage.model_copy(
        update={
            "intervals": tuple(intervals),
            "finished": usage.finished or phase in ENDED_PHASES,
            "projected_gpu_hours": projected,
            "admitted_gpu_hours": admitted_gpu_hours(usage),  # an old entry's, from now on
        }
    )


def release(usage: PlanUsage, now: datetime) -> PlanUsage:
    """The entry of a deleted plan: its open interval closes now and it commits nothing
    more; what it used stays until it leaves the window."""
    intervals = list(usage.intervals)
    if intervals and intervals[-1].end is None:
        intervals[-1] = UsageInterval(start=intervals[-1].start, end=max(now, intervals[-1].start))
    return usage.model_copy(update={"intervals": tuple(intervals), "finished": True})


def replace_usage(ledger: Sequence[PlanUsage], updated: PlanUsage) -> list[PlanUsage]:
    """The ledger with one entry replaced (matched by name and uid)."""
    return [updated if _same_plan(usage, updated.name, updated.uid) else usage for usage in ledger]


# --- admission ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """A budget's decision on one plan."""

    allowed: bool
    message: str
    """Why it was denied, or what was done (empty when it simply fits)."""
    warnings: tuple[str, ...] = ()
    plan: Plan | None = None
    """The plan to launch (the downsized one under Downsize); None when denied."""
    spec: TrainingPlanSpec | None = None
    """The spec the plan was made from (changed objective when downsized)."""
    exceeded: bool = False
    """Admitted over budget (Warn): the plan's BudgetExceeded condition is True."""
    charge: Charge = ESTIMATE
    """The quantile of the plan's GPU-hours the budget charged (or would charge)."""

    @property
    def charged(self) -> str:
        """What the admitted plan is charged, e.g. `18,600 GPU-hours at p90 (estimate
        12,400)`; empty without a plan."""
        return "" if self.plan is None else self.charge.describe(self.plan)


Replan = Callable[[TrainingPlanSpec], Plan]
"""Plans a spec; raises the planner's errors (InfeasiblePlanError, PlanInputError)."""


def _hours_text(value: float) -> str:
    return f"{value:,.0f}"


@dataclass(frozen=True, slots=True)
class Budget:
    """A budget as admission sees it: its name, spec and figures now."""

    name: str
    spec: GPUBudgetSpec
    summary: BudgetSummary
    charge: Charge = ESTIMATE
    """What a plan judged here is charged (`charge_for`)."""

    def shortfall(self, plan: Plan) -> str:
        return (
            f"needs {self.charge.describe(plan)}; {self.name} has"
            f" {_hours_text(max(0.0, self.summary.remaining_gpu_hours))} of"
            f" {_hours_text(self.spec.gpu_hours)} left in the last {self.spec.period}"
        )

    def ceiling(self, plan: Plan) -> str:
        return (
            f"needs {plan.gpus:,} GPUs at once; {self.name} allows {self.spec.max_gpus or 0:,}"
            f" and {self.summary.gpus_in_use:,} are in use"
        )

    def over(self, plan: Plan) -> tuple[bool, bool]:
        """(over the GPU-hours left, over the concurrent GPU ceiling)."""
        over_hours = self.charge.gpu_hours(plan) > self.summary.remaining_gpu_hours
        max_gpus = self.spec.max_gpus
        over_gpus = max_gpus is not None and self.summary.gpus_in_use + plan.gpus > max_gpus
        return over_hours, over_gpus


def _downsized_spec(spec: TrainingPlanSpec, ceiling: int, keep_deadline: bool) -> TrainingPlanSpec:
    objective = spec.objective
    capped = min(ceiling, objective.max_gpus) if objective.max_gpus else ceiling
    new_objective = objective.model_copy(
        update={
            "gpus": None,
            "max_gpus": capped,
            "deadline": objective.deadline if keep_deadline else None,
        }
    )
    parallelism = spec.parallelism.model_copy(update={"data": None})
    return spec.model_copy(update={"objective": new_objective, "parallelism": parallelism})


def judge(budget: Budget, spec: TrainingPlanSpec, plan: Plan, replan: Replan) -> Verdict:
    """Whether `plan`, at the budget's charge, fits it under its enforcement mode. Downsize re-plans
    under the GPUs left below `maxGPUs` (keeping the deadline if it can, with a warning
    when it cannot) and admits when the result fits."""
    over_hours, over_gpus = budget.over(plan)
    if not over_hours and not over_gpus:
        return Verdict(True, "", plan=plan, spec=spec, charge=budget.charge)
    problems = []
    if over_hours:
        problems.append(budget.shortfall(plan))
    if over_gpus:
        problems.append(budget.ceiling(plan))
    message = "; ".join(problems)
    if budget.spec.enforcement == "Warn":
        warning = f"over budget: {message}"
        return Verdict(
            True, message, (warning,), plan=plan, spec=spec, exceeded=True, charge=budget.charge
        )
    max_gpus = budget.spec.max_gpus
    if budget.spec.enforcement == "Downsize" and over_gpus and max_gpus is not None:
        free = max_gpus - budget.summary.gpus_in_use
        if free < 1:
            return Verdict(False, f"{message}; no GPU is free to downsize to")
        return _downsize(budget, spec, free, replan, message)
    return Verdict(False, message)


def _downsize(
    budget: Budget, spec: TrainingPlanSpec, free_gpus: int, replan: Replan, message: str
) -> Verdict:
    attempts = [True, False] if spec.objective.deadline else [False]
    errors = []
    for keep_deadline in attempts:
        smaller_spec = _downsized_spec(spec, free_gpus, keep_deadline)
        try:
            smaller = replan(smaller_spec)
        except PlanInputError as error:
            errors.append(str(error))
            continue
        except InfeasiblePlanError as error:
            errors.append("; ".join(error.reasons))
            continue
        if any(budget.over(smaller)):
            reason = budget.shortfall(smaller)
            return Verdict(False, f"{message}; downsized to {smaller.gpus} GPUs it {reason}")
        warnings = [f"downsized to {smaller.gpus} GPUs to fit {budget.name} ({message})"]
        deadline = spec.objective.deadline
        if deadline and not keep_deadline:
            takes = format_duration(smaller.duration_seconds)
            late = smaller.duration_seconds > parse_duration_seconds(deadline)
            warnings.append(
                f"with {smaller.gpus} GPUs the run takes {takes}"
                + (f", past the deadline of {deadline}" if late else "")
            )
        return Verdict(
            True,
            warnings[0],
            tuple(warnings),
            plan=smaller,
            spec=smaller_spec,
            charge=budget.charge,
        )
    detail = "; ".join(errors) or "no plan fits"
    return Verdict(False, f"{message}; no plan fits within {free_gpus} GPUs: {detail}")


# --- status ------------------------------------------------------------------------------


def budget_conditions(
    summary: BudgetSummary,
    current: Mapping[str, Any],
    *,
    generation: int | None,
    now: datetime,
    charge_confidence: float = ESTIMATE.confidence,
) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """The budget's conditions (Valid; NearlyExhausted: used at 80% of the allowance;
    Exhausted: used at 100%, or, reason Overcommitted, used and committed over it), merged
    into the current ones, and the Events of the crossings. `charge_confidence`: the least
    quantile plans are charged at, named beside what they commit when above the estimate."""
    percent = summary.used_ratio * 100
    figures = (
        f"{_hours_text(summary.used_gpu_hours)} of {_hours_text(summary.limit_gpu_hours)}"
        f" GPU-hours used ({percent:.0f}%)"
    )
    overcommitted = round(summary.remaining_gpu_hours, 3) < 0  # as the status document says
    if overcommitted and summary.committed_gpu_hours > 0:
        figures += (
            f" and {_hours_text(summary.committed_gpu_hours)} committed"
            + (
                f" (charged at {quantile_name(charge_confidence)} or above)"
                if charge_confidence > ESTIMATE.confidence
                else ""
            )
            + f": {_hours_text(-summary.remaining_gpu_hours)} over the allowance"
        )
    exhausted = summary.used_ratio >= 1.0
    levels = (
        (
            BudgetConditionType.NEARLY_EXHAUSTED,
            summary.used_ratio >= NEARLY_EXHAUSTED_RATIO,
            "NearlyExhausted",
        ),
        (
            BudgetConditionType.EXHAUSTED,
            exhausted or overcommitted,
            "Exhausted" if exhausted else "Overcommitted",
        ),
    )
    updates = [
        make_condition(
            BudgetConditionType.VALID, "True", "Accounted", figures, now=now, generation=generation
        )
    ]
    events = []
    previous = {
        c.get("type"): (c.get("status"), c.get("reason"))
        for c in current.get("conditions", []) or []
    }
    for condition_type, crossed, reason in levels:
        updates.append(
            make_condition(
                condition_type,
                "True" if crossed else "False",
                reason if crossed else "Within",
                figures,
                now=now,
                generation=generation,
            )
        )
        was_true, was_reason = previous.get(condition_type, (None, None))
        # News: turning True, or an overcommitted budget now used up.
        if crossed and (was_true != "True" or (exhausted and was_reason != reason)):
            events.append(("Warning", f"Budget{reason}", figures))
    return merge_conditions(current.get("conditions"), updates), events


def budget_status(
    spec: GPUBudgetSpec,
    ledger: Sequence[PlanUsage],
    current: Mapping[str, Any],
    *,
    generation: int | None,
    now: datetime,
) -> tuple[dict[str, Any], list[tuple[str, str, str]], BudgetSummary]:
    """The budget's whole status (ledger pruned) for one write, its Events, and figures."""
    kept = prune(spec, ledger, now)
    summary = summarize(spec, kept, now)
    conditions, events = budget_conditions(
        summary,
        current,
        generation=generation,
        now=now,
        charge_confidence=spec.charge_confidence,
    )
    status = {
        "usedGPUHours": round(summary.used_gpu_hours, 3),
        "committedGPUHours": round(summary.committed_gpu_hours, 3),
        "remainingGPUHours": round(summary.remaining_gpu_hours, 3),
        "activePlans": list(summary.active_plans),
        "gpusInUse": summary.gpus_in_use,
        "ledger": [usage.to_document() for usage in kept],
        "conditions": conditions,
        "lastUpdatedTime": now.isoformat(),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status, events, summary


def ledger_from_status(status: Mapping[str, Any]) -> list[PlanUsage]:
    """The ledger stored in a budget's status."""
    return [PlanUsage.model_validate(entry) for entry in status.get("ledger", []) or []]
