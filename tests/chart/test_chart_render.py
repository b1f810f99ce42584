"""The Helm chart (charts/trainplan), rendered offline with helm-python-sdk (Helm's Go SDK),
and the plain manifests of deploy/manifests/ made from it.

- Helm's lint is clean (strict; Kubernetes 1.30 and the newest version kubernetes-validate
  knows) with the default values, every optional part on, and the self-signed webhook.
- Every rendered object of a built-in kind passes `kubernetes_validate.validate(obj,
  version, strict=True)` for those versions; the custom kinds it has no schema for
  (ServiceMonitor, PodMonitor, PrometheusRule: Prometheus Operator; Certificate, Issuer:
  cert-manager) are checked by shape and by how they connect to the rest, and against
  their projects' CRD schemas in tests/contract/test_chart_upstream_schemas.py.
- The CRDs in the chart are the committed crds/ (byte for byte), rendered with
  `helm.sh/resource-policy: keep`.
- deploy/manifests/ is what `make manifests` writes now.
The ClusterRole is tested against the operator's code in `test_chart_rbac.py`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.chart.helm_render import (
    ALL_ON,
    CHART_DIR,
    MANIFESTS,
    MANIFESTS_DIR,
    REPO_ROOT,
    SELF_SIGNED,
    Rendered,
    chart_crds,
    manifest_files,
    notes,
    render,
    values_with,
)
from tests.contract.crd_schema import CRDS_DIR, committed_crd
from tests.integration.prometheus_server import promtool_binary
from tests.rendered_examples import RENDERABLE, example_objects
from trainplan.api import APP_COMPONENT_LABEL, APP_NAME_LABEL, PLAN_LABEL
from trainplan.dashboards import DEFAULT_OPERATOR_JOB
from trainplan.launcher.render import METRICS_PATH, METRICS_PORT_NAME
from trainplan.local.runner import DEFAULT_METRICS_PORT
from trainplan.planner import Catalog

VERSIONS: Final = ["1.30.0", kubernetes_validate.latest_version()]
VARIANTS: Final[Mapping[str, Mapping[str, Any]]] = {
    "default": {},
    "all-on": ALL_ON,
    "self-signed": SELF_SIGNED,
    "given-issuer": values_with(
        ALL_ON,
        {
            "webhook": {
                "failurePolicy": "Fail",
                "certificate": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
                "address": "$(POD_IP)",
                "clientCA": {"configMap": "apiserver-webhook-client-ca"},
            },
            "crds": {"install": False},
            "serviceAccount": {"annotations": {"example.com/role": "trainplan"}},
            "operator": {
                "prometheusUrl": "http://prometheus-operated.monitoring:9090",
                "verbose": True,
                "extraArgs": ["--watch-timeout=120"],
                "env": [{"name": "TZ", "value": "UTC"}],
                "metricsAddress": "$(POD_IP)",
                "healthAddress": "$(POD_IP)",
            },
            "networkPolicy": {
                "webhookFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
                "metricsFrom": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        }
                    }
                ],
            },
            "imagePullSecrets": [{"name": "regcred"}],
            "podLabels": {"team": "ml-platform"},
            "podAnnotations": {"example.com/scrape": "false"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/arch",
                                        "operator": "In",
                                        "values": ["amd64"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "priorityClassName": "system-cluster-critical",
            "dashboard": {"namespace": "monitoring", "annotations": {"grafana_folder": "ML"}},
        },
    ),
}
"""Values the chart is rendered with: its defaults, every optional part on, the webhook's
other certificate mode, and every other option set once."""
CUSTOM_KINDS: Final = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
    ("kopf.dev/v1", "ClusterKopfPeering"),
    ("kopf.dev/v1", "KopfPeering"),
}
"""Kinds of other projects' CRDs, for which kubernetes-validate has no schema."""


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest, chart_dir: Path) -> tuple[str, list[Rendered]]:
    return request.param, render(VARIANTS[request.param], chart_dir=chart_dir)


def objects(rendered: list[Rendered], kind: str) -> list[dict[str, Any]]:
    return [item.object for item in rendered if item.kind == kind]


def one(rendered: list[Rendered], kind: str) -> dict[str, Any]:
    (found,) = objects(rendered, kind)
    return dict(found)


