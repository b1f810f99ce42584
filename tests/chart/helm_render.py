"""Render the Helm chart (charts/trainplan) offline, as `helm template` does, with
helm-python-sdk (Helm's Go SDK through ctypes: no helm binary, no cluster, no network), and
write the plain manifests of deploy/manifests/ from it.

    python -m tests.chart.helm_render --write    # or: make manifests

`render(values)` returns the chart's objects in Helm's install order, each with the
template it came from and its own YAML text; `manifest_files()` the texts of
deploy/manifests/, which `tests/chart/test_chart_render.py` compares with the committed
files.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import yaml

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
CHART_DIR: Final = REPO_ROOT / "charts" / "trainplan"
MANIFESTS_DIR: Final = REPO_ROOT / "deploy" / "manifests"
RELEASE: Final = "trainplan"
NAMESPACE: Final = "trainplan"

ALL_ON: Final[Mapping[str, Any]] = {
    "webhook": {"enabled": True},
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
    },
    "dashboard": {"enabled": True},
}
"""Every optional part on: the cert-manager webhook, the ServiceMonitor, the PodMonitor,
the PrometheusRule and the dashboard (the CRDs and the metrics Service are on anyway)."""

SELF_SIGNED: Final[Mapping[str, Any]] = {
    "webhook": {"enabled": True, "certificate": {"mode": "selfSigned"}},
    "operator": {"watchNamespaces": ["team-a", "team-b"]},
    "replicaCount": 1,
    "peering": {"enabled": False},
}
"""The other webhook mode, with a namespace-restricted operator: one standalone replica
(each replica would write its own self-signed CA into the webhook configuration)."""

MANIFESTS: Final[Mapping[str, tuple[Mapping[str, Any], str]]] = {
    "trainplan.yaml": ({}, "the chart's default values"),
    "trainplan-full.yaml": (
        ALL_ON,
        "every optional part on: the admission webhook with a cert-manager certificate,"
        "\n# the ServiceMonitor, PodMonitor and PrometheusRule (Prometheus Operator) and the"
        "\n# Grafana dashboard ConfigMap; needs cert-manager and the Prometheus Operator's CRDs",
    ),
}
"""deploy/manifests/<file>: the values it is rendered with, and what it is."""

# Helm's install order (pkg/release/util InstallOrder); other kinds come after these.
INSTALL_ORDER: Final = (
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
_SEPARATOR: Final = re.compile(r"^---[ \t]*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Rendered:
    """One object of the rendered chart."""

    source: str
    """The template, e.g. `trainplan/templates/deployment.yaml`."""
    text: str
    """Its YAML as the template wrote it (comments kept)."""
    object: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.object["kind"])

    @property
    def name(self) -> str:
        return str(self.object["metadata"]["name"])


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def values_with(*overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Several value overrides merged into one (later ones win, maps merge deeply)."""
    merged: dict[str, Any] = {}
    for override in overrides:
        merged = _merged(merged, override)
    return merged


def _order(item: Rendered) -> tuple[int, str]:
    kind = item.kind
    rank = INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)
    return rank, item.source


def render(
    values: Mapping[str, Any] | None = None,
    *,
    chart_dir: Path = CHART_DIR,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[Rendered]:
    """The chart's objects for `values` (over the chart's defaults), in Helm's install
    order (then by template, then as written); NOTES.txt and empty documents left out."""
    with helm.Chart.load(chart_dir) as chart:
        templates = chart.render(
            dict(values or {}), name=release, namespace=namespace, is_install=True
        )
    found: list[Rendered] = []
    for source in sorted(templates):
        if not source.endswith("NOTES.txt"):
            found.extend(_documents(source, templates[source]))
    return sorted(found, key=_order)


def _documents(source: str, text: str) -> list[Rendered]:
    found = []
    for part in _SEPARATOR.split(text):
        document = yaml.safe_load(part)
        if document is None:
            continue
        assert isinstance(document, dict), f"{source}: not a YAML mapping: {part[:200]}"
        found.append(Rendered(source, part.strip("\n") + "\n", document))
    return found


def chart_crds(chart_dir: Path = CHART_DIR) -> list[Rendered]:
    """The CRDs of the chart's crds/ directory (Kopf's peering), which Helm installs
    before the templates and `helm template --include-crds` prints first."""
    found: list[Rendered] = []
    for path in sorted((chart_dir / "crds").glob("*.yaml")):
        source = f"{chart_dir.name}/crds/{path.name}"
        found.extend(_documents(source, path.read_text(encoding="utf-8")))
    return found


def notes(values: Mapping[str, Any] | None = None, *, chart_dir: Path = CHART_DIR) -> str:
    """The chart's NOTES.txt as `helm install` prints it."""
    with helm.Chart.load(chart_dir) as chart:
        templates = chart.render(
            dict(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True
        )
    return next(text for source, text in templates.items() if source.endswith("NOTES.txt"))


def manifest_text(rendered: list[Rendered], description: str) -> str:
    """A plain manifest file: a header, the release namespace, then every object with
    its `# Source:` line as `helm template` prints them."""
    lines = [
        f"# Generated by `make manifests` from charts/trainplan with {description}.",
        "# Do not edit: change the chart (or its values in tests/chart/helm_render.py) and",
        "# run `make manifests`. Release name trainplan, namespace trainplan.",
        "---",
        "# Not from the chart: the release namespace (`helm install --create-namespace`).",
        "apiVersion: v1",
        "kind: Namespace",
        "metadata:",
        f"  name: {NAMESPACE}",
    ]
    text = "\n".join(lines) + "\n"
    for item in rendered:
        text += f"---\n# Source: {item.source}\n{item.text}"
    return text


def manifest_files(chart_dir: Path = CHART_DIR) -> dict[str, str]:
    """The texts of deploy/manifests/, by file name."""
    crds = chart_crds(chart_dir)
    return {
        name: manifest_text(crds + render(values, chart_dir=chart_dir), description)
        for name, (values, description) in MANIFESTS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write deploy/manifests/")
    arguments = parser.parse_args(argv)
    files = manifest_files()
    if not arguments.write:
        for name, text in files.items():
            sys.stdout.write(f"# ==> {name} <==\n{text}")
        return 0
    MANIFESTS_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (MANIFESTS_DIR / name).write_text(text, encoding="utf-8")
        print(f"wrote {(MANIFESTS_DIR / name).relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
