"""`trainplan` entry point. Exit codes: 0 success, 2 invalid input, 3 no feasible plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console

from trainplan.cli.inputs import read_plan_inputs
from trainplan.cli.table import print_plan_table
from trainplan.planner import InfeasiblePlanError, PlanInputError, load_catalog, plan

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_INFEASIBLE = 3


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
    status = EXIT_OK
    plans: list[dict[str, Any]] = []
    for path in files:
        for item in read_plan_inputs(path):
            if item.spec is None:
                for problem in item.problems:
                    errors.print(f"{item.label}: {problem}", markup=False)
                status = EXIT_INVALID
                continue
            try:
                result = plan(item.spec, catalog)
            except PlanInputError as error:
                for field, message in error.problems:
                    where = f"{item.spec_path}{field}"
                    errors.print(f"{item.label}: {where}: {message}", markup=False)
                status = EXIT_INVALID
                continue
            except InfeasiblePlanError as error:
                errors.print(f"{item.label}: no feasible plan", markup=False)
                for reason in error.reasons:
                    errors.print(f"  {reason}", markup=False)
                status = max(status, EXIT_INFEASIBLE) if status != EXIT_INVALID else status
                continue
            if output == "table":
                print_plan_table(console, item.name, result)
            else:
                plans.append(result.to_document())
    if output == "json" and plans:
        document: Any = plans[0] if len(plans) == 1 else plans
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif output == "yaml" and plans:
        sys.stdout.write(yaml.safe_dump_all(plans, sort_keys=False))
    sys.exit(status)
