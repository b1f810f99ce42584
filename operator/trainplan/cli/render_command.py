"""`trainplan render FILE... [-o yaml]`: every object the operator would create for each
TrainingPlan, as YAML documents separated by `---`, like `helm template`.

Each plan's first document starts with comments naming the file and summarising the plan.
Objects are rendered without owner references (there is no TrainingPlan uid outside the
cluster), in the namespace of `metadata.namespace` or `default`, named after
`metadata.name` or the file's stem. Exit status as for `trainplan plan`: 0, 2 for invalid
input (including a spec the launcher cannot render, e.g. without `job.image`), 3 when no
plan is feasible.

Does I/O: reads the files and the packaged catalog, writes to stdout and stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
import yaml

from trainplan.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    PlannedInput,
    Report,
    plan_files,
    report_field_problems,
    worse_status,
)
from trainplan.launcher import LauncherError, PlanRef, render_for
from trainplan.planner import Catalog, load_catalog

DEFAULT_NAMESPACE = "default"


class _Dumper(yaml.SafeDumper):
    """Block style throughout; multi-line strings (a ConfigMap's file) as literal blocks."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_text)


def to_yaml(document: Any) -> str:
    """One YAML document, keys in their order, lines never folded."""
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 16
    )


def _summary(planned: PlannedInput, ref: PlanRef) -> str:
    result, job = planned.plan, planned.spec.job
    layout = result.layout
    words = [layout.summary, f"ZeRO-{layout.zero_stage}"]
    return (
        f"TrainingPlan {ref.namespace}/{ref.name}: {result.gpus} x {result.gpu_type} "
        f"({result.nodes} {'node' if result.nodes == 1 else 'nodes'} x "
        f"{result.gpus // result.nodes}), {' '.join(words)}, "
        f"{result.total_steps:,} steps; framework {job.framework}, launcher {job.launcher}"
    )


def render_files(files: Iterable[Path], catalog: Catalog, report: Report) -> tuple[str, int]:
    """The `trainplan render` output for `files`, and its exit status; problems go to
    `report`, one line each."""
    planned_inputs, status = plan_files(files, catalog, report)
    chunks: list[str] = []
    for planned in planned_inputs:
        item = planned.item
        ref = PlanRef(name=item.name, namespace=item.namespace or DEFAULT_NAMESPACE)
        try:
            objects = render_for(ref, planned.spec, planned.plan, catalog)
        except LauncherError as error:
            report_field_problems(item, error.problems, report)
            status = worse_status(status, EXIT_INVALID)
            continue
        header = f"# Source: {item.label}\n# {_summary(planned, ref)}\n"
        for position, obj in enumerate(objects):
            chunks.append("---\n" + (header if position == 0 else "") + to_yaml(obj))
    return "".join(chunks), status


class RenderError(Exception):
    """`render_documents` could not render every document; `lines` says why."""

    def __init__(self, status: int, lines: list[str]) -> None:
        self.status = status
        self.lines = tuple(lines)
        super().__init__("\n".join(lines))


def render_documents(path: Path, catalog: Catalog | None = None) -> str:
    """What `trainplan render PATH` prints; RenderError (with the exit status and the
    error lines) when it would not exit 0."""
    lines: list[str] = []
    text, status = render_files([path], catalog or load_catalog(), lines.append)
    if status != EXIT_OK:
        raise RenderError(status, lines)
    return text


@click.command("render")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml"]),
    default="yaml",
    show_default=True,
    help="yaml: one document per object, separated by ---.",
)
def command(files: tuple[Path, ...], output: str) -> None:
    """Print every Kubernetes object the operator would create for each TrainingPlan in
    FILES (whole resources or bare specs, YAML or JSON): the headless Service, the
    DeepSpeed ConfigMap, the Indexed Job or JobSet.

    Exit status: 0 when every document renders, 2 when any input is invalid or cannot be
    rendered (each problem on its own line, with its field path), 3 when some input has
    no feasible plan.
    """
    assert output == "yaml"
    text, status = render_files(files, load_catalog(), lambda line: click.echo(line, err=True))
    sys.stdout.write(text)
    sys.exit(status)
