"""One ETA revision of one running plan: its Job, Pods and metrics are read and folded
into the plan's tracker, giving the status patch and the Events of the revision. Kopf's
timer (`handlers.revise_eta`) calls it every `eta_interval_seconds` and writes the patch.

Reads the cluster through `trainplan.cluster` and metrics through `trainplan.monitor`;
the decisions are pure (`trainplan.eta`, `trainplan.controller.progress`).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import aiohttp

from trainplan.api import Plan, TrainingPlanSpec
from trainplan.cluster import KubernetesApi
from trainplan.controller.config import OperatorConfig
from trainplan.controller.progress import ProgressUpdate, progress_update
from trainplan.eta import (
    Estimate,
    EtaState,
    Observation,
    PlanFacts,
    StallPolicy,
    plan_facts,
    revise,
)
from trainplan.launcher import label_value, plan_pods_selector, workload_kind
from trainplan.launcher.env import JOB_COMPLETION_INDEX_ANNOTATION
from trainplan.monitor import (
    FailureLedger,
    ScrapeError,
    ScrapeLimits,
    TrainingMetrics,
    observe_failures,
    on_node,
    query_prometheus,
    scrape,
    summarize_gpus,
)
from trainplan.runtime.schema import TRAIN_STEP

WorkloadIndex = Mapping[tuple[str, str], Collection[Mapping[str, Any]]]
"""Kopf's index of one workload kind: (namespace, name) to the objects of that name (one)."""


@dataclass(frozen=True, slots=True)
class TrackedPlan:
    """What a revision needs of a plan's spec and stored plan, parsed once per launch."""

    key: tuple[Any, ...]
    """(observedGeneration, jobName) it was parsed for."""
    facts: PlanFacts
    workload: tuple[str, str]
    metrics_port: int


@dataclass
class PlanTracker:
    """What one plan's revisions carry forward."""

    eta: EtaState = field(default_factory=EtaState)
    failures: FailureLedger = field(default_factory=FailureLedger)
    plan: TrackedPlan | None = None

    def parsed(self, spec: Mapping[str, Any], status: Mapping[str, Any]) -> TrackedPlan:
        """The plan in force, parsed again only when it changed (a new launch)."""
        key = (status.get("observedGeneration"), status.get("jobName"))
        if self.plan is None or self.plan.key != key:
            parsed_spec = TrainingPlanSpec.model_validate(dict(spec))
            self.plan = TrackedPlan(
                key=key,
                facts=plan_facts(Plan.model_validate(status["plan"]), parsed_spec),
                workload=workload_kind(parsed_spec.job.launcher),
                metrics_port=parsed_spec.job.metrics_port,
            )
        return self.plan


def node_urls(pods: Sequence[Mapping[str, Any]], port: int) -> dict[str, str]:
    """The metrics URL of every running pod (one per node), by completion index; index
    "0" holds global rank 0."""
    urls = {}
    for pod in pods:
        annotations = (pod.get("metadata", {}) or {}).get("annotations", {}) or {}
        status = pod.get("status", {}) or {}
        index = annotations.get(JOB_COMPLETION_INDEX_ANNOTATION)
        address = _pod_address(status.get("podIP"))
        if index is not None and address and status.get("phase") == "Running":
            urls[str(index)] = f"http://{address}:{port}/metrics"
    return urls


def _pod_address(value: object) -> str | None:
    """A pod's IP as a URL host (IPv6 in brackets); None unless it is an IP literal, so a
    scrape goes to the pod itself and never to a name the operator would resolve. No pod
    has an unspecified (0.0.0.0, which reaches the operator's own host) or multicast
    address, nor an IPv6 zone (which picks the operator's network interface)."""
    try:
        address = ipaddress.ip_address(str(value))
    except ValueError:
        return None
    if address.is_unspecified or address.is_multicast or "%" in str(address):
        return None
    return f"[{address}]" if address.version == 6 else str(address)


async def _scrape_nodes(
    session: aiohttp.ClientSession, urls: Mapping[str, str], config: OperatorConfig
) -> dict[str, TrainingMetrics | ScrapeError]:
    """Every node's metrics, at most `scrape_concurrency` at a time."""
    limit = asyncio.Semaphore(config.scrape_concurrency)
    limits = ScrapeLimits(
        timeout_seconds=config.scrape_timeout_seconds,
        max_bytes=config.scrape_max_bytes,
        parse_timeout_seconds=config.scrape_parse_timeout_seconds,
    )

    async def one(url: str) -> TrainingMetrics | ScrapeError:
        async with limit:
            try:
                return await scrape(session, url, limits)
            except ScrapeError as error:
                return error

    results = await asyncio.gather(*(one(url) for url in urls.values()))
    return dict(zip(urls, results, strict=True))


async def read_metrics(
    *,
    session: aiohttp.ClientSession,
    config: OperatorConfig,
    pods: Sequence[Mapping[str, Any]],
    namespace: str,
    name: str,
    port: int,
) -> tuple[TrainingMetrics | None, str | None]:
    """(metrics, None) or (None, why not): rank 0's training series with the GPU series
    of every node that answers."""
    try:
        if config.prometheus_url:
            selector = f'namespace="{namespace}",plan="{label_value(name)}"'
            metrics = await query_prometheus(
                session, config.prometheus_url, selector, config.scrape_timeout_seconds
            )
        else:
            urls = node_urls(pods, port)
            if "0" not in urls:
                return None, "no running pod with completion index 0 to scrape"
            nodes = await _scrape_nodes(session, urls, config)
            rank_zero = nodes["0"]
            if isinstance(rank_zero, ScrapeError):
                raise rank_zero
            gpus = tuple(
                gpu
                for index, node in sorted(nodes.items())
                if isinstance(node, TrainingMetrics)
                for gpu in on_node(node.gpus, f"node-{index}")
            )
            metrics = replace(rank_zero, gpus=gpus)
    except ScrapeError as error:
        return None, str(error)
    if TRAIN_STEP.name in metrics.rejected:
        return None, f"{TRAIN_STEP.name} is out of bounds (not a step count)"
    if not metrics.has_training_series:
        return None, f"the metrics carry no {TRAIN_STEP.name} series yet"
    return metrics, None


