"""The operator's ETA loop against kmock: a metrics endpoint served by the test, Pod and
Job status written by the test (with a restart); status fields, conditions, Events and
the operator metrics follow; a failing scrape degrades to MetricsAvailable=False."""

from __future__ import annotations

import asyncio
import copy
import urllib.request
from typing import Any

import kmock
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.harness import Cluster, OperatorProcess, TrainingPod, small_plan
from trainplan.controller import revision
from trainplan.eta import Estimate, EtaState, Observation, PlanFacts, StallPolicy, revise

pytestmark = pytest.mark.asyncio


def _status(cluster: Cluster, name: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.plan(name).get("status", {})
    return status


def _job_reads(cluster: Cluster, job: str) -> int:
    """GET requests for the Job so far."""
    path = f"/apis/batch/v1/namespaces/default/jobs/{job}"
    return sum(1 for r in cluster.emulator if r.method == kmock.method.GET and r.url.path == path)


def _condition(cluster: Cluster, name: str, kind: str) -> dict[str, Any]:
    return next((c for c in _status(cluster, name).get("conditions", []) if c["type"] == kind), {})


async def test_eta_follows_metrics_failures_and_scrape_errors(
    fast_operator: OperatorProcess, cluster: Cluster, pod: TrainingPod
) -> None:
    name = await cluster.apply_plan(small_plan("tracked", metricsPort=pod.port))
    job = (await cluster.wait_for_phase(name, "Launching"))["status"]["jobName"]
    pod_body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-0-abcde",
            "namespace": "default",
            "uid": "pod-1",
            "labels": {"trainplan.dev/plan": name},
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "containerStatuses": [{"name": "trainer", "restartCount": 0}],
        },
    }
    code, _ = await cluster._call("POST", "/api/v1/namespaces/default/pods", pod_body)
    assert code in (200, 201)
    # The second node's pod: the operator scrapes it for its GPUs only (both pods are
    # served by the test's one endpoint, each reporting one GPU).
    second_node = copy.deepcopy(pod_body)
    second_node["metadata"].update(name=f"{job}-1-fghij", uid="pod-2")
    second_node["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "1"
    code, _ = await cluster._call("POST", "/api/v1/namespaces/default/pods", second_node)
    assert code in (200, 201)
    pod.gpu_utilization_ratio = 0.75
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    status = (await cluster.wait_for_phase(name, "Running"))["status"]
    pod.tokens_per_step = status["plan"]["tokensPerStep"]

    job_reads = _job_reads(cluster, job)
    pod.step = 100
    pod.checkpoint_seconds = (20.0, 30.0)
    await cluster.wait_for(
        lambda: _status(cluster, name).get("progress", {}).get("step") == 100,
        "progress to reach step 100",
    )
    # The revisions read the Job from the operator's index of its watch, never from the
    # API server.
    assert _job_reads(cluster, job) == job_reads
    status = _status(cluster, name)
    total = status["plan"]["totalSteps"]
    assert status["progress"]["totalSteps"] == total
    assert status["progress"]["tokens"] == 100 * pod.tokens_per_step
    assert status["progress"]["measuredCheckpointSeconds"] == 25.0
    assert status["progressPercentage"] == int(100 / total * 100)
    assert status["estimatedRemainingSeconds"] > 0
    assert status["estimatedCompletionRange"]["earliest"] <= status["estimatedCompletionTime"]
    assert status["estimatedCompletionTime"] <= status["estimatedCompletionRange"]["latest"]
    assert status["gpuHours"]["projected"] >= status["gpuHours"]["used"]
    assert _condition(cluster, name, "MetricsAvailable")["status"] == "True"
    assert status["gpuUsage"] == {
        "reportingGPUs": 2,
        "utilizationRatio": 0.75,
        "memoryUsedBytes": 4e10,
        "memoryTotalBytes": 8e10,
    }

    # The trainer's container restarts once (OOM): counted once, an Event says so.
    pod_body["status"]["containerStatuses"] = [
        {
            "name": "trainer",
            "restartCount": 1,
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
        }
    ]
    code, _ = await cluster._call(
        "PATCH",
        f"/api/v1/namespaces/default/pods/{pod_body['metadata']['name']}/status",
        {"status": pod_body["status"]},
    )
    assert code == 200
    await cluster.wait_for(
        lambda: _status(cluster, name).get("failures", {}).get("count") == 1,
        "the restart to be counted",
    )
    assert _status(cluster, name)["failures"]["lastReason"] == "OOMKilled (exit code 137)"
    await cluster.wait_for(
        lambda: any(e.get("reason") == "Restarted" for e in cluster.objects("v1/events").values()),
        "a Restarted event",
    )
    # The trainer resumes from its checkpoint at step 90, and regains step 100 after
    # the restart's lost time.
    pod.step = 90
    await cluster.wait_for(
        lambda: _status(cluster, name).get("progress", {}).get("step") == 90, "step 90"
    )
    await asyncio.sleep(3 * status["plan"]["stepSeconds"] + 1.0)
    pod.step = 101
    await cluster.wait_for(
        lambda: _status(cluster, name).get("progress", {}).get("step") == 101, "step 101"
    )
    assert _status(cluster, name)["failures"]["count"] == 1  # seen again, counted once
    await cluster.wait_for(
        lambda: _status(cluster, name)["failures"].get("lostSeconds", 0) > 0,
        "the failure's measured cost",
    )

    # Scraping fails: the condition says why, the estimate stays.
    pod.healthy = False
    await cluster.wait_for(
        lambda: _condition(cluster, name, "MetricsAvailable").get("status") == "False",
        "MetricsAvailable=False",
    )
    assert "500" in _condition(cluster, name, "MetricsAvailable")["message"]
    assert _status(cluster, name)["estimatedRemainingSeconds"] > 0
    assert fast_operator.running

    # The operator's own metrics carry the ETA.
    url = f"http://127.0.0.1:{fast_operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as page:
        text = page.read().decode()
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("plan") == name
    }
    assert samples["trainplan_plan_eta_seconds"] > 0
    assert samples["trainplan_plan_progress_ratio"] == pytest.approx(101 / total)


