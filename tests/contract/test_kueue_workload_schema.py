"""The Kueue Workloads the tests feed the operator have the shape of real ones, and what
the operator does to them and reads from them keeps to Kueue's API.

Against the `spec` and `status` schemas of Kueue v0.14.8's Workload CRD (vendored in
`tests/data/upstream/kueue-v0.14.8-workload-schema.yaml`, from kubernetes-sigs/kueue,
`config/components/crd/bases/kueue.x-k8s.io_workloads.yaml`, v1beta1, the version the
operator uses): the Workload Kueue makes for trainplan's queued Job (its pod template
included) validates, before and after the operator's `spec.active` patch; each status of
`tests/data/kueue_workload_statuses.yaml` validates, and the plan status the operator
writes from it validates against the committed TrainingPlan CRD; Workloads short of
Kueue's API (no pod sets, as the Kueue integration test posted before; conditions without
transition time or message) do not. The labels and annotations the launcher puts on a
queued job, and the Workload's name, are Kueue's
(`tests/data/upstream/kueue-v0.14.8-constants.txt`).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.recording_api import RecordingApi
from tests.contract.crd_schema import committed_crd, errors, validator_for
from tests.contract.test_controller_status_against_crd import merge_patch
from tests.kueue_workloads import (
    status_names,
    upstream_constants,
    upstream_validator,
    workload,
    workload_name,
    workload_status,
)
from tests.rendered_examples import EXAMPLES_DIR, OWNER_UID
from trainplan.api import TrainingPlanSpec
from trainplan.cluster import Connection
from trainplan.controller import ControllerContext
from trainplan.controller.handlers import _activate_kueue_workloads
from trainplan.controller.reconcile import kueue_admission
from trainplan.launcher import PlanRef, render_for
from trainplan.launcher.render import (
    KUEUE_JOB_UID_LABEL,
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_REQUIRED_TOPOLOGY,
)
from trainplan.planner import Catalog, plan

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
QUEUED_EXAMPLE = EXAMPLES_DIR / "frameworks" / "megatron-llama2-7b.yaml"
"""The example queued through Kueue (`job.queueName: research`), launched as a Job."""
JOB_UID = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"


@cache
def _plan_status_validator() -> jsonschema.protocols.Validator:
    return validator_for(committed_crd("trainingplans"), "status")


_JOBS: dict[str, dict[str, Any]] = {}


def _queued_job(catalog: Catalog, **job: Any) -> dict[str, Any]:
    """The Job the operator launches for the queued example (with `job` fields added), as
    the API server stores it (with a uid)."""
    key = json.dumps(job, sort_keys=True)
    if key not in _JOBS:
        document = yaml.safe_load(QUEUED_EXAMPLE.read_text(encoding="utf-8"))
        document["spec"]["job"].update(job)
        spec = TrainingPlanSpec.model_validate(document["spec"])
        meta = document["metadata"]
        objects = render_for(
            PlanRef(meta["name"], meta["namespace"], OWNER_UID), spec, plan(spec, catalog), catalog
        )
        (_JOBS[key],) = [obj for obj in objects if obj["kind"] == "Job"]
        _JOBS[key]["metadata"]["uid"] = JOB_UID
    return copy.deepcopy(_JOBS[key])


@pytest.mark.parametrize(
    "job",
    [{}, {"priorityClass": "high", "topology": {"required": "cloud.example/block"}}],
    ids=["plain", "priority-and-topology"],
)
def test_the_workload_kueue_makes_for_the_queued_job_is_valid(
    job: dict[str, Any], catalog: Catalog
) -> None:
    made = workload(_queued_job(catalog, **job))
    assert made["spec"]["queueName"] == "research"
    assert made["spec"]["podSets"][0]["count"] == 4
    assert errors(upstream_validator("spec"), made["spec"]) == []


@pytest.mark.asyncio
async def test_the_operators_patch_keeps_the_workload_valid(catalog: Catalog) -> None:
    """The operator pauses and resumes a queued Job through its Workload's `spec.active`
    (trainplan.controller.handlers); the Workload stays valid, and the Job's own
    `spec.suspend` (Kueue's) is not written."""
    job = _queued_job(catalog)
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    api = RecordingApi()
    api.put("batch", "jobs", job)
    made = workload(job)
    api.put("kueue.x-k8s.io", "workloads", {**made, "status": workload_status("admitted")})
    context = ControllerContext(catalog=catalog)
    context.connection = Connection(server="http://api.invalid")
    context._api = api
    spec, status = upstream_validator("spec"), upstream_validator("status")

    try:
        for active in (False, True):
            assert await _activate_kueue_workloads(
                context, "batch/v1", "Job", namespace, name, active=active
            )
            stored = api.stored("kueue.x-k8s.io", "workloads", namespace, made["metadata"]["name"])
            assert stored["spec"] == {**made["spec"], "active": active}
            assert errors(spec, stored["spec"]) == []
            assert errors(status, stored["status"]) == []
    finally:
        await api.close()
    assert {(r.resource, r.verb) for r in api.requests} == {
        ("jobs", "get"),
        ("workloads", "list"),
        ("workloads", "patch"),
    }


@pytest.mark.parametrize("name", status_names())
def test_each_fixture_is_a_workload_status(name: str) -> None:
    assert errors(upstream_validator("status"), workload_status(name)) == []


@pytest.mark.parametrize("name", status_names())
def test_each_admission_has_a_pod_set_assignment_per_pod_set(name: str, catalog: Catalog) -> None:
    """The CRD's CEL rule (not evaluated by jsonschema): with QuotaReserved True, as many
    `podSetAssignments` as `podSets`."""
    status = workload_status(name)
    reserved = any(
        c["type"] == "QuotaReserved" and c["status"] == "True" for c in status["conditions"]
    )
    if reserved and "admission" in status:
        pod_sets = workload(_queued_job(catalog))["spec"]["podSets"]
        assert len(status["admission"]["podSetAssignments"]) == len(pod_sets)


EXPECTED_ADMITTED = {
    "pending": ("False", "Pending", "couldn't assign flavors to pod set main"),
    "quota_reserved": ("False", "QuotaReserved", "quota reserved in ClusterQueue"),
    "admitted": ("True", "Admitted", "admitted by ClusterQueue gpu-cluster-queue on a100-80gb"),
    "evicted": ("False", "Evicted", "Preempted to accommodate a workload"),
}


@pytest.mark.parametrize("name", status_names())
def test_the_plan_status_written_from_each_fixture_fits_the_crd(
    name: str, catalog: Catalog
) -> None:
    current = {"phase": "Launching", "jobName": "megatron-llama2-7b"}
    observed = {**workload(_queued_job(catalog)), "status": workload_status(name)}
    patch = kueue_admission(observed, current, generation=1, now=NOW)
    if name == "finished":
        assert patch is None  # the Job's own status tells the end
        return
    assert patch is not None
    (admitted,) = [c for c in patch["conditions"] if c["type"] == "Admitted"]
    state, reason, message = EXPECTED_ADMITTED[name]
    assert (admitted["status"], admitted["reason"]) == (state, reason)
    assert admitted["message"].startswith(message)
    assert errors(_plan_status_validator(), merge_patch(current, patch)) == []


def test_the_schema_refuses_workloads_short_of_kueues_api() -> None:
    """A control: a Workload without pod sets (the Kueue integration test posted one
    before), conditions without transition time, message or reason, and an admission
    without pod set assignments are refused."""
    spec = {"active": True, "queueName": "team-a"}
    bare_conditions = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ],
        "admission": {
            "clusterQueue": "gpu-cluster-queue",
            "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "a100-80gb"}}],
        },
    }
    bare_admission = {
        "conditions": [{"type": "Admitted", "status": "True"}],
        "admission": {"clusterQueue": "cq"},
    }
    assert errors(upstream_validator("spec"), spec) == ["(root): 'podSets' is a required property"]
    assert errors(upstream_validator("status"), bare_conditions) == [
        "conditions.0: 'lastTransitionTime' is a required property",
        "conditions.0: 'message' is a required property",
        "conditions.1: 'lastTransitionTime' is a required property",
        "conditions.1: 'message' is a required property",
    ]
    assert errors(upstream_validator("status"), bare_admission) == [
        "admission: 'podSetAssignments' is a required property",
        "conditions.0: 'lastTransitionTime' is a required property",
        "conditions.0: 'message' is a required property",
        "conditions.0: 'reason' is a required property",
    ]


