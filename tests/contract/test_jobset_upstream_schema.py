"""The JobSet statuses the tests feed the operator (`tests/data/jobset_statuses.yaml`) have
the shape of a real JobSet's: each validates against the `status` schema of JobSet
v0.12.0's CRD (vendored in `tests/data/upstream/jobset-v0.12.0-schema.yaml`, from
kubernetes-sigs/jobset, `config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml`), and
a Job's status does not (issue 14: a JobSet was read as a Job). What the operator writes
into the plan from each of them validates against the committed TrainingPlan CRD."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from tests.contract.crd_schema import (
    FORMAT_CHECKER,
    committed_crd,
    errors,
    to_json_schema,
    validator_for,
)
from tests.contract.test_controller_status_against_crd import merge_patch
from tests.jobset_statuses import fixture_names, jobset, jobset_status, upstream_schema
from trainplan.controller.reconcile import child_state, child_status_patch

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _status_validator() -> jsonschema.protocols.Validator:
    schema = to_json_schema(upstream_schema("status"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


@pytest.mark.parametrize("name", fixture_names())
def test_each_fixture_is_a_jobset_status(name: str) -> None:
    assert errors(_status_validator(), jobset_status(name)) == []


def test_a_jobs_status_is_not_a_jobsets() -> None:
    job_status: dict[str, Any] = {
        "active": 2,
        "failed": 1,
        "startTime": "2026-11-22T00:00:00Z",
        "completionTime": "2026-11-22T01:00:00Z",
    }
    assert errors(_status_validator(), job_status) == [
        "(root): Additional properties are not allowed ('active', 'completionTime', 'failed',"
        " 'startTime' were unexpected)"
    ]


def test_the_schema_refuses_a_wrong_count_and_condition() -> None:
    status = jobset_status("restart_in_progress")
    status["replicatedJobsStatus"][0]["ready"] = "1"
    status["conditions"][0]["status"] = "Yes"
    assert errors(_status_validator(), status) == [
        "conditions.0.status: 'Yes' is not one of ['True', 'False', 'Unknown']",
        "replicatedJobsStatus.0.ready: '1' is not of type 'integer'",
    ]


@pytest.mark.parametrize("name", fixture_names())
def test_the_plan_status_written_from_each_fixture_fits_the_crd(name: str) -> None:
    validator = validator_for(committed_crd("trainingplans"), "status")
    current = {"phase": "Launching", "jobName": "train"}
    patch = child_status_patch(child_state(jobset(name)), current, generation=1, now=NOW)
    assert patch is not None
    assert errors(validator, merge_patch(current, patch)) == []
