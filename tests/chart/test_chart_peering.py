"""The chart's high-availability parts: two peered replicas rolled one at a time, each
known to Kopf by its pod name, the peering objects Kopf looks for (validated against the
chart's own kopf.dev CRDs, whose names are the ones Kopf 1.45 selects), the
PodDisruptionBudget, and the settings the chart refuses. (The operator's side, a leader
killed mid-launch: tests/integration/test_peering.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
from kopf._cogs.structs import references

from tests.chart.helm_render import SELF_SIGNED, chart_crds, render
from tests.chart.test_chart_render import VERSIONS, args, container, objects, one, selects

STANDALONE: Final = {"replicaCount": 1, "peering": {"enabled": False}}
NAMESPACES: Final = ("team-a", "team-b")


def _crd(kind: str) -> dict[str, Any]:
    (crd,) = [c.object for c in chart_crds() if c.object["spec"]["names"]["kind"] == kind]
    return crd


@pytest.mark.parametrize(
    ("selector", "scope"),
    [(references.CLUSTER_PEERINGS_K, "Cluster"), (references.NAMESPACED_PEERINGS_K, "Namespaced")],
)
def test_the_peering_crds_are_what_kopf_selects(selector: references.Selector, scope: str) -> None:
    (crd,) = [c.object for c in chart_crds() if c.object["spec"]["scope"] == scope]
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"]) == (selector.group, selector.version)
    assert crd["spec"]["names"]["plural"] == selector.any_name
    assert version["served"] is True
    assert version["storage"] is True


@pytest.mark.parametrize("version", VERSIONS)
def test_the_peering_crds_validate(version: str) -> None:
    crds = chart_crds()
    assert {c.object["metadata"]["name"] for c in crds} == {
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }
    for crd in crds:
        kubernetes_validate.validate(crd.object, version, strict=True)


def _validate_against_crd(obj: dict[str, Any]) -> None:
    schema = _crd(obj["kind"])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft202012Validator(schema).validate(obj)


def test_two_peered_replicas_by_default() -> None:
    rendered = render({})
    spec = one(rendered, "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    flags = args(rendered)
    assert flags["--peering"] == "trainplan"
    assert flags["--peering-lifetime"] == "60"
    env = {item["name"]: item for item in container(rendered)["env"]}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    (peering,) = objects(rendered, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == flags["--peering"]
    assert "namespace" not in peering["metadata"]
    _validate_against_crd(peering)
    assert objects(rendered, "KopfPeering") == []


def test_watching_namespaces_the_peering_is_in_each() -> None:
    rendered = render({"operator": {"watchNamespaces": list(NAMESPACES)}})
    peerings = objects(rendered, "KopfPeering")
    assert [p["metadata"]["namespace"] for p in peerings] == list(NAMESPACES)
    assert {p["metadata"]["name"] for p in peerings} == {args(rendered)["--peering"]}
    for peering in peerings:
        _validate_against_crd(peering)
    assert objects(rendered, "ClusterKopfPeering") == []


def test_the_disruption_budget_keeps_a_replica() -> None:
    rendered = render({})
    budget = one(rendered, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    labels = one(rendered, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selects(budget["spec"]["selector"]["matchLabels"], labels)
    assert budget["metadata"]["namespace"] == "trainplan"


def test_standalone_is_one_replica_recreated() -> None:
    rendered = render(STANDALONE)
    spec = one(rendered, "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert "--peering" not in args(rendered)
    assert "POD_ID" not in {item["name"] for item in container(rendered)["env"]}
    for kind in ("ClusterKopfPeering", "KopfPeering", "PodDisruptionBudget"):
        assert objects(rendered, kind) == [], kind
    (role,) = objects(rendered, "ClusterRole")
    assert not [rule for rule in role["rules"] if "kopf.dev" in rule["apiGroups"]]


def test_the_self_signed_webhook_mode_is_standalone() -> None:
    rendered = render(SELF_SIGNED)
    assert "--peering" not in args(rendered)
    assert one(rendered, "Deployment")["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"replicaCount": 3, "peering": {"enabled": False}},
            "replicaCount above 1 needs peering.enabled",
        ),
        (
            {"webhook": {"enabled": True, "certificate": {"mode": "selfSigned"}}},
            "each replica write its own CA",
        ),
        ({"replicaCount": 0}, "/replicaCount"),
        ({"peering": {"lifetimeSeconds": 0}}, "/peering/lifetimeSeconds"),
    ],
)
def test_settings_that_would_run_two_operators_are_refused(
    chart_dir: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values, chart_dir=chart_dir)
