"""The examples of deploy/examples (and deploy/examples/frameworks) as `trainplan render`
renders them, computed once per test session and shared by the golden, contract and CLI
tests."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainplan.cli.common import EXIT_OK
from trainplan.cli.inputs import read_plan_inputs
from trainplan.cli.render_command import render_files
from trainplan.launcher import PlanRef, render_for
from trainplan.planner import Catalog, plan

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "deploy" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml")) + sorted(
    (EXAMPLES_DIR / "frameworks").glob("*.yaml")
)
EXAMPLE_IDS = [path.stem for path in EXAMPLES]
NOT_RENDERABLE = frozenset({"tiny-local"})
"""Examples that `trainplan render` rejects on purpose: no job.image (for `run --local`)."""
RENDERABLE = [path for path in EXAMPLES if path.stem not in NOT_RENDERABLE]
RENDERABLE_IDS = [path.stem for path in RENDERABLE]


@dataclass(frozen=True, slots=True)
class Rendered:
    """What `trainplan render <example>` prints, run from the repository root."""

    status: int
    stdout: str
    stderr_lines: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.status == EXIT_OK


_CACHE: dict[Path, Rendered] = {}


def render_example(path: Path, catalog: Catalog) -> Rendered:
    """`trainplan render` of one example, by its path relative to the repository root."""
    if path not in _CACHE:
        lines: list[str] = []
        with contextlib.chdir(ROOT):
            text, status = render_files([path.relative_to(ROOT)], catalog, lines.append)
        _CACHE[path] = Rendered(status, text, tuple(lines))
    return _CACHE[path]


OWNER_UID = "0b7c1f4e-7d41-4a8e-9f61-2f5a3c9d1e20"
"""A uid for renderings with owner references, as the operator makes them."""


def example_objects(path: Path, catalog: Catalog, *, uid: str | None = OWNER_UID) -> list[Any]:
    """The objects of an example as `render` returns them (with owner references when
    `uid` is given); every document of the file, in order."""
    objects: list[Any] = []
    for item in read_plan_inputs(path):
        assert item.spec is not None, item.problems
        result = plan(item.spec, catalog)
        ref = PlanRef(item.name, item.namespace or "default", uid)
        objects += render_for(ref, item.spec, result, catalog)
    return objects


def command_lines(command: list[str], args: list[str]) -> str:
    """A container's command and args as a shell command, one flag (with its value) per
    line, as docs/frameworks.md shows them."""
    lines: list[str] = []
    position = 0
    while position < len(args):
        token = args[position]
        following = args[position + 1] if position + 1 < len(args) else None
        if (
            token.startswith("-")
            and "=" not in token
            and following is not None
            and not following.startswith("-")
        ):
            lines.append(f"{token} {following}")
            position += 2
        else:
            lines.append(token)
            position += 1
    return " \\\n    ".join([" ".join(command), *lines])


def training_container(objects: list[Any]) -> dict[str, Any]:
    """The training container of rendered objects: the Job's, or the JobSet's template's."""
    workload = next(obj for obj in objects if obj["kind"] in ("Job", "JobSet"))
    if workload["kind"] == "JobSet":
        template = workload["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    else:
        template = workload["spec"]["template"]
    (container,) = template["spec"]["containers"]
    return container  # type: ignore[no-any-return]
