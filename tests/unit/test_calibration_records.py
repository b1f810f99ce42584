"""A succeeded run's record in its ClusterCalibration (controller/calibration.py, pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.contract.crd_schema import committed_crd, validator_for
from trainplan.api import CalibrationRecord, ClusterCalibration, TrainingPlanSpec
from trainplan.controller.calibration import (
    RECORD_MIN_STEPS,
    finished_run_record,
    measured_restart_seconds,
    status_with_record,
    steady_step_seconds,
)
from trainplan.planner import Catalog, plan
from trainplan.planner.cluster_fit import (
    ClusterEvidence,
    RunRecord,
    cluster_evidence,
    fit_cluster,
    run_records,
)

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
SPEC = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
}


def status(catalog: Catalog, step: int = 500, cluster: ClusterEvidence | None = None) -> Any:
    planned = plan(TrainingPlanSpec.model_validate(SPEC), catalog, cluster=cluster)
    return {
        "phase": "Succeeded",
        "plan": planned.to_document(),
        "completionTime": "2026-11-25T10:00:00Z",
        "progress": {
            "step": step,
            "measuredStepSeconds": planned.step_seconds * 1.2,
            "measuredCheckpointSeconds": 12.5,
        },
        "failures": {"count": 3, "lostSeconds": 3 * 6000.0},
        "gpuHours": {"used": 40.0},
    }


def calibration(records: int = 0, max_records: int = 100) -> dict[str, Any]:
    record = {
        "plan": "team-a/old",
        "finished": "2026-11-01T00:00:00Z",
        "gpus": 8,
        "plannedStepSeconds": 2.0,
        "measuredStepSeconds": 2.4,
        "gpuHours": 30.0,
        "interruptions": 1,
    }
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "ClusterCalibration",
        "metadata": {"name": "fleet", "generation": 1},
        "spec": {"gpuType": "A100-SXM4-80GB", "maxRecords": max_records},
        "status": {"records": [{**record, "plan": f"team-a/old-{i}"} for i in range(records)]},
    }


def test_a_steady_run_is_recorded_with_the_catalogs_planned_step(catalog: Catalog) -> None:
    record = finished_run_record("team-a", "run", status(catalog), NOW)
    assert record is not None
    assert record.plan == "team-a/run"
    assert record.finished == datetime(2026, 11, 25, 10, tzinfo=UTC)
    # The measured step time averages the checkpoint writes in: the record's is steady.
    interval = status(catalog)["plan"]["reliability"]["checkpointIntervalSteps"]
    assert record.measured_step_seconds == pytest.approx(
        record.planned_step_seconds * 1.2 - 12.5 / interval
    )
    assert (record.interruptions, record.gpu_hours, record.gpus) == (3, 40.0, 8)
    # 6,000 s lost per interruption, less half a checkpoint interval of redone steps.
    planned = status(catalog)["plan"]
    redone = planned["reliability"]["checkpointIntervalSteps"] * record.measured_step_seconds / 2
    assert 0 < redone < 6000
    assert record.restart_seconds == pytest.approx(6000 - redone)
    assert record.checkpoint_seconds == 12.5
    # A plan that a ClusterCalibration corrected records the catalog's step time.
    fit = fit_cluster([RunRecord(2.0, 2.6, 100.0, 0)] * 3, catalog.calibration)
    corrected = status(catalog, cluster=ClusterEvidence("fleet", 1, "A100-SXM4-80GB", fit))
    again = finished_run_record("team-a", "run", corrected, NOW)
    assert again is not None
    assert again.planned_step_seconds == pytest.approx(record.planned_step_seconds)


def test_a_run_without_interruptions_or_checkpoints_measures_neither(catalog: Catalog) -> None:
    document = status(catalog)
    document["failures"] = {"count": 0, "lostSeconds": 0}
    del document["progress"]["measuredCheckpointSeconds"]
    record = finished_run_record("team-a", "run", document, NOW)
    assert record is not None
    assert (record.restart_seconds, record.checkpoint_seconds) == (None, None)


@pytest.mark.parametrize("broken", ["few-steps", "no-measurement", "invalid"])
def test_an_unsteady_or_invalid_run_is_not_recorded(catalog: Catalog, broken: str) -> None:
    document = status(catalog, step=RECORD_MIN_STEPS - 1 if broken == "few-steps" else 500)
    if broken == "no-measurement":
        del document["progress"]["measuredStepSeconds"]
    if broken == "invalid":
        document["progress"]["measuredStepSeconds"] = -1
    assert finished_run_record("team-a", "run", document, NOW) is None


def test_the_record_is_added_once_and_the_fit_recomputed(catalog: Catalog) -> None:
    record = finished_run_record("team-a", "run", status(catalog), NOW)
    assert record is not None
    new = status_with_record(calibration(2), record, catalog.calibration, NOW)
    assert new is not None
    assert [r["plan"] for r in new["records"]] == ["team-a/old-0", "team-a/old-1", "team-a/run"]
    assert new["runs"] == 3
    assert new["stepSecondsFactor"] == pytest.approx(1.2, rel=0.05)
    assert new["conditions"][0]["type"] == "Calibrated"
    assert new["conditions"][0]["message"].startswith("3 runs; step time x 1.")
    stored = {**calibration(), "status": {"records": new["records"]}}
    assert status_with_record(stored, record, catalog.calibration, NOW) is None  # repeated


def test_the_oldest_records_are_folded_beyond_max_records(catalog: Catalog) -> None:
    record = finished_run_record("team-a", "run", status(catalog), NOW)
    assert record is not None
    new = status_with_record(calibration(3, max_records=3), record, catalog.calibration, NOW)
    assert new is not None
    assert [r["plan"] for r in new["records"]] == ["team-a/old-1", "team-a/old-2", "team-a/run"]
    assert new["folded"]["stepSeconds"]["runs"] == 1
    assert new["folded"]["interruptions"] == 1
    assert new["runs"] == 4
    # `kubectl describe` shows the fit in words.
    message = new["conditions"][0]["message"]
    assert message.startswith("4 runs (1 folded from older records); step time x 1.")
    assert "a new run within x 0." in message
    assert "(10-90%)" in message
    assert "checkpoints take 12s" in message
    assert "restarts take " in message


def test_folded_records_count_as_if_they_were_kept(catalog: Catalog) -> None:
    """Twenty runs added one at a time to a resource keeping 4 fit as the twenty do
    together: the factor and range within a fraction of a percent, the failure posterior
    exactly (every interruption and GPU-hour counts)."""
    prior = catalog.calibration
    document = calibration(0, max_records=4)
    runs = []
    for i in range(20):
        ratio = 1.25 * (1.0 + 0.04 * math.sin(i))  # a cluster 25% slow, 4% run-to-run
        runs.append(RunRecord(2.0, 2.0 * ratio, 50.0 + i, i % 3))
        added = CalibrationRecord(
            plan=f"team-a/run-{i}",
            finished=NOW,
            gpus=8,
            planned_step_seconds=2.0,
            measured_step_seconds=2.0 * ratio,
            gpu_hours=50.0 + i,
            interruptions=i % 3,
        )
        new = status_with_record(document, added, prior, NOW)
        assert new is not None
        document = {**document, "status": new}
    assert len(document["status"]["records"]) == 4
    validator = validator_for(committed_crd("clustercalibrations"), "status")
    assert list(validator.iter_errors(document["status"])) == []
    stored = cluster_evidence(ClusterCalibration.model_validate(document), prior).fit
    whole = fit_cluster(runs, prior)
    assert stored.runs == whole.runs == 20
    assert stored.step_seconds_factor == pytest.approx(whole.step_seconds_factor, rel=0.002)
    assert stored.step_seconds_ratio_p90 == pytest.approx(whole.step_seconds_ratio_p90, rel=0.01)
    assert stored.interruptions_alpha == whole.interruptions_alpha
    assert stored.interruptions_beta_gpu_hours == pytest.approx(whole.interruptions_beta_gpu_hours)
    # Without the folded sums, the last four runs alone would be a weaker fit.
    kept = fit_cluster(run_records(ClusterCalibration.model_validate(document)), prior)
    assert kept.runs == 4
    assert kept.step_seconds_ratio_p90 > stored.step_seconds_ratio_p90


def test_a_restart_hidden_by_the_redone_work_is_no_measurement() -> None:
    """Lost time within half a checkpoint interval says nothing of the restart itself
    (the redone work spreads from 0 to a whole interval): no restart time, not a 0 that
    would pull the cluster's median restart cost down."""
    assert measured_restart_seconds(1000.0, 1200.0) == pytest.approx(400.0)
    assert measured_restart_seconds(500.0, 1200.0) is None
    assert measured_restart_seconds(600.0, 1200.0) is None