async def test_hostile_metric_values_neither_stop_the_revisions_nor_reach_the_status(
    fast_operator: OperatorProcess, cluster: Cluster, pod: TrainingPod
) -> None:
    # Hostile from its first page (a good page first would leave its tokens in the status).
    pod.page = "trainplan_train_step +Inf\ntrainplan_train_tokens NaN\n"
    name = await cluster.apply_plan(small_plan("hostile", metricsPort=pod.port))
    job = (await cluster.wait_for_phase(name, "Launching"))["status"]["jobName"]
    code, _ = await cluster._call(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job}-0-hostile",
                "namespace": "default",
                "uid": "pod-hostile",
                "labels": {"trainplan.dev/plan": name},
                "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
            },
            "status": {"phase": "Running", "podIP": "127.0.0.1"},
        },
    )
    assert code in (200, 201)
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    await cluster.wait_for_phase(name, "Running")

    # A step that is no step: the revision goes on and says which series it refused.
    await cluster.wait_for(
        lambda: (
            "trainplan_train_step is out of bounds"
            in _condition(cluster, name, "MetricsAvailable").get("message", "")
        ),
        "the refused step in MetricsAvailable",
    )
    assert _condition(cluster, name, "MetricsAvailable")["status"] == "False"
    # Values past every bound beside a good step: dropped and named, never written.
    pod.page = (
        "trainplan_train_step 5\ntrainplan_train_tokens 1e300\n"
        "trainplan_train_last_step_timestamp_seconds -1e15\n"
        'trainplan_gpu_power_watts{gpu="0"} -300\n'
        'trainplan_gpu_utilization_ratio{gpu="0"} NaN\n'
    )
    await cluster.wait_for(
        lambda: _status(cluster, name).get("progress", {}).get("step") == 5, "step 5"
    )
    status = _status(cluster, name)
    assert "tokens" not in status["progress"]
    assert "lastStepTime" not in status["progress"]
    assert "powerWatts" not in status.get("gpuUsage", {})
    message = _condition(cluster, name, "MetricsAvailable")["message"]
    assert "trainplan_train_tokens" in message
    assert "1e300" not in message
    assert fast_operator.running


async def test_figures_the_engine_cannot_fold_leave_the_revisions_running(
    fast_operator: OperatorProcess,
    cluster: Cluster,
    pod: TrainingPod,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = await cluster.apply_plan(small_plan("unfoldable", metricsPort=pod.port))
    job = (await cluster.wait_for_phase(name, "Launching"))["status"]["jobName"]
    code, _ = await cluster._call(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job}-0-unfoldable",
                "namespace": "default",
                "uid": "pod-unfoldable",
                "labels": {"trainplan.dev/plan": name},
                "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
            },
            "status": {"phase": "Running", "podIP": "127.0.0.1"},
        },
    )
    assert code in (200, 201)
    await cluster.write_job_status(job, {"active": 1, "startTime": "2026-11-22T00:00:00Z"})
    status = (await cluster.wait_for_phase(name, "Running"))["status"]
    pod.tokens_per_step = status["plan"]["tokensPerStep"]
    pod.step = 5
    await cluster.wait_for(
        lambda: _status(cluster, name).get("progress", {}).get("step") == 5, "step 5"
    )

    # An engine that cannot fold what the pod reports (an arithmetic error): the round
    # goes on without the metrics, says so by the error's kind, and the next rounds run.
    def unfoldable(
        facts: PlanFacts, state: EtaState, observation: Observation, stall: StallPolicy
    ) -> tuple[Estimate, EtaState]:
        if observation.step is not None:
            raise OverflowError("math range error")
        return revise(facts, state, observation, stall)

    monkeypatch.setattr(revision, "revise", unfoldable)
    pod.step = 9
    await cluster.wait_for(
        lambda: (
            _condition(cluster, name, "MetricsAvailable").get("message")
            == "the metrics could not be used in the estimate (OverflowError)"
        ),
        "MetricsAvailable naming the engine's error",
    )
    assert _condition(cluster, name, "MetricsAvailable")["status"] == "False"
    revised = _status(cluster, name)["lastUpdatedTime"]
    await cluster.wait_for(
        lambda: _status(cluster, name)["lastUpdatedTime"] != revised, "the next revision"
    )
    assert _status(cluster, name)["progress"]["step"] == 5

    monkeypatch.undo()
    await cluster.wait_for(
        lambda: _status(cluster, name).get("progress", {}).get("step") == 9, "step 9"
    )
    assert _condition(cluster, name, "MetricsAvailable")["status"] == "True"
    assert fast_operator.running
