"""The Kopf operator: thin handlers (`handlers`) over pure decisions (`reconcile`,
`conditions`), settings (`config`) and the shared context. Does I/O through
`trainplan.cluster` only."""

from trainplan.controller.config import OperatorConfig
from trainplan.controller.context import ControllerContext
from trainplan.controller.handlers import build_registry
from trainplan.controller.runner import run_operator

__all__ = ["ControllerContext", "OperatorConfig", "build_registry", "run_operator"]