def test_the_steady_step_leaves_the_checkpoint_writes_out() -> None:
    assert steady_step_seconds(2.1, 50.0, 500) == pytest.approx(2.0)
    assert steady_step_seconds(2.0, 0.0, 500) == 2.0
    # A checkpoint time that would leave nothing is not trusted over the measurement.
    assert steady_step_seconds(2.0, 5000.0, 1) == 2.0


def test_a_measured_checkpoint_rate_sets_the_checkpoint_time_of_new_plans(
    catalog: Catalog,
) -> None:
    record = finished_run_record("team-a", "run", status(catalog), NOW)
    assert record is not None
    planned = status(catalog)["plan"]
    # pythia-1b in bf16 with AdamW: 2 bytes of weights and 12 of optimizer state a parameter.
    assert record.checkpoint_bytes == planned["reliability"]["checkpointBytes"]
    assert record.checkpoint_bytes == pytest.approx(planned["parameters"] * 14, rel=0.001)
    assert planned["reliability"]["checkpointSeconds"] == 60.0  # no calibration: the default
    # Three runs writing 10, 40 and 100 GB at 2, 1 and 4 GB/s: the median rate, 2 GB/s.
    runs = [
        RunRecord(2.0, 2.4, 100.0, 0, checkpoint_seconds=seconds, checkpoint_bytes=written)
        for seconds, written in ((5.0, 10e9), (40.0, 40e9), (25.0, 100e9))
    ]
    fit = fit_cluster(runs, catalog.calibration)
    assert fit.checkpoint_bytes_per_second == pytest.approx(2e9)
    cluster = ClusterEvidence("fleet", 1, "A100-SXM4-80GB", fit)
    corrected = plan(TrainingPlanSpec.model_validate(SPEC), catalog, cluster=cluster)
    assert corrected.reliability.checkpoint_seconds == pytest.approx(record.checkpoint_bytes / 2e9)
    # A spec's own checkpoint time stands.
    told = {**SPEC, "reliability": {"checkpointSeconds": 90.0}}
    kept = plan(TrainingPlanSpec.model_validate(told), catalog, cluster=cluster)
    assert kept.reliability.checkpoint_seconds == 90.0


