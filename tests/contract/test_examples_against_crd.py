"""Documents users write and statuses the operator writes validate against the committed CRDs;
malformed ones are rejected by the schema as well as by the models."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from tests.contract.crd_schema import REPO_ROOT, committed_crd, errors, validator_for
from trainplan.api import (
    CompletionRange,
    Condition,
    ConditionType,
    FailureSummary,
    GPUBudget,
    GPUBudgetStatus,
    GPUHours,
    GPUUsage,
    Phase,
    PlanUsage,
    Progress,
    TrainingPlan,
    TrainingPlanSpec,
    TrainingPlanStatus,
    UsageInterval,
    parse_duration_seconds,
)
from trainplan.planner import load_catalog, plan
from trainplan.planner.cluster_fit import ClusterEvidence, RunRecord, fit_cluster

EXAMPLES_DIR: Final = REPO_ROOT / "deploy" / "examples"
EXAMPLES: Final = sorted(EXAMPLES_DIR.rglob("*.yaml"))
BUDGET_EXAMPLES: Final = sorted((REPO_ROOT / "deploy" / "budgets").glob("*.yaml"))

NOW: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def spec_validator() -> jsonschema.protocols.Validator:
    return validator_for(committed_crd("trainingplans"), "spec")


@pytest.fixture(scope="module")
def status_validator() -> jsonschema.protocols.Validator:
    return validator_for(committed_crd("trainingplans"), "status")


@pytest.fixture(scope="module")
def tiny_spec() -> dict[str, Any]:
    spec = load(REPO_ROOT / "deploy" / "examples" / "tiny-local.yaml")["spec"]
    assert isinstance(spec, dict)
    return spec


def document_of(model: BaseModel) -> dict[str, Any]:
    """What the operator writes: JSON mode, camelCase, unset optionals left out."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- specs --------------------------------------------------------------------------------


def test_there_are_examples_of_both_kinds() -> None:
    assert len(EXAMPLES) >= 6
    assert BUDGET_EXAMPLES


@pytest.mark.parametrize(
    "path", EXAMPLES, ids=[path.relative_to(EXAMPLES_DIR).as_posix() for path in EXAMPLES]
)
def test_example_spec_validates_against_the_crd(
    path: Path, spec_validator: jsonschema.protocols.Validator
) -> None:
    document = load(path)
    assert document["kind"] == "TrainingPlan"
    assert errors(spec_validator, document["spec"]) == []
    # What the operator reads back after defaulting validates too.
    resource = TrainingPlan.model_validate(document)
    assert errors(spec_validator, document_of(resource.spec)) == []


def _set(document: dict[str, Any], dotted: str, value: object) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    *parents, leaf = dotted.split(".")
    node = changed
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    return changed


MALFORMED: Final = [
    ("unknown top-level field", "replicas", 4, "replicas"),
    ("unknown nested field", "model.layerz", 2, "layerz"),
    ("misspelt camelCase", "batch.global_batch_size", 16, "global_batch_size"),
    ("wrong type: string for integer", "batch.globalBatchSize", "sixteen", "batch"),
    ("wrong type: object for string", "hardware.gpuType", {"name": "A100"}, "hardware"),
    ("negative count", "data.samples", -5, "data"),
    ("zero for a positive number", "data.epochs", 0, "data"),
    ("negative seconds", "reliability.checkpointSeconds", -1, "reliability"),
    ("above a maximum", "parallelism.zeroStage", 4, "parallelism"),
    ("port out of range", "job.metricsPort", 70000, "job"),
    ("bad enum", "training.precision", "fp12", "training"),
    ("bad launcher", "job.launcher", "Pod", "job"),
    ("duration without a unit", "objective.deadline", "14", "objective"),
    ("duration in months", "objective.deadline", "1mo", "objective"),
    ("empty image", "job.image", "", "job"),
    ("quantity as a boolean", "job.resources", {"cpu": True}, "job"),
    ("env not a list", "job.env", {"NAME": "x"}, "job"),
    ("too many tolerations", "job.tolerations", [{"key": "k"}] * 65, "job"),
]


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [(field, value, where) for _, field, value, where in MALFORMED],
    ids=[name for name, *_ in MALFORMED],
)
def test_malformed_spec_is_rejected_by_the_schema_and_the_model(
    field: str,
    value: object,
    where: str,
    tiny_spec: dict[str, Any],
    spec_validator: jsonschema.protocols.Validator,
) -> None:
    malformed = _set(tiny_spec, field, value)
    problems = errors(spec_validator, malformed)
    assert problems, f"the CRD schema accepts {field}={value!r}"
    assert any(where in problem for problem in problems), problems
    with pytest.raises(ValidationError):
        TrainingPlanSpec.model_validate(malformed)