def container(rendered: list[Rendered]) -> dict[str, Any]:
    (operator,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(operator)


def args(rendered: list[Rendered]) -> dict[str, str]:
    """The operator's `--flag=value` args as a dict (a bare flag maps to "")."""
    found: dict[str, str] = {}
    for arg in container(rendered)["args"]:
        name, _, value = arg.partition("=")
        found.setdefault(name, value)
    return found


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# --- lint and schemas ---------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_helm_lint_is_clean(chart_dir: Path, name: str, version: str) -> None:
    report = helm.lint(
        chart_dir,
        dict(VARIANTS[name]),
        strict=True,
        namespace="trainplan",
        kube_version=f"v{version}",
    )
    assert report["errors"] == []
    findings = [m for m in report["messages"] if m["severity"] >= 1]
    assert findings == [{"severity": 1, "path": "Chart.yaml", "error": "icon is recommended"}]


def test_helm_lint_catches_a_broken_chart(chart_dir: Path, tmp_path: Path) -> None:
    """A control: a template that does not parse is an error."""
    broken = tmp_path / "trainplan"
    shutil.copytree(chart_dir, broken)
    (broken / "templates" / "broken.yaml").write_text("{{ .Values.nope | nope }}\n")
    assert helm.lint(broken, strict=True)["errors"]


@pytest.mark.parametrize("version", VERSIONS)
def test_built_in_objects_validate(variant: tuple[str, list[Rendered]], version: str) -> None:
    name, rendered = variant
    built_in = [
        item.object
        for item in rendered
        if (item.object["apiVersion"], item.kind) not in CUSTOM_KINDS
    ]
    assert len(built_in) >= 6, name
    for obj in built_in:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validation_catches_a_broken_deployment() -> None:
    rendered = render({})
    deployment = one(rendered, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["root"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def test_every_object_is_known(variant: tuple[str, list[Rendered]]) -> None:
    kinds = {(item.object["apiVersion"], item.kind) for item in variant[1]}
    built_in = {
        ("v1", "ServiceAccount"),
        ("v1", "Service"),
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("policy/v1", "PodDisruptionBudget"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    }
    assert kinds <= built_in | CUSTOM_KINDS


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webhook": {"certificate": {"mode": "letsEncrypt"}}}, "/webhook/certificate/mode"),
        ({"webhook": {"failurePolicy": "fail"}}, "/webhook/failurePolicy"),
        ({"webhooks": {"enabled": True}}, "additional properties 'webhooks'"),
        ({"operator": {"metricsPort": "8080"}}, "/operator/metricsPort"),
    ],
)
def test_values_schema_refuses_bad_values(
    chart_dir: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values, chart_dir=chart_dir)


def test_values_schema_covers_every_value() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    for leaf in _leaves(values):
        node = schema
        for key in leaf.split("."):
            assert key in node.get("properties", {}), f"values.schema.json lacks {leaf}"
            node = node["properties"][key]


# --- the operator's Deployment ------------------------------------------------------------


def test_the_deployment_runs_hardened_operators(variant: tuple[str, list[Rendered]]) -> None:
    """(Replicas, peering and the update strategy: tests/chart/test_chart_peering.py.)"""
    rendered = variant[1]
    deployment = one(rendered, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int)
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    operator = container(rendered)
    security = operator["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsNonRoot"] is True
    assert operator["resources"]["requests"]
    assert operator["resources"]["limits"]
    mounts = {mount["name"]: mount["mountPath"] for mount in operator["volumeMounts"]}
    assert mounts["tmp"] == "/tmp"
    assert selects(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])


def test_probes_call_the_liveness_endpoint(variant: tuple[str, list[Rendered]]) -> None:
    rendered = variant[1]
    operator = container(rendered)
    ports = {port["name"]: port["containerPort"] for port in operator["ports"]}
    assert re.fullmatch(
        rf"http://(0\.0\.0\.0|\$\(POD_IP\)):{ports['health']}/healthz", args(rendered)["--liveness"]
    )
    assert ports["health"] == 8081
    for probe in ("livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_metrics_port_and_service(variant: tuple[str, list[Rendered]]) -> None:
    rendered = variant[1]
    operator = container(rendered)
    ports = {port["name"]: port["containerPort"] for port in operator["ports"]}
    assert args(rendered)["--metrics-port"] == str(ports["metrics"]) == "8080"
    service = next(
        s for s in objects(rendered, "Service") if s["metadata"]["name"].endswith("-metrics")
    )
    pod_labels = one(rendered, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selects(service["spec"]["selector"], pod_labels)
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics"
    assert port["targetPort"] == "metrics"


def test_the_operator_args_follow_the_values() -> None:
    rendered = render(VARIANTS["given-issuer"])
    given = args(rendered)
    assert given["--prometheus-url"] == "http://prometheus-operated.monitoring:9090"
    assert "--verbose" in given
    assert container(rendered)["args"][-1] == "--watch-timeout=120"
    namespaced = container(render(SELF_SIGNED))["args"]
    assert [a for a in namespaced if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert not [a for a in namespaced if a.startswith(("--prometheus-url", "--verbose"))]


def test_listen_addresses_follow_the_values() -> None:
    """Every interface by default; `$(POD_IP)` (the downward API's pod address, which the
    kubelet expands in args) binds each server to the pod's own address."""
    default = args(render(ALL_ON))
    assert default["--metrics-address"] == "0.0.0.0"
    assert default["--liveness"] == "http://0.0.0.0:8081/healthz"
    assert default["--webhook-address"] == "0.0.0.0"
    rendered = render(VARIANTS["given-issuer"])
    given = args(rendered)
    assert given["--metrics-address"] == "$(POD_IP)"
    assert given["--liveness"] == "http://$(POD_IP):8081/healthz"
    assert given["--webhook-address"] == "$(POD_IP)"
    (pod_ip,) = [env for env in container(rendered)["env"] if env["name"] == "POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def _network_policy(rendered: list[Rendered]) -> dict[str, Any]:
    policy = one(rendered, "NetworkPolicy")
    (deployment,) = objects(rendered, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    return policy


def _opened_ports(policy: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Who may reach each named port of the operator pod."""
    return {
        port["port"]: rule["from"] for rule in policy["spec"]["ingress"] for port in rule["ports"]
    }


def test_the_network_policy_opens_metrics_and_webhook_only() -> None:
    """The health port is opened to no one (the kubelet's probes come from the node,
    which a NetworkPolicy never blocks); the webhook port only with the webhook."""
    assert _opened_ports(_network_policy(render({}))) == {"metrics": [{"namespaceSelector": {}}]}
    assert _opened_ports(_network_policy(render(ALL_ON))) == {
        "metrics": [{"namespaceSelector": {}}],
        "webhook": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
    }
    narrowed = _opened_ports(_network_policy(render(VARIANTS["given-issuer"])))
    assert narrowed["webhook"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert narrowed["metrics"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    closed = render(values_with(ALL_ON, {"networkPolicy": {"metricsFrom": []}}))
    assert set(_opened_ports(_network_policy(closed))) == {"webhook"}
    assert not objects(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_the_named_ports_of_the_policy_exist_on_the_operator_container() -> None:
    rendered = render(ALL_ON)
    names = {port["name"] for port in container(rendered)["ports"]}
    assert set(_opened_ports(_network_policy(rendered))) <= names


def test_a_client_ca_makes_the_webhook_ask_for_client_certificates() -> None:
    rendered = render(VARIANTS["given-issuer"])
    given = args(rendered)
    assert given["--webhook-client-ca"] == "/etc/trainplan/webhook-client-ca/ca.crt"
    (deployment,) = objects(rendered, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-client-ca"]["configMap"] == {"name": "apiserver-webhook-client-ca"}
    mounts = {m["name"]: m for m in container(rendered)["volumeMounts"]}
    assert mounts["webhook-client-ca"]["mountPath"] == "/etc/trainplan/webhook-client-ca"
    assert "--webhook-client-ca" not in args(render(ALL_ON))


# --- the admission webhook ----------------------------------------------------------------


def test_no_webhook_by_default() -> None:
    rendered = render({})
    assert not objects(rendered, "ValidatingWebhookConfiguration")
    assert not [item for item in rendered if item.object["apiVersion"].startswith("cert-manager")]
    assert not [a for a in args(rendered) if a.startswith("--webhook")]
    assert [s["metadata"]["name"] for s in objects(rendered, "Service")] == ["trainplan-metrics"]


def test_the_cert_manager_webhook_connects_up() -> None:
    rendered = render(ALL_ON)
    given = args(rendered)
    configuration = one(rendered, "ValidatingWebhookConfiguration")
    certificate = one(rendered, "Certificate")
    issuer = one(rendered, "Issuer")
    service = next(
        s for s in objects(rendered, "Service") if s["metadata"]["name"].endswith("-webhook")
    )
    deployment = one(rendered, "Deployment")
    (webhook,) = configuration["webhooks"]
    # The API server calls the Service at /budget (Kopf's path for the handler `budget`).
    client = webhook["clientConfig"]["service"]
    assert client == {
        "name": service["metadata"]["name"],
        "namespace": "trainplan",
        "path": "/budget",
        "port": service["spec"]["ports"][0]["port"],
    }
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    ports = {port["name"]: port["containerPort"] for port in container(rendered)["ports"]}
    assert given["--webhook-port"] == str(ports["webhook"])
    assert given["--webhook-host"] == f"{service['metadata']['name']}.trainplan.svc"
    assert "--webhook-managed" not in given
    assert webhook["rules"] == [
        {
            "apiGroups": ["trainplan.dev"],
            "apiVersions": ["v1alpha1"],
            "resources": ["trainingplans"],
            "operations": ["CREATE"],
            "scope": "Namespaced",
        }
    ]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["name"].count(".") >= 2  # the API server wants a fully qualified name
    # cert-manager fills the caBundle from the Certificate, whose Secret the operator mounts.
    annotations = configuration["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == (
        f"trainplan/{certificate['metadata']['name']}"
    )
    assert given["--webhook-host"] in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert issuer["spec"] == {"selfSigned": {}}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    mounts = {m["name"]: m["mountPath"] for m in container(rendered)["volumeMounts"]}
    assert given["--webhook-cert-dir"] == mounts["webhook-tls"]


def test_a_given_issuer_replaces_the_self_signed_one() -> None:
    rendered = render(VARIANTS["given-issuer"])
    assert not objects(rendered, "Issuer")
    assert one(rendered, "Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert one(rendered, "ValidatingWebhookConfiguration")["webhooks"][0]["failurePolicy"] == (
        "Fail"
    )


def test_the_self_signed_webhook_is_the_operators_own() -> None:
    """The operator makes its certificate and keeps the configuration (--webhook-managed):
    the chart renders neither, only the Service the configuration's URL points at."""
    rendered = render(SELF_SIGNED)
    given = args(rendered)
    assert not objects(rendered, "ValidatingWebhookConfiguration")
    assert not [item for item in rendered if item.object["apiVersion"].startswith("cert-manager")]
    assert given["--webhook-managed"] == "trainplan.trainplan.dev"
    assert "--webhook-cert-dir" not in given
    service = next(
        s for s in objects(rendered, "Service") if s["metadata"]["name"].endswith("-webhook")
    )
    # Kopf writes https://HOST:PORT/budget with the server's own port: the Service's too.
    assert given["--webhook-host"] == f"{service['metadata']['name']}.trainplan.svc"
    assert str(service["spec"]["ports"][0]["port"]) == given["--webhook-port"]


# --- CRDs ---------------------------------------------------------------------------------


def test_the_charts_crds_are_the_committed_ones() -> None:
    """charts/trainplan/files/crds/ is a copy of crds/ (`make manifests` copies it)."""
    chart_crds = CHART_DIR / "files" / "crds"
    committed = {path.name: path.read_bytes() for path in sorted(CRDS_DIR.glob("*.yaml"))}
    copies = {path.name: path.read_bytes() for path in sorted(chart_crds.glob("*.yaml"))}
    assert copies == committed, "run `make manifests` (it copies crds/ into the chart)"


def test_crds_render_as_committed_and_are_kept_on_uninstall() -> None:
    rendered = objects(render({}), "CustomResourceDefinition")
    assert sorted(crd["metadata"]["name"] for crd in rendered) == [
        "clustercalibrations.trainplan.dev",
        "gpubudgets.trainplan.dev",
        "trainingplans.trainplan.dev",
    ]
    for crd in rendered:
        committed = committed_crd(crd["metadata"]["name"].split(".")[0])
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert committed["metadata"]["labels"].items() <= crd["metadata"]["labels"].items()
        assert {k: v for k, v in crd.items() if k != "metadata"} == {
            k: v for k, v in committed.items() if k != "metadata"
        }
        assert crd["metadata"]["name"] == committed["metadata"]["name"]


def test_crds_can_be_left_out() -> None:
    assert not objects(render({"crds": {"install": False}}), "CustomResourceDefinition")


# --- monitoring ---------------------------------------------------------------------------


def test_monitoring_is_off_by_default() -> None:
    kinds = {item.kind for item in render({})}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"}


def test_the_service_monitor_scrapes_the_metrics_service() -> None:
    rendered = render(ALL_ON)
    monitor = one(rendered, "ServiceMonitor")
    service = next(
        s for s in objects(rendered, "Service") if s["metadata"]["name"].endswith("-metrics")
    )
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["trainplan"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    # It also selects the webhook Service, which has no such port: no target there.
    with_port = [
        other["metadata"]["name"]
        for other in objects(rendered, "Service")
        if selects(monitor["spec"]["selector"]["matchLabels"], other["metadata"]["labels"])
        and endpoint["port"] in {p["name"] for p in other["spec"]["ports"]}
    ]
    assert with_port == [service["metadata"]["name"]]


def _training_pod_templates(catalog: Catalog) -> Iterator[dict[str, Any]]:
    for path in RENDERABLE:
        for obj in example_objects(path, catalog):
            if obj["kind"] == "Job":
                yield obj["spec"]["template"]
            elif obj["kind"] == "JobSet":
                yield obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def test_the_pod_monitor_selects_every_training_pod_and_not_the_operator(
    catalog: Catalog,
) -> None:
    rendered = render(ALL_ON)
    monitor = one(rendered, "PodMonitor")
    selector = monitor["spec"]["selector"]
    assert selector["matchExpressions"] == [{"key": PLAN_LABEL, "operator": "Exists"}]
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == METRICS_PORT_NAME
    assert endpoint["path"] == METRICS_PATH
    templates = list(_training_pod_templates(catalog))
    assert templates
    for template in templates:
        labels = template["metadata"]["labels"]
        assert selects(selector["matchLabels"], labels)
        assert PLAN_LABEL in labels
        (trainer,) = template["spec"]["containers"]
        assert METRICS_PORT_NAME in {port["name"] for port in trainer["ports"]}
    operator_labels = one(rendered, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not selects(selector["matchLabels"], operator_labels)
    assert selector["matchLabels"] == {APP_NAME_LABEL: "trainplan", APP_COMPONENT_LABEL: "training"}
    # The plan's name becomes the `plan` label that --prometheus-url queries by.
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_label_trainplan_dev_plan"],
        "targetLabel": "plan",
    } in endpoint["relabelings"]


def test_the_prometheus_rule_carries_the_rules_file() -> None:
    rule = one(render(ALL_ON), "PrometheusRule")
    source = yaml.safe_load((CHART_DIR / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == {"groups": source["groups"]}


def test_the_dashboard_config_map_carries_the_dashboard() -> None:
    config_map = one(render(ALL_ON), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = json.loads((CHART_DIR / "files" / "trainplan-dashboard.json").read_text())
    assert json.loads(config_map["data"]["trainplan-dashboard.json"]) == source


def test_the_dashboard_can_go_to_grafanas_namespace() -> None:
    config_map = one(render(VARIANTS["given-issuer"]), "ConfigMap")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "ML"}


# --- values, notes, manifests, image --------------------------------------------------------


PASS_THROUGH: Final = frozenset(
    {
        "imagePullSecrets",
        "resources",
        "podSecurityContext",
        "securityContext",
        "nodeSelector",
        "affinity",
        "monitoring.podMonitor.namespaceSelector",
    }
)
"""Values that are Kubernetes fields as a whole, documented as one."""
_KEY: Final = re.compile(r"^( *)([A-Za-z]\w*):")


def _leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The path of every option: a scalar, a list, an empty map or a pass-through map."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and path not in PASS_THROUGH:
            yield from _leaves(value, f"{path}.")
        else:
            yield path


def _key_lines(text: str) -> dict[str, int]:
    """The line index of every key of a block-style YAML file, by its dotted path."""
    found: dict[str, int] = {}
    stack: list[str] = []
    for number, line in enumerate(text.splitlines()):
        match = _KEY.match(line)
        if match is None:
            continue
        depth = len(match.group(1)) // 2
        stack = [*stack[:depth], match.group(2)]
        found[".".join(stack)] = number
    return found


def test_every_value_is_commented_and_in_the_install_docs() -> None:
    text = (CHART_DIR / "values.yaml").read_text(encoding="utf-8")
    lines = text.splitlines()
    leaves = set(_leaves(yaml.safe_load(text)))
    positions = _key_lines(text)
    for leaf in sorted(leaves):
        above = lines[positions[leaf] - 1].strip()
        assert above.startswith("#"), f"values.yaml: {leaf} has no comment above it"
    table = (REPO_ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([\w.]+)` \|", table, flags=re.MULTILINE))
    assert sorted(leaves - documented) == [], "values missing from docs/install.md"
    assert sorted(documented - leaves) == [], "docs/install.md has values the chart lacks"


def test_notes_render() -> None:
    text = notes(ALL_ON)
    assert "kubectl -n trainplan rollout status deployment/trainplan" in text
    assert "trainplan.trainplan.dev" in text


@pytest.mark.parametrize("name", list(MANIFESTS))
def test_deploy_manifests_are_current(name: str) -> None:
    committed = MANIFESTS_DIR / name
    assert committed.is_file(), f"{committed} is missing; run `make manifests`"
    assert committed.read_text(encoding="utf-8") == manifest_files()[name], (
        f"{committed.relative_to(REPO_ROOT)} is out of date with the chart; run `make manifests`"
    )


def test_deploy_manifests_hold_the_rendered_objects() -> None:
    documents = [
        d
        for d in yaml.safe_load_all((MANIFESTS_DIR / "trainplan.yaml").read_text())
        if d is not None
    ]
    assert documents[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "trainplan"},
    }
    assert documents[1:] == [item.object for item in chart_crds() + render({})]


def test_the_image_runs_the_operator_as_the_charts_user() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")
    pod = one(render({}), "Deployment")["spec"]["template"]["spec"]
    uid = pod["securityContext"]["runAsUser"]
    assert re.search(rf"^USER {uid}:{uid}$", dockerfile, flags=re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["trainplan", "operator"\]$', dockerfile, flags=re.MULTILINE)
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, flags=re.MULTILINE)
    assert re.search(r"^RUN pip install \. ", dockerfile, flags=re.MULTILINE)  # no extras
    assert "torch==" not in dockerfile


# --- deploy/prometheus.yml ----------------------------------------------------------------


def test_local_prometheus_config_scrapes_a_local_run() -> None:
    config = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: [t for group in job["static_configs"] for t in group["targets"]]
        for job in config["scrape_configs"]
    }
    assert targets["trainplan-local-metrics"] == [f"127.0.0.1:{DEFAULT_METRICS_PORT}"]
    assert targets["trainplan-operator-metrics"] == ["127.0.0.1:8080"]
    # TrainplanOperatorDown finds the operator by job name: both jobs must count as one.
    assert all(re.fullmatch(DEFAULT_OPERATOR_JOB, job) for job in targets)


def test_local_prometheus_config_passes_promtool() -> None:
    promtool = promtool_binary()
    result = subprocess.run(
        [promtool, "check", "config", str(REPO_ROOT / "deploy" / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_the_operator_pod_mounts_the_accounts_token() -> None:
    rendered = render({})
    (account,) = objects(rendered, "ServiceAccount")
    (deployment,) = objects(rendered, "Deployment")
    assert account["automountServiceAccountToken"] is False
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    (shared,) = objects(render({"serviceAccount": {"automount": True}}), "ServiceAccount")
    assert shared["automountServiceAccountToken"] is True


def test_image_pull_secrets_are_names() -> None:
    given = render({"imagePullSecrets": [{"name": "regcred"}]})
    (deployment,) = objects(given, "Deployment")
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    with pytest.raises(helm.HelmError, match="imagePullSecrets"):
        render({"imagePullSecrets": ["regcred"]})
