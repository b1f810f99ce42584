"""Errors the planner raises for a user's input (pure)."""

from __future__ import annotations


class PlanInputError(ValueError):
    """The spec is well-formed but does not fit the catalog or the model: a user error.

    `problems` holds (field path within the spec, message) pairs, e.g.
    ("parallelism.tensor", "8 does not divide attentionHeads (12)").
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{path}: {message}" for path, message in self.problems))


class InfeasiblePlanError(Exception):
    """No layout satisfies the spec; `reasons` says why, one sentence each."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__(" ".join(self.reasons))
