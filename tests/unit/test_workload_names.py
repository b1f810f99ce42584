"""The status names the workload the launcher renders, for Jobs and JobSets, at every plan
name length (a JobSet's name budget is shorter: its webhook counts a random suffix)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from trainplan.controller.reconcile import decide_launch
from trainplan.planner import Catalog

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 16},
    "job": {"image": "registry.example/train:1.0"},
}


@pytest.mark.parametrize("launcher", ["Job", "JobSet"])
@pytest.mark.parametrize("length", [10, 44, 45, 47, 50, 51, 253])
def test_status_job_name_is_the_rendered_workloads(
    catalog: Catalog, launcher: str, length: int
) -> None:
    spec = {**SPEC, "job": {**SPEC["job"], "launcher": launcher}}
    decision = decide_launch(
        name=("plan-" * 60)[: length - 1] + "z",
        namespace="team-a",
        uid="uid-1",
        generation=1,
        spec_document=spec,
        previous_status={},
        catalog=catalog,
        now=datetime(2026, 11, 25, tzinfo=UTC),
    )
    assert decision.accepted
    (workload,) = [obj for obj in decision.objects if obj["kind"] == launcher]
    assert decision.status["jobName"] == workload["metadata"]["name"]