def test_folded_checkpoint_rates_are_kept(catalog: Catalog) -> None:
    document = calibration(0, max_records=1)
    for i, (seconds, written) in enumerate(((10.0, 10e9), (10.0, 30e9), (10.0, 50e9))):
        added = CalibrationRecord(
            plan=f"team-a/run-{i}",
            finished=NOW,
            gpus=8,
            planned_step_seconds=2.0,
            measured_step_seconds=2.4,
            gpu_hours=50.0,
            checkpoint_seconds=seconds,
            checkpoint_bytes=written,
        )
        new = status_with_record(document, added, catalog.calibration, NOW)
        assert new is not None
        document = {**document, "status": new}
    validator = validator_for(committed_crd("clustercalibrations"), "status")
    assert list(validator.iter_errors(document["status"])) == []
    folded = document["status"]["folded"]
    assert folded["checkpointRateRuns"] == 2
    assert folded["checkpointBytesPerSecond"] == pytest.approx(2e9)  # mean of 1 and 3 GB/s
    # The one record kept (5 GB/s) outweighs the folded mean: the records' median stands.
    assert document["status"]["checkpointBytesPerSecond"] == pytest.approx(5e9)
    fit = cluster_evidence(ClusterCalibration.model_validate(document), catalog.calibration).fit
    assert fit.checkpoint_bytes_per_second == pytest.approx(5e9)


def test_a_near_zero_checkpoint_time_cannot_overflow_the_rate(catalog: Catalog) -> None:
    """A pod's checkpoint seconds are input: 1e-300 s for a 94 GB checkpoint is clamped to
    the ClusterCalibration's bound, and the status stays valid."""
    document = calibration(0)
    added = CalibrationRecord(
        plan="team-a/odd",
        finished=NOW,
        gpus=8,
        planned_step_seconds=2.0,
        measured_step_seconds=2.4,
        gpu_hours=50.0,
        checkpoint_seconds=1e-300,
        checkpoint_bytes=9.4e10,
    )
    new = status_with_record(document, added, catalog.calibration, NOW)
    assert new is not None
    assert new["checkpointBytesPerSecond"] == 1.0e15
    validator = validator_for(committed_crd("clustercalibrations"), "status")
    assert list(validator.iter_errors(new)) == []
