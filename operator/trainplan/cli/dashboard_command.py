"""`trainplan dashboard` and `trainplan alerts`: write the Grafana dashboard JSON and the
Prometheus alert rules (rule groups YAML) of `trainplan.dashboards`.

Both print to standard output unless `--output FILE` names a file. The copies the Helm chart
embeds are `charts/trainplan/files/trainplan-dashboard.json` and
`charts/trainplan/files/prometheus-rules.yaml`; the contract tests compare them with the
same functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from trainplan.dashboards import DEFAULT_OPERATOR_JOB, render_dashboard_json, render_rules_yaml

CHART_FILES: Final = Path("charts/trainplan/files")
DASHBOARD_FILE: Final = CHART_FILES / "trainplan-dashboard.json"
RULES_FILE: Final = CHART_FILES / "prometheus-rules.yaml"

_OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=Path("-"),
    show_default="standard output",
    help="File to write; its directory is created if missing.",
)


def _write(output: Path, text: str) -> None:
    if str(output) == "-":
        click.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}", err=True)


@click.command("dashboard")
@_OUTPUT
def dashboard_command(output: Path) -> None:
    """Write the Grafana dashboard JSON (ETA, progress, speed, failures, GPUs, GPU-hours
    and budgets; a Prometheus data source variable, namespace and plan variables).

    The chart's copy: trainplan dashboard -o charts/trainplan/files/trainplan-dashboard.json
    """
    _write(output, render_dashboard_json())


@click.command("alerts")
@_OUTPUT
@click.option(
    "--operator-job",
    default=DEFAULT_OPERATOR_JOB,
    show_default=True,
    help="Regular expression of the operator's scrape job (the OperatorDown alert).",
)
@click.option(
    "--runbook-base-url",
    default=None,
    metavar="URL",
    help=(
        "Where docs/runbooks.md is published: each alert gets the annotation"
        " runbook_url URL#<alert in lower case>. Default: no runbook_url."
    ),
)
def alerts_command(output: Path, operator_job: str, runbook_base_url: str | None) -> None:
    """Write the Prometheus alert rules (rule groups YAML, the spec of a PrometheusRule):
    deadline at risk, stalled, restart storm, budget nearly exhausted and exhausted,
    operator down.

    The chart's copy: trainplan alerts -o charts/trainplan/files/prometheus-rules.yaml
    """
    _write(output, render_rules_yaml(operator_job, runbook_base_url))
