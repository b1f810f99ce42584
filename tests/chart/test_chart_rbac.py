"""The chart's ClusterRole and Roles grant exactly what the operator uses: no verb
missing, none extra, in each way the chart can run the operator; watching some
namespaces, the namespaced rules are Roles in those namespaces only.

For each mode (default values; every optional part on, i.e. the cert-manager webhook;
the self-signed webhook that the operator manages, with watched namespaces), the
operator's settings are not assumed: the rendered Deployment's args are parsed by the
CLI's own `trainplan operator` options, and the registry is built from them as the
command builds it. What that operator needs is then derived from the code in two parts:

1. trainplan's own requests are recorded, not listed by hand. `trainplan.cluster` is the
   only code that talks to the API; `RecordingApi` is that client with its one HTTP
   method answered from memory, recording each request as (API group, resource, verb).
   The registry's real handlers are driven through the life of two plans (a Job with a
   GPUBudget, a DeepSpeed JobSet without one): launch, the admission webhook when it is
   registered, `job.suspend`, an ETA revision with a failed pod, the Job completing, the
   budget timer losing a write to another writer, an invalid budget spec, deletions.
   `test_every_client_call_site_is_driven` scans operator/trainplan (AST) for every call
   of the client (`api.get/list_objects/create/patch/apply/ownership_conflicts`, also on
   `context.api()`) and fails when a call site was not reached, so a new API call cannot
   slip past this test: give `drive` a step that reaches it.
2. Kopf's own requests follow from the same registry and Kopf's settings, by what Kopf
   (1.45) does; each rule names where:
   - every resource with a change, timer or event handler: list, watch (its watch
     streams, `kopf._cogs.clients.watching`);
   - resources with change or timer handlers: patch (progress and last-handled
     annotations under trainplan.dev/, the finalizer; `kopf._cogs.clients.patching`);
   - `<plural>/status`: patch, when a driven handler wrote to `patch.status` (Kopf sends
     it to the status subresource the CRDs declare);
   - events: create, when a driven handler posted one through `kopf.warn`/`info`/`event`
     (Kopf also posts log records at or above the posting level; the same POST);
   - customresourcedefinitions: list, watch (the resource observer, always on);
   - namespaces: list, watch, only when restricted to namespaces (the namespace observer,
     `kopf._core.reactor.observation`; cluster-wide it does not look);
   - validatingwebhookconfigurations: create, patch, only when Kopf manages the webhook
     configuration (`settings.admission.managed`, `kopf._core.engines.admission`).

API discovery (`/api`, `/apis`) is a non-resource URL every authenticated user may read.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, cast

import kopf
import pytest
import yaml
from kopf._core.engines import posting

from tests import kueue_workloads
from tests.chart.helm_render import ALL_ON, SELF_SIGNED, Rendered, render
from tests.chart.recording_api import PACKAGE_DIR, REPO_ROOT, RecordingApi
from trainplan.api import GROUP, PLAN_LABEL, TrainingPlanSpec
from trainplan.cli.operator_command import command as operator_command
from trainplan.cluster import Connection
from trainplan.controller import ControllerContext, OperatorConfig, build_registry
from trainplan.controller.config import configure_kopf
from trainplan.planner import Catalog, plan

Rule = tuple[str, str, str]
"""(API group, resource or resource/subresource, verb)."""

NOW: Final = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
CLIENT_METHODS: Final = frozenset(
    {"get", "list_objects", "create", "patch", "apply", "ownership_conflicts"}
)
MODES: Final[Mapping[str, Mapping[str, Any]]] = {
    "default": {},
    "all-on": ALL_ON,
    "self-signed": SELF_SIGNED,
    "peered-in-namespaces": {"operator": {"watchNamespaces": ["team-a", "team-b"]}},
}
SPEC: Final[Mapping[str, Any]] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0"},
}


# --- what the chart grants ----------------------------------------------------------------


CLUSTER_SCOPED: Final = frozenset(
    {
        "customresourcedefinitions",
        "namespaces",
        "validatingwebhookconfigurations",
        "clusterkopfpeerings",
        "clustercalibrations",
        "clustercalibrations/status",
    }
)
"""The resources of the rules that no Role can grant."""


def _rules(role: Mapping[str, Any]) -> set[Rule]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def roles(rendered: list[Rendered]) -> dict[str, set[Rule]]:
    """The rules of each rendered Role, by its namespace."""
    return {
        item.object["metadata"]["namespace"]: _rules(item.object)
        for item in rendered
        if item.kind == "Role"
    }


def granted(rendered: list[Rendered]) -> set[Rule]:
    """Every (group, resource, verb) the rendered ClusterRole and Roles allow."""
    (role,) = [item.object for item in rendered if item.kind == "ClusterRole"]
    return _rules(role).union(*roles(rendered).values())


@dataclass(frozen=True)
class Launch:
    """How the chart starts the operator: its settings and namespaces."""

    config: OperatorConfig
    namespaces: tuple[str, ...]


def launch_of(rendered: list[Rendered]) -> Launch:
    """The rendered Deployment's args, parsed by `trainplan operator`'s own options."""
    (deployment,) = [item.object for item in rendered if item.kind == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    context = operator_command.make_context("operator", list(container["args"]))
    params = context.params
    config = OperatorConfig(
        eta_interval_seconds=params["eta_interval_seconds"],
        budget_interval_seconds=params["budget_interval_seconds"],
        webhook_port=params["webhook_port"],
        webhook_host=params["webhook_host"],
        webhook_managed=params["webhook_managed"],
        peering_name=params["peering_name"],
    )
    return Launch(config, tuple(params["namespaces"]))


# --- driving the handlers -----------------------------------------------------------------


@dataclass
class Drive:
    """What driving the handlers asked of the API, and what Kopf would write for them."""

    api: RecordingApi
    status_written: set[str] = field(default_factory=set)
    """Plurals whose handlers wrote `patch.status`."""
    events_posted: int = 0


def _handler(registry: kopf.OperatorRegistry, plural: str, name: str) -> Callable[..., Any]:
    handlers = [
        *registry._changing.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
        *registry._watching.get_all_handlers(),
        *registry._webhooks.get_all_handlers(),
    ]
    for handler in handlers:
        selector = handler.selector
        if selector is not None and selector.any_name == plural and handler.fn.__name__ == name:
            return handler.fn
    raise LookupError(f"no handler {name} for {plural}")


def _body(obj: Mapping[str, Any]) -> kopf.Body:
    """An object as Kopf hands it to a handler."""
    return kopf.Body(cast(kopf.RawBody, copy.deepcopy(dict(obj))))


def _plan(name: str, namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": copy.deepcopy(dict(spec)),
    }


def _deepspeed_jobset_spec() -> dict[str, Any]:
    path = REPO_ROOT / "deploy" / "examples" / "frameworks" / "deepspeed-gpt-1b3.yaml"
    spec: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))["spec"]
    spec["job"]["launcher"] = "JobSet"
    return spec


async def drive(config: OperatorConfig, catalog: Catalog) -> Drive:
    """Every handler of the registry through two plans' lives (see the module doc)."""
    registry = build_registry(config=config)
    api = RecordingApi()
    now = [NOW]
    context = ControllerContext(catalog=catalog, config=config, clock=lambda: now[0])
    context.connection = Connection(server="http://api.invalid")
    context._api = api
    memo = kopf.Memo(context=context)
    logger = logging.getLogger("tests.chart.rbac")
    settings = kopf.OperatorSettings()
    configure_kopf(settings, config)
    events: asyncio.Queue[Any] = asyncio.Queue()
    posting.settings_var.set(settings)
    posting.event_queue_var.set(events)
    posting.event_queue_loop_var.set(asyncio.get_running_loop())
    result = Drive(api)

    async def call(plural: str, name: str, body: Mapping[str, Any], **kwargs: Any) -> None:
        patch = kopf.Patch()
        fn = _handler(registry, plural, name)
        outcome = fn(body=_body(body), patch=patch, memo=memo, logger=logger, **kwargs)
        if asyncio.iscoroutine(outcome):
            await outcome
        if patch.get("status"):  # Kopf writes it; the next handler reads it back
            result.status_written.add(plural)
            key = (GROUP, plural, body["metadata"]["namespace"], body["metadata"]["name"])
            if key in api.objects:
                stored = api.objects[key]
                api.put(
                    GROUP,
                    plural,
                    {**stored, "status": {**stored.get("status", {}), **patch["status"]}},
                )

    gpu_hours = plan(TrainingPlanSpec.model_validate(SPEC), catalog).gpu_hours
    budget = api.put(
        GROUP,
        "gpubudgets",
        {
            "apiVersion": "trainplan.dev/v1alpha1",
            "kind": "GPUBudget",
            "metadata": {"name": "team", "namespace": "team-a"},
            # Over budget, admitted with a warning: the 80% and 100% Events are posted.
            "spec": {"gpuHours": gpu_hours * 0.9, "period": "30d", "enforcement": "Warn"},
        },
    )
    # Alpha names a ClusterCalibration (cluster-scoped): read when planning, and its
    # record written there when the run succeeds.
    api.put(
        GROUP,
        "clustercalibrations",
        {
            "apiVersion": "trainplan.dev/v1alpha1",
            "kind": "ClusterCalibration",
            "metadata": {"name": "fleet"},
            "spec": {"gpuType": "A100-SXM4-80GB"},
        },
    )
    alpha_spec = {**SPEC, "budgetRef": "team", "hardware": {"calibration": "fleet"}}
    alpha = api.put(GROUP, "trainingplans", _plan("alpha", "team-a", alpha_spec))
    beta = api.put(GROUP, "trainingplans", _plan("beta", "team-b", _deepspeed_jobset_spec()))

    # Created: planned, budgeted, applied (Service and Job; Service, ConfigMap and JobSet).
    await call("trainingplans", "launch", alpha)
    await call("trainingplans", "launch", beta)
    alpha = api.stored(GROUP, "trainingplans", "team-a", "alpha")
    beta = api.stored(GROUP, "trainingplans", "team-b", "beta")
    assert alpha["status"]["jobName"], alpha["status"]
    assert beta["status"]["jobName"], beta["status"]

    # The admission webhook: a plan naming its budget, and one finding it in the namespace.
    if config.webhook_port is not None:
        for spec in ({**SPEC, "budgetRef": "team"}, SPEC):
            review = _body(_plan("gamma", "team-a", spec))
            fn = _handler(registry, "trainingplans", "budget")
            await fn(body=review, memo=memo, warnings=[], logger=logger)

    # job.suspend after launch: the Job and the JobSet follow.
    suspend = [kopf.DiffItem(kopf.DiffOperation.CHANGE, ("spec", "job", "suspend"), None, True)]
    for body in (alpha, beta):
        suspended = copy.deepcopy(body)
        suspended["spec"]["job"]["suspend"] = True
        await call(
            "trainingplans",
            "spec_changed",
            suspended,
            status=_body(suspended).status,
            diff=kopf.Diff(suspend),
        )

    # A queued plan (Kueue) is paused through its Workload's spec.active.
    queued = api.put(
        GROUP,
        "trainingplans",
        _plan("delta", "team-a", {**SPEC, "job": {**SPEC["job"], "queueName": "team-a"}}),
    )
    await call("trainingplans", "launch", queued)
    queued = api.stored(GROUP, "trainingplans", "team-a", "delta")
    queued_job = api.stored("batch", "jobs", "team-a", queued["status"]["jobName"])
    # The Workload Kueue makes for the Job (tests/kueue_workloads.py: Kueue v0.14.8's shape).
    made = api.put("kueue.x-k8s.io", "workloads", kueue_workloads.workload(queued_job))
    name = made["metadata"]["name"]
    paused = copy.deepcopy(queued)
    paused["spec"]["job"]["suspend"] = True
    await call(
        "trainingplans",
        "spec_changed",
        paused,
        status=_body(paused).status,
        diff=kopf.Diff(suspend),
    )
    workload = api.stored("kueue.x-k8s.io", "workloads", "team-a", name)
    assert workload["spec"]["active"] is False
    # Kueue admits it: the plan's Admitted condition.
    workload["status"] = kueue_workloads.workload_status("admitted")
    assert kueue_workloads.upstream_errors(workload) == []
    await call("workloads", "kueue_changed", workload)
    admitted = api.stored(GROUP, "trainingplans", "team-a", "delta")["status"]["conditions"]
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in admitted)

    # An ETA revision while running, after a pod failed: the Restarted Event.
    api.put(
        "",
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "alpha-0",
                "namespace": "team-a",
                "labels": {PLAN_LABEL: "alpha"},
            },
            "status": {"phase": "Failed", "reason": "Evicted"},
        },
    )
    alpha = api.stored(GROUP, "trainingplans", "team-a", "alpha")
    running = api.put(
        GROUP, "trainingplans", {**alpha, "status": {**alpha["status"], "phase": "Running"}}
    )
    await call("trainingplans", "revise_eta", running)

    # The Job completes ten hours later: the plan's status, its budget (now used up: the
    # BudgetExhausted Events), a Succeeded Event and its ClusterCalibration record follow.
    now[0] = NOW + timedelta(hours=10)
    alpha = api.stored(GROUP, "trainingplans", "team-a", "alpha")
    steady = {"step": 500, "measuredStepSeconds": alpha["status"]["plan"]["stepSeconds"]}
    api.put(GROUP, "trainingplans", {**alpha, "status": {**alpha["status"], "progress": steady}})
    job = api.stored("batch", "jobs", "team-a", alpha["status"]["jobName"])
    job["status"] = {
        "startTime": NOW.isoformat(),
        "completionTime": now[0].isoformat(),
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    await call("jobs", "child_changed", job)

    # The budget's timer; its first write loses to another writer and is done again.
    api.conflict_once.add((GROUP, "gpubudgets/status"))
    budget = api.stored(GROUP, "gpubudgets", "team-a", "team")
    await call("gpubudgets", "revise", budget)
    invalid = {**budget, "spec": {"gpuHours": -1}}
    await call("gpubudgets", "spec_changed", invalid)

    # The operator starts again after beta's JobSet was deleted meanwhile: the run ends.
    beta = api.stored(GROUP, "trainingplans", "team-b", "beta")
    del api.objects[("jobset.x-k8s.io", "jobsets", "team-b", beta["status"]["jobName"])]
    beta = api.put(
        GROUP, "trainingplans", {**beta, "status": {**beta["status"], "phase": "Running"}}
    )
    await call("trainingplans", "launch", beta)
    assert api.stored(GROUP, "trainingplans", "team-b", "beta")["status"]["phase"] == "Failed"

    # Deleted.
    await call("trainingplans", "forget", api.stored(GROUP, "trainingplans", "team-a", "alpha"))
    await call("gpubudgets", "forget", budget)

    result.events_posted = events.qsize()
    await api.close()
    await context.close()
    return result


def run_drive(config: OperatorConfig, catalog: Catalog) -> Drive:
    return asyncio.run(drive(config, catalog))


# --- what the operator needs --------------------------------------------------------------


def _resource_handlers(registry: kopf.OperatorRegistry) -> Iterator[tuple[str, str, str]]:
    """(group, plural, "changing" | "spawning" | "watching") of every resource handler."""
    for kind, handlers in (
        ("changing", registry._changing.get_all_handlers()),
        ("spawning", registry._spawning.get_all_handlers()),
        ("watching", registry._watching.get_all_handlers()),
    ):
        for handler in handlers:
            assert handler.selector is not None
            assert handler.selector.group is not None
            yield handler.selector.group, str(handler.selector.any_name), kind


def kopf_rules(launch: Launch, driven: Drive) -> set[Rule]:
    """What Kopf itself asks of the API for this registry and these settings."""
    registry = build_registry(config=launch.config)
    settings = kopf.OperatorSettings()
    configure_kopf(settings, launch.config)
    rules: set[Rule] = set()
    for group, plural, kind in _resource_handlers(registry):
        rules |= {(group, plural, "list"), (group, plural, "watch")}
        if kind in ("changing", "spawning"):
            rules.add((group, plural, "patch"))
    rules |= {(GROUP, f"{plural}/status", "patch") for plural in driven.status_written}
    if driven.events_posted:
        rules.add(("", "events", "create"))
    rules |= {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    }
    if launch.namespaces:
        rules |= {("", "namespaces", "list"), ("", "namespaces", "watch")}
    if launch.config.peering_name is not None:
        # The peering observer lists and watches the peering objects, and the keep-alive
        # patches this replica's record (`kopf._core.engines.peering`): ClusterKopfPeering
        # cluster-wide, KopfPeering when restricted to namespaces.
        plural = "kopfpeerings" if launch.namespaces else "clusterkopfpeerings"
        rules |= {("kopf.dev", plural, verb) for verb in ("list", "watch", "patch")}
    if settings.admission.managed is not None and registry._webhooks.get_all_handlers():
        rules |= {
            ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "create"),
            ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
        }
    return rules


