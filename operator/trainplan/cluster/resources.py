"""URL paths of the kinds trainplan reads and writes (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.api import (
    API_VERSION,
    CLUSTER_CALIBRATION_KIND,
    CLUSTER_CALIBRATION_PLURAL,
    GPU_BUDGET_KIND,
    GPU_BUDGET_PLURAL,
    TRAINING_PLAN_KIND,
    TRAINING_PLAN_PLURAL,
)

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta1"
"""Kueue's Workload API: v1beta1 is served by every Kueue release that has
`spec.active` (v1beta2, the storage version since Kueue 0.15, has the same field)."""

_KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Service"): ("services", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Event"): ("events", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("jobsets", True),
    (KUEUE_API_VERSION, "Workload"): ("workloads", True),
    (API_VERSION, TRAINING_PLAN_KIND): (TRAINING_PLAN_PLURAL, True),
    (API_VERSION, GPU_BUDGET_KIND): (GPU_BUDGET_PLURAL, True),
    (API_VERSION, CLUSTER_CALIBRATION_KIND): (CLUSTER_CALIBRATION_PLURAL, False),
}


@dataclass(frozen=True, slots=True)
class ResourcePath:
    """Where a kind lives in the API: `/api/v1` or `/apis/<group>/<version>`, plural."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def prefix(self) -> str:
        return (
            f"/api/{self.api_version}"
            if "/" not in self.api_version
            else (f"/apis/{self.api_version}")
        )

    def collection(self, namespace: str | None) -> str:
        """The collection URL, in a namespace for namespaced kinds."""
        if self.namespaced and namespace:
            return f"{self.prefix}/namespaces/{path_segment(namespace)}/{self.plural}"
        return f"{self.prefix}/{self.plural}"

    def item(self, namespace: str | None, name: str, subresource: str | None = None) -> str:
        """One object's URL, optionally a subresource such as `status`."""
        url = f"{self.collection(namespace)}/{path_segment(name)}"
        return f"{url}/{path_segment(subresource)}" if subresource else url


_NOT_IN_A_SEGMENT = frozenset("/\\?#%")


def path_segment(value: str) -> str:
    """`value` as one segment of a URL path; ValueError for a value that would be another
    path (empty, `.`, `..`, a slash, a percent-escape, a query or a fragment), so that no
    name read from a spec can make a request reach a different object or namespace."""
    if value in ("", ".", "..") or not _NOT_IN_A_SEGMENT.isdisjoint(value):
        raise ValueError(f"not a Kubernetes name: {value!r}")
    return value


def resource_path(api_version: str, kind: str) -> ResourcePath:
    """The path of a known kind; `KeyError` names the kinds this client knows."""
    try:
        plural, namespaced = _KINDS[(api_version, kind)]
    except KeyError:
        known = ", ".join(f"{v}/{k}" for v, k in sorted(_KINDS))
        raise KeyError(f"unknown kind {api_version}/{kind}; known: {known}") from None
    return ResourcePath(api_version, kind, plural, namespaced)
