"""A JobSet restarts as a whole (issue 14, item 1): its own `failurePolicy` recreates all
its Jobs up to `reliability.maxRestarts` times (so `status.restarts` counts restarts and
the plan can show Restarting), its Job fails at the first pod failure (`backoffLimit: 0`,
so restarts do not multiply), and a Job failed by the pod failure policy (usage or
configuration error) fails the JobSet at once. The Job launcher is unchanged."""

from __future__ import annotations

from typing import Any

from trainplan.api import TrainingPlanSpec
from trainplan.launcher import PlanRef, render_for
from trainplan.planner import Catalog, plan

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 16},
    "reliability": {"maxRestarts": 7},
    "job": {"image": "registry.example/train:1.0"},
}


def _workload(catalog: Catalog, launcher: str) -> dict[str, Any]:
    spec = TrainingPlanSpec.model_validate({**SPEC, "job": {**SPEC["job"], "launcher": launcher}})
    objects = render_for(PlanRef("train", "team-a", "uid-1"), spec, plan(spec, catalog), catalog)
    (found,) = [obj for obj in objects if obj["kind"] in ("Job", "JobSet")]
    return found


def test_a_jobset_restarts_whole_up_to_max_restarts(catalog: Catalog) -> None:
    jobset = _workload(catalog, "JobSet")
    assert jobset["spec"]["failurePolicy"] == {
        "maxRestarts": 7,
        "rules": [
            {
                "name": "UsageOrConfigurationError",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job_spec = replicated["template"]["spec"]
    assert job_spec["backoffLimit"] == 0
    # The pod failure policy that fails the Job (reason PodFailurePolicy) stays.
    assert [rule["action"] for rule in job_spec["podFailurePolicy"]["rules"]] == [
        "Ignore",
        "FailJob",
    ]
    # A Job retries its pods itself, as before.
    job = _workload(catalog, "Job")
    assert job["spec"]["backoffLimit"] == 7
    assert "failurePolicy" not in job["spec"]