def client_rules(driven: Drive) -> set[Rule]:
    return {(r.group, r.resource, r.verb) for r in driven.api.requests}


# --- tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=list(MODES))
def mode(request: pytest.FixtureRequest, chart_dir: Path, catalog: Catalog) -> dict[str, Any]:
    rendered = render(MODES[request.param], chart_dir=chart_dir)
    launch = launch_of(rendered)
    driven = run_drive(launch.config, catalog)
    return {"name": request.param, "rendered": rendered, "launch": launch, "driven": driven}


def test_the_roles_grant_exactly_what_the_operator_uses(mode: dict[str, Any]) -> None:
    needed = client_rules(mode["driven"]) | kopf_rules(mode["launch"], mode["driven"])
    grants = granted(mode["rendered"])
    missing, extra = sorted(needed - grants), sorted(grants - needed)
    assert not missing, f"{mode['name']}: the roles lack {missing}"
    assert not extra, f"{mode['name']}: the roles grant {extra}, which nothing uses"


def test_the_modes_differ_as_documented(mode: dict[str, Any]) -> None:
    """Namespaces only when restricted to some; webhook configurations only when managed,
    patch limited to the one the operator keeps."""
    launch: Launch = mode["launch"]
    grants = granted(mode["rendered"])
    namespaces = {rule for rule in grants if rule[1] == "namespaces"}
    webhooks = {rule for rule in grants if rule[1] == "validatingwebhookconfigurations"}
    assert bool(namespaces) == bool(launch.namespaces)
    assert bool(webhooks) == (launch.config.webhook_managed is not None)
    roles = [item.object for item in mode["rendered"] if item.kind in ("ClusterRole", "Role")]
    names_by_resource = {
        "validatingwebhookconfigurations": launch.config.webhook_managed,
        "clusterkopfpeerings": launch.config.peering_name,
        "kopfpeerings": launch.config.peering_name,
    }
    for rule in (rule for role in roles for rule in role["rules"]):
        (resource, *_) = rule["resources"]
        if resource in names_by_resource and "patch" in rule["verbs"]:
            assert rule["resourceNames"] == [names_by_resource[resource]]
        else:
            assert "resourceNames" not in rule


