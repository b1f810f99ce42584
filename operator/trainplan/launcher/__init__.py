"""Launcher: renders a planned TrainingPlan into the Kubernetes objects that run it.

`render(ref, spec, plan, gpu)` gives the headless Service, the DeepSpeed ConfigMap (for
`job.framework: deepspeed`) and the Indexed Job or JobSet that run torchrun with the plan's
layout; `render_for` looks the GPU and the model shape up in the catalog first. `job_name`
names the Job/JobSet (and Service) of a plan. The environment contract with the training
program is in `trainplan.launcher.env`, the framework adapters in
`trainplan.launcher.frameworks`.

Pure: no I/O, no clock; imports only `trainplan.api`, `trainplan.planner`, pydantic and
the standard library, and `kubernetes_validate` for a spec with `job.podTemplate` (its
merged pod is checked against the pod schema read from that package's data).
"""

from trainplan.launcher.errors import LauncherError
from trainplan.launcher.names import job_name, label_value
from trainplan.launcher.render import (
    KUEUE_JOB_UID_LABEL,
    PlanRef,
    plan_pods_selector,
    render,
    render_for,
    workload_kind,
)

__all__ = [
    "KUEUE_JOB_UID_LABEL",
    "LauncherError",
    "PlanRef",
    "job_name",
    "label_value",
    "plan_pods_selector",
    "render",
    "render_for",
    "workload_kind",
]
