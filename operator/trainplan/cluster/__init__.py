"""The only code that talks to the Kubernetes API: a small async client (aiohttp) with
create-or-adopt apply, get, list, merge-patch (status too) and events. Does network I/O."""

from trainplan.cluster.client import (
    ApplyResult,
    Connection,
    KubernetesApi,
    KubernetesApiError,
    OwnershipConflictError,
    ResourceVersionConflictError,
    event_for,
)
from trainplan.cluster.resources import ResourcePath, resource_path

__all__ = [
    "ApplyResult",
    "Connection",
    "KubernetesApi",
    "KubernetesApiError",
    "OwnershipConflictError",
    "ResourcePath",
    "ResourceVersionConflictError",
    "event_for",
    "resource_path",
]
