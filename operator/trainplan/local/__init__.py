"""The local backend: `trainplan run FILE --local` plans the spec for CPU processes on
this machine, runs the launcher's torchrun command as a supervised local process group
(restarting it on failure), scrapes its metrics on localhost, revises the same ETA as the
operator, shows it live, exports the operator's plan series and writes a report.

May import everything but `trainplan.controller` and `trainplan.cli`.
"""

from trainplan.local.launch import LocalLaunch, LocalPlan, local_launch, local_spec, plan_locally
from trainplan.local.report import Revision
from trainplan.local.runner import Hooks, LocalOptions, LocalResult, run_local

__all__ = [
    "Hooks",
    "LocalLaunch",
    "LocalOptions",
    "LocalPlan",
    "LocalResult",
    "Revision",
    "local_launch",
    "local_spec",
    "plan_locally",
    "run_local",
]
