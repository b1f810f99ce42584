"""End to end: a real local run (2 processes, gloo) scraped by a real Prometheus server
on 127.0.0.1; PromQL on its ETA series returns data, and the ETA converges."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from tests.integration.prometheus_server import PrometheusServer, free_port, prometheus_binary
from trainplan.api import parse_training_plan_spec
from trainplan.local.launch import plan_locally
from trainplan.local.runner import LocalOptions, LocalResult, run_local
from trainplan.planner import load_catalog

STEPS = 80


def _spec() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(Path("deploy/examples/tiny-local.yaml").read_text())
    document["spec"]["data"] = {"samples": 16 * STEPS, "epochs": 1}
    document["spec"]["reliability"] = {"checkpointIntervalSteps": 20, "checkpointSeconds": 1}
    return document


def test_prometheus_scrapes_a_local_run_and_the_eta_converges(tmp_path: Path) -> None:
    prometheus_binary()  # skip by hand / fail in CI when the package is missing
    port = free_port()
    prometheus = PrometheusServer(tmp_path, {"local": f"127.0.0.1:{port}"})
    local = plan_locally("promlocal", parse_training_plan_spec(_spec()), 2, load_catalog())
    outcome: list[LocalResult] = []
    runner = threading.Thread(
        target=lambda: outcome.append(
            run_local(
                local,
                LocalOptions(
                    work_dir=tmp_path / "work",
                    metrics_port=port,
                    metrics_address="127.0.0.1",
                    scrape_interval=0.5,
                    show=False,
                ),
                None,
                Console(file=io.StringIO()),
            )
        )
    )
    runner.start()
    try:
        eta, ratio = [], []
        for _ in range(300):  # bounded: at most 60 s
            eta = prometheus.query('trainplan_plan_eta_seconds{namespace="local",plan="promlocal"}')
            ratio = prometheus.query(
                'trainplan_plan_progress_ratio{namespace="local",plan="promlocal"} > 0'
            )
            if eta and ratio:
                break
            threading.Event().wait(0.2)
        assert eta, "no trainplan_plan_eta_seconds in Prometheus"
        assert ratio, "no trainplan_plan_progress_ratio in Prometheus"
        assert 0 < float(ratio[0]["value"][1]) <= 1
    finally:
        runner.join(timeout=180)
        prometheus.stop()
    assert not runner.is_alive()
    (result,) = outcome
    assert result.exit_code == 0
    revisions = result.revisions
    end = next(r.elapsed for r in revisions if r.step >= r.total_steps)

    def error_at(progress: float) -> float:
        seen = next(r for r in revisions if r.step >= progress * r.total_steps)
        return abs(seen.elapsed + seen.eta_seconds - end) / end

    # Converges: the error shrinks from a quarter to three quarters of the way.
    assert error_at(0.75) < error_at(0.25) or error_at(0.75) < 0.03
    assert error_at(0.75) < 0.10
