"""The only code that talks to the Kubernetes API: a small async client (aiohttp) with
create-or-adopt apply, get, list, merge-patch (status too) and events, and a one-off read
for commands (`get_object_once`). Does network I/O; `ownership` and `resources` are pure."""

from trainplan.cluster.client import (
    ApiServerUnreachableError,
    ApplyResult,
    Connection,
    KubernetesApi,
    KubernetesApiError,
    NotJsonAnswerError,
    OwnershipConflictError,
    ResourceVersionConflictError,
    StatusKeptChangingError,
    event_for,
    get_object_once,
)
from trainplan.cluster.ownership import (
    OwnerRef,
    OwnershipConflict,
    OwnershipVerdict,
    controller_of,
    judge_ownership,
)
from trainplan.cluster.resources import KUEUE_API_VERSION, ResourcePath, resource_path

__all__ = [
    "KUEUE_API_VERSION",
    "ApiServerUnreachableError",
    "ApplyResult",
    "Connection",
    "KubernetesApi",
    "KubernetesApiError",
    "NotJsonAnswerError",
    "OwnerRef",
    "OwnershipConflict",
    "OwnershipConflictError",
    "OwnershipVerdict",
    "ResourcePath",
    "ResourceVersionConflictError",
    "StatusKeptChangingError",
    "controller_of",
    "event_for",
    "get_object_once",
    "judge_ownership",
    "resource_path",
]
