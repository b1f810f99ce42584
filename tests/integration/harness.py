"""Harness for the integration tests: the real Kopf operator, in-process, against kmock's
Kubernetes emulator.

kmock stores objects and serves watches but validates nothing, assigns no uid,
generation or creation time, and runs no controllers: `Cluster` writes those the way the
API server, the Job controller and the kubelet would. `VersionedEmulator` adds the API
server's resource versions, which Kopf's finalizer patches rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import os
import signal
import socket
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import aiohttp
import attrs
import kmock
import kopf
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from trainplan.api import PLAN_LABEL
from trainplan.controller import ControllerContext, OperatorConfig, run_operator
from trainplan.planner import Catalog

TRAINING_PLANS = "trainplan.dev/v1alpha1/trainingplans"
JOBS = "batch/v1/jobs"
SERVICES = "v1/services"
CONFIG_MAPS = "v1/configmaps"
JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"
WORKLOADS = "kueue.x-k8s.io/v1beta1/workloads"
CLUSTER_PEERINGS = "kopf.dev/v1/clusterkopfpeerings"
CLUSTER_CALIBRATIONS = "trainplan.dev/v1alpha1/clustercalibrations"
WAIT_SECONDS = 15.0

RESOURCES: dict[str, dict[str, Any]] = {
    TRAINING_PLANS: {
        "kind": "TrainingPlan",
        "singular": "trainingplan",
        "subresources": {"status"},
    },
    "trainplan.dev/v1alpha1/gpubudgets": {
        "kind": "GPUBudget",
        "singular": "gpubudget",
        "subresources": {"status"},
    },
    JOBS: {"kind": "Job", "singular": "job", "subresources": {"status"}},
    JOBSETS: {"kind": "JobSet", "singular": "jobset", "subresources": {"status"}},
    SERVICES: {"kind": "Service", "singular": "service", "subresources": {"status"}},
    CONFIG_MAPS: {"kind": "ConfigMap", "singular": "configmap", "subresources": set()},
    "v1/pods": {"kind": "Pod", "singular": "pod", "subresources": {"status"}},
    "v1/events": {"kind": "Event", "singular": "event", "subresources": set()},
    WORKLOADS: {"kind": "Workload", "singular": "workload", "subresources": {"status"}},
}
# Kopf's resource observer lists and watches these (cluster-scoped) before serving.
CLUSTER_RESOURCES: dict[str, dict[str, Any]] = {
    "apiextensions.k8s.io/v1/customresourcedefinitions": {
        "kind": "CustomResourceDefinition",
        "singular": "customresourcedefinition",
        "subresources": set(),
    },
    "v1/namespaces": {"kind": "Namespace", "singular": "namespace", "subresources": set()},
    CLUSTER_CALIBRATIONS: {
        "kind": "ClusterCalibration",
        "singular": "clustercalibration",
        "subresources": {"status"},
    },
    # Kopf's peering (`trainplan operator --peering`); standalone operators ignore it.
    CLUSTER_PEERINGS: {
        "kind": "ClusterKopfPeering",
        "singular": "clusterkopfpeering",
        "subresources": set(),
    },
}
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}


def small_plan(name: str, **job: Any) -> dict[str, Any]:
    """A TrainingPlan that plans in milliseconds: pythia-1b on 8 GPUs, 1e9 tokens, with
    `job` added to its job section (the image is set)."""
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": {
            "model": {"preset": "pythia-1b"},
            "data": {"tokens": 1e9},
            "batch": {"globalBatchSize": 64},
            "objective": {"gpus": 8},
            "job": {"image": "registry.example/train:1.0", **job},
        },
    }


def declare_resources(emulator: kmock.KubernetesEmulator) -> None:
    """Tell the emulator the resources trainplan and Kopf use (it knows none by itself)."""
    for resources, namespaced in ((RESOURCES, True), (CLUSTER_RESOURCES, False)):
        for resource, info in resources.items():
            emulator.resources[resource] = kmock.ResourceInfo(
                kind=info["kind"],
                singular=info["singular"],
                subresources=info["subresources"],
                verbs=VERBS,
                namespaced=namespaced,
            )


@attrs.frozen
class ResourceVersionConflictError(kmock.KubernetesError):
    """What the API server answers a JSON patch whose `test` op fails."""

    status: int = 422
    reason: str = "Invalid"
    message: str = "the resourceVersion test of the JSON patch failed: the object changed"


@attrs.frozen
class InternalServerError(kmock.KubernetesError):
    """What the API server answers when etcd is slow."""

    status: int = 500
    reason: str = "InternalError"
    message: str = "etcdserver: request timed out"


@attrs.frozen
class ResourceVersionChangedError(kmock.KubernetesError):
    """What the API server answers a patch that names a resourceVersion no longer current."""

    status: int = 409
    reason: str = "Conflict"
    message: str = "the object has been modified; please apply your changes to the latest version"


@attrs.define(kw_only=True)
class VersionedEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with resource versions, as the API server keeps them: every
    create and patch stores a new `metadata.resourceVersion`; a JSON patch that tests an
    older version is refused with 422 and a merge patch that names one with 409. Kopf's
    finalizer patches and trainplan's budget writes rely on it."""

    _versions: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    forget_served: bool = False
    """Drop each request from kmock's history once it is served: kmock matches every
    request against its whole history, which makes a long load quadratic. Tests that
    assert on requests keep the history (the default)."""
    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    _by_resource: dict[tuple[Any, ...], list[Any]] = attrs.field(factory=dict, init=False)
    _indexed: int = attrs.field(default=0, init=False)

    def _KubernetesEmulator__get_objs(self, request: Any, strict: bool) -> list[Any]:
        """kmock's object lookup (it scans every object of every kind), through an index
        by resource: objects are only ever added to kmock's store, never removed, so
        the index follows by taking in the keys added since the last lookup."""
        wanted = request.resource
        if wanted is None or None in (wanted.group, wanted.version, wanted.plural):
            return super()._KubernetesEmulator__get_objs(request, strict)  # type: ignore[misc, no-any-return]
        for key in itertools.islice(self._objects.keys(), self._indexed, None):
            resource = key[0]
            kind_key = (resource.group, resource.version, resource.plural)
            self._by_resource.setdefault(kind_key, []).append(key)
            self._indexed += 1
        found = []
        for key in self._by_resource.get((wanted.group, wanted.version, wanted.plural), []):
            _, namespace, name = key
            if strict:
                namespace_ok = namespace == request.namespace
            else:
                namespace_ok = request.namespace is None or namespace == request.namespace
            if namespace_ok and (request.name is None or name == request.name):
                found.append(self._objects[key])
        return found

    async def _serve_list(self, request: Any) -> Any:
        """kmock's list, filtered by `labelSelector` as the API server filters it
        (equality-based: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated)."""
        payload: Any = await super()._serve_list(request)
        selector = request.params.get("labelSelector")
        if selector:
            payload["items"] = [item for item in payload["items"] if _selected(item, selector)]
        return payload

    def _stored_version(self, request: Any) -> str | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        stored = self._objects[key]
        version = stored.raw.get("metadata", {}).get("resourceVersion")
        return None if version is None else str(version)

    async def _handle(self, request: Any) -> web.StreamResponse:
        try:
            return await self._handle_versioned(request)
        finally:
            if self.forget_served:
                for index in range(len(self._requests) - 1, -1, -1):
                    if self._requests[index] is request:
                        del self._requests[index]
                        break

    async def _handle_versioned(self, request: Any) -> web.StreamResponse:
        writes = (kmock.action.CREATE, kmock.action.UPDATE)
        if request.resource is None or request.action not in writes:
            response: web.StreamResponse = await super()._handle(request)
            return response
        async with self._writes:  # the version check and the write are one step
            self._check_and_version(request)
            response = await super()._handle(request)
            return response

    def _check_and_version(self, request: Any) -> None:
        """Refuse a write onto an old version; give the write a new version."""
        version = str(next(self._versions))
        data = request.data
        if isinstance(data, list):  # a JSON patch
            tested = [
                str(op.get("value"))
                for op in data
                if op.get("op") == "test" and op.get("path") == "/metadata/resourceVersion"
            ]
            if tested and tested[0] != self._stored_version(request):
                raise ResourceVersionConflictError()
            data = [*data, {"op": "add", "path": "/metadata/resourceVersion", "value": version}]
        elif isinstance(data, dict):
            expected = (data.get("metadata") or {}).get("resourceVersion")
            stale = expected is not None and str(expected) != self._stored_version(request)
            if request.action == kmock.action.UPDATE and stale:
                raise ResourceVersionChangedError()
            data = {**data, "metadata": {**data.get("metadata", {}), "resourceVersion": version}}
        object.__setattr__(request, "data", data)  # the frozen request, amended in place


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata", {}) or {}).get("labels", {}) or {}
    for term in (part.strip() for part in selector.split(",") if part.strip()):
        if "!=" in term:
            key, value = term.split("!=", 1)
            matched = labels.get(key.strip()) != value.strip()
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            matched = labels.get(key.strip()) == value.strip()
        elif term.startswith("!"):
            matched = term[1:].strip() not in labels
        else:
            matched = term in labels
        if not matched:
            return False
    return True


