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


def test_unspecified_multicast_and_zoned_addresses_are_not_scraped() -> None:
    # 0.0.0.0 and :: reach the operator's own host; a zone picks its network interface.
    pods = [
        _pod("0", "0.0.0.0"),
        _pod("1", "::"),
        _pod("2", "224.0.0.1"),
        _pod("3", "ff02::1"),
        _pod("4", "fe80::1%eth0"),
        _pod("5", "127.0.0.1"),
    ]
    assert node_urls(pods, 9400) == {"5": "http://127.0.0.1:9400/metrics"}
