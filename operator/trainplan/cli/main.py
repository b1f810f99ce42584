"""`trainplan` entry point. Exit codes: 0 success, 2 invalid input, 3 no feasible plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console

from trainplan.cli.common import plan_files
from trainplan.cli.table import print_plan_table
from trainplan.planner import load_catalog


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainplan")
def main() -> None:
    """Plan, launch and track GPU training jobs."""


@main.command("plan")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="table for people; json or yaml print exactly the object stored in status.plan.",
)
def plan_command(files: tuple[Path, ...], output: str) -> None:
    """Plan each TrainingPlan in FILES (whole resources or bare specs, YAML or JSON).

    Exit status: 0 when every file has a plan, 2 when any input is invalid (each problem
    on its own line, with its field path), 3 when some input has no feasible plan.
    """
    catalog = load_catalog()
    console = Console()
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    planned, status = plan_files(files, catalog, lambda line: errors.print(line, markup=False))
    if output == "table":
        for entry in planned:
            print_plan_table(console, entry.item.name, entry.plan)
    elif planned:
        documents = [entry.plan.to_document() for entry in planned]
        if output == "json":
            document: Any = documents[0] if len(documents) == 1 else documents
            sys.stdout.write(json.dumps(document, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False))
    sys.exit(status)


def _register_commands() -> None:
    """The subcommands that live in their own modules."""
    from trainplan.cli import (
        crds_command,
        dashboard_command,
        eta_command,
        operator_command,
        render_command,
        run_command,
    )

    main.add_command(crds_command.command)
    main.add_command(dashboard_command.dashboard_command)
    main.add_command(dashboard_command.alerts_command)
    main.add_command(eta_command.group)
    main.add_command(operator_command.command)
    main.add_command(render_command.command)
    main.add_command(run_command.command)


_register_commands()