class Cluster:
    """A thin kubectl: writes objects as the API server would store them."""

    def __init__(self, emulator: kmock.KubernetesEmulator) -> None:
        self.emulator = emulator
        self._uids = itertools.count(1)

    @property
    def url(self) -> str:
        return str(self.emulator.url).rstrip("/")

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, json=body, headers=headers) as response,
        ):
            return response.status, await response.json(content_type=None)

    async def apply_plan(self, document: dict[str, Any], namespace: str = "default") -> str:
        """`kubectl apply` of a new TrainingPlan: the server adds uid, generation, resource
        version and the creation time."""
        body = copy.deepcopy(document)
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        meta["uid"] = f"uid-{next(self._uids):04d}"
        meta["generation"] = 1
        meta["creationTimestamp"] = datetime.now(tz=UTC).isoformat()
        status, answer = await self._call(
            "POST", f"/apis/trainplan.dev/v1alpha1/namespaces/{namespace}/trainingplans", body
        )
        assert status in (200, 201), answer
        return str(meta["name"])

    async def apply_budget(
        self, name: str, spec: dict[str, Any], namespace: str = "default"
    ) -> None:
        """`kubectl apply` of a new GPUBudget."""
        body = {
            "apiVersion": "trainplan.dev/v1alpha1",
            "kind": "GPUBudget",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{next(self._uids):04d}",
                "generation": 1,
                "creationTimestamp": datetime.now(tz=UTC).isoformat(),
            },
            "spec": spec,
        }
        status, answer = await self._call(
            "POST", f"/apis/trainplan.dev/v1alpha1/namespaces/{namespace}/gpubudgets", body
        )
        assert status in (200, 201), answer

    def budget(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.objects("trainplan.dev/v1alpha1/gpubudgets", namespace).get(name, {})

    async def patch_plan_spec(
        self, name: str, spec_patch: dict[str, Any], namespace: str = "default"
    ) -> None:
        """`kubectl patch` of the spec: the server bumps the generation."""
        current = self.plan(name, namespace)
        generation = int(current.get("metadata", {}).get("generation", 1)) + 1
        status, answer = await self._call(
            "PATCH",
            f"/apis/trainplan.dev/v1alpha1/namespaces/{namespace}/trainingplans/{name}",
            {"metadata": {"generation": generation}, "spec": spec_patch},
        )
        assert status == 200, answer

    async def write_job_status(
        self, name: str, status_patch: dict[str, Any], namespace: str = "default"
    ) -> None:
        """What the Job controller writes to a Job's status."""
        code, answer = await self._call(
            "PATCH",
            f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status",
            {"status": status_patch},
        )
        assert code == 200, answer

    async def complete_job(self, name: str, completion_time: str) -> None:
        """What the Job controller writes when the Job succeeds."""
        await self.write_job_status(
            name,
            {
                "active": 0,
                "succeeded": 1,
                "completionTime": completion_time,
                "conditions": [{"type": "Complete", "status": "True"}],
            },
        )

    async def stamp_jobset_creation(
        self, name: str, created: str, namespace: str = "default"
    ) -> None:
        """The JobSet's `metadata.creationTimestamp`, which the API server sets when the
        operator creates it (kmock sets none)."""
        code, answer = await self._call(
            "PATCH",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}",
            {"metadata": {"creationTimestamp": created}},
        )
        assert code == 200, answer

    async def write_jobset_status(
        self, name: str, status: dict[str, Any], namespace: str = "default"
    ) -> None:
        """What the JobSet controller writes to a JobSet's status (a merge patch: its
        lists, `conditions` and `replicatedJobsStatus`, are replaced whole)."""
        code, answer = await self._call(
            "PATCH",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}/status",
            {"status": status},
        )
        assert code == 200, answer

    async def create_rank0_pod(
        self, plan_name: str, job: str, status: dict[str, Any], namespace: str = "default"
    ) -> None:
        """What the Job controller and the kubelet make of a plan's Job: its rank-0 pod
        (completion index 0, the plan's label) with `status`."""
        code, answer = await self._call(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job}-0-abcde",
                    "namespace": namespace,
                    "uid": f"pod-{plan_name}",
                    "labels": {PLAN_LABEL: plan_name},
                    "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
                },
                "status": status,
            },
        )
        assert code in (200, 201), answer

    async def write_plan_status(
        self, name: str, status_patch: dict[str, Any], namespace: str = "default"
    ) -> None:
        """A status write to a plan, as the operator's ETA loop makes from the pods'
        metrics (progress, failures, GPU-hours)."""
        code, answer = await self._call(
            "PATCH",
            f"/apis/trainplan.dev/v1alpha1/namespaces/{namespace}/trainingplans/{name}/status",
            {"status": status_patch},
        )
        assert code == 200, answer

    def cluster_calibration(self, name: str) -> dict[str, Any]:
        """The ClusterCalibration `name` as stored."""
        return self.objects(CLUSTER_CALIBRATIONS, namespace=None).get(name, {})

    async def create_cluster_calibration(self, document: dict[str, Any]) -> None:
        """A ClusterCalibration as whoever maintains it writes it (status included)."""
        body = copy.deepcopy(document)
        body.setdefault("metadata", {}).setdefault("generation", 1)
        code, answer = await self._call(
            "POST", "/apis/trainplan.dev/v1alpha1/clustercalibrations", body
        )
        assert code in (200, 201), answer

    async def create_cluster_peering(self, name: str) -> None:
        """The ClusterKopfPeering `name` (the chart creates it; the operator never does)."""
        code, answer = await self._call(
            "POST",
            "/apis/kopf.dev/v1/clusterkopfpeerings",
            {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}},
        )
        assert code in (200, 201), answer

    def peers(self, name: str) -> dict[str, Any]:
        """The operators recorded in the ClusterKopfPeering `name`, by identity."""
        peering = self.objects(CLUSTER_PEERINGS, namespace=None).get(name, {})
        return dict(peering.get("status") or {})

    def objects(
        self, resource: str, namespace: str | None = "default"
    ) -> dict[str, dict[str, Any]]:
        """Live (not deleted) objects of a resource, by name (namespace None: a
        cluster-scoped resource)."""
        found = {}
        for key, obj in self.emulator.objects.items():
            res, ns, name = key
            if str(res) == str(kmock.resource(resource)) and ns == namespace and not obj.deleted:
                found[name] = _plain(obj)
        return found

    def plan(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.objects(TRAINING_PLANS, namespace).get(name, {})

    async def wait_for(
        self, check: Callable[[], bool], what: str, timeout_seconds: float = WAIT_SECONDS
    ) -> None:
        """Poll `check` every 50 ms until it holds; fail with `what` after the timeout."""
        deadline = asyncio.get_running_loop().time() + timeout_seconds
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out after {timeout_seconds}s waiting for {what}")
            await asyncio.sleep(0.05)

    async def wait_for_phase(self, name: str, phase: str) -> dict[str, Any]:
        await self.wait_for(
            lambda: self.plan(name).get("status", {}).get("phase") == phase,
            f"{name} to reach phase {phase} (now {self.plan(name).get('status', {})})",
        )
        return self.plan(name)


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class OperatorProcess:
    """The operator in a thread with its own event loop, as in a real process: Kopf
    cancels every task of its loop when it stops, so it must not share the test's."""

    def __init__(
        self,
        cluster: Cluster,
        catalog: Catalog,
        config: OperatorConfig | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.cluster = cluster
        self.catalog = catalog
        self.clock = clock
        """The operator's clock (tz-aware); None: the wall clock."""
        # Operator metrics on any free port: several operators start in one test session.
        self.config = config or OperatorConfig(metrics_port=0, metrics_address="127.0.0.1")
        self._thread: threading.Thread | None = None
        self._context: ControllerContext | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None

    def _login(self, **_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=self.cluster.url, insecure=True)

    @property
    def metrics_port(self) -> int | None:
        """The port the operator metrics are served on (chosen at start-up)."""
        return None if self._context is None else self._context.metrics_port

    def _run(self, ready: threading.Event) -> None:
        context = self._context = ControllerContext(catalog=self.catalog, config=self.config)
        if self.clock is not None:
            context.clock = self.clock
        try:
            asyncio.run(
                run_operator(context, login=self._login, stop_flag=self._stop, ready_flag=ready)
            )
        except asyncio.CancelledError:
            pass  # Kopf's own way of ending once the stop flag is set
        except BaseException as error:  # reported by stop()
            self._error = error

    async def start(self) -> None:
        self._stop = threading.Event()
        ready = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, args=(ready,), name="operator")
        self._thread.start()
        try:
            started = await asyncio.to_thread(ready.wait, WAIT_SECONDS)
            assert started, f"the operator did not start: {self._error!r}"
            await self._wait_for_watches()
        except BaseException:
            await self.stop()
            raise

    async def _wait_for_watches(self) -> None:
        emulator = self.cluster.emulator
        # Objects applied before the watches connect arrive twice (kmock has no
        # resourceVersion to deduplicate with); the handlers are idempotent either way.
        await self.cluster.wait_for(
            lambda: (
                len(emulator[kmock.action.WATCH, kmock.resource(TRAINING_PLANS)]) > 0
                and len(emulator[kmock.action.WATCH, kmock.resource(JOBS)]) > 0
            ),
            "the operator's watches",
        )

    async def stop(self) -> None:
        """Set the stop flag, wait for the thread, and fail on any error it had."""
        if self._thread is None:
            return
        self._stop.set()
        thread, self._thread = self._thread, None
        await asyncio.to_thread(thread.join, WAIT_SECONDS)
        assert not thread.is_alive(), "the operator did not stop in time"
        assert self._error is None, self._error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class TrainingPod:
    """A rank-0 training pod's metrics endpoint, on 127.0.0.1."""

    def __init__(self) -> None:
        self.step = 0
        self.healthy = True
        self.port = 0
        self.gpu_utilization_ratio: float | None = None
        """Set to serve one GPU's series too."""
        self.tokens_per_step = 1000
        """The global tokens of one step (set to the plan's, as a real trainer reports)."""
        self.page: str | None = None
        """When set, served as is instead of the training series (a hostile pod)."""
        self.checkpoint_seconds: tuple[float, ...] = ()
        """Seconds of each checkpoint written, served as the checkpoint-time histogram."""

    async def metrics(self, _: web.Request) -> web.Response:
        if not self.healthy:
            return web.Response(status=500, text="boom")
        if self.page is not None:
            return web.Response(text=self.page)
        return web.Response(
            text=(
                "# TYPE trainplan_train_step gauge\n"
                f"trainplan_train_step {self.step}\n"
                "# TYPE trainplan_train_tokens gauge\n"
                f"trainplan_train_tokens {self.step * self.tokens_per_step}\n"
                + self._checkpoint_series()
                + self._gpu_series()
            )
        )

    def _checkpoint_series(self) -> str:
        if not self.checkpoint_seconds:
            return ""
        count, total = len(self.checkpoint_seconds), sum(self.checkpoint_seconds)
        return (
            "# TYPE trainplan_train_checkpoint_seconds histogram\n"
            f'trainplan_train_checkpoint_seconds_bucket{{le="+Inf"}} {count}\n'
            f"trainplan_train_checkpoint_seconds_count {count}\n"
            f"trainplan_train_checkpoint_seconds_sum {total}\n"
        )

    def _gpu_series(self) -> str:
        if self.gpu_utilization_ratio is None:
            return ""
        return (
            "# TYPE trainplan_gpu_utilization_ratio gauge\n"
            f'trainplan_gpu_utilization_ratio{{gpu="0"}} {self.gpu_utilization_ratio}\n'
            "# TYPE trainplan_gpu_memory_used_bytes gauge\n"
            'trainplan_gpu_memory_used_bytes{gpu="0"} 4e10\n'
            "# TYPE trainplan_gpu_memory_total_bytes gauge\n"
            'trainplan_gpu_memory_total_bytes{gpu="0"} 8e10\n'
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def write_kubeconfig(path: Path, cluster: Cluster, token: str = "test-token") -> Path:
    """A kubeconfig at `path` whose current context is the emulator, with bearer `token`."""
    context = {"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": cluster.url}}],
                "users": [{"name": "tester", "user": {"token": token}}],
                "contexts": [context],
                "current-context": "kmock",
            }
        )
    )
    return path