ACCEPTED_VARIANTS: Final = [
    ("integer quantity", "job.resources", {"cpu": 32, "memory": "256Gi"}),
    ("explicit null optional", "batch.microBatchSize", None),
    (
        "explicit shape",
        "model",
        {
            "layers": 2,
            "hiddenSize": 64,
            "attentionHeads": 4,
            "vocabSize": 256,
            "sequenceLength": 128,
        },
    ),
    ("ISO deadline", "objective", {"deadline": "P1DT12H"}),
    (
        "tolerations",
        "job.tolerations",
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    ),
    ("env", "job.env", [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "EMPTY"}]),
    ("node selector", "job.nodeSelector", {"nvidia.com/gpu.product": "A100-SXM4-80GB"}),
]


@pytest.mark.parametrize(
    ("field", "value"),
    [(field, value) for _, field, value in ACCEPTED_VARIANTS],
    ids=[name for name, *_ in ACCEPTED_VARIANTS],
)
def test_valid_spec_variants_are_accepted_by_the_schema_and_the_model(
    field: str,
    value: object,
    tiny_spec: dict[str, Any],
    spec_validator: jsonschema.protocols.Validator,
) -> None:
    variant = _set(tiny_spec, field, value)
    if field == "objective":
        variant["objective"] = value
    assert errors(spec_validator, variant) == []
    TrainingPlanSpec.model_validate(variant)


DURATIONS_ACCEPTED: Final = [
    "14d",
    "36h",
    "1d12h",
    "1.5h",
    "13d 4h",
    " 14d ",
    "P14D",
    "PT36H",
    "P1DT12H",
    "P2W",
    "PT1.5H",
    "p1dt12h",
]
DURATIONS_REJECTED: Final = [
    "",
    "14",
    "5x",
    "3D",
    "1y",
    "2mo",
    "-1d",
    "d",
    "P1Y",
    "P1M",
    "P1H",
    "14 days",
]


def test_duration_pattern_admits_every_duration_the_model_accepts(
    tiny_spec: dict[str, Any], spec_validator: jsonschema.protocols.Validator
) -> None:
    for text in DURATIONS_ACCEPTED:
        assert parse_duration_seconds(text) > 0
        document = {**tiny_spec, "objective": {"deadline": text}}
        assert errors(spec_validator, document) == [], text


def test_duration_pattern_rejects_malformed_durations(
    tiny_spec: dict[str, Any], spec_validator: jsonschema.protocols.Validator
) -> None:
    for text in DURATIONS_REJECTED:
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration_seconds(text)
        document = {**tiny_spec, "objective": {"deadline": text}}
        assert errors(spec_validator, document), text


# --- statuses -----------------------------------------------------------------------------


def _condition(kind: ConditionType, status: str, reason: str, minutes: int) -> Condition:
    return Condition(
        type=kind,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        message=f"{kind} is {status}",
        last_transition_time=NOW + timedelta(minutes=minutes),
        observed_generation=2,
    )


