"""ClusterCalibration: a cluster's finished runs correct its next plans (the fit, the
planner using it, the CLI reading it, and the resource's CRD)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.builders import make_layout
from trainplan.api import ClusterCalibration, TrainingPlanSpec
from trainplan.cli.main import main
from trainplan.controller.reconcile import default_calibration
from trainplan.crdgen.crds import cluster_calibration_crd
from trainplan.planner import Calibration, Catalog, PlanInputError, plan
from trainplan.planner.cluster_fit import (
    PRIOR_INTERRUPTIONS,
    ClusterEvidence,
    RunRecord,
    apply_cluster_fit,
    cluster_evidence,
    fit_cluster,
)
from trainplan.planner.layout import Workload
from trainplan.planner.steptime import step_time

TRUE_FACTOR = 1 / 0.75  # a cluster 25% less efficient than the catalog
NOISE = (0.02, -0.03, 0.01, -0.01, 0.03, -0.02, 0.0, 0.015, -0.015, 0.005)


def runs(count: int, factor: float = TRUE_FACTOR, **extra: Any) -> list[RunRecord]:
    return [
        RunRecord(
            planned_step_seconds=10.0,
            measured_step_seconds=10.0 * factor * math.exp(NOISE[i % len(NOISE)]),
            gpu_hours=50_000.0,
            interruptions=extra.get("interruptions", 3),
            restart_seconds=extra.get("restart_seconds"),
        )
        for i in range(count)
    ]


def test_without_records_the_fit_is_the_catalogs(calibration: Calibration) -> None:
    fit = fit_cluster([], calibration)
    assert fit.runs == 0
    assert fit.step_seconds_factor == 1.0
    assert fit.step_seconds_ratio_p10 == calibration.step_seconds_ratio_p10
    assert fit.step_seconds_ratio_p90 == calibration.step_seconds_ratio_p90
    assert fit.interruptions_per_gpu_hour == pytest.approx(calibration.interruptions_per_gpu_hour)
    assert fit.restart_seconds is None


@pytest.mark.parametrize(("count", "within"), [(1, 0.10), (3, 0.05), (10, 0.03)])
def test_the_factor_converges_on_the_clusters_own(
    calibration: Calibration, count: int, within: float
) -> None:
    fit = fit_cluster(runs(count), calibration)
    assert abs(fit.step_seconds_factor / TRUE_FACTOR - 1) < within
    # The range of a new run's measured / corrected step time holds the truth's scatter.
    assert fit.step_seconds_ratio_p10 < 1 < fit.step_seconds_ratio_p90


def test_ranges_narrow_as_runs_accumulate(calibration: Calibration) -> None:
    widths = [
        math.log(fit.step_seconds_ratio_p90 / fit.step_seconds_ratio_p10)
        for fit in (fit_cluster(runs(n), calibration) for n in (1, 3, 10))
    ]
    assert widths[0] > widths[2]


def test_one_outlier_run_moves_the_factor_by_less_than_2_percent(
    calibration: Calibration,
) -> None:
    steady = fit_cluster(runs(5), calibration)
    broken = RunRecord(
        planned_step_seconds=10.0, measured_step_seconds=26.0, gpu_hours=50_000, interruptions=3
    )
    with_outlier = fit_cluster([*runs(5), broken], calibration)
    assert with_outlier.down_weighted == 1
    assert abs(with_outlier.step_seconds_factor / steady.step_seconds_factor - 1) < 0.02


def test_interruptions_are_a_gamma_posterior_on_the_fleet_prior(
    calibration: Calibration,
) -> None:
    fit = fit_cluster(runs(4, interruptions=15, restart_seconds=900.0), calibration)
    beta0 = PRIOR_INTERRUPTIONS / calibration.interruptions_per_gpu_hour
    assert fit.interruptions_alpha == PRIOR_INTERRUPTIONS + 60
    assert fit.interruptions_beta_gpu_hours == pytest.approx(beta0 + 200_000)
    assert fit.interruptions_per_gpu_hour == pytest.approx(61 / (beta0 + 200_000))
    assert fit.restart_seconds == 900.0


def test_applied_the_fit_scales_every_part_of_the_step(
    calibration: Calibration, catalog: Catalog
) -> None:
    fit = fit_cluster(runs(3), calibration)
    corrected = apply_cluster_fit(calibration, fit)
    assert corrected.interruptions_per_gpu_hour == fit.interruptions_per_gpu_hour
    assert corrected.step_seconds_ratio_p90 == fit.step_seconds_ratio_p90
    work = Workload(
        shape=catalog.model("llama2-7b").shape,
        gpu=catalog.gpu("A100-SXM4-80GB"),
        gpus_per_node=8,
        global_batch_size=512,
    )
    layout = make_layout(2, 2, 16, micro=1, accumulation=16, zero=1)
    plain, scaled = step_time(work, layout, calibration), step_time(work, layout, corrected)
    assert scaled.step_seconds == pytest.approx(plain.step_seconds * fit.step_seconds_factor)
    assert scaled.data_comm_seconds == pytest.approx(
        plain.data_comm_seconds * fit.step_seconds_factor
    )


# ----------------------------------------------------------------- the planner

SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 5.0e10},
    "batch": {"globalBatchSize": 512},
    "hardware": {"gpuType": "A100-SXM4-80GB"},
    "parallelism": {"tensor": 1, "pipeline": 1, "zeroStage": 3},
    "objective": {"gpus": 64},
}


def spec(**hardware: Any) -> TrainingPlanSpec:
    return TrainingPlanSpec.model_validate({**SPEC, "hardware": {**SPEC["hardware"], **hardware}})


def evidence(calibration: Calibration, gpu_type: str = "A100-SXM4-80GB") -> ClusterEvidence:
    return ClusterEvidence("a100-east", 4, gpu_type, fit_cluster(runs(3), calibration))


def test_a_calibrated_plan_is_slower_and_says_by_what(catalog: Catalog) -> None:
    cluster = evidence(catalog.calibration)
    plain = plan(spec(), catalog)
    calibrated = plan(spec(), catalog, cluster=cluster)
    assert calibrated.layout == plain.layout
    assert calibrated.step_seconds == pytest.approx(
        plain.step_seconds * cluster.fit.step_seconds_factor
    )
    assert calibrated.gpu_hours > plain.gpu_hours
    assert calibrated.calibration is not None
    assert calibrated.calibration.name == "a100-east"
    assert calibrated.calibration.generation == 4
    assert calibrated.calibration.runs == 3
    assert calibrated.to_document()["calibration"]["stepSecondsFactor"] == pytest.approx(
        cluster.fit.step_seconds_factor
    )
    assert calibrated.explanation[-1].startswith("Calibrated by ClusterCalibration a100-east")
    assert plain.calibration is None


def test_a_spec_can_opt_out_or_must_name_the_given_calibration(catalog: Catalog) -> None:
    cluster = evidence(catalog.calibration)
    opted_out = plan(spec(calibration="none"), catalog, cluster=cluster)
    assert opted_out.calibration is None
    assert opted_out.step_seconds == plan(spec(), catalog).step_seconds
    named = plan(spec(calibration="a100-east"), catalog, cluster=cluster)
    assert named.calibration is not None
    with pytest.raises(PlanInputError, match="names ClusterCalibration 'other'"):
        plan(spec(calibration="other"), catalog, cluster=cluster)


def test_a_calibration_of_another_gpu_is_refused(catalog: Catalog) -> None:
    cluster = evidence(catalog.calibration, gpu_type="H100-SXM5-80GB")
    with pytest.raises(PlanInputError) as raised:
        plan(spec(), catalog, cluster=cluster)
    assert raised.value.problems[0][0] == "hardware.gpuType"


# ----------------------------------------------------------------- resource and CLI


def resource(records: int = 3, **record: Any) -> dict[str, Any]:
    entries = [
        {
            "plan": f"team-a/run-{i}",
            "finished": "2026-11-20T10:00:00Z",
            "gpus": 64,
            "layout": "TP1 PP1 DP64 ZeRO-3",
            "plannedStepSeconds": 10.0,
            "measuredStepSeconds": 10.0 * TRUE_FACTOR,
            "gpuHours": 50_000.0,
            "interruptions": 3,
        }
        | record
        for i in range(records)
    ]
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "ClusterCalibration",
        "metadata": {"name": "a100-east", "generation": 2},
        "spec": {"gpuType": "A100-80GB"},
        "status": {"records": entries, "stepSecondsFactor": 0.5},
    }


def test_the_records_are_refitted_not_the_status_trusted(calibration: Calibration) -> None:
    parsed = ClusterCalibration.model_validate(resource())
    found = cluster_evidence(parsed, calibration)
    assert found.name == "a100-east"
    assert found.generation == 2
    assert found.fit.runs == 3
    assert found.fit.step_seconds_factor > 1.2  # not the status's 0.5
    kept = cluster_evidence(replace_max_records(parsed, 2), calibration)
    assert kept.fit.runs == 2


def replace_max_records(parsed: ClusterCalibration, count: int) -> ClusterCalibration:
    return parsed.model_copy(update={"spec": parsed.spec.model_copy(update={"max_records": count})})


@pytest.mark.parametrize(
    "bad",
    [{"measuredStepSeconds": 0}, {"gpuHours": -1}, {"interruptions": -2}, {"finished": "noon"}],
)
def test_records_are_bounded_input(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"status\.records"):
        ClusterCalibration.model_validate(resource(1, **bad))


def test_the_cli_plans_with_a_calibration_file(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(SPEC))
    calibration_file = tmp_path / "cal.yaml"
    calibration_file.write_text(yaml.safe_dump(resource()))
    result = CliRunner().invoke(
        main, ["plan", "-o", "json", "--calibration", str(calibration_file), str(plan_file)]
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["calibration"]["name"] == "a100-east"
    assert document["calibration"]["runs"] == 3
    calibration_file.write_text(yaml.safe_dump(resource(1, gpuHours=-5)))
    refused = CliRunner().invoke(
        main, ["plan", "--calibration", str(calibration_file), str(plan_file)]
    )
    assert refused.exit_code == 2
    assert f"{calibration_file}: status.records[0].gpuHours" in refused.stderr


def test_the_crd_is_cluster_scoped_with_its_columns() -> None:
    crd = cluster_calibration_crd()
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["ccal"]
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["GPU", "Runs", "Step-Factor", "Interruptions/GPU-h", "Age"]
    record = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"][
        "properties"
    ]["records"]
    assert record["maxItems"] == 1000


def test_the_eta_starts_from_the_clusters_failure_rate(catalog: Catalog) -> None:
    from trainplan.eta.facts import plan_facts

    fit = fit_cluster(runs(4, interruptions=40), catalog.calibration)
    cluster = ClusterEvidence("a100-east", 1, "A100-SXM4-80GB", fit)
    facts = plan_facts(plan(spec(), catalog, cluster=cluster))
    assert facts.interruptions_per_gpu_hour == pytest.approx(fit.interruptions_per_gpu_hour)
    assert fit.interruptions_per_gpu_hour > 3 * catalog.calibration.interruptions_per_gpu_hour


def test_a_gpu_types_default_is_the_first_marked_default_of_that_gpu(catalog: Catalog) -> None:
    def listed(name: str, gpu_type: object, default: object) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"gpuType": gpu_type, "default": default}}

    documents = [
        listed("zeta", "A100-SXM4-80GB", True),
        listed("alpha", "A100-80GB", True),  # an alias of the same GPU
        listed("beta", "A100-SXM4-80GB", False),
        listed("gamma", "H100-SXM5-80GB", True),
        listed("delta", "no-such-gpu", True),
        listed("eps", 7, True),
        listed("eta", "A100-SXM4-80GB", "true"),  # input: only a boolean true counts
        {"metadata": {"name": "broken"}, "spec": "nonsense"},
    ]
    chosen = default_calibration(documents, "A100-SXM4-80GB", catalog)
    assert chosen is not None
    assert chosen["metadata"]["name"] == "alpha"
    assert default_calibration(documents, "H100-SXM5-80GB", catalog) == documents[3]
    assert default_calibration(documents, "A100-SXM4-40GB", catalog) is None
    assert default_calibration(documents, "no-such-gpu", catalog) is None


def whole_runs(count: int, overhead: float, lost_gpu_hours: float = 0.0) -> list[RunRecord]:
    """Runs at the true step factor whose failure-free GPU-hours are `overhead` times the
    plan's (beyond the step factor), each losing `lost_gpu_hours` to interruptions."""
    records = []
    for i, noise in enumerate(NOISE[:count]):
        step_ratio = TRUE_FACTOR * math.exp(noise)
        failure_free = 40_000.0 * step_ratio * overhead * math.exp(-noise / 2)
        records.append(
            RunRecord(
                planned_step_seconds=10.0,
                measured_step_seconds=10.0 * step_ratio,
                gpu_hours=failure_free + lost_gpu_hours,
                interruptions=3 + i % 2,
                planned_gpu_hours=40_000.0,
                lost_gpu_hours=lost_gpu_hours,
            )
        )
    return records