class OperatorCommand:
    """`trainplan operator` as a real process against the emulator, in its own process
    group: it logs in with a kubeconfig whose bearer token is `token` (so the emulator's
    requests tell operators apart) and serves its liveness endpoint on 127.0.0.1."""

    def __init__(
        self, cluster: Cluster, workdir: Path, *args: str, token: str = "test-token"
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.args: Sequence[str] = args
        self.token = token
        self.liveness = f"http://127.0.0.1:{free_port()}/healthz"
        self.log_path = workdir / f"{token}.log"
        self.process: asyncio.subprocess.Process | None = None
        self._log: IO[str] | None = None

    def _kubeconfig(self) -> Path:
        return write_kubeconfig(self.workdir / f"{self.token}.kubeconfig", self.cluster, self.token)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    async def _healthy(self) -> bool:
        try:
            async with aiohttp.ClientSession() as session, session.get(self.liveness) as answer:
                return answer.status == 200
        except aiohttp.ClientError:
            return False

    async def start(self, env: dict[str, str] | None = None) -> None:
        """Start it and wait for its liveness endpoint."""
        script = Path(sys.executable).parent / "trainplan"
        self._log = self.log_path.open("w")
        self.process = await asyncio.create_subprocess_exec(
            str(script),
            "operator",
            "--liveness",
            self.liveness,
            "--metrics-port",
            "0",
            "--metrics-address",
            "127.0.0.1",
            *self.args,
            env={
                "KUBECONFIG": str(self._kubeconfig()),
                "PATH": str(script.parent),
                "HOME": str(self.workdir),
                **(env or {}),
            },
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        deadline = asyncio.get_running_loop().time() + 30
        while not await self._healthy():
            assert self.process.returncode is None, self.log()
            assert asyncio.get_running_loop().time() < deadline, "no liveness endpoint"
            await asyncio.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL its process group: no goodbye, no clean-up (a node lost, an OOM kill)."""
        if self.process is not None and self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self, timeout_seconds: float = 30) -> int:
        """SIGTERM, wait, and SIGKILL the group if it outlives `timeout_seconds`; the
        process's exit code (negative: the signal that ended it)."""
        process = self.process
        if process is None:
            return 0
        try:
            if process.returncode is None:
                # Not `process.send_signal`: Popen.send_signal polls first, and on a
                # process that `kill` has just ended that poll reaps it before asyncio's
                # child watcher can, which then reports exit code 255 instead of -9.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
            try:
                return await asyncio.wait_for(process.wait(), timeout_seconds)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                raise
        finally:
            if self._log is not None:
                self._log.close()


def budget_series(port: int | None, budget: str = "team-a") -> dict[str, float]:
    """`trainplan_budget_gpu_hours` of `budget` on the operator's /metrics, by kind."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    return {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "trainplan_budget_gpu_hours" and sample.labels["budget"] == budget
    }
