"""The PromQL of the generated dashboard and alert rules, ready to run (a test helper).

`dashboard_queries()` lists every panel target's expression with the Grafana variables
substituted (`$namespace`, `$plan`: the given values; `$__rate_interval`: 1m);
`variable_queries()` turns each `label_values(SELECTOR, LABEL)` variable query into the
PromQL `count by (LABEL) (SELECTOR)`; `metric_names()` finds the trainplan names an
expression reads; `MAYBE_ABSENT_LOCALLY` are the series a local run without a GPU, a
deadline, a budget or a ClusterCalibration does not have.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from trainplan.dashboards import render_dashboard_json
from trainplan.runtime import schema

RATE_INTERVAL: Final = "1m"

MAYBE_ABSENT_LOCALLY: Final = frozenset(
    {spec.name for spec in schema.GPU_METRICS}
    # A GPU's series need NVML; a local run has no deadline (its objective is the process
    # count) and no budget.
    | {schema.PLAN_DEADLINE_TIMESTAMP_SECONDS.name, schema.BUDGET_GPU_HOURS.name}
    # Nor a ClusterCalibration.
    | {schema.CALIBRATION_STEP_SECONDS_FACTOR.name, schema.CALIBRATION_RUNS.name}
)
CALIBRATED_ONLY: Final = 'calibration!=""'
"""A selector of plans a ClusterCalibration corrected: none locally."""

_NAME = re.compile(r"\btrainplan_[a-z0-9_]+")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


@dataclass(frozen=True, slots=True)
class Query:
    """One expression and where it comes from (panel title and refId, or variable name)."""

    source: str
    expr: str


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(render_dashboard_json())
    return document


def panels() -> list[dict[str, Any]]:
    """The panels that show data (rows left out)."""
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def substitute(expr: str, namespace: str = ".*", plan: str = ".*") -> str:
    return (
        expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$namespace", namespace)
        .replace("$plan", plan)
    )


def dashboard_queries(namespace: str = ".*", plan: str = ".*") -> list[Query]:
    return [
        Query(f"{panel['title']} {target['refId']}", substitute(target["expr"], namespace, plan))
        for panel in panels()
        for target in panel["targets"]
    ]


def variable_queries(namespace: str = ".*", plan: str = ".*") -> list[Query]:
    queries = []
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = _LABEL_VALUES.match(variable["query"])
        assert match, variable["query"]
        selector = substitute(match["selector"], namespace, plan)
        queries.append(Query(variable["name"], f"count by ({match['label']}) ({selector})"))
    return queries


def metric_names(expr: str) -> set[str]:
    """The trainplan metric names in an expression."""
    return set(_NAME.findall(expr))
