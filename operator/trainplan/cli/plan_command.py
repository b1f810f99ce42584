"""`trainplan plan FILES`: the plan of each TrainingPlan file, as tables or as JSON/YAML.

With `-o json` or `-o yaml` every document of every file gives one object: its plan's
document (exactly what the operator stores in `status.plan`) led by `name` (the
resource's metadata.name, else the file's stem) and `source` (the file as given), or,
when it has no plan, `name`, `source`, `error` and `reasons`. One file of one document
prints that object alone; anything more prints a list in input order, whatever succeeded,
so that a script can match results to inputs. The exit status still says whether any
failed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console

from trainplan.cli.calibration_source import NO_CALIBRATION, read_calibration
from trainplan.cli.common import EXIT_INVALID, plan_outcomes
from trainplan.cli.table import print_plan_table
from trainplan.planner import load_catalog
from trainplan.planner.cluster_fit import cluster_evidence


@click.command("plan")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help=(
        "table for people; json or yaml print, per document, the object stored in "
        "status.plan led by name and source (or name, source, error and reasons): one "
        "object for one file of one document, else a list."
    ),
)
@click.option(
    "--calibration",
    metavar="FILE|NAME|none",
    default=None,
    help=(
        "A ClusterCalibration whose finished runs correct every plan (step time and its"
        " range, failure rate, restart cost): a FILE holding the resource (YAML or JSON),"
        " or else the NAME of one in the cluster, read through the current kubeconfig"
        " (KUBECONFIG, else ~/.kube/config). A spec with hardware.calibration: none is"
        " planned without it; one naming another calibration is refused. 'none' plans"
        " from the published constants, reading nothing (like hardware.calibration:"
        " none); a spec naming a calibration is then refused (a file named none: ./none)."
    ),
)
def command(files: tuple[Path, ...], output: str, calibration: str | None) -> None:
    """Plan each TrainingPlan in FILES (whole resources or bare specs, YAML or JSON).

    Exit status: 0 when every file has a plan, 2 when any input is invalid (each problem
    on its own line, with its field path), 3 when some input has no feasible plan.
    """
    catalog = load_catalog()
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    cluster = None
    without_calibration = calibration == NO_CALIBRATION
    if calibration is not None and not without_calibration:
        resource, problems = read_calibration(calibration)
        for problem in problems:
            errors.print(problem, markup=False)
        if resource is None:
            sys.exit(EXIT_INVALID)
        cluster = cluster_evidence(resource, catalog.calibration)
    outcomes, status = plan_outcomes(
        files,
        catalog,
        lambda line: errors.print(line, markup=False),
        cluster,
        without_calibration=without_calibration,
    )
    if output == "table":
        console = Console()
        for outcome in outcomes:
            if outcome.plan is not None:
                print_plan_table(console, outcome.item.name, outcome.plan)
    else:
        documents = [outcome.to_document() for outcome in outcomes]
        document: Any = documents[0] if len(files) == 1 and len(documents) == 1 else documents
        if output == "json":
            sys.stdout.write(json.dumps(document, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    sys.exit(status)
