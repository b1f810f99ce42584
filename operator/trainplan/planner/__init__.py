"""Planner: catalog, FLOPs, memory, step time, reliability and layout search (pure).

The public surface is `plan(spec, catalog)` with `load_catalog()` to get the packaged
catalog once at the edge; `PlanInputError` and `InfeasiblePlanError` are what it raises
for a user's input; `duration_quantile_factor` turns an estimate into its quantile at a
confidence (deadline searches and budget charges). Only `catalog.load_catalog` reads
(package) files.
"""

from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, load_catalog
from trainplan.planner.errors import InfeasiblePlanError, PlanInputError
from trainplan.planner.planning import duration_quantile_factor, plan

__all__ = [
    "Calibration",
    "Catalog",
    "InfeasiblePlanError",
    "PlanInputError",
    "duration_quantile_factor",
    "load_catalog",
    "plan",
]
