"""What the commands that plan TrainingPlan files share: reading every document of every
file, planning each, reporting each problem on its own line, and the exit status.

Exit status: 0 when every document has a plan, 2 (`EXIT_INVALID`) when any input is
invalid, else 3 (`EXIT_INFEASIBLE`) when some input has no feasible plan. Problems are
reported as `<file>: <field path>: <message>`; an infeasible plan as `<file>: no feasible
plan` followed by one indented line per reason.

`plan_outcomes` also keeps each failure, with its reasons, beside the plans (`trainplan plan
-o json` prints both, each with its name and source file).

Does I/O: reads the files; reports through the callback it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainplan.api import Plan, TrainingPlanSpec
from trainplan.cli.calibration_source import without_calibration_problem
from trainplan.cli.inputs import PlanInput, read_plan_inputs
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan
from trainplan.planner.cluster_fit import ClusterEvidence

EXIT_OK: Final = 0
EXIT_INVALID: Final = 2
EXIT_INFEASIBLE: Final = 3

INVALID_INPUT: Final = "invalid input"
NO_FEASIBLE_PLAN: Final = "no feasible plan"

Report = Callable[[str], None]
"""Takes one line for the user's error stream."""


@dataclass(frozen=True, slots=True)
class PlannedInput:
    """One document of one file with its spec and plan."""

    item: PlanInput
    spec: TrainingPlanSpec
    plan: Plan


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """What became of one document of one file: its plan, or why it has none."""

    item: PlanInput
    source: str
    """The file the document came from, as given."""
    document: int | None
    """The document's index in its file when the file holds more than one, else None."""
    plan: Plan | None
    error: str | None = None
    """`invalid input` or `no feasible plan` when there is no plan."""
    reasons: tuple[str, ...] = ()
    """One line per problem (a field path and message) or per reason it cannot fit."""

    def to_document(self) -> dict[str, Any]:
        """The plan's document (as stored in status.plan) led by `name` and `source` (and
        `document` in a file of several); without a plan, `error` (its reasons on one
        line) and `reasons`."""
        head: dict[str, Any] = {"name": self.item.name, "source": self.source}
        if self.document is not None:
            head["document"] = self.document
        if self.plan is not None:
            return head | self.plan.to_document()
        error = self.error or "no plan"
        return head | {
            "error": f"{error}: {'; '.join(self.reasons)}" if self.reasons else error,
            "reasons": list(self.reasons),
        }


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


def plan_outcomes(
    files: Iterable[Path],
    catalog: Catalog,
    report: Report,
    cluster: ClusterEvidence | None = None,
    *,
    without_calibration: bool = False,
) -> tuple[list[PlanOutcome], int]:
    """What became of every document of `files`, in order, and the exit status; with
    `cluster`, each plan is corrected by that ClusterCalibration (`plan(cluster=)`);
    `without_calibration` (`--calibration none`) refuses a spec that names one.

    Unreadable files, invalid documents, input errors and infeasible specs are also
    reported through `report`, one line each, prefixed with the file.
    """
    status = EXIT_OK
    outcomes: list[PlanOutcome] = []
    for path in files:
        items = read_plan_inputs(path)
        for index, item in enumerate(items):
            source, document = str(path), (index if len(items) > 1 else None)
            if item.spec is None:
                for problem in item.problems:
                    report(f"{item.label}: {problem}")
                status = worse_status(status, EXIT_INVALID)
                outcomes.append(
                    PlanOutcome(item, source, document, None, INVALID_INPUT, item.problems)
                )
                continue
            try:
                refusal = without_calibration_problem(item.spec.hardware.calibration)
                if without_calibration and refusal is not None:
                    raise PlanInputError([("hardware.calibration", refusal)])
                result = plan(item.spec, catalog, cluster=cluster)
            except PlanInputError as error:
                report_field_problems(item, error.problems, report)
                status = worse_status(status, EXIT_INVALID)
                problems = tuple(
                    f"{item.spec_path}{field}: {text}" for field, text in error.problems
                )
                outcomes.append(PlanOutcome(item, source, document, None, INVALID_INPUT, problems))
                continue
            except InfeasiblePlanError as error:
                report(f"{item.label}: {NO_FEASIBLE_PLAN}")
                for reason in error.reasons:
                    report(f"  {reason}")
                status = worse_status(status, EXIT_INFEASIBLE)
                reasons = tuple(error.reasons)
                outcomes.append(
                    PlanOutcome(item, source, document, None, NO_FEASIBLE_PLAN, reasons)
                )
                continue
            outcomes.append(PlanOutcome(item, source, document, result))
    return outcomes, status


def plan_files(
    files: Iterable[Path], catalog: Catalog, report: Report
) -> tuple[list[PlannedInput], int]:
    """Every document of `files` that plans, in order, and the exit status so far.

    Unreadable files, invalid documents, input errors and infeasible specs are reported
    through `report` and left out.
    """
    outcomes, status = plan_outcomes(files, catalog, report)
    planned = [
        PlannedInput(outcome.item, outcome.item.spec, outcome.plan)
        for outcome in outcomes
        if outcome.plan is not None and outcome.item.spec is not None
    ]
    return planned, status
