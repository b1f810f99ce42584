"""trainplan's Kubernetes client over an in-memory API server that records every request
as the RBAC rule it needs (a test helper for `test_chart_rbac.py`).

`RecordingApi` is the real `trainplan.cluster.KubernetesApi` with only `_request` (the one
method that sends HTTP) replaced: the URL the client built is parsed back into API group,
resource, subresource, namespace and name, the HTTP method into the RBAC verb (GET of an
object: get, GET of a collection: list, POST: create, PATCH: patch), and the request is
answered from a dict the way the API server would (404, 409 on a name taken or a stale
`resourceVersion`, merge patches, label selectors). A create whose owner reference blocks
the owner's deletion also records `update` on the owner's `finalizers`, which the API
server's OwnerReferencesPermissionEnforcement admission plugin requires. Each request
also records the line of the operator's code that made it (the innermost frame under
operator/trainplan outside the client itself), so a test can tell which call sites it has
driven.
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final
from urllib.parse import parse_qs

from trainplan.cluster import (
    Connection,
    KubernetesApi,
    KubernetesApiError,
    ResourceVersionConflictError,
)
from trainplan.cluster.resources import resource_path

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGE_DIR: Final = REPO_ROOT / "operator" / "trainplan"
CLIENT_FILE: Final = PACKAGE_DIR / "cluster" / "client.py"

JSON = dict[str, Any]
_VERBS: Final = {"POST": "create", "PATCH": "patch"}


@dataclass(frozen=True, slots=True)
class Request:
    """One request: the RBAC rule it needs and the operator's line that made it."""

    group: str
    resource: str
    """The plural, with `/subresource` for a subresource (e.g. `gpubudgets/status`)."""
    verb: str
    site: tuple[str, int]
    """(path relative to the repository, line number) of the calling code."""


@dataclass(frozen=True, slots=True)
class _Target:
    group: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _parse(path: str) -> _Target:
    parts = [part for part in path.split("/") if part]
    if parts[0] == "api":  # /api/v1/...
        group, rest = "", parts[2:]
    else:  # /apis/<group>/<version>/...
        group, rest = parts[1], parts[3:]
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    return _Target(
        group,
        rest[0],
        namespace,
        rest[1] if len(rest) > 1 else None,
        rest[2] if len(rest) > 2 else None,
    )


def _call_site() -> tuple[str, int]:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = Path(frame.f_code.co_filename)
        if filename.is_relative_to(PACKAGE_DIR) and filename != CLIENT_FILE:
            return str(filename.relative_to(REPO_ROOT)), frame.f_lineno
        frame = frame.f_back
    return "", 0


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _selected(obj: Mapping[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels", {}) or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _owner_finalizer_updates(body: Mapping[str, Any], site: tuple[str, int]) -> list[Request]:
    """What the API server's OwnerReferencesPermissionEnforcement plugin checks on a
    create: an owner reference with `blockOwnerDeletion: true` needs `update` on the
    owner's `finalizers` subresource."""
    requests = []
    for owner in (body.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("blockOwnerDeletion"):
            owner_path = resource_path(owner["apiVersion"], owner["kind"])
            group = owner["apiVersion"].rpartition("/")[0]
            requests.append(Request(group, f"{owner_path.plural}/finalizers", "update", site))
    return requests


class RecordingApi(KubernetesApi):
    """The operator's client, answered from memory; `requests` lists what it asked."""

    def __init__(self) -> None:
        super().__init__(Connection(server="http://api.invalid"))
        self.objects: dict[tuple[str, str, str | None, str], JSON] = {}
        self.requests: list[Request] = []
        self.conflict_once: set[tuple[str, str]] = set()
        """(group, resource) whose next patch fails with 409, as if another writer won."""
        self._versions = itertools.count(1)

    def put(self, group: str, plural: str, obj: Mapping[str, Any]) -> JSON:
        """Store an object as the API server would (uid, resource version)."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(group, plural, meta.get("namespace"), meta["name"])] = stored
        return copy.deepcopy(stored)

    def stored(self, group: str, plural: str, namespace: str, name: str) -> JSON:
        return copy.deepcopy(self.objects[(group, plural, namespace, name)])

    async def _request(
        self, method: str, url: str, *, body: Any = None, content_type: str | None = None
    ) -> JSON:
        path, _, query = url.partition("?")
        target = _parse(path)
        verb = _VERBS.get(method) or ("get" if target.name else "list")
        resource = target.plural + (f"/{target.subresource}" if target.subresource else "")
        self.requests.append(Request(target.group, resource, verb, _call_site()))
        if verb == "list":
            selector = parse_qs(query).get("labelSelector", [""])[0]
            items = [
                copy.deepcopy(obj)
                for (group, plural, namespace, _), obj in sorted(
                    self.objects.items(), key=lambda item: str(item[0])
                )
                if (group, plural) == (target.group, target.plural)
                and namespace == target.namespace
                and _selected(obj, selector)
            ]
            return {"items": items}
        if verb == "create":
            self.requests.extend(_owner_finalizer_updates(body, _call_site()))
            meta = body.get("metadata", {})
            key = (target.group, target.plural, target.namespace, meta["name"])
            if key in self.objects:
                raise ResourceVersionConflictError(409, "AlreadyExists", f"{key} exists")
            return self.put(target.group, target.plural, body)
        assert target.name is not None
        key = (target.group, target.plural, target.namespace, target.name)
        if key not in self.objects:
            raise KubernetesApiError(404, "NotFound", f"{key} not found")
        if verb == "get":
            return copy.deepcopy(self.objects[key])
        return self._patch(key, resource, target.subresource, body)

    def _patch(
        self, key: tuple[str, str, str | None, str], resource: str, sub: str | None, body: Any
    ) -> JSON:
        stored = self.objects[key]
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if (key[0], resource) in self.conflict_once or (
            wanted is not None and wanted != stored["metadata"]["resourceVersion"]
        ):
            self.conflict_once.discard((key[0], resource))
            raise ResourceVersionConflictError(409, "Conflict", "the object has been modified")
        if sub == "status":  # the status subresource writes the status alone
            merged = {**stored, "status": merge_patch(stored.get("status"), body.get("status"))}
        else:
            merged = merge_patch(stored, {k: v for k, v in body.items() if k != "metadata"})
            merged["metadata"] = merge_patch(stored["metadata"], body.get("metadata") or {})
        return self.put(key[0], key[1], merged)
