"""`trainplan run --local` end to end: a real 2-process torchrun of the reference trainer
(gloo, CPU) planned, supervised, scraped and reported; then one whose worker is killed."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from tests.runtime.train_harness import worker_pids
from trainplan.api import parse_training_plan_spec
from trainplan.cli.main import main
from trainplan.local import Hooks, LocalOptions, Revision, plan_locally, run_local
from trainplan.planner import load_catalog

ETA_KEYS = {"time", "step", "totalSteps", "etaSeconds", "earliestSeconds", "latestSeconds"}


def _spec(steps: int, interval: int) -> dict[str, Any]:
    """tiny-local, shortened to `steps` optimizer steps of 16 sequences."""
    document: dict[str, Any] = yaml.safe_load(Path("deploy/examples/tiny-local.yaml").read_text())
    spec: dict[str, Any] = document["spec"]
    spec["data"] = {"samples": 16 * steps, "epochs": 1}
    spec["reliability"] = {"checkpointIntervalSteps": interval, "checkpointSeconds": 1}
    return document


def test_run_local_cli_writes_eta_log_report_and_serves_metrics(tmp_path: Path) -> None:
    plan_file = tmp_path / "tiny.yaml"
    plan_file.write_text(yaml.safe_dump(_spec(30, 10)))
    eta_log, report = tmp_path / "eta.jsonl", tmp_path / "report"
    result = CliRunner().invoke(
        main,
        [
            "run", str(plan_file), "--local", "--nproc", "2", "--eta-log", str(eta_log),
            "--report", str(report), "--metrics-port", "0", "--scrape-interval", "0.5",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in eta_log.read_text().splitlines()]
    assert len(lines) >= 3
    for line in lines:
        assert ETA_KEYS | {"restarts"} <= set(line)
    assert lines[-1]["step"] == lines[-1]["totalSteps"] == 30
    assert lines[-1]["etaSeconds"] == 0
    assert any(0 < line["step"] < 30 for line in lines)
    summary = json.loads((report / "summary.json").read_text())
    assert summary["succeeded"] is True
    assert summary["finalStep"] == summary["totalSteps"] == 30
    assert summary["restarts"] == 0
    assert summary["plannedDurationSeconds"] > 0
    assert summary["actualDurationSeconds"] > 0
    assert summary["finalLoss"] is not None
    assert set(summary["etaErrorSeconds"]) == {"25%", "50%", "75%"}
    if importlib.util.find_spec("matplotlib") is not None:
        assert (report / "eta.png").stat().st_size > 0


def test_killed_worker_is_restarted_and_metrics_are_served(tmp_path: Path) -> None:
    document = _spec(40, 5)
    spec = parse_training_plan_spec(document)
    local = plan_locally("tiny-kill", spec, 2, load_catalog())
    agents: list[int] = []
    killed: list[int] = []
    scraped: list[str] = []

    def on_revision(revision: Revision, url: str) -> None:
        if not scraped and revision.step > 0:
            with urllib.request.urlopen(url, timeout=5) as response:
                scraped.append(response.read().decode())
        if not killed and revision.step >= 12:
            workers = worker_pids(agents[-1])
            if 1 in workers:
                os.kill(workers[1], signal.SIGKILL)
                killed.append(revision.step)

    result = run_local(
        local,
        LocalOptions(
            eta_log=tmp_path / "eta.jsonl",
            report_dir=tmp_path / "report",
            metrics_port=0,
            metrics_address="127.0.0.1",
            scrape_interval=0.5,
            show=False,
        ),
        Hooks(on_attempt=agents.append, on_revision=on_revision),
        Console(file=io.StringIO()),
    )
    assert killed, "no worker was killed"
    assert result.exit_code == 0, result.log_path and result.log_path.read_text()
    assert result.restarts >= 1
    assert result.final_step == result.total_steps == 40
    assert result.revisions[-1].restarts >= 1

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped[0])
        for sample in family.samples
    }
    key = (("namespace", "local"), ("plan", "tiny-kill"))
    for name in (
        "trainplan_plan_progress_ratio",
        "trainplan_plan_eta_seconds",
        "trainplan_plan_estimated_completion_timestamp_seconds",
    ):
        assert (name, key) in samples, name
    assert ("trainplan_plan_step_seconds", (*key, ("source", "planned"))) in samples
    assert ("trainplan_plan_failures_total", (*key, ("reason", "restart"))) in samples
