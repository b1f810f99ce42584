"""trainplan's Prometheus alert rules, as the rule groups file Prometheus and promtool read
(the `spec` of a prometheus-operator PrometheusRule).

Each alert keeps, besides its expression, the `quantity` it puts a threshold on (seconds
past the deadline, seconds since the last step, failures in the last hour, the share of a
budget used, the operator's `up`): what to graph when it fires, and what the end-to-end
test evaluates against a live run.

- TrainplanDeadlineAtRisk (warning): an active plan's estimated completion is past its
  deadline, for 15m;
- TrainplanStalled (critical): no step for 10 step times (at least 10m), for 5m;
- TrainplanRestartStorm (warning): 3 or more failures within an hour;
- TrainplanBudgetNearlyExhausted (warning): a GPUBudget has used 80% of its GPU-hours;
- TrainplanBudgetExhausted (critical): a GPUBudget has used all of them;
- TrainplanCalibrationDrift (warning): plans a ClusterCalibration corrected run more than
  15% off their planned step time, for 1h;
- TrainplanOperatorDown (critical): no operator target up, for 5m.

Pure: builds objects and text; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import yaml

from trainplan.api import ACTIVE_PHASES, NEARLY_EXHAUSTED_RATIO
from trainplan.dashboards.promql import BY_PLAN, ON_PLAN, UP, equals, matches, series
from trainplan.runtime.schema import (
    BUDGET_GPU_HOURS,
    PLAN_DEADLINE_TIMESTAMP_SECONDS,
    PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS,
    PLAN_FAILURES_TOTAL,
    PLAN_INFO,
    PLAN_PHASE,
    PLAN_STEP_SECONDS,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
)

GROUP_NAME: Final = "trainplan"

DEFAULT_OPERATOR_JOB: Final = ".*trainplan.*-metrics"
"""The `job` label (a regular expression) of the operator's scrape target: the Helm chart's
ServiceMonitor scrapes the Service `<release fullname>-metrics`, and prometheus-operator
names the job after the Service."""

STALL_STEP_TIMES: Final = 10
"""Stalled: no step for this many step times (the larger of planned and measured)..."""
STALL_MIN_SECONDS: Final = 600
"""...and at least this long."""

CALIBRATION_DRIFT_RATIO: Final = 0.15
"""CalibrationDrift: calibrated plans' measured step time this far from planned."""

RESTART_STORM_FAILURES: Final = 3
RESTART_STORM_WINDOW: Final = "1h"