def test_the_schema_refuses_a_wrong_pod_count_and_flavor() -> None:
    broken = workload_status("admitted")
    broken["admission"]["podSetAssignments"][0]["count"] = "4"
    broken["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] = "A100 80GB"
    assert errors(upstream_validator("status"), broken) == [
        "admission.podSetAssignments.0.count: '4' is not of type 'integer'",
        "admission.podSetAssignments.0.flavors.nvidia.com/gpu: 'A100 80GB' does not match"
        " '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
    ]


def test_the_workload_name_is_kueues() -> None:
    """Kueue's own case: Job `test-job` of uid `test-job` has the Workload
    `job-test-job-ce737` (pkg/controller/jobframework/reconciler_test.go, v0.14.8)."""
    assert workload_name("test-job", "test-job") == "job-test-job-ce737"


def test_the_launchers_label_and_annotation_names_are_kueues() -> None:
    """The names the launcher writes (trainplan.launcher.render) are Kueue v0.14.8's
    constants: pkg/controller/constants/constants.go and
    apis/kueue/v1beta1/topology_types.go."""
    kueue = upstream_constants()
    assert {
        KUEUE_QUEUE_LABEL: kueue["QueueLabel"],
        KUEUE_JOB_UID_LABEL: kueue["JobUIDLabel"],
        KUEUE_PRIORITY_CLASS_LABEL: kueue["WorkloadPriorityClassLabel"],
        KUEUE_REQUIRED_TOPOLOGY: kueue["PodSetRequiredTopologyAnnotation"],
        KUEUE_PREFERRED_TOPOLOGY: kueue["PodSetPreferredTopologyAnnotation"],
    } == {
        "kueue.x-k8s.io/queue-name": "kueue.x-k8s.io/queue-name",
        "kueue.x-k8s.io/job-uid": "kueue.x-k8s.io/job-uid",
        "kueue.x-k8s.io/priority-class": "kueue.x-k8s.io/priority-class",
        "kueue.x-k8s.io/podset-required-topology": "kueue.x-k8s.io/podset-required-topology",
        "kueue.x-k8s.io/podset-preferred-topology": "kueue.x-k8s.io/podset-preferred-topology",
    }


def test_the_fixtures_workload_uses_kueues_names(catalog: Catalog) -> None:
    kueue = upstream_constants()
    job = _queued_job(catalog, priorityClass="high", topology={"preferred": "cloud.example/rack"})
    made = workload(job)
    assert made["metadata"]["labels"] == {kueue["JobUIDLabel"]: JOB_UID}
    assert made["metadata"]["finalizers"] == [kueue["ResourceInUseFinalizerName"]]
    assert [pod_set["name"] for pod_set in made["spec"]["podSets"]] == [kueue["DefaultPodSetName"]]
    assert job["metadata"]["labels"][kueue["QueueLabel"]] == made["spec"]["queueName"]
    assert job["metadata"]["labels"][kueue["WorkloadPriorityClassLabel"]] == "high"
    template_annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert template_annotations[kueue["PodSetPreferredTopologyAnnotation"]] == "cloud.example/rack"
    assert made["spec"]["podSets"][0]["topologyRequest"]["preferred"] == "cloud.example/rack"
    assert made["spec"]["priorityClassName"] == "high"
    assert errors(upstream_validator("spec"), made["spec"]) == []
