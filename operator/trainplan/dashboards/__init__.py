"""trainplan.dashboards: the Grafana dashboard (grafana-foundation-sdk) and the Prometheus
alert rules, both built from the metric names of `trainplan.runtime.schema`.

`render_dashboard_json` and `render_rules_yaml` give the texts `trainplan dashboard` and
`trainplan alerts` write, and that are committed under `charts/trainplan/files/`.

Pure: imports only `trainplan.api`, `trainplan.runtime.schema`, the SDK and PyYAML; no I/O.
"""

from trainplan.dashboards.alerts import (
    DEFAULT_OPERATOR_JOB,
    AlertRule,
    alert_rules,
    render_rules_yaml,
    rule_groups,
)
from trainplan.dashboards.grafana import (
    DASHBOARD_UID,
    build_dashboard,
    render_dashboard_json,
)

__all__ = [
    "DASHBOARD_UID",
    "DEFAULT_OPERATOR_JOB",
    "AlertRule",
    "alert_rules",
    "build_dashboard",
    "render_dashboard_json",
    "render_rules_yaml",
    "rule_groups",
]
