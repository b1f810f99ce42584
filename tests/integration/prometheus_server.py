"""A real Prometheus server (Debian's package) for end-to-end tests, on 127.0.0.1; the
static labels of a job stand in for what a PodMonitor's relabelling adds.

`make test` installs it. Run by hand without it, the tests that need it skip and say so;
under CI (`CI` set) a missing binary fails them instead, so CI never passes silently.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

START_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def prometheus_binary() -> str:
    """The prometheus binary, or skip (by hand) / fail (CI) with the reason."""
    binary = shutil.which("prometheus")
    if binary is None:
        reason = "prometheus is not installed (make test installs Debian's package)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


def promtool_binary() -> str:
    """promtool (Debian's prometheus package ships it), or skip (by hand) / fail (CI)."""
    binary = shutil.which("promtool")
    if binary is None:
        reason = "promtool is not installed (make test installs Debian's prometheus package)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


class PrometheusServer:
    """Prometheus scraping the given targets every second, until `stop()`."""

    def __init__(
        self,
        workdir: Path,
        targets: dict[str, str],
        labels: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [
                        {"targets": [target], "labels": (labels or {}).get(job, {})}
                    ],
                }
                for job, target in targets.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._log = (workdir / "prometheus.log").open("w")
        self._process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._workdir = workdir
        deadline = time.monotonic() + START_SECONDS
        while not self._ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError((workdir / "prometheus.log").read_text()[-2000:])
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            payload = json.loads(response.read())
        assert payload["status"] == "success", payload
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._log.close()
