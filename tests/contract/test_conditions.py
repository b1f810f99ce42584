"""Conditions hold metav1.Condition's bounds: in the models, in the committed CRDs, and in
what the operator writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from tests.contract.crd_schema import committed_crd, errors, validator_for
from trainplan.api import ConditionType, TrainingPlanStatus
from trainplan.api.status import CONDITION_MESSAGE_MAX_LENGTH, MAX_CONDITIONS
from trainplan.controller.conditions import make_condition

NOW = datetime(2026, 11, 25, tzinfo=UTC)


def _condition(**changes: Any) -> dict[str, Any]:
    condition = make_condition(
        ConditionType.PLANNED, "True", "Planned", "fine", now=NOW, generation=1
    )
    condition.update(changes)
    return condition


def test_every_condition_type_and_reason_the_operator_writes_is_valid() -> None:
    validator = validator_for(committed_crd("trainingplans"), "status")
    for condition_type in ConditionType:
        status = {"conditions": [_condition(type=condition_type.value)]}
        assert errors(validator, status) == []
        TrainingPlanStatus.model_validate(status)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("type", "has space"),
        ("type", "x" * 317),
        ("type", "-Leading"),
        ("reason", "1Starts-with-a-digit"),
        ("reason", "has space"),
        ("reason", "R" * 1025),
        ("message", "m" * (CONDITION_MESSAGE_MAX_LENGTH + 1)),
        ("observedGeneration", -1),
    ],
)
def test_the_crd_and_the_model_refuse_what_metav1_condition_refuses(
    field: str, value: object
) -> None:
    status = {"conditions": [_condition(**{field: value})]}
    (problem,) = errors(validator_for(committed_crd("trainingplans"), "status"), status)
    assert problem.startswith(f"conditions.0.{field}: ")
    with pytest.raises(ValidationError):
        TrainingPlanStatus.model_validate(status)


def test_the_list_is_bounded() -> None:
    many = [_condition(type=f"Type{index}") for index in range(MAX_CONDITIONS + 1)]
    assert errors(validator_for(committed_crd("trainingplans"), "status"), {"conditions": many})


def test_a_long_message_is_cut_to_fit() -> None:
    condition = make_condition(
        ConditionType.PLANNED, "False", "Invalid", "x" * 100_000, now=NOW, generation=None
    )
    assert len(condition["message"]) == CONDITION_MESSAGE_MAX_LENGTH
    assert condition["message"].endswith("\u2026")
    assert make_condition("A", "True", "B", "short", now=NOW, generation=None)["message"] == (
        "short"
    )
