"""The chart's objects of other projects' kinds validate against those projects' CRDs.

The ServiceMonitor, PodMonitor and PrometheusRule (monitoring.coreos.com/v1) and the
cert-manager Certificate and Issuer (cert-manager.io/v1) that charts/trainplan renders,
with every variant of values the chart tests render (`tests/chart/test_chart_render.py`,
VARIANTS) and with the monitoring options set, and those in the committed
deploy/manifests/, validate against the `spec` schema of the CRD of Prometheus Operator
v0.93.0 and of cert-manager v1.21.1 (vendored in tests/data/upstream/, each node's text
unchanged: see tests/data/README.md), unknown fields refused as the API server's strict
field validation refuses them. The schemas do not hold CEL rules for these nodes but the
Issuer's Venafi one, which the chart never renders. Broken objects are refused, so the
validation is known to bite.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Final

import jsonschema
import pytest
import yaml

from tests.chart.helm_render import (
    ALL_ON,
    CHART_DIR,
    MANIFESTS,
    MANIFESTS_DIR,
    render,
    values_with,
)
from tests.chart.test_chart_render import CUSTOM_KINDS, VARIANTS
from tests.contract.crd_schema import errors, node_validator

UPSTREAM: Final = Path(__file__).resolve().parents[1] / "data" / "upstream"
SCHEMAS: Final = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "prometheus-operator-v0.93.0-servicemonitor",
    ("monitoring.coreos.com/v1", "PodMonitor"): "prometheus-operator-v0.93.0-podmonitor",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheus-operator-v0.93.0-prometheusrule",
    ("cert-manager.io/v1", "Certificate"): "cert-manager-v1.21.1-certificate",
    ("cert-manager.io/v1", "Issuer"): "cert-manager-v1.21.1-issuer",
}
"""(apiVersion, kind): the vendored file `tests/data/upstream/<name>-schema.yaml`."""
MONITORING_OPTIONS: Final = values_with(
    ALL_ON,
    {
        "monitoring": {
            "serviceMonitor": {"interval": "1m", "labels": {"release": "kube-prometheus-stack"}},
            "podMonitor": {
                "interval": "10s",
                "labels": {"release": "kube-prometheus-stack"},
                "namespaceSelector": {"matchNames": ["team-a", "team-b"]},
            },
            "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
        }
    },
)
"""Every monitoring option set, with the cert-manager webhook on."""
ALL_VARIANTS: Final = {**VARIANTS, "monitoring-options": MONITORING_OPTIONS}
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    path = UPSTREAM / f"{SCHEMAS[(api_version, kind)]}-schema.yaml"
    return node_validator(yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)["spec"])


def _upstream_objects(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for obj in objects:
        if (obj.get("apiVersion"), obj.get("kind")) in SCHEMAS:
            yield obj


def _spec_errors(obj: dict[str, Any]) -> list[str]:
    return errors(_validator(obj["apiVersion"], obj["kind"]), obj["spec"])


def test_every_custom_kind_of_the_chart_has_a_schema() -> None:
    """Each kind of another project's CRD that the chart renders has its project's schema
    here, but those whose CRD the chart installs itself (charts/trainplan/crds/)."""
    shipped = {
        (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
        for path in sorted((CHART_DIR / "crds").glob("*.yaml"))
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if crd
        for version in crd["spec"]["versions"]
    }
    assert CUSTOM_KINDS - shipped == set(SCHEMAS)


@pytest.mark.parametrize("name", list(ALL_VARIANTS))
def test_rendered_objects_validate(name: str) -> None:
    found = list(_upstream_objects([item.object for item in render(ALL_VARIANTS[name])]))
    for obj in found:
        assert _spec_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    kinds = {(obj["apiVersion"], obj["kind"]) for obj in found}
    if name in ("all-on", "monitoring-options"):
        assert kinds == set(SCHEMAS)
    if name == "given-issuer":  # the given ClusterIssuer signs: no Issuer of the chart's
        assert kinds == set(SCHEMAS) - {("cert-manager.io/v1", "Issuer")}


@pytest.mark.parametrize("file", list(MANIFESTS))
def test_committed_manifests_validate(file: str) -> None:
    documents = yaml.safe_load_all((MANIFESTS_DIR / file).read_text(encoding="utf-8"))
    found = list(_upstream_objects([document for document in documents if document]))
    for obj in found:
        assert _spec_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    if file == "trainplan-full.yaml":
        assert {(obj["apiVersion"], obj["kind"]) for obj in found} == set(SCHEMAS)


@cache
def _all_on() -> dict[str, dict[str, Any]]:
    kinds = {kind for _, kind in SCHEMAS}
    return {item.kind: item.object for item in render(ALL_ON) if item.kind in kinds}


def _broken(kind: str) -> dict[str, Any]:
    return copy.deepcopy(_all_on()[kind])


def test_the_validation_catches_a_broken_service_monitor() -> None:
    monitor = _broken("ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = 30
    monitor["spec"]["endpoints"][0]["honorLabels"] = "true"
    monitor["spec"]["endpoints"][0]["scrapeEvery"] = "30s"
    assert _spec_errors(monitor) == [
        "endpoints.0.honorLabels: 'true' is not of type 'boolean'",
        "endpoints.0.interval: 30 is not of type 'string'",
        "endpoints.0: Additional properties are not allowed ('scrapeEvery' was unexpected)",
    ]


def test_the_validation_catches_a_broken_pod_monitor() -> None:
    monitor = _broken("PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"
    del monitor["spec"]["selector"]
    assert _spec_errors(monitor) == [
        "(root): 'selector' is a required property",
        "podMetricsEndpoints.0.interval: '15 seconds' does not match"
        " '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
        "(([0-9]+)ms)?)$'",
    ]


def test_the_validation_catches_a_broken_prometheus_rule() -> None:
    rule = _broken("PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    rule["spec"]["groups"][0]["partial_response_strategy"] = "ignore"
    assert _spec_errors(rule) == [
        "groups.0.partial_response_strategy: 'ignore' does not match '(?i)^(abort|warn)?$'",
        "groups.0.rules.0.for: '5 minutes' does not match"
        " '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
        "(([0-9]+)ms)?)$'",
    ]
    rule["spec"]["groups"][0]["partial_response_strategy"] = "WARN"  # RE2's (?i)
    assert len(_spec_errors(rule)) == 1


def test_the_validation_catches_a_broken_certificate() -> None:
    certificate = _broken("Certificate")
    certificate["spec"]["privateKey"]["size"] = "256"
    certificate["spec"]["privateKey"]["algorithm"] = "DSA"
    del certificate["spec"]["secretName"]
    assert _spec_errors(certificate) == [
        "(root): 'secretName' is a required property",
        "privateKey.algorithm: 'DSA' is not one of ['RSA', 'ECDSA', 'Ed25519']",
        "privateKey.size: '256' is not of type 'integer'",
    ]


def test_the_validation_catches_a_broken_issuer() -> None:
    issuer = _broken("Issuer")
    issuer["spec"]["selfSigned"] = {"crlDistributionPoints": "http://crl.example"}
    issuer["spec"]["selfsigned"] = {}
    assert _spec_errors(issuer) == [
        "(root): Additional properties are not allowed ('selfsigned' was unexpected)",
        "selfSigned.crlDistributionPoints: 'http://crl.example' is not of type 'array'",
    ]
