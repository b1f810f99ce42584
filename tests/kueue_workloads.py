"""Kueue Workloads (kueue.x-k8s.io/v1beta1) as Kueue v0.14.8 makes and admits them for a
queued trainplan Job (the statuses: `tests/data/kueue_workload_statuses.yaml`), the
upstream schema they validate against
(`tests/data/upstream/kueue-v0.14.8-workload-schema.yaml`) and the names of Kueue's labels
and annotations (`tests/data/upstream/kueue-v0.14.8-constants.txt`); shared by the
contract and integration tests."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

import jsonschema
import yaml

from tests.contract.crd_schema import errors, node_validator

DATA: Final = Path(__file__).resolve().parent / "data"
STATUSES_FILE: Final = DATA / "kueue_workload_statuses.yaml"
SCHEMA_FILE: Final = DATA / "upstream" / "kueue-v0.14.8-workload-schema.yaml"
CONSTANTS_FILE: Final = DATA / "upstream" / "kueue-v0.14.8-constants.txt"
API_VERSION: Final = "kueue.x-k8s.io/v1beta1"
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader where PyYAML has it: the schema is 600 KB (pod templates)."""
_GO_STRING_CONSTANT: Final = re.compile(r'^\t(\w+)\s+(?:\w+\s+)?=\s+"([^"]*)"$')


def workload_name(job_name: str, uid: str, kind: str = "Job", group: str = "batch") -> str:
    """The name Kueue gives the Workload of a job (pkg/controller/jobframework/
    workload_names.go: `<kind>-<name>-` and 5 hex digits of the SHA-1 of kind, group,
    name and uid)."""
    digest = hashlib.sha1("\n".join((kind, group, job_name, uid)).encode()).hexdigest()
    return f"{kind.lower()}-{job_name}"[:247] + "-" + digest[:5]


def workload(job: Mapping[str, Any], *, priority: int = 0) -> dict[str, Any]:
    """The Workload Kueue v0.14.8's batch/v1 Job integration creates for a queued Job
    (`metadata.uid` set), before any status (pkg/controller/jobframework/reconciler.go
    `ConstructWorkload` and `prepareWorkload`, pkg/controller/jobs/job/job_controller.go
    `PodSets`): named by `workload_name`, labelled with the Job's uid, owned by the Job,
    with Kueue's finalizer; one pod set `main` of the Job's parallelism (at most its
    completions) with its pod
    template and, topology-aware scheduling being on by default, a topology request with
    the completion-index label and the template's required or preferred topology. A
    `kueue.x-k8s.io/priority-class` label names a WorkloadPriorityClass (of value
    `priority`)."""
    meta = job["metadata"]
    labels = meta.get("labels", {}) or {}
    uid = str(meta["uid"])
    template = copy.deepcopy(job["spec"]["template"])
    annotations = template.get("metadata", {}).get("annotations", {}) or {}
    topology: dict[str, Any] = {"podIndexLabel": "batch.kubernetes.io/job-completion-index"}
    for level in ("required", "preferred"):
        value = annotations.get(f"kueue.x-k8s.io/podset-{level}-topology")
        if value is not None:
            topology[level] = value
            break
    parallelism, completions = job["spec"].get("parallelism", 1), job["spec"].get("completions")
    spec: dict[str, Any] = {
        "active": True,
        "queueName": labels["kueue.x-k8s.io/queue-name"],
        "podSets": [
            {
                "name": "main",
                "count": parallelism if completions is None else min(parallelism, completions),
                "template": template,
                "topologyRequest": topology,
            }
        ],
        "priority": priority,
        "priorityClassSource": "",
    }
    if "kueue.x-k8s.io/priority-class" in labels:
        spec["priorityClassName"] = labels["kueue.x-k8s.io/priority-class"]
        spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(str(meta["name"]), uid),
            "namespace": meta.get("namespace", "default"),
            "labels": {"kueue.x-k8s.io/job-uid": uid},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


@cache
def _statuses() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(STATUSES_FILE.read_text(encoding="utf-8"))
    return loaded


def status_names() -> list[str]:
    return list(_statuses())


def workload_status(name: str) -> dict[str, Any]:
    """The status `name` of `tests/data/kueue_workload_statuses.yaml`: pending,
    quota_reserved, admitted, evicted, finished."""
    status: dict[str, Any] = copy.deepcopy(_statuses()[name])
    return status


@cache
def _schemas() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(SCHEMA_FILE.read_text(encoding="utf-8"), Loader=_LOADER)
    return loaded


@cache
def upstream_validator(node: str) -> jsonschema.protocols.Validator:
    """A JSON Schema validator of the vendored node `spec` or `status`."""
    return node_validator(_schemas()[node])


def upstream_errors(document: Mapping[str, Any]) -> list[str]:
    """What the Workload schema refuses in a Workload's `spec` and `status` (each error
    prefixed by its part); empty when both validate."""
    return [
        f"{part}.{error}"
        for part in ("spec", "status")
        if part in document
        for error in errors(upstream_validator(part), document[part])
    ]


def upstream_constants() -> dict[str, str]:
    """Kueue's Go string constants of the vendored excerpt, by name."""
    found: dict[str, str] = {}
    for line in CONSTANTS_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        match = _GO_STRING_CONSTANT.match(line)
        assert match, f"not a Go string constant: {line!r}"
        found[match[1]] = match[2]
    return found