def test_whole_runs_learn_their_overhead_and_narrow_the_gpu_hours_range(
    calibration: Calibration,
) -> None:
    """Failure-free GPU-hours 10% above what the step time explains: the whole-run factor
    finds it, and the GPU-hours range narrows from the catalog's (x 0.77-1.47) to the
    runs' own spread. Time lost to interruptions is left to the failure fit: runs losing
    a third of their GPU-hours to failures teach the same overhead."""
    fit = fit_cluster(whole_runs(10, 1.10), calibration)
    assert fit.whole_run_runs == 10
    assert fit.whole_run_factor == pytest.approx(1.10, rel=0.02)
    assert fit.gpu_hours_ratio_p10 is not None
    assert fit.gpu_hours_ratio_p90 is not None
    assert calibration.gpu_hours_ratio_p10 < fit.gpu_hours_ratio_p10 < 1.0
    assert 1.0 < fit.gpu_hours_ratio_p90 < 1.15 < calibration.gpu_hours_ratio_p90
    lossy = fit_cluster(whole_runs(10, 1.10, lost_gpu_hours=20_000.0), calibration)
    assert lossy.whole_run_factor == pytest.approx(fit.whole_run_factor)
    # Records without planned GPU-hours teach nothing of whole runs.
    unplanned = fit_cluster(runs(10), calibration)
    assert (unplanned.whole_run_runs, unplanned.whole_run_factor) == (0, 1.0)
    assert unplanned.gpu_hours_ratio_p10 is None