PLAN: Final = "{{ $labels.namespace }}/{{ $labels.plan }}"
BUDGET: Final = "{{ $labels.namespace }}/{{ $labels.budget }}"


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alerting rule: `expr` fires it; `quantity` is the figure it thresholds."""

    alert: str
    expr: str
    quantity: str
    for_: str
    severity: str
    summary: str
    description: str
    action: str
    """What to do, in a sentence or two; the description ends with it, and the runbook
    (docs/runbooks.md) says more."""

    @property
    def runbook_anchor(self) -> str:
        """The alert's section in docs/runbooks.md (a Markdown heading's anchor)."""
        return self.alert.lower()

    def to_rule(self, runbook_base_url: str | None = None) -> dict[str, Any]:
        """The rule as the rule groups file writes it: `summary` and `description`
        annotations, and `runbook_url` (`runbook_base_url#<alert in lower case>`) when
        a base URL is given, e.g. where docs/runbooks.md is published."""
        annotations = {
            "summary": self.summary,
            "description": f"{self.description} {self.action}",
        }
        if runbook_base_url:
            annotations["runbook_url"] = f"{runbook_base_url}#{self.runbook_anchor}"
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": annotations,
        }


def _deadline_at_risk() -> AlertRule:
    late = (
        f"{series(PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS)}"
        f" - {ON_PLAN} {series(PLAN_DEADLINE_TIMESTAMP_SECONDS)}"
    )
    phases = "|".join(phase.value for phase in ACTIVE_PHASES)
    # The stateset's label is named after the metric (prometheus-client's convention).
    active = f"{series(PLAN_PHASE, matches(PLAN_PHASE.name, phases))} == 1"
    return AlertRule(
        alert="TrainplanDeadlineAtRisk",
        expr=f"({late}) > 0 and {ON_PLAN} {active}",
        quantity=late,
        for_="15m",
        severity="warning",
        summary=f"{PLAN} is estimated to finish after its deadline",
        description=(
            "The median estimated completion is {{ $value | humanizeDuration }} past the"
            " deadline (the job's start plus spec.objective.deadline)."
        ),
        action=(
            "kubectl describe tp -n {{ $labels.namespace }} {{ $labels.plan }}"
            " (condition DeadlineAtRisk); compare measured with planned step time and the"
            " failures on the trainplan dashboard; fix a slow or failing job, or re-plan"
            " with more GPUs or a later deadline."
        ),
    )


def _stalled() -> AlertRule:
    since = f"time() - max {BY_PLAN} ({series(TRAIN_LAST_STEP_TIMESTAMP_SECONDS)})"
    limit = (
        f"clamp_min({STALL_STEP_TIMES} * max {BY_PLAN} ({series(PLAN_STEP_SECONDS)}),"
        f" {STALL_MIN_SECONDS})"
    )
    return AlertRule(
        alert="TrainplanStalled",
        expr=f"({since}) > {ON_PLAN} {limit}",
        quantity=since,
        for_="5m",
        severity="critical",
        summary=f"{PLAN} has completed no step for {STALL_STEP_TIMES} step times",
        description=(
            "No optimizer step for {{ $value | humanizeDuration }} (the limit:"
            f" {STALL_STEP_TIMES} step times, planned or measured, at least"
            f" {STALL_MIN_SECONDS // 60}m); the pods run but training does not move."
        ),
        action=(
            "Read the rank-0 pod's log (kubectl logs -n {{ $labels.namespace }}"
            " -l trainplan.dev/plan={{ $labels.plan }}) for a hang: collective timeout,"
            " data loader, storage; delete the stuck pod to restart from the newest"
            " checkpoint."
        ),
    )


def _restart_storm() -> AlertRule:
    # The operator's counter carries the total under the latest failure's reason, so a
    # new reason starts a new series at the total: the count over the window is the
    # highest value in it less the lowest, over all of the plan's series.
    failures = series(PLAN_FAILURES_TOTAL)
    window = RESTART_STORM_WINDOW
    count = (
        f"max {BY_PLAN} (max_over_time({failures}[{window}]))"
        f" - min {BY_PLAN} (min_over_time({failures}[{window}]))"
    )
    return AlertRule(
        alert="TrainplanRestartStorm",
        expr=f"({count}) >= {RESTART_STORM_FAILURES}",
        quantity=count,
        for_="0m",
        severity="warning",
        summary=f"{PLAN} failed {{{{ $value }}}} times in the last {window}",
        description=(
            f"{RESTART_STORM_FAILURES} or more interruptions within {window}; each"
            " restart redoes the work since the last checkpoint and the ETA grows."
        ),
        action=(
            "kubectl describe tp -n {{ $labels.namespace }} {{ $labels.plan }} and kubectl"
            " get events -n {{ $labels.namespace }} for the reasons (OOMKilled, evictions,"
            " node faults); cordon a faulty node or fix the cause, and set"
            " spec.job.suspend: true to stop restarting meanwhile."
        ),
    )


def _budget_used() -> str:
    used = series(BUDGET_GPU_HOURS, equals("kind", "used"))
    limit = series(BUDGET_GPU_HOURS, equals("kind", "limit"))
    return f"{used} / ignoring (kind) {limit}"


def _budget_nearly_exhausted() -> AlertRule:
    used = _budget_used()
    return AlertRule(
        alert="TrainplanBudgetNearlyExhausted",
        expr=f"({used}) >= {NEARLY_EXHAUSTED_RATIO} < 1",
        quantity=used,
        for_="0m",
        severity="warning",
        summary=f"GPUBudget {BUDGET} is nearly exhausted",
        description=(
            "{{ $value | humanizePercentage }} of its GPU-hours are used in its window;"
            " plans that do not fit what is left are rejected, warned or downsized as the"
            " budget's enforcement says."
        ),
        action=(
            "kubectl get gpubudget -n {{ $labels.namespace }} {{ $labels.budget }} -o yaml"
            " (activePlans, ledger): hold new plans, or raise spec.gpuHours."
        ),
    )


def _budget_exhausted() -> AlertRule:
    used = _budget_used()
    return AlertRule(
        alert="TrainplanBudgetExhausted",
        expr=f"({used}) >= 1",
        quantity=used,
        for_="0m",
        severity="critical",
        summary=f"GPUBudget {BUDGET} is exhausted",
        description=(
            "{{ $value | humanizePercentage }} of its GPU-hours are used in its window;"
            " new plans in the namespace are rejected, warned or downsized as the budget's"
            " enforcement says."
        ),
        action=(
            "Raise spec.gpuHours of GPUBudget {{ $labels.budget }} in"
            " {{ $labels.namespace }}, or wait for its window (spec.period) to roll on;"
            " kubectl get gpubudget -n {{ $labels.namespace }} shows what is used."
        ),
    )


def calibrated_step_ratio() -> str:
    """Measured over planned step time of the plans a ClusterCalibration corrected, by
    calibration and GPU type (mean over their plans)."""
    measured = series(PLAN_STEP_SECONDS, equals("source", "measured"))
    planned = series(PLAN_STEP_SECONDS, equals("source", "planned"))
    calibrated = series(PLAN_INFO, 'calibration!=""')
    return (
        f"avg by (calibration, gpu_type) ({measured} / ignoring (source) {planned}"
        f" * {ON_PLAN} group_left (calibration, gpu_type) {calibrated})"
    )


def _calibration_drift() -> AlertRule:
    ratio = calibrated_step_ratio()
    return AlertRule(
        alert="TrainplanCalibrationDrift",
        expr=f"abs(({ratio}) - 1) > {CALIBRATION_DRIFT_RATIO}",
        quantity=ratio,
        for_="1h",
        severity="warning",
        summary=(
            "Plans calibrated by {{ $labels.calibration }} ({{ $labels.gpu_type }}) run off"
            " their calibration"
        ),
        description=(
            "Their measured step time differs from the calibrated plans' by"
            " {{ $value | humanizePercentage }} (more than"
            f" {CALIBRATION_DRIFT_RATIO:.0%}) for an hour: the cluster"
            " changed since its records (a degraded network or link, a driver or software"
            " update, power capping)."
        ),
        action=(
            "Compare the plans' step time on the trainplan dashboard (Cluster calibration"
            " row) across nodes; find and fix the degraded component; if the change is"
            " lasting, the next finished runs' records move the calibration to it."
        ),
    )


def _operator_down(operator_job: str) -> AlertRule:
    up = f"{UP}{{{matches('job', operator_job)}}}"
    return AlertRule(
        alert="TrainplanOperatorDown",
        expr=f"absent({up} == 1)",
        quantity=up,
        for_="5m",
        severity="critical",
        summary="The trainplan operator is down or not scraped",
        description=(
            f'No target of job=~"{operator_job}" has been up for 5m: plans are not'
            " launched, ETAs and budgets are not revised, and the plan series are"
            " stale."
        ),
        action=(
            "kubectl get pods,events in the operator's namespace; read the operator's log"
            " and its liveness probe (:8081/healthz); check that its ServiceMonitor or"
            " PodMonitor selects it and that the job matches this rule."
        ),
    )


def alert_rules(operator_job: str = DEFAULT_OPERATOR_JOB) -> tuple[AlertRule, ...]:
    """Every trainplan alert, in the order the rules file lists them."""
    return (
        _deadline_at_risk(),
        _stalled(),
        _restart_storm(),
        _budget_nearly_exhausted(),
        _budget_exhausted(),
        _calibration_drift(),
        _operator_down(operator_job),
    )


def rule_groups(
    operator_job: str = DEFAULT_OPERATOR_JOB, runbook_base_url: str | None = None
) -> dict[str, Any]:
    """The rule groups document (`groups:`), with `runbook_url` annotations when
    `runbook_base_url` is given."""
    rules = [rule.to_rule(runbook_base_url) for rule in alert_rules(operator_job)]
    return {"groups": [{"name": GROUP_NAME, "rules": rules}]}


RULES_HEADER: Final = (
    "# Generated by `trainplan alerts` from trainplan.dashboards; do not edit.\n"
    "# Prometheus rule groups (the spec of a PrometheusRule); docs/observability.md.\n"
)


def render_rules_yaml(
    operator_job: str = DEFAULT_OPERATOR_JOB, runbook_base_url: str | None = None
) -> str:
    """The rules file: a generated-file header, then the groups; the same text on every run."""
    body = yaml.safe_dump(
        rule_groups(operator_job, runbook_base_url),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=4096,
    )
    return RULES_HEADER + body
