"""The error the launcher raises when a spec and its plan cannot become Kubernetes objects.

Pure: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable


class LauncherError(ValueError):
    """The spec cannot be rendered into a training job: a user error, like a bad field.

    `problems` holds (field path within the spec, message) pairs, e.g.
    ("job.image", "required to render the training job"), as `PlanInputError` does; the
    message of the exception prefixes each path with `spec.`, the path in a TrainingPlan.
    """

    def __init__(self, problems: Iterable[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"spec.{path}: {message}" for path, message in self.problems))
