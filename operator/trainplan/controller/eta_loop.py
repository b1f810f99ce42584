"""The ETA revision loop: every `eta_interval_seconds`, each running plan's Job, Pods and
metrics are read, folded into its tracker, and its status is patched once (a merge
patch of the status subresource) with Events on transitions.

It runs as one background task of the operator (started at start-up, stopped at
cleanup) rather than as a Kopf timer per plan: a timer makes Kopf keep a finalizer on
every plan, and the status written here needs nothing of Kopf's progress bookkeeping.
Reads the cluster through `trainplan.cluster` and metrics through `trainplan.monitor`;
the decisions are pure (`trainplan.eta`, `trainplan.controller.progress`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from trainplan.api import API_VERSION, TRAINING_PLAN_KIND, Phase, Plan, TrainingPlanSpec
from trainplan.cluster import KubernetesApi, KubernetesApiError, event_for
from trainplan.controller.config import OperatorConfig
from trainplan.controller.metrics import OperatorMetrics, snapshot_from_status
from trainplan.controller.progress import ProgressUpdate, progress_update
from trainplan.eta import EtaState, Observation, plan_facts, revise
from trainplan.launcher import label_value
from trainplan.monitor import (
    FailureLedger,
    ScrapeError,
    TrainingMetrics,
    observe_failures,
    query_prometheus,
    scrape,
)

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ACTIVE_PHASES = frozenset({Phase.LAUNCHING.value, Phase.RUNNING.value, Phase.RESTARTING.value})
"""Phases whose ETA is revised."""

logger = logging.getLogger("trainplan.eta")


@dataclass
class PlanTracker:
    """What one plan's revisions carry forward."""

    eta: EtaState = field(default_factory=EtaState)
    failures: FailureLedger = field(default_factory=FailureLedger)


def rank_zero_url(pods: Sequence[Mapping[str, Any]], port: int) -> str | None:
    """The metrics URL of the running pod with completion index 0 (global rank 0)."""
    for pod in pods:
        annotations = (pod.get("metadata", {}) or {}).get("annotations", {}) or {}
        status = pod.get("status", {}) or {}
        ip = status.get("podIP")
        running = status.get("phase") == "Running"
        if annotations.get(COMPLETION_INDEX_ANNOTATION) == "0" and ip and running:
            return f"http://{ip}:{port}/metrics"
    return None


async def read_metrics(
    *,
    session: aiohttp.ClientSession,
    config: OperatorConfig,
    pods: Sequence[Mapping[str, Any]],
    namespace: str,
    name: str,
    port: int,
) -> tuple[TrainingMetrics | None, str | None]:
    """(metrics, None) or (None, why not)."""
    try:
        if config.prometheus_url:
            selector = f'namespace="{namespace}",plan="{label_value(name)}"'
            metrics = await query_prometheus(session, config.prometheus_url, selector)
        else:
            url = rank_zero_url(pods, port)
            if url is None:
                return None, "no running pod with completion index 0 to scrape"
            metrics = await scrape(session, url, config.scrape_timeout_seconds)
    except ScrapeError as error:
        return None, str(error)
    if not metrics.has_training_series:
        return None, "the metrics carry no trainplan_train_step series yet"
    return metrics, None


async def revise_plan(
    body: Mapping[str, Any],
    *,
    api: KubernetesApi,
    session: aiohttp.ClientSession,
    config: OperatorConfig,
    tracker: PlanTracker,
    now: datetime,
) -> ProgressUpdate:
    """Read everything about one running plan and revise its ETA."""
    meta = body.get("metadata", {})
    namespace, name = str(meta.get("namespace", "default")), str(meta["name"])
    status = body.get("status", {}) or {}
    spec = TrainingPlanSpec.model_validate(dict(body.get("spec", {})))
    plan = Plan.model_validate(status["plan"])
    api_version, kind = (
        ("jobset.x-k8s.io/v1alpha2", "JobSet")
        if spec.job.launcher == "JobSet"
        else ("batch/v1", "Job")
    )
    job = await api.get(api_version, kind, namespace, str(status.get("jobName", name)))
    pods = await api.list_objects("v1", "Pod", namespace, f"trainplan.dev/plan={label_value(name)}")
    tracker.failures = observe_failures(tracker.failures, pods, job)
    metrics, error = await read_metrics(
        session=session,
        config=config,
        pods=pods,
        namespace=namespace,
        name=name,
        port=spec.job.metrics_port,
    )
    started = status.get("startTime")
    last_step_time = None
    if metrics is not None and metrics.last_step_timestamp_seconds:
        last_step_time = datetime.fromtimestamp(metrics.last_step_timestamp_seconds, tz=UTC)
    observation = Observation(
        time=now,
        step=None if metrics is None else metrics.step,
        tokens=None if metrics is None else metrics.tokens,
        last_step_time=last_step_time,
        failures=tracker.failures.count,
        checkpoint_step=None if metrics is None else metrics.checkpoint_step,
        started_at=datetime.fromisoformat(started) if started else None,
    )
    estimate, tracker.eta = revise(
        plan_facts(plan, spec), tracker.eta, observation, config.stall_policy
    )
    return progress_update(
        estimate,
        tracker.failures,
        status,
        tokens=observation.tokens,
        last_step_time=last_step_time,
        metrics_error=error,
        generation=meta.get("generation"),
        now=now,
    )


@dataclass
class EtaLoop:
    """Revises every running plan's ETA on an interval, until cancelled."""

    config: OperatorConfig
    metrics: OperatorMetrics
    trackers: dict[tuple[str, str], PlanTracker] = field(default_factory=dict)

    async def revise_all(
        self, api: KubernetesApi, session: aiohttp.ClientSession, now: datetime
    ) -> int:
        """One pass over the plans; returns how many were revised. A plan that fails is
        logged and retried on the next pass; the others go on."""
        plans = await api.list_objects(API_VERSION, TRAINING_PLAN_KIND, None)
        active = set()
        revised = 0
        for body in plans:
            meta = body.get("metadata", {})
            status = body.get("status", {}) or {}
            key = (str(meta.get("namespace", "default")), str(meta.get("name", "")))
            if status.get("phase") not in ACTIVE_PHASES or not status.get("plan"):
                continue
            active.add(key)
            tracker = self.trackers.setdefault(key, PlanTracker())
            try:
                update = await revise_plan(
                    body,
                    api=api,
                    session=session,
                    config=self.config,
                    tracker=tracker,
                    now=now,
                )
                await api.patch(
                    API_VERSION,
                    TRAINING_PLAN_KIND,
                    key[0],
                    key[1],
                    {"status": update.status},
                    subresource="status",
                )
                for event_type, reason, message in update.events:
                    await api.create(event_for(body, event_type, reason, message, now.isoformat()))
            except (KubernetesApiError, ValueError, KeyError) as error:
                logger.warning(f"revising the ETA of {key[0]}/{key[1]}: {error}")
                continue
            self.metrics.record(*key, snapshot_from_status({**status, **update.status}))
            revised += 1
        for gone in set(self.trackers) - active:
            del self.trackers[gone]
        return revised

    async def run(self, api: Callable[[], KubernetesApi], clock: Callable[[], datetime]) -> None:
        """Revise forever, every `eta_interval_seconds` (cancel the task to stop). `api`
        gives the client of the current login."""
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    await self.revise_all(api(), session, clock())
                except (KubernetesApiError, aiohttp.ClientError) as error:
                    logger.warning(f"listing TrainingPlans: {error}")
                await asyncio.sleep(self.config.eta_interval_seconds)