def test_a_plan_with_whole_run_evidence_is_longer_and_surer(catalog: Catalog) -> None:
    spec = TrainingPlanSpec.model_validate(
        {
            "model": {"preset": "llama2-7b"},
            "data": {"tokens": 2.0e10},
            "batch": {"globalBatchSize": 512},
            "objective": {"gpus": 64},
        }
    )
    steps_only = ClusterEvidence(
        "s", 1, "A100-SXM4-80GB", fit_cluster(runs(10), catalog.calibration)
    )
    whole = ClusterEvidence(
        "w", 1, "A100-SXM4-80GB", fit_cluster(whole_runs(10, 1.10), catalog.calibration)
    )
    base, learned = plan(spec, catalog, cluster=steps_only), plan(spec, catalog, cluster=whole)
    assert learned.calibration is not None
    assert learned.calibration.whole_run_factor == pytest.approx(1.10, rel=0.02)
    assert learned.gpu_hours / base.gpu_hours == pytest.approx(1.10, rel=0.03)
    assert base.gpu_hours_range is not None
    assert learned.gpu_hours_range is not None
    width = math.log(learned.gpu_hours_range.p90 / learned.gpu_hours_range.p10)
    assert width < 0.5 * math.log(base.gpu_hours_range.p90 / base.gpu_hours_range.p10)
