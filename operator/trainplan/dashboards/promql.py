"""PromQL pieces shared by the dashboard and the alert rules.

Every metric name comes from a `MetricSpec` of `trainplan.runtime.schema`; nothing here
spells one out.

Labels: every trainplan series carries `namespace` and `plan` in Prometheus. The operator's
series (and those of `trainplan run --local`, with `namespace="local"`) export them
themselves; the training pods' series (`trainplan_train_*`, `trainplan_gpu_*`) get them from
the scrape, as `trainplan operator --prometheus-url` expects: the pod's namespace and its
`trainplan.dev/plan` label, relabelled by a PodMonitor or a scrape config.
"""

from __future__ import annotations

from typing import Final

from trainplan.runtime.schema import MetricSpec

PLAN_LABELS: Final = ("namespace", "plan")
"""The labels that name a plan on every trainplan series."""

BY_PLAN: Final = "by (namespace, plan)"
ON_PLAN: Final = "on (namespace, plan)"

UP: Final = "up"
"""Prometheus' own series: 1 for each target its last scrape reached."""


def series(spec: MetricSpec, *matchers: str) -> str:
    """`name{matcher, ...}`, or the bare name without matchers."""
    if not matchers:
        return spec.name
    return f"{spec.name}{{{', '.join(matchers)}}}"


def equals(label: str, value: str) -> str:
    """The matcher `label="value"`."""
    return f'{label}="{value}"'


def matches(label: str, pattern: str) -> str:
    """The matcher `label=~"pattern"`."""
    return f'{label}=~"{pattern}"'
