"""JobSet statuses as the JobSet controller (kubernetes-sigs/jobset v0.12.0) writes them,
from `tests/data/jobset_statuses.yaml`, and the upstream schema they validate against
(`tests/data/upstream/jobset-v0.12.0-schema.yaml`); shared by the unit, contract and
integration tests."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml

DATA: Final = Path(__file__).resolve().parent / "data"
STATUSES_FILE: Final = DATA / "jobset_statuses.yaml"
SCHEMA_FILE: Final = DATA / "upstream" / "jobset-v0.12.0-schema.yaml"
CREATED: Final = "2026-11-22T00:00:00Z"
"""When the fixtures' JobSet was created (its `metadata.creationTimestamp`)."""


@cache
def _fixtures() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(STATUSES_FILE.read_text(encoding="utf-8"))
    return loaded


def fixture_names() -> list[str]:
    return list(_fixtures())


def jobset_status(name: str) -> dict[str, Any]:
    """The `status` of the fixture `name`."""
    status: dict[str, Any] = copy.deepcopy(_fixtures()[name]["status"])
    return status


def jobset_spec_change(name: str) -> dict[str, Any]:
    """What the fixture `name` changes in the JobSet's spec (`suspend`), or nothing."""
    change: dict[str, Any] = copy.deepcopy(_fixtures()[name].get("spec") or {})
    return change


def jobset(name: str) -> dict[str, Any]:
    """trainplan's JobSet `train` (one replicated job `node` of one replica) with the
    fixture's status."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a", "creationTimestamp": CREATED},
        "spec": {
            "suspend": False,
            "replicatedJobs": [{"name": "node", "replicas": 1}],
            **jobset_spec_change(name),
        },
        "status": jobset_status(name),
    }


@cache
def _schemas() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


def upstream_schema(node: str) -> dict[str, Any]:
    """The vendored OpenAPI v3 schema node: `status` or `failurePolicy`."""
    schema: dict[str, Any] = copy.deepcopy(_schemas()[node])
    return schema
