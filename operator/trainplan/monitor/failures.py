"""Failures of a training Job read from Job and Pod status, each counted once however
often it is observed (pure).

A failure is identified by what Kubernetes keeps about it: a container's restart
(pod uid, container, restart number), or a failed pod (pod uid); the Job's `failed`
counter (`workload_failures`; a JobSet's restarts) covers pods already deleted.
Reasons: the container's terminated reason (OOMKilled, Error, ...) and exit code, the
pod's reason (Evicted, NodeLost, ...), or its DisruptionTarget condition (preemption,
eviction, node drain).
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


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def workload_failures(workload: Mapping[str, Any]) -> int:
    """The failures a Job's or JobSet's own status counts. A batch/v1 Job: `failed`
    (its failed pods). A JobSet (kubernetes-sigs/jobset v0.12.0, `api/jobset/v1alpha2/
    jobset_types.go`) counts Jobs, not pods: each failure its failure policy answered
    with a restart, `restarts` (all Jobs recreated) plus `replicatedJobsStatus[].
    jobRestarts` (one Job recreated); and, once it has failed (`terminalState: Failed`),
    the failed Jobs that ended it (`replicatedJobsStatus[].failed`). While it runs on, a
    failed Job is the one its latest restart answers (`failure_policy.go` counts the
    restart in the same status write), so it is not counted twice."""
    status = workload.get("status") or {}
    if workload.get("kind") != "JobSet":
        return int(status.get("failed", 0) or 0)
    replicated = [r for r in status.get("replicatedJobsStatus") or [] if isinstance(r, Mapping)]
    count = _count(status.get("restarts"))
    count += sum(_count(n) for r in replicated for n in r.get("jobRestarts") or [])
    failed = any(
        isinstance(c, Mapping) and c.get("type") == "Failed" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if failed or status.get("terminalState") == "Failed":
        count += sum(_count(r.get("failed")) for r in replicated)
    return count


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
    """The ledger after looking at the Job's pods and the Job (or JobSet) itself."""
    keys = set(ledger.keys)
    last = ledger.last
    for pod in pods:
        for failure in pod_failures(pod):
            if failure.key not in keys:
                keys.add(failure.key)
                last = failure
    job_failed = ledger.job_failed
    if job is not None:
        job_failed = max(job_failed, workload_failures(job))
    return replace(ledger, keys=frozenset(keys), job_failed=job_failed, last=last)