def full_status() -> TrainingPlanStatus:
    """A status with every field set, the plan planned for a real example."""
    resource = TrainingPlan.model_validate(
        load(REPO_ROOT / "deploy" / "examples" / "llama2-70b-pinned.yaml")
    )
    catalog = load_catalog()
    record = RunRecord(
        planned_step_seconds=10.0, measured_step_seconds=11.0, gpu_hours=1e5, interruptions=4
    )
    cluster = ClusterEvidence(
        "a100-east", 3, "A100-SXM4-80GB", fit_cluster([record], catalog.calibration)
    )
    chosen = plan(resource.spec, catalog, cluster=cluster)
    layout = chosen.layout
    return TrainingPlanStatus(
        phase=Phase.RUNNING,
        observed_generation=2,
        conditions=tuple(
            _condition(kind, "True" if index % 2 == 0 else "False", "Observed", index)
            for index, kind in enumerate(ConditionType)
        ),
        # A LoRA plan's and an MoE plan's fields too, on this dense pre-training plan: the
        # schema, not the numbers.
        plan=chosen.model_copy(
            update={"trainable_parameters": 262_144_000, "active_parameters": 1_300_000_000}
        ),
        gpus=chosen.gpus,
        layout=f"TP{layout.tensor} PP{layout.pipeline} DP{layout.data}",
        job_name="llama2-70b-pinned",
        start_time=NOW,
        completion_time=NOW + timedelta(days=20),
        progress=Progress(
            step=1200,
            total_steps=chosen.total_steps,
            tokens=1200.0 * chosen.tokens_per_step,
            measured_step_seconds=chosen.step_seconds * 1.05,
            measured_mfu=chosen.mfu * 0.95,
            measured_checkpoint_seconds=48.0,
            last_step_time=NOW + timedelta(hours=3),
        ),
        progress_percentage=7,
        estimated_remaining_seconds=1_500_000,
        estimated_completion_time=NOW + timedelta(days=18),
        estimated_completion_range=CompletionRange(
            earliest=NOW + timedelta(days=17), latest=NOW + timedelta(days=19)
        ),
        failures=FailureSummary(
            count=2, last_reason="NodeLost", last_time=NOW + timedelta(hours=2), lost_seconds=900.5
        ),
        gpu_hours=GPUHours(used=6144.0, projected=chosen.gpu_hours),
        gpu_usage=GPUUsage(
            reporting_gpus=chosen.gpus,
            utilization_ratio=0.91,
            memory_used_bytes=71.5e9,
            memory_total_bytes=80e9,
            power_watts=chosen.gpus * 390.0,
        ),
        last_updated_time=NOW + timedelta(hours=3, seconds=15),
    )


def _unset_fields(model: BaseModel, path: str = "") -> list[str]:
    """Fields left None or empty anywhere in `model` (lists of models checked item by item)."""
    unset = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        if value is None or value == ():
            unset.append(f"{path}{name}")
        elif isinstance(value, BaseModel):
            unset += _unset_fields(value, f"{path}{name}.")
        elif isinstance(value, tuple) and isinstance(value[0], BaseModel):
            for index, item in enumerate(value):
                unset += _unset_fields(item, f"{path}{name}[{index}].")
    return unset


def test_full_status_sets_every_field() -> None:
    status = full_status()
    assert _unset_fields(status) == []
    assert status.plan is not None
    assert status.plan.alternatives
    assert status.plan.explanation


def test_full_status_validates_against_the_crd(
    status_validator: jsonschema.protocols.Validator,
) -> None:
    document = document_of(full_status())
    assert set(document) == {
        field.alias or name for name, field in TrainingPlanStatus.model_fields.items()
    }
    assert errors(status_validator, document) == []
    assert TrainingPlanStatus.model_validate(document) == full_status()


def test_minimal_rejected_status_validates(
    status_validator: jsonschema.protocols.Validator,
) -> None:
    status = TrainingPlanStatus(
        phase=Phase.REJECTED,
        conditions=(
            Condition(
                type=ConditionType.PLANNED,
                status="False",
                reason="InvalidSpec",
                message="data: give exactly one of tokens or samples",
                last_transition_time=NOW,
            ),
        ),
    )
    document = document_of(status)
    assert set(document) == {"phase", "conditions"}
    assert errors(status_validator, document) == []


