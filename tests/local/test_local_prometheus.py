"""End to end: a real local run (2 processes, gloo) scraped by a real Prometheus server
on 127.0.0.1; PromQL on its ETA series returns data, and the ETA converges; every query of
the Grafana dashboard and every alert rule is accepted, and returns data where a local run
has the series."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from tests.dashboard_queries import (
    CALIBRATED_ONLY,
    MAYBE_ABSENT_LOCALLY,
    Query,
    dashboard_queries,
    metric_names,
    variable_queries,
)
from tests.integration.prometheus_server import PrometheusServer, free_port, prometheus_binary
from trainplan.api import parse_training_plan_spec
from trainplan.cli.main import main
from trainplan.dashboards import alert_rules
from trainplan.local.launch import LOCAL_NAMESPACE, LocalPlan, plan_locally
from trainplan.local.runner import LocalOptions, LocalResult, run_local
from trainplan.planner import load_catalog

STEPS = 80
PLAN = "promlocal"
OPERATOR_JOB = "trainplan-metrics"
"""The local exporter's scrape job, named as the chart's operator Service (the operator
series, and the OperatorDown rule's `up`)."""


def _spec(steps: int = STEPS) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(Path("deploy/examples/tiny-local.yaml").read_text())
    document["spec"]["data"] = {"samples": 16 * steps, "epochs": 1}
    document["spec"]["reliability"] = {"checkpointIntervalSteps": 20, "checkpointSeconds": 1}
    return document


def _queries() -> tuple[list[Query], list[Query]]:
    """Every dashboard query (variables set to the run's namespace and plan) and every
    alert rule's quantity; and those of them that must return data while a local run goes:
    all but those reading series a local run lacks (the GPU series without NVML, the
    deadline and budget series, and a ClusterCalibration's: a local run is corrected by
    none)."""
    variables = variable_queries(LOCAL_NAMESPACE, PLAN)
    queries = [
        *dashboard_queries(LOCAL_NAMESPACE, PLAN),
        *(Query(f"{rule.alert} quantity", rule.quantity) for rule in alert_rules()),
    ]
    expected = variables + [
        q
        for q in queries
        if not metric_names(q.expr) & MAYBE_ABSENT_LOCALLY and CALIBRATED_ONLY not in q.expr
    ]
    return queries + variables, expected


@dataclass(frozen=True)
class ScrapedRun:
    """What a real Prometheus saw of one local run, and how the run ended."""

    plan: LocalPlan
    result: LocalResult
    eta: list[dict[str, Any]]
    """trainplan_plan_eta_seconds of the plan, queried while it ran."""
    progress: list[dict[str, Any]]
    """trainplan_plan_progress_ratio of the plan, above 0, queried while it ran."""
    pending: list[Query]
    """Queries expected to return data that had none by the end of the run."""
    namespaces: set[str]
    """The namespaces the dashboard's namespace variable offered."""
    trace: Path
    """The trace docs/eta.md's export script wrote from Prometheus after the run."""


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> ScrapedRun:
    """One local run (2 processes, `STEPS` steps) with its exporter and its trainer
    scraped every second by a real Prometheus; every dashboard and alert query is run while
    it goes (one run serves every test here: a run costs about 40 s)."""
    prometheus_binary()  # skip by hand / fail in CI when the package is missing
    directory = tmp_path_factory.mktemp("scraped")
    queries, expected = _queries()
    assert len(expected) >= 14
    local = plan_locally(PLAN, parse_training_plan_spec(_spec()), 2, load_catalog())
    exporter_port, trainer_port = free_port(), free_port()
    options = LocalOptions(
        work_dir=directory / "work",
        metrics_port=exporter_port,
        metrics_address="127.0.0.1",
        trainer_metrics_port=trainer_port,
        scrape_interval=0.5,
        show=False,
    )
    outcome: list[LocalResult] = []
    runner = threading.Thread(
        target=lambda: outcome.append(run_local(local, options, None, Console(file=io.StringIO())))
    )
    prometheus = PrometheusServer(
        directory,
        {OPERATOR_JOB: f"127.0.0.1:{exporter_port}", "training": f"127.0.0.1:{trainer_port}"},
        # What the chart's PodMonitor adds to the training pods' series.
        {"training": {"namespace": LOCAL_NAMESPACE, "plan": PLAN}},
    )
    selector = f'namespace="{LOCAL_NAMESPACE}",plan="{PLAN}"'
    started = time.time()
    runner.start()
    try:
        eta: list[dict[str, Any]] = []
        progress: list[dict[str, Any]] = []
        pending = list(expected)
        for _ in range(400):  # bounded: at most about 100 s
            eta = eta or prometheus.query(f"trainplan_plan_eta_seconds{{{selector}}}")
            progress = progress or prometheus.query(
                f"trainplan_plan_progress_ratio{{{selector}}} > 0"
            )
            pending = [q for q in pending if not prometheus.query(q.expr)]
            if (eta and progress and not pending) or not runner.is_alive():
                break
            threading.Event().wait(0.25)
        # Every expression is accepted (`query` asserts the API's success), including the
        # alerts' own and those with no local series.
        for query in queries:
            prometheus.query(query.expr)
        for rule in alert_rules():
            prometheus.query(rule.expr)
        offered = prometheus.query(variable_queries()[0].expr)
        runner.join(timeout=180)
        time.sleep(2.5)  # the last scrapes of the finished run
        trace = _export_trace(prometheus.url, started, time.time(), directory)
    finally:
        runner.join(timeout=180)
        prometheus.stop()
    assert not runner.is_alive()
    (result,) = outcome
    return ScrapedRun(
        plan=local,
        result=result,
        eta=eta,
        progress=progress,
        pending=pending,
        namespaces={r["metric"]["namespace"] for r in offered},
        trace=trace,
    )


def test_prometheus_scrapes_a_local_run_and_the_eta_converges(scraped: ScrapedRun) -> None:
    assert scraped.eta, "no trainplan_plan_eta_seconds in Prometheus"
    assert scraped.progress, "no trainplan_plan_progress_ratio in Prometheus"
    assert 0 < float(scraped.progress[0]["value"][1]) <= 1
    assert scraped.result.exit_code == 0
    revisions = scraped.result.revisions
    end = next(r.elapsed for r in revisions if r.step >= r.total_steps)

    def error_at(progress: float) -> float:
        seen = next(r for r in revisions if r.step >= progress * r.total_steps)
        return abs(seen.elapsed + seen.eta_seconds - end) / end

    # Converges: the error shrinks from a quarter to three quarters of the way, or is within
    # the jitter of CPU step times on a shared two-core machine (a quarter-way error that
    # is small by chance, 0.4%, once met 3.6% at three quarters).
    assert error_at(0.75) < error_at(0.25) or error_at(0.75) < 0.05
    assert error_at(0.75) < 0.10


def test_dashboard_and_alert_queries_run_against_a_local_run(scraped: ScrapedRun) -> None:
    """Every dashboard query and alert expression is accepted (the fixture ran them all);
    the variables, the panels' queries and the quantities the alerts threshold returned
    data while the run went, except where they read series a local run lacks."""
    assert not scraped.pending, f"no data for {[(q.source, q.expr) for q in scraped.pending]}"
    assert scraped.namespaces == {LOCAL_NAMESPACE}


def test_a_trace_exported_from_prometheus_replays(scraped: ScrapedRun, tmp_path: Path) -> None:
    """The trace docs/eta.md's export script wrote replays and is scored against the real
    end."""
    assert scraped.result.exit_code == 0
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(scraped.plan.plan.to_document()), encoding="utf-8")
    replayed = CliRunner().invoke(
        main,
        ["eta", "replay", str(scraped.trace), "--plan", str(plan_file), "-o", "jsonl"],
        env={"NO_COLOR": "1"},
    )
    assert replayed.exit_code == 0, replayed.output
    lines = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert lines[-1]["step"] == scraped.plan.plan.total_steps
    assert any("errors" in line for line in lines), "the trace never reached the real end"


def _export_trace(url: str, start: float, end: float, directory: Path) -> Path:
    """Run docs/eta.md's export script against the test's Prometheus."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "eta.md"
    section = docs.read_text(encoding="utf-8").split("### Export a trace from Prometheus")[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "no export script in docs/eta.md"
    script = directory / "export_trace.py"
    script.write_text(match.group(1), encoding="utf-8")
    environment = {
        **os.environ,
        "PROM": url,
        "NS": LOCAL_NAMESPACE,
        "PLAN": PLAN,
        "START": f"{start:.3f}",
        "END": f"{end:.3f}",
        "STEP": "1s",
    }
    exported = subprocess.run(
        [sys.executable, str(script)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    trace = directory / "trace.jsonl"
    trace.write_text(exported.stdout, encoding="utf-8")
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(rows) > 10
    assert {"time", "step", "failures"} <= rows[0].keys()
    return trace