def status_time(value: object) -> datetime | None:
    """A time of the status (ISO 8601) as an aware datetime (UTC when it names no zone);
    None when absent or malformed, so a bad value costs the estimate its start, not the
    revision."""
    if not isinstance(value, str):
        return None
    try:
        time = datetime.fromisoformat(value)
    except ValueError:
        return None
    return time if time.tzinfo is not None else time.replace(tzinfo=UTC)


def revise_guarded(
    facts: PlanFacts, state: EtaState, observation: Observation, stall: StallPolicy
) -> tuple[Estimate, EtaState, str | None]:
    """`revise`, never failing on the figures a pod reported: when the engine cannot fold
    them (an arithmetic error), the revision goes on without the observation's metrics
    (from a fresh state, should the state itself be at fault). The third item then says
    so, naming the error's kind only (never a value)."""
    try:
        estimate, revised = revise(facts, state, observation, stall)
    except (ArithmeticError, ValueError) as error:
        reason = f"the metrics could not be used in the estimate ({type(error).__name__})"
    else:
        return estimate, revised, None
    blind = replace(observation, step=None, tokens=None, last_step_time=None, checkpoint_step=None)
    try:
        estimate, revised = revise(facts, state, blind, stall)
    except (ArithmeticError, ValueError):
        estimate, revised = revise(facts, EtaState(), blind, stall)
    return estimate, revised, reason


async def revise_plan(
    body: Mapping[str, Any],
    *,
    api: KubernetesApi,
    session: aiohttp.ClientSession,
    config: OperatorConfig,
    tracker: PlanTracker,
    now: datetime,
    workloads: Mapping[tuple[str, str], WorkloadIndex] | None = None,
) -> ProgressUpdate:
    """Read everything about one running plan and revise its ETA. The Job (or JobSet) is
    read from `workloads` (Kopf's index of that kind, by apiVersion and kind) when it
    holds its kind, else from the API server."""
    workloads = workloads or {}
    meta = body.get("metadata", {})
    namespace, name = str(meta.get("namespace", "default")), str(meta["name"])
    status = body.get("status", {}) or {}
    tracked = tracker.parsed(body.get("spec", {}) or {}, status)
    job_name = str(status.get("jobName", name))
    index = workloads.get(tracked.workload)
    job: Mapping[str, Any] | None
    if index is None:
        job = await api.get(*tracked.workload, namespace, job_name)
    else:
        job = next(iter(index.get((namespace, job_name), ())), None)
    pods = await api.list_objects("v1", "Pod", namespace, plan_pods_selector(name))
    tracker.failures = observe_failures(tracker.failures, pods, job)
    metrics, error = await read_metrics(
        session=session,
        config=config,
        pods=pods,
        namespace=namespace,
        name=name,
        port=tracked.metrics_port,
    )
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
        started_at=status_time(status.get("startTime")),
    )
    estimate, tracker.eta, unusable = revise_guarded(
        tracked.facts, tracker.eta, observation, config.stall_policy
    )
    if unusable is not None:
        metrics, error, last_step_time = None, unusable, None
    return progress_update(
        estimate,
        tracker.failures,
        status,
        tokens=None if metrics is None else observation.tokens,
        last_step_time=last_step_time,
        metrics_error=error,
        gpus=None if metrics is None else summarize_gpus(metrics.gpus),
        dropped_series=() if metrics is None else metrics.rejected,
        checkpoint_seconds=None if metrics is None else metrics.mean_checkpoint_seconds,
        generation=meta.get("generation"),
        now=now,
    )


@dataclass
class EtaRevisions:
    """The per-plan state of the ETA revisions (one tracker per running plan) and the
    HTTP session the scrapes share. Kopf's timer calls `revise` for each running plan."""

    config: OperatorConfig
    trackers: dict[tuple[str, str], PlanTracker] = field(default_factory=dict)
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    def session(self) -> aiohttp.ClientSession:
        """The shared scrape session (made on first use, inside the operator's loop);
        RuntimeError once closed (a revision still running as the operator stops)."""
        if self._closed:
            raise RuntimeError("the operator is stopping")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def revise(
        self,
        body: Mapping[str, Any],
        api: KubernetesApi,
        now: datetime,
        workloads: Mapping[tuple[str, str], WorkloadIndex] | None = None,
    ) -> ProgressUpdate:
        """One revision of one plan: its Job, Pods and metrics folded into its tracker."""
        meta = body.get("metadata", {})
        key = (str(meta.get("namespace", "default")), str(meta.get("name", "")))
        tracker = self.trackers.setdefault(key, PlanTracker())
        return await revise_plan(
            body,
            api=api,
            session=self.session(),
            config=self.config,
            tracker=tracker,
            now=now,
            workloads=workloads,
        )

    def forget(self, namespace: str, name: str) -> None:
        """Drop a plan's tracker (it finished or was deleted)."""
        self.trackers.pop((namespace, name), None)

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
