"""Planner: catalog, FLOPs, memory, step time, reliability and layout search (pure).

The public surface is `plan(spec, catalog)` with `load_catalog()` to get the packaged
catalog once at the edge; `PlanInputError` and `InfeasiblePlanError` are what it raises
for a user's input. Only `catalog.load_catalog` reads (package) files.
"""

from trainplan.planner.catalog import Catalog, load_catalog
from trainplan.planner.errors import InfeasiblePlanError, PlanInputError
from trainplan.planner.planning import plan

__all__ = ["Catalog", "InfeasiblePlanError", "PlanInputError", "load_catalog", "plan"]
