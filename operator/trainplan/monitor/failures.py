"""Failures of a training Job read from Job and Pod status, each counted once however
often it is observed (pure).

A failure is identified by what Kubernetes keeps about it: a container's restart
(pod uid, container, restart number), or a failed pod (pod uid); the Job's `failed`
counter covers pods already deleted. Reasons: the container's terminated reason
(OOMKilled, Error, ...) and exit code, the pod's reason (Evicted, NodeLost, ...), or its
DisruptionTarget condition (preemption, eviction, node drain).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure: its identity, why, and when."""

    key: tuple[str, ...]
    reason: str
    time: str | None


@dataclass(frozen=True, slots=True)
class FailureLedger:
    """Every failure seen so far, by identity."""

    keys: frozenset[tuple[str, ...]] = field(default_factory=frozenset)
    job_failed: int = 0
    last: Failure | None = None

    @property
    def count(self) -> int:
        """Distinct failures: those identified, or the Job's count if it is higher (pods
        that failed and were deleted before they were seen)."""
        pod_failures = sum(1 for key in self.keys if key[0] == "pod")
        restarts = len(self.keys) - pod_failures
        return restarts + max(pod_failures, self.job_failed)


def _terminated_reason(state: Mapping[str, Any]) -> tuple[str, str | None]:
    terminated = state.get("terminated") or {}
    reason = str(terminated.get("reason") or "Error")
    code = terminated.get("exitCode")
    if code is not None:
        reason = f"{reason} (exit code {code})"
    return reason, terminated.get("finishedAt")


def pod_failures(pod: Mapping[str, Any]) -> list[Failure]:
    """The failures one pod records."""
    meta = pod.get("metadata", {}) or {}
    uid = str(meta.get("uid") or meta.get("name") or "")
    status = pod.get("status", {}) or {}
    found: list[Failure] = []
    for container in status.get("containerStatuses", []) or []:
        name = str(container.get("name", ""))
        restarts = int(container.get("restartCount", 0) or 0)
        reason, time = _terminated_reason(container.get("lastState", {}) or {})
        for number in range(1, restarts + 1):
            found.append(Failure(("restart", uid, name, str(number)), reason, time))
    if status.get("phase") == "Failed":
        pod_reason: str | None = status.get("reason")
        for condition in status.get("conditions", []) or []:
            if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
                pod_reason = pod_reason or f"Disruption: {condition.get('reason', 'unknown')}"
        finished: str | None = None
        if not pod_reason:
            for container in status.get("containerStatuses", []) or []:
                if (container.get("state", {}) or {}).get("terminated"):
                    pod_reason, finished = _terminated_reason(container["state"])
                    break
        found.append(Failure(("pod", uid), pod_reason or "Failed", finished))
    return found


def observe_failures(
    ledger: FailureLedger, pods: Iterable[Mapping[str, Any]], job: Mapping[str, Any] | None
) -> FailureLedger:
    """The ledger after looking at the Job's pods and the Job itself."""
    keys = set(ledger.keys)
    last = ledger.last
    for pod in pods:
        for failure in pod_failures(pod):
            if failure.key not in keys:
                keys.add(failure.key)
                last = failure
    job_failed = ledger.job_failed
    if job is not None:
        job_failed = max(job_failed, int((job.get("status", {}) or {}).get("failed", 0) or 0))
    return replace(ledger, keys=frozenset(keys), job_failed=job_failed, last=last)
