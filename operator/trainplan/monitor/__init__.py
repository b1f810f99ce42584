"""Monitoring a training run: its metrics (a pod's endpoint or a Prometheus server) and
its failures (Job and Pod status, each counted once). Parsing is pure; `scrape` does
network I/O. Reads Pods and Jobs as dicts handed in; talks to no Kubernetes API itself."""

from trainplan.monitor.failures import (
    Failure,
    FailureLedger,
    observe_failures,
    pod_failures,
    workload_failures,
)
from trainplan.monitor.metrics import (
    GpuMetrics,
    GpuUsage,
    TrainingMetrics,
    on_node,
    parse_metrics,
    summarize_gpus,
)
from trainplan.monitor.scrape import ScrapeError, ScrapeLimits, query_prometheus, scrape

__all__ = [
    "Failure",
    "FailureLedger",
    "GpuMetrics",
    "GpuUsage",
    "ScrapeError",
    "ScrapeLimits",
    "TrainingMetrics",
    "observe_failures",
    "on_node",
    "parse_metrics",
    "pod_failures",
    "query_prometheus",
    "scrape",
    "summarize_gpus",
    "workload_failures",
]