MALFORMED_STATUS: Final = [
    ("unknown phase", {"phase": "Exploded"}),
    ("percentage above 100", {"progressPercentage": 101}),
    ("negative remaining seconds", {"estimatedRemainingSeconds": -1}),
    ("naive time", {"estimatedCompletionTime": "2024-05-01T12:00:00"}),
    ("not a time", {"startTime": "tomorrow"}),
    (
        "condition without reason",
        {
            "conditions": [
                {"type": "Planned", "status": "True", "lastTransitionTime": "2024-05-01T12:00:00Z"}
            ]
        },
    ),
    (
        "condition status not True/False/Unknown",
        {
            "conditions": [
                {
                    "type": "Planned",
                    "status": "Yes",
                    "reason": "Planned",
                    "lastTransitionTime": "2024-05-01T12:00:00Z",
                }
            ]
        },
    ),
    ("plan missing its layout", {"plan": {"gpuType": "A100-SXM4-80GB", "gpus": 8}}),
    ("unknown status field", {"etaSeconds": 5}),
]


@pytest.mark.parametrize(
    "document",
    [document for _, document in MALFORMED_STATUS],
    ids=[name for name, _ in MALFORMED_STATUS],
)
def test_malformed_status_is_rejected(
    document: dict[str, Any], status_validator: jsonschema.protocols.Validator
) -> None:
    assert errors(status_validator, document)
    with pytest.raises(ValidationError):
        TrainingPlanStatus.model_validate(document)


# --- GPUBudget ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", BUDGET_EXAMPLES, ids=[path.stem for path in BUDGET_EXAMPLES])
def test_gpu_budget_example_validates(path: Path) -> None:
    document = load(path)
    crd = committed_crd("gpubudgets")
    assert errors(validator_for(crd, "spec"), document["spec"]) == []
    budget = GPUBudget.model_validate(document)
    assert budget.spec.gpu_hours > 0
    assert errors(validator_for(crd, "spec"), document_of(budget.spec)) == []


def test_gpu_budget_status_validates_and_bad_budgets_are_rejected() -> None:
    crd = committed_crd("gpubudgets")
    status = GPUBudgetStatus(
        used_gpu_hours=30_000.0,
        committed_gpu_hours=25_000.0,
        remaining_gpu_hours=-5_000.0,
        active_plans=("llama2-7b-deadline", "tiny-local"),
        gpus_in_use=64,
        ledger=(
            PlanUsage(
                name="llama2-7b-deadline",
                uid="uid-1",
                gpus=64,
                projected_gpu_hours=40_000.0,
                admitted_gpu_hours=36_000.0,
                charged_confidence=0.9,
                admitted_time=NOW,
                intervals=(
                    UsageInterval(start=NOW, end=NOW + timedelta(hours=2)),
                    UsageInterval(start=NOW + timedelta(hours=3), end=NOW + timedelta(hours=9)),
                ),
                finished=True,
            ),
        ),
        last_updated_time=NOW + timedelta(hours=10),
        observed_generation=1,
        conditions=(_condition(ConditionType.BUDGET_EXCEEDED, "True", "OverCommitted", 0),),
    )
    assert _unset_fields(status) == []
    assert errors(validator_for(crd, "status"), document_of(status)) == []
    spec_validator = validator_for(crd, "spec")
    assert errors(spec_validator, {"gpuHours": 0})
    assert errors(spec_validator, {"gpuHours": 10, "enforcement": "Ignore"})
    assert errors(spec_validator, {"gpuHours": 10, "period": "1mo"})
    assert errors(spec_validator, {"gpuHours": 10, "chargeConfidence": 0.99})
    assert errors(spec_validator, {"gpuHours": 10, "chargeConfidence": 0.4})
    assert errors(spec_validator, {"period": "30d"})
