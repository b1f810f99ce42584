"""Which address a plan's pods are scraped at: only each running pod's own IP literal."""

from __future__ import annotations

from typing import Any

from trainplan.controller.revision import node_urls


def _pod(index: str, ip: object, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": index}},
        "status": {"phase": phase, "podIP": ip},
    }


def test_only_ip_literals_of_running_pods_are_scraped() -> None:
    pods = [
        _pod("0", "10.1.2.3"),
        _pod("1", "fd00::5"),
        _pod("2", "metadata.google.internal"),
        _pod("3", "169.254.169.254/latest/meta-data#"),
        _pod("4", "10.1.2.4", phase="Pending"),
        _pod("5", None),
        _pod("6", "10.1.2.6@evil.example"),
    ]
    assert node_urls(pods, 9400) == {
        "0": "http://10.1.2.3:9400/metrics",
        "1": "http://[fd00::5]:9400/metrics",
    }
