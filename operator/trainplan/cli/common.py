"""What the commands that plan TrainingPlan files share: reading every document of every
file, planning each, reporting each problem on its own line, and the exit status.

Exit status: 0 when every document has a plan, 2 (`EXIT_INVALID`) when any input is
invalid, else 3 (`EXIT_INFEASIBLE`) when some input has no feasible plan. Problems are
reported as `<file>: <field path>: <message>`; an infeasible plan as `<file>: no feasible
plan` followed by one indented line per reason.

Does I/O: reads the files; reports through the callback it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trainplan.api import Plan, TrainingPlanSpec
from trainplan.cli.inputs import PlanInput, read_plan_inputs
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan

EXIT_OK: Final = 0
EXIT_INVALID: Final = 2
EXIT_INFEASIBLE: Final = 3

Report = Callable[[str], None]
"""Takes one line for the user's error stream."""


@dataclass(frozen=True, slots=True)
class PlannedInput:
    """One document of one file with its spec and plan."""

    item: PlanInput
    spec: TrainingPlanSpec
    plan: Plan


def worse_status(current: int, new: int) -> int:
    """The exit status after another outcome: invalid input outranks infeasible, which
    outranks success."""
    if EXIT_INVALID in (current, new):
        return EXIT_INVALID
    return max(current, new)


def report_field_problems(
    item: PlanInput, problems: Iterable[tuple[str, str]], report: Report
) -> None:
    """One line per (spec field path, message), prefixed with the file and `spec.` for a
    whole resource."""
    for field, message in problems:
        report(f"{item.label}: {item.spec_path}{field}: {message}")


def plan_files(
    files: Iterable[Path], catalog: Catalog, report: Report
) -> tuple[list[PlannedInput], int]:
    """Every document of `files` that plans, in order, and the exit status so far.

    Unreadable files, invalid documents, input errors and infeasible specs are reported
    through `report` and left out.
    """
    status = EXIT_OK
    planned: list[PlannedInput] = []
    for path in files:
        for item in read_plan_inputs(path):
            if item.spec is None:
                for problem in item.problems:
                    report(f"{item.label}: {problem}")
                status = worse_status(status, EXIT_INVALID)
                continue
            try:
                result = plan(item.spec, catalog)
            except PlanInputError as error:
                report_field_problems(item, error.problems, report)
                status = worse_status(status, EXIT_INVALID)
                continue
            except InfeasiblePlanError as error:
                report(f"{item.label}: no feasible plan")
                for reason in error.reasons:
                    report(f"  {reason}")
                status = worse_status(status, EXIT_INFEASIBLE)
                continue
            planned.append(PlannedInput(item, item.spec, result))
    return planned, status
