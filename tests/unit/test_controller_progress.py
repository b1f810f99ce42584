"""ETA estimate -> status patch and Events; status -> operator metrics."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.crd_schema import committed_crd, validator_for
from trainplan.controller.metrics import OperatorMetrics, snapshot_from_status
from trainplan.controller.progress import progress_update
from trainplan.eta import EtaState, Observation, PlanFacts, revise
from trainplan.monitor import Failure, FailureLedger, GpuUsage

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
FACTS = PlanFacts(
    total_steps=100,
    planned_step_seconds=1.0,
    gpus=8,
    checkpoint_interval_steps=10,
    restart_seconds=30,
    interruptions_per_gpu_hour=0.0,
    planned_mfu=0.5,
    planned_duration_seconds=100,
    deadline_seconds=50,
)


def _estimate(step: int, stalled_for: float = 0.0):  # type: ignore[no-untyped-def]
    state = EtaState()
    estimate = None
    for second in range(0, step + 1, 5):
        estimate, state = revise(
            FACTS,
            state,
            Observation(time=NOW + timedelta(seconds=second), step=second, started_at=NOW),
        )
    if stalled_for:
        estimate, state = revise(
            FACTS,
            state,
            Observation(
                time=NOW + timedelta(seconds=step + stalled_for), step=step, started_at=NOW
            ),
        )
    assert estimate is not None
    return estimate


def test_status_patch_has_every_design_field_and_validates() -> None:
    ledger = FailureLedger(
        keys=frozenset({("pod", "a")}), last=Failure(("pod", "a"), "Evicted", None)
    )
    update = progress_update(
        _estimate(40),
        ledger,
        {},
        tokens=4000,
        last_step_time=NOW,
        metrics_error=None,
        generation=1,
        now=NOW,
    )
    status = update.status
    for key in (
        "progress",
        "progressPercentage",
        "estimatedRemainingSeconds",
        "estimatedCompletionTime",
        "estimatedCompletionRange",
        "failures",
        "gpuHours",
        "conditions",
        "lastUpdatedTime",
    ):
        assert key in status, key
    assert status["progress"]["step"] == 40
    assert status["progressPercentage"] == 40
    assert status["failures"]["count"] == 1
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {"MetricsAvailable": "True", "DeadlineAtRisk": "True", "Stalled": "False"}
    assert "gpuUsage" not in status  # no GPU reported
    validator = validator_for(committed_crd("trainingplans"), "status")
    assert list(validator.iter_errors(status)) == []
    reasons = [event[1] for event in update.events]
    assert reasons == ["DeadlineAtRisk", "Restarted"]


def test_gpu_usage_is_reported_when_gpus_report() -> None:
    update = progress_update(
        _estimate(40),
        FailureLedger(),
        {},
        tokens=None,
        last_step_time=None,
        metrics_error=None,
        gpus=GpuUsage(8, 0.93, 61e9, 80e9, None),
        generation=1,
        now=NOW,
    )
    assert update.status["gpuUsage"] == {
        "reportingGPUs": 8,
        "utilizationRatio": 0.93,
        "memoryUsedBytes": 61e9,
        "memoryTotalBytes": 80e9,
    }
    validator = validator_for(committed_crd("trainingplans"), "status")
    assert list(validator.iter_errors(update.status)) == []


def test_the_measured_checkpoint_time_is_reported_and_kept_until_measured_again() -> None:
    def update(current: dict[str, object], seconds: float | None) -> dict[str, object]:
        progress = progress_update(
            _estimate(40),
            FailureLedger(),
            current,
            tokens=None,
            last_step_time=None,
            metrics_error=None,
            checkpoint_seconds=seconds,
            generation=1,
            now=NOW,
        ).status["progress"]
        assert isinstance(progress, dict)
        return progress

    first = update({}, 42.5)
    assert first["measuredCheckpointSeconds"] == 42.5
    # After a restart no checkpoint is written yet: the last measured time stays.
    assert update({"progress": first}, None)["measuredCheckpointSeconds"] == 42.5
    # What the status held is input: garbage there is dropped, not carried.
    for garbage in ("42", -1, float("nan"), True):
        assert "measuredCheckpointSeconds" not in update(
            {"progress": {"measuredCheckpointSeconds": garbage}}, None
        )


def test_events_only_on_transitions_and_scrape_failures_are_reported() -> None:
    first = progress_update(
        _estimate(40),
        FailureLedger(),
        {},
        tokens=None,
        last_step_time=None,
        metrics_error="cannot scrape",
        generation=1,
        now=NOW,
    )
    second = progress_update(
        _estimate(45),
        FailureLedger(),
        first.status,
        tokens=None,
        last_step_time=None,
        metrics_error="cannot scrape",
        generation=1,
        now=NOW,
    )
    assert [e[1] for e in first.events] == ["DeadlineAtRisk"]
    assert second.events == ()
    metrics = next(c for c in second.status["conditions"] if c["type"] == "MetricsAvailable")
    assert (metrics["status"], metrics["message"]) == ("False", "cannot scrape")


def test_stall_event() -> None:
    update = progress_update(
        _estimate(40, stalled_for=600),
        FailureLedger(),
        {},
        tokens=None,
        last_step_time=None,
        metrics_error=None,
        generation=1,
        now=NOW,
    )
    assert "Stalled" in [event[1] for event in update.events]


def test_operator_metrics_use_design_names() -> None:
    metrics = OperatorMetrics()
    status = progress_update(
        _estimate(40),
        FailureLedger(),
        {},
        tokens=None,
        last_step_time=None,
        metrics_error=None,
        generation=1,
        now=NOW,
    ).status
    status.update(
        {
            "phase": "Running",
            "gpus": 8,
            "layout": "TP1 PP1 DP8",
            "plan": {"gpuType": "A100-SXM4-80GB", "stepSeconds": 1.0, "mfu": 0.5, "gpuHours": 1.0},
        }
    )
    metrics.record("team-a", "llama", snapshot_from_status(status))
    registry = CollectorRegistry()
    registry.register(metrics)
    names = {
        sample.name: sample
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    for name in (
        "trainplan_plan_info",
        "trainplan_plan_phase",
        "trainplan_plan_gpus",
        "trainplan_plan_progress_ratio",
        "trainplan_plan_eta_seconds",
        "trainplan_plan_estimated_completion_timestamp_seconds",
        "trainplan_plan_step_seconds",
        "trainplan_plan_mfu",
        "trainplan_plan_gpu_hours",
    ):
        assert name in names, name
    assert names["trainplan_plan_gpus"].labels == {"namespace": "team-a", "plan": "llama"}
    assert names["trainplan_plan_progress_ratio"].value == 0.4
    metrics.forget("team-a", "llama")
    assert "trainplan_plan_gpus" not in generate_latest(registry).decode().split("# TYPE")[-1]


def test_operator_metrics_give_the_deadline_and_the_time_lost() -> None:
    status = {
        "phase": "Running",
        "startTime": "2026-11-22T00:00:00Z",
        "failures": {"count": 2, "lastReason": "OOMKilled", "lostSeconds": 90.5},
    }
    snapshot = snapshot_from_status(status, {"objective": {"deadline": "36h"}})
    start = datetime(2026, 11, 22, tzinfo=UTC).timestamp()
    assert snapshot.deadline_timestamp_seconds == start + 36 * 3600
    assert snapshot.lost_seconds == 90.5
    metrics = OperatorMetrics()
    metrics.record("team-a", "llama", snapshot)
    registry = CollectorRegistry()
    registry.register(metrics)
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    deadline = samples["trainplan_plan_deadline_timestamp_seconds"]
    assert deadline.labels == {"namespace": "team-a", "plan": "llama"}
    assert deadline.value == start + 36 * 3600
    assert samples["trainplan_plan_lost_seconds"].value == 90.5
    # No deadline without a start, without an objective deadline, or with an unreadable one.
    for spec, start_time in (
        ({"objective": {"deadline": "36h"}}, None),
        ({"objective": {"gpus": 8}}, "2026-11-22T00:00:00Z"),
        ({"objective": {"deadline": "soon"}}, "2026-11-22T00:00:00Z"),
    ):
        other = snapshot_from_status({"startTime": start_time}, spec)
        assert other.deadline_timestamp_seconds is None
    assert snapshot_from_status(status).deadline_timestamp_seconds is None


def test_before_the_first_step_the_status_says_so_and_shows_the_plan() -> None:
    state = EtaState()
    estimate = None
    # Five minutes of loading: metrics at step 0, no step done yet.
    for second in range(0, 301, 30):
        estimate, state = revise(
            FACTS, state, Observation(time=NOW + timedelta(seconds=second), step=0, started_at=NOW)
        )
    assert estimate is not None
    assert estimate.waiting_for_first_step
    assert not estimate.stalled  # a first step may take half an hour
    assert estimate.remaining_seconds > 0.9 * FACTS.planned_duration_seconds
    update = progress_update(
        estimate,
        FailureLedger(),
        {},
        tokens=None,
        last_step_time=None,
        metrics_error=None,
        generation=1,
        now=NOW + timedelta(seconds=300),
    )
    stalled = next(c for c in update.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("False", "WaitingForFirstStep")
    assert "plan" in stalled["message"]
    validator = validator_for(committed_crd("trainingplans"), "status")
    assert list(validator.iter_errors(update.status)) == []


def test_a_plan_of_millennia_and_non_finite_figures_still_write_a_valid_status() -> None:
    # 14,280 years of planned steps: the completion time is beyond the dates the status
    # can hold; the patch clamps it instead of failing every round.
    years = replace(
        FACTS,
        total_steps=10**9,
        planned_step_seconds=450.0,
        planned_duration_seconds=4.5e11,
        deadline_seconds=None,
    )
    estimate, _ = revise(years, EtaState(), Observation(time=NOW, step=0, started_at=NOW))
    hostile = replace(
        estimate,
        step=-5,
        measured_step_seconds=math.inf,
        measured_mfu=math.nan,
        lost_seconds=math.nan,
        gpu_hours_projected=math.inf,
        earliest_seconds=-1e15,
    )
    for case in (estimate, hostile):
        update = progress_update(
            case,
            FailureLedger(),
            {},
            tokens=-1,
            last_step_time=None,
            metrics_error=None,
            generation=1,
            now=NOW,
        )
        text = json.dumps(update.status, allow_nan=False)  # no NaN or Infinity token
        assert datetime.fromisoformat(update.status["estimatedCompletionTime"]).year < 9999
        validator = validator_for(committed_crd("trainingplans"), "status")
        assert list(validator.iter_errors(update.status)) == [], text
        assert "tokens" not in update.status["progress"]


def test_series_out_of_bounds_are_named_in_the_condition() -> None:
    update = progress_update(
        _estimate(40),
        FailureLedger(),
        {},
        tokens=None,
        last_step_time=None,
        metrics_error=None,
        dropped_series=("trainplan_gpu_power_watts",),
        generation=1,
        now=NOW,
    )
    condition = next(c for c in update.status["conditions"] if c["type"] == "MetricsAvailable")
    assert condition["status"] == "True"
    assert condition["message"].endswith("out of bounds, ignored: trainplan_gpu_power_watts")


def test_figures_past_every_range_are_clamped_and_the_horizon_is_noted() -> None:
    # An estimate no engine should make (NaN waits, reversed percentiles, no total) and a
    # clock near datetime's end: the patch still validates and says the horizon was hit.
    hostile = replace(
        _estimate(40),
        remaining_seconds=math.inf,
        earliest_seconds=math.nan,
        latest_seconds=10.0,
        seconds_since_progress=math.nan,
        stalled=True,
        total_steps=0,
    )
    for now in (NOW, datetime(9990, 1, 1, tzinfo=UTC)):
        update = progress_update(
            hostile,
            FailureLedger(),
            {},
            tokens=None,
            last_step_time=None,
            metrics_error=None,
            generation=1,
            now=now,
        )
        json.dumps(update.status, allow_nan=False)
        validator = validator_for(committed_crd("trainingplans"), "status")
        assert list(validator.iter_errors(update.status)) == []
        window = update.status["estimatedCompletionRange"]
        assert window["earliest"] <= window["latest"]
        assert datetime.fromisoformat(update.status["estimatedCompletionTime"]).year <= 9999
        risk = next(c for c in update.status["conditions"] if c["type"] == "DeadlineAtRisk")
        assert "or more (the horizon of the status)" in risk["message"]