def test_watched_namespaces_get_roles_and_the_cluster_role_keeps_the_rest(
    mode: dict[str, Any],
) -> None:
    """Watching some namespaces, the operator may touch namespaced objects only there:
    the same rules in a Role of each, none in the ClusterRole. Watching all, no Role."""
    launch: Launch = mode["launch"]
    (cluster_role,) = [item.object for item in mode["rendered"] if item.kind == "ClusterRole"]
    cluster_rules = _rules(cluster_role)
    namespaced = {rule for rule in granted(mode["rendered"]) if rule[1] not in CLUSTER_SCOPED}
    by_namespace = roles(mode["rendered"])
    if launch.namespaces:
        assert set(by_namespace) == set(launch.namespaces)
        assert all(rules == namespaced for rules in by_namespace.values())
        assert {rule[1] for rule in cluster_rules} <= CLUSTER_SCOPED
    else:
        assert by_namespace == {}
        assert namespaced <= cluster_rules


def test_each_role_is_bound_to_the_operators_account_in_its_namespace(
    mode: dict[str, Any],
) -> None:
    objects = [item.object for item in mode["rendered"]]
    (deployment,) = [obj for obj in objects if obj["kind"] == "Deployment"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    role_names = {
        obj["metadata"]["namespace"]: obj["metadata"]["name"]
        for obj in objects
        if obj["kind"] == "Role"
    }
    bindings = {
        obj["metadata"]["namespace"]: obj for obj in objects if obj["kind"] == "RoleBinding"
    }
    assert set(bindings) == set(role_names)
    for namespace, binding in bindings.items():
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role_names[namespace],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": "trainplan"}
        ]


