"""Where an ETA revision reads the plan's Job from (controller/revision.py): Kopf's index
of the workload's kind when the operator passes one, the API server otherwise; a Job the
index does not hold is a missing Job, as the API server's 404 was."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from trainplan.api import TrainingPlanSpec
from trainplan.controller.config import OperatorConfig
from trainplan.controller.revision import PlanTracker, WorkloadIndex, revise_plan
from trainplan.planner import Catalog, plan

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)
SPEC = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
}
JOB_KIND = ("batch/v1", "Job")


class RecordingApi:
    """The two reads a revision makes, recorded; the Job it is asked for has failed."""

    def __init__(self) -> None:
        self.gets: list[tuple[str, str, str, str]] = []

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        self.gets.append((api_version, kind, namespace, name))
        return _job(failed=2)

    async def list_objects(self, *_: Any) -> list[dict[str, Any]]:
        return []


def _job(failed: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "llama", "namespace": "research"},
        "status": {"active": 1, "failed": failed},
    }


def _plan_body(catalog: Catalog) -> dict[str, Any]:
    planned = plan(TrainingPlanSpec.model_validate(SPEC), catalog)
    return {
        "metadata": {"name": "llama", "namespace": "research", "generation": 1},
        "spec": SPEC,
        "status": {
            "phase": "Running",
            "plan": planned.to_document(),
            "jobName": "llama",
            "observedGeneration": 1,
            "startTime": "2026-11-27T11:00:00Z",
        },
    }


async def _revise(
    catalog: Catalog, api: RecordingApi, workloads: dict[tuple[str, str], WorkloadIndex] | None
) -> PlanTracker:
    tracker = PlanTracker()
    async with aiohttp.ClientSession() as session:
        await revise_plan(
            _plan_body(catalog),
            api=api,  # type: ignore[arg-type]
            session=session,
            config=OperatorConfig(),
            tracker=tracker,
            now=NOW,
            workloads=workloads,
        )
    return tracker


@pytest.mark.asyncio
async def test_the_job_comes_from_the_index_when_one_is_passed(catalog: Catalog) -> None:
    api = RecordingApi()
    index = {("research", "llama"): [_job(failed=3)]}
    tracker = await _revise(catalog, api, {JOB_KIND: index})
    assert api.gets == []
    assert tracker.failures.count == 3


@pytest.mark.asyncio
async def test_the_api_server_answers_for_a_kind_without_an_index(catalog: Catalog) -> None:
    api = RecordingApi()
    jobsets: WorkloadIndex = {("research", "llama"): [_job(failed=3)]}
    tracker = await _revise(catalog, api, {("jobset.x-k8s.io/v1alpha2", "JobSet"): jobsets})
    assert api.gets == [("batch/v1", "Job", "research", "llama")]
    assert tracker.failures.count == 2


@pytest.mark.asyncio
async def test_a_job_the_index_lacks_is_a_missing_job(catalog: Catalog) -> None:
    api = RecordingApi()
    tracker = await _revise(catalog, api, {JOB_KIND: {("research", "other"): [_job(failed=3)]}})
    assert api.gets == []
    assert tracker.failures.count == 0
