"""The plan, the status and the GPUBudget: JSON keys, round trips, time zones."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from trainplan.api import (
    API_VERSION,
    APP_COMPONENT_LABEL,
    APP_INSTANCE_LABEL,
    APP_MANAGED_BY_LABEL,
    APP_NAME_LABEL,
    APP_PART_OF_LABEL,
    GPU_BUDGET_KIND,
    GPU_BUDGET_PLURAL,
    GROUP,
    PLAN_LABEL,
    TRAINING_PLAN_KIND,
    TRAINING_PLAN_PLURAL,
    TRAINING_PLAN_SHORT_NAMES,
    VERSION,
    Alternative,
    ApiModel,
    CompletionRange,
    Condition,
    ConditionType,
    FailureSummary,
    GPUBudget,
    GPUBudgetSpec,
    GPUBudgetStatus,
    GPUHours,
    MemoryBreakdown,
    Phase,
    Plan,
    PlanLayout,
    PlanReliability,
    Progress,
    StepBreakdown,
    TrainingPlan,
    TrainingPlanStatus,
    format_validation_errors,
)

# The keys of DESIGN.md "The plan", and the ones added since.
DESIGN_PLAN_KEYS = {
    "gpuType", "gpus", "nodes", "gpusPerNode", "layout", "memory", "flopsPerStep",
    "stepSeconds", "stepBreakdown", "tokensPerStep", "totalSteps", "computeSeconds",
    "overheadSeconds", "durationSeconds", "gpuHours", "mfu", "tokensPerSecondPerGPU",
    "reliability", "ruleOfThumbGPUs", "alternatives", "explanation",
}  # fmt: skip
DESIGN_LAYOUT_KEYS = {
    "tensor", "pipeline", "data", "zeroStage", "activationCheckpointing", "microBatchSize",
    "gradientAccumulationSteps", "globalBatchSize",
}  # fmt: skip
DESIGN_MEMORY_KEYS = {
    "capacityBytes", "totalBytes", "weightsBytes", "gradientsBytes", "optimizerBytes",
    "activationsBytes", "overheadBytes",
}  # fmt: skip
DESIGN_STEP_KEYS = {
    "computeSeconds", "tensorCommSeconds", "dataCommSeconds", "pipelineBubbleSeconds",
    "optimizerSeconds",
}  # fmt: skip
DESIGN_RELIABILITY_KEYS = {"expectedInterruptions", "checkpointIntervalSteps", "restartSeconds"}
ADDED_PLAN_KEYS = {
    "parameters", "stepSecondsRange", "durationSecondsRange", "gpuHoursRange", "calibration",
    "trainableParameters", "activeParameters",
}  # fmt: skip
"""Optional: plans stored before it was added lack it."""
ADDED_LAYOUT_KEYS = {
    "virtualPipelineStages", "sequenceParallel", "context", "expert", "expertTensor",
}  # fmt: skip
ADDED_MEMORY_KEYS = {"logitsBytes"}
ADDED_STEP_KEYS = {"pipelineCommSeconds", "contextCommSeconds", "expertCommSeconds"}
ADDED_RELIABILITY_KEYS = {
    "checkpointSeconds", "checkpointBytes", "meanSecondsBetweenInterruptions", "lostWorkSeconds",
}  # fmt: skip
ALTERNATIVE_KEYS = {
    "gpus", "nodes", "layout", "stepSeconds", "durationSeconds", "gpuHours", "mfu",
    "memoryTotalBytes", "note",
}  # fmt: skip

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def layout(**changes: Any) -> dict[str, Any]:
    return {
        "tensor": 8,
        "pipeline": 2,
        "data": 128,
        "zeroStage": 1,
        "activationCheckpointing": "selective",
        "microBatchSize": 1,
        "gradientAccumulationSteps": 8,
        "globalBatchSize": 1024,
        "virtualPipelineStages": 1,
        "sequenceParallel": True,
        "context": 1,
        "expert": 1,
        "expertTensor": 1,
    } | changes


def plan_document() -> dict[str, Any]:
    return {
        "gpuType": "A100-SXM4-80GB",
        "gpus": 2048,
        "nodes": 256,
        "gpusPerNode": 8,
        "layout": layout(),
        "memory": {
            "capacityBytes": 85_899_345_920,
            "totalBytes": 60_000_000_000,
            "weightsBytes": 10_000_000_000,
            "gradientsBytes": 10_000_000_000,
            "optimizerBytes": 10_000_000_000,
            "activationsBytes": 20_000_000_000,
            "logitsBytes": 4_000_000_000,
            "overheadBytes": 6_000_000_000,
        },
        "flopsPerStep": 1.7e17,
        "stepSeconds": 2.5,
        "stepBreakdown": {
            "computeSeconds": 2.0,
            "tensorCommSeconds": 0.2,
            "contextCommSeconds": 0.0,
            "expertCommSeconds": 0.0,
            "dataCommSeconds": 0.1,
            "pipelineBubbleSeconds": 0.1,
            "pipelineCommSeconds": 0.05,
            "optimizerSeconds": 0.05,
        },
        "tokensPerStep": 4_194_304,
        "totalSteps": 476_837,
        "computeSeconds": 1_192_092.5,
        "overheadSeconds": 50_000.0,
        "durationSeconds": 1_242_092.5,
        "gpuHours": 706_612.4,
        "mfu": 0.45,
        "tokensPerSecondPerGPU": 819.2,
        "reliability": {
            "expectedInterruptions": 12.5,
            "checkpointIntervalSteps": 400,
            "restartSeconds": 600.0,
            "checkpointSeconds": 60.0,
            "checkpointBytes": 9.4e10,
            "meanSecondsBetweenInterruptions": 99_000.0,
            "lostWorkSeconds": 6_000.0,
        },
        "ruleOfThumbGPUs": 2000,
        "alternatives": [
            {
                "gpus": 1024,
                "nodes": 128,
                "layout": layout(data=64, gradientAccumulationSteps=16),
                "stepSeconds": 4.9,
                "durationSeconds": 2_400_000.0,
                "gpuHours": 682_666.7,
                "mfu": 0.46,
                "memoryTotalBytes": 60_000_000_000,
                "note": "misses the deadline by 13d 4h",
            }
        ],
        "explanation": ["tensor 8: the heads split across one node's NVLink"],
    }


def condition(**changes: Any) -> dict[str, Any]:
    return {
        "type": "Planned",
        "status": "True",
        "reason": "Planned",
        "message": "2048 GPUs",
        "lastTransitionTime": "2024-05-01T12:00:00Z",
        "observedGeneration": 3,
    } | changes


def status_document() -> dict[str, Any]:
    return {
        "phase": "Running",
        "observedGeneration": 3,
        "conditions": [condition(), condition(type="Progressing", reason="Training")],
        "plan": plan_document(),
        "jobName": "llama-train",
        "startTime": "2024-05-01T12:00:00Z",
        "completionTime": "2024-05-20T12:00:00Z",
        "progress": {
            "step": 1000,
            "totalSteps": 476_837,
            "tokens": 4.194304e9,
            "measuredStepSeconds": 2.6,
            "measuredMFU": 0.43,
            "lastStepTime": "2024-05-01T13:00:00Z",
        },
        "progressPercentage": 0,
        "estimatedRemainingSeconds": 1_300_000,
        "estimatedCompletionTime": "2024-05-16T09:00:00Z",
        "estimatedCompletionRange": {
            "earliest": "2024-05-15T09:00:00Z",
            "latest": "2024-05-17T09:00:00Z",
        },
        "failures": {
            "count": 1,
            "lastReason": "NodeNotReady",
            "lastTime": "2024-05-01T12:30:00Z",
            "lostSeconds": 900.0,
        },
        "gpuHours": {"used": 2048.0, "projected": 740_000.0},
        "lastUpdatedTime": "2024-05-01T13:00:05Z",
    }


def budget_document() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUBudget",
        "metadata": {"name": "team-a", "namespace": "team-a"},
        "spec": {
            "gpuHours": 100_000.0,
            "period": "30d",
            "maxGPUs": 4096,
            "enforcement": "Warn",
            "chargeConfidence": 0.9,
        },
        "status": {
            "usedGPUHours": 2048.0,
            "committedGPUHours": 50_000.0,
            "remainingGPUHours": -1.5,
            "activePlans": ["llama"],
            "gpusInUse": 2048,
            "ledger": [
                {
                    "name": "llama",
                    "uid": "uid-1",
                    "gpus": 2048,
                    "projectedGPUHours": 52_048.0,
                    "admittedTime": "2026-11-01T00:00:00Z",
                    "intervals": [{"start": "2026-11-01T00:10:00Z"}],
                    "finished": False,
                }
            ],
            "conditions": [condition(type="BudgetExceeded", reason="OverCommitted")],
        },
    }


def test_plan_json_keys_are_designs_plus_the_added_ones() -> None:
    document = Plan.model_validate(plan_document()).to_document()
    assert set(document) == DESIGN_PLAN_KEYS
    assert set(document["layout"]) == DESIGN_LAYOUT_KEYS | ADDED_LAYOUT_KEYS
    assert set(document["memory"]) == DESIGN_MEMORY_KEYS | ADDED_MEMORY_KEYS
    assert set(document["stepBreakdown"]) == DESIGN_STEP_KEYS | ADDED_STEP_KEYS
    assert set(document["reliability"]) == DESIGN_RELIABILITY_KEYS | ADDED_RELIABILITY_KEYS
    assert set(document["alternatives"][0]) == ALTERNATIVE_KEYS


def test_plan_serialised_field_names_match_json_schema() -> None:
    schema = Plan.model_json_schema(by_alias=True)
    assert set(schema["properties"]) == DESIGN_PLAN_KEYS | ADDED_PLAN_KEYS
    assert set(schema["required"]) == DESIGN_PLAN_KEYS - {"alternatives", "explanation"}


def test_a_plan_stored_without_its_parameter_count_still_reads() -> None:
    document = plan_document()
    assert "parameters" not in document
    assert Plan.model_validate(document).parameters is None
    assert Plan.model_validate({**document, "parameters": 6_738_415_616}).parameters == (
        6_738_415_616
    )


def test_plan_round_trips() -> None:
    plan = Plan.model_validate(plan_document())
    assert plan.to_document() == plan_document()
    assert Plan.model_validate(plan.model_dump(by_alias=True)) == plan
    assert plan.tokens_per_second_per_gpu == 819.2
    assert plan.rule_of_thumb_gpus == 2000
    assert plan.layout.gpus == plan.gpus


def test_plan_layout_defaults() -> None:
    document = layout()
    del document["virtualPipelineStages"], document["sequenceParallel"]
    parsed = PlanLayout.model_validate(document)
    assert parsed.virtual_pipeline_stages == 1
    assert parsed.sequence_parallel is False


def test_plan_without_failures_leaves_out_the_mean_time_between_them() -> None:
    reliability = plan_document()["reliability"] | {"meanSecondsBetweenInterruptions": None}
    assert "meanSecondsBetweenInterruptions" not in (
        PlanReliability.model_validate(reliability).to_document()
    )


def test_plan_rejects_a_batch_split_that_does_not_multiply_out() -> None:
    with pytest.raises(ValidationError) as caught:
        PlanLayout.model_validate(layout(gradientAccumulationSteps=4))
    [line] = format_validation_errors(caught.value)
    assert "gradientAccumulationSteps" in line
    assert "globalBatchSize" in line


@pytest.mark.parametrize("model", [Plan, Alternative])
def test_plan_rejects_gpus_other_than_the_layouts(model: type[ApiModel]) -> None:
    document = plan_document() if model is Plan else plan_document()["alternatives"][0]
    with pytest.raises(ValidationError, match="must equal gpus"):
        model.model_validate(document | {"gpus": 8})


def test_plan_rejects_non_finite_numbers() -> None:
    with pytest.raises(ValidationError):
        Plan.model_validate(plan_document() | {"stepSeconds": float("inf")})


ROUND_TRIPS: list[tuple[type[ApiModel], dict[str, Any]]] = [
    (PlanLayout, layout()),
    (MemoryBreakdown, plan_document()["memory"]),
    (StepBreakdown, plan_document()["stepBreakdown"]),
    (PlanReliability, plan_document()["reliability"]),
    (Alternative, plan_document()["alternatives"][0]),
    (Plan, plan_document()),
    (Condition, condition()),
    (Progress, status_document()["progress"]),
    (CompletionRange, status_document()["estimatedCompletionRange"]),
    (FailureSummary, status_document()["failures"]),
    (GPUHours, status_document()["gpuHours"]),
    (TrainingPlanStatus, status_document()),
    (GPUBudgetSpec, budget_document()["spec"]),
    (GPUBudgetStatus, budget_document()["status"]),
    (GPUBudget, budget_document()),
]


@pytest.mark.parametrize(
    ("model", "document"), ROUND_TRIPS, ids=[model.__name__ for model, _ in ROUND_TRIPS]
)
def test_round_trip_in_camel_case(model: type[ApiModel], document: dict[str, Any]) -> None:
    parsed = model.model_validate(document)
    assert parsed.to_document() == document
    assert model.model_validate(parsed.model_dump(by_alias=True)) == parsed
    assert model.model_validate(parsed.to_document()) == parsed


@pytest.mark.parametrize(
    ("model", "document"), ROUND_TRIPS, ids=[model.__name__ for model, _ in ROUND_TRIPS]
)
def test_unknown_fields_are_rejected(model: type[ApiModel], document: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="bogusField"):
        model.model_validate(document | {"bogusField": 1})


def test_training_plan_with_status_round_trips() -> None:
    document = {
        "apiVersion": API_VERSION,
        "kind": "TrainingPlan",
        "metadata": {"name": "llama", "namespace": "team-a", "generation": 3},
        "spec": {
            "model": {"preset": "llama2-7b"},
            "data": {"tokens": 2e12},
            "batch": {"globalBatchSize": 1024},
        },
        "status": status_document(),
    }
    resource = TrainingPlan.model_validate(document)
    assert resource.status is not None
    assert resource.status.phase is Phase.RUNNING
    assert TrainingPlan.model_validate(resource.to_document()) == resource
    assert resource.to_document()["status"] == status_document()


@pytest.mark.parametrize(
    ("model", "document", "field"),
    [
        (Condition, condition(), "lastTransitionTime"),
        (Progress, {"step": 1}, "lastStepTime"),
        (CompletionRange, {"earliest": "2024-05-01T00:00:00Z"}, "latest"),
        (FailureSummary, {}, "lastTime"),
        (TrainingPlanStatus, {}, "startTime"),
        (TrainingPlanStatus, {}, "completionTime"),
        (TrainingPlanStatus, {}, "estimatedCompletionTime"),
        (TrainingPlanStatus, {}, "lastUpdatedTime"),
    ],
)
def test_naive_datetimes_are_rejected(
    model: type[ApiModel], document: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(document | {field: "2024-05-01T12:00:00"})
    [error] = caught.value.errors()
    assert error["loc"] == (field,)
    assert error["type"] == "timezone_aware"
    with pytest.raises(ValidationError):
        model.model_validate(document | {field: datetime(2024, 5, 1, 12)})


def test_conditions_accept_any_time_zone() -> None:
    plus_two = timezone(timedelta(hours=2))
    parsed = Condition.model_validate(condition(lastTransitionTime="2024-05-01T14:00:00+02:00"))
    assert parsed.last_transition_time == NOW
    assert Condition(
        type=ConditionType.STALLED, status="False", reason="Steady", last_transition_time=NOW
    ).to_document() == {
        "type": "Stalled",
        "status": "False",
        "reason": "Steady",
        "message": "",
        "lastTransitionTime": "2024-05-01T12:00:00Z",
    }
    assert (
        Condition(
            type="Planned",
            status="True",
            reason="Planned",
            last_transition_time=NOW.astimezone(plus_two),
        ).last_transition_time
        == NOW
    )


@pytest.mark.parametrize("value", ["true", "Yes", ""])
def test_condition_status_is_true_false_or_unknown(value: str) -> None:
    with pytest.raises(ValidationError, match="status"):
        Condition.model_validate(condition(status=value))


def test_phases_and_condition_types() -> None:
    assert [phase.value for phase in Phase] == [
        "Pending",
        "Planned",
        "Rejected",
        "Launching",
        "Running",
        "Restarting",
        "Succeeded",
        "Failed",
        "Suspended",
    ]
    assert {kind.value for kind in ConditionType} == {
        "Planned",
        "Launched",
        "Progressing",
        "DeadlineAtRisk",
        "Stalled",
        "BudgetExceeded",
        "MetricsAvailable",
        "Complete",
        "Failed",
        "Suspended",
        "Admitted",
    }
    with pytest.raises(ValidationError):
        TrainingPlanStatus.model_validate({"phase": "Exploding"})


def test_status_defaults_and_condition_lookup() -> None:
    empty = TrainingPlanStatus()
    assert empty.conditions == ()
    assert empty.to_document() == {"conditions": []}
    status = TrainingPlanStatus.model_validate(status_document())
    found = status.condition(ConditionType.PROGRESSING)
    assert found is not None
    assert found.reason == "Training"
    assert status.condition(ConditionType.STALLED) is None


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"progressPercentage": 101}, "progressPercentage"),
        ({"progressPercentage": -1}, "progressPercentage"),
        ({"estimatedRemainingSeconds": -5}, "estimatedRemainingSeconds"),
    ],
)
def test_status_bounds(document: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TrainingPlanStatus.model_validate(document)
    assert format_validation_errors(caught.value)[0].startswith(f"{field}: ")


def test_completion_range_is_ordered() -> None:
    with pytest.raises(ValidationError, match="earliest"):
        CompletionRange(earliest=NOW + timedelta(hours=1), latest=NOW)


def test_budget_names_and_rules() -> None:
    spec = GPUBudgetSpec.model_validate({"gpuHours": 10})
    assert spec.period == "30d"
    assert spec.enforcement == "Reject"
    assert spec.charge_confidence == 0.5
    assert spec.to_document() == {
        "gpuHours": 10.0,
        "period": "30d",
        "enforcement": "Reject",
        "chargeConfidence": 0.5,
    }
    for bad in (
        {"gpuHours": 0},
        {"gpuHours": 1, "chargeConfidence": 0.49},
        {"gpuHours": 1, "chargeConfidence": 0.96},
        {"gpuHours": 1, "period": "1 month"},
        {"gpuHours": 1, "maxGPUs": 0},
    ):
        with pytest.raises(ValidationError):
            GPUBudgetSpec.model_validate(bad)
    with pytest.raises(ValidationError, match="enforcement"):
        GPUBudgetSpec.model_validate({"gpuHours": 1, "enforcement": "Ignore"})


def test_constants() -> None:
    assert (GROUP, VERSION) == ("trainplan.dev", "v1alpha1")
    assert f"{GROUP}/{VERSION}" == API_VERSION
    assert (TRAINING_PLAN_KIND, TRAINING_PLAN_PLURAL) == ("TrainingPlan", "trainingplans")
    assert TRAINING_PLAN_SHORT_NAMES == ("tp",)
    assert (GPU_BUDGET_KIND, GPU_BUDGET_PLURAL) == ("GPUBudget", "gpubudgets")
    assert PLAN_LABEL == "trainplan.dev/plan"
    assert [
        f"app.kubernetes.io/{name}"
        for name in ("name", "instance", "component", "part-of", "managed-by")
    ] == [
        APP_NAME_LABEL,
        APP_INSTANCE_LABEL,
        APP_COMPONENT_LABEL,
        APP_PART_OF_LABEL,
        APP_MANAGED_BY_LABEL,
    ]
    assert TrainingPlan.model_fields["api_version"].default == API_VERSION
    assert GPUBudget.model_fields["kind"].default == GPU_BUDGET_KIND