def test_the_binding_binds_the_role_to_the_operators_account(mode: dict[str, Any]) -> None:
    objects = {(item.kind, item.name): item.object for item in mode["rendered"]}
    (binding,) = [obj for (kind, _), obj in objects.items() if kind == "ClusterRoleBinding"]
    (role,) = [obj for (kind, _), obj in objects.items() if kind == "ClusterRole"]
    (deployment,) = [obj for (kind, _), obj in objects.items() if kind == "Deployment"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "trainplan"}
    ]
    assert ("ServiceAccount", account) in objects


def client_call_sites() -> list[tuple[str, int, int]]:
    """(file, first line, last line) of every call of trainplan's API client in
    operator/trainplan, outside the client itself: `api.<method>(...)` and
    `<x>.api().<method>(...)` for the client's request methods."""
    sites = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.parent.name == "cluster":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CLIENT_METHODS
            ):
                continue
            receiver = node.func.value
            is_client = (isinstance(receiver, ast.Name) and receiver.id == "api") or (
                isinstance(receiver, ast.Call)
                and isinstance(receiver.func, ast.Attribute)
                and receiver.func.attr == "api"
            )
            if is_client:
                relative = str(path.relative_to(REPO_ROOT))
                sites.append((relative, node.lineno, node.end_lineno or node.lineno))
    return sites


def test_every_client_call_site_is_driven(catalog: Catalog) -> None:
    """The recorded rules stand for the whole operator only if the drive reaches every
    place that calls the API (with the webhook on, so that its handler is registered)."""
    sites = client_call_sites()
    assert len(sites) >= 15, sites  # the scan still finds the calls it is meant to find
    config = OperatorConfig(webhook_port=9443, webhook_host="trainplan-webhook.trainplan.svc")
    reached = {request.site for request in run_drive(config, catalog).api.requests}
    missed = [
        f"{file}:{first}"
        for file, first, last in sites
        if not any(f == file and first <= line <= last for f, line in reached)
    ]
    assert not missed, f"API calls no step of `drive` reaches: {missed}"


def test_the_recording_sees_kopfs_status_and_event_writes(catalog: Catalog) -> None:
    """A control: the drive exercises the writes the Kopf rules depend on."""
    driven = run_drive(OperatorConfig(), catalog)
    assert driven.status_written == {"trainingplans", "gpubudgets"}
    assert driven.events_posted > 0
    assert ("trainplan.dev", "gpubudgets/status", "patch") in client_rules(driven)
