"""Budgets against a cluster: finding a plan's GPUBudget, reserving GPU-hours with
optimistic concurrency, following plans' phases into the ledger and refreshing the figures.
The cluster is an in-memory fake of `KubernetesApi` with the API server's resourceVersion
preconditions: a write onto an old version is refused with a 409 conflict."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from tests.contract.crd_schema import committed_crd, errors, validator_for
from trainplan.api import (
    API_VERSION,
    GPU_BUDGET_KIND,
    TRAINING_PLAN_KIND,
    PlanUsage,
    TrainingPlanSpec,
    UsageInterval,
)
from trainplan.cluster import KubernetesApi, KubernetesApiError, ResourceVersionConflictError
from trainplan.controller.admission import (
    CONFLICT_ATTEMPTS,
    BudgetContentionError,
    BudgetLookupError,
    Reservation,
    budget_for,
    budget_spec,
    follow_plan,
    refresh_budget,
    reserve,
    verdict_for,
)
from trainplan.controller.budgets import ledger_from_status
from trainplan.planner import Catalog, plan

pytestmark = pytest.mark.asyncio

NS = "team"
T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "x:1"},
}


# --- the fake API server --------------------------------------------------------------------


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


@dataclass
class Write:
    """One attempted write: what, onto which version, and whether it applied."""

    kind: str
    name: str
    resource_version: str | None
    applied: bool


class FakeApi:
    """What `admission` calls of `KubernetesApi`: get, list_objects, patch. Objects are
    stored as documents with a resourceVersion that moves on every change; a patch with
    `resource_version` applies only onto that version, else a 409 as the API server
    answers. `before_write` hooks run (once each, in order) when a write arrives, before
    its precondition is checked: another writer getting in first."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: list[Write] = []
        self.before_write: list[Callable[[], Awaitable[None]]] = []
        self.meddle_always = False
        self._version = 100

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an object (as another client would)."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", NS)
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_version()
        self.objects[(stored["kind"], meta["namespace"], meta["name"])] = stored
        return copy.deepcopy(stored)

    def delete(self, kind: str, name: str, namespace: str = NS) -> None:
        del self.objects[(kind, namespace, name)]

    def stored(self, kind: str, name: str, namespace: str = NS) -> dict[str, Any]:
        return copy.deepcopy(self.objects[(kind, namespace, name)])

    def budget(self, name: str = "team-a") -> dict[str, Any]:
        return self.stored(GPU_BUDGET_KIND, name)

    def meddle(self, kind: str = GPU_BUDGET_KIND, name: str = "team-a") -> None:
        """Another writer changes the object (a label): its resourceVersion moves."""
        obj = self.objects[(kind, NS, name)]
        labels = obj["metadata"].setdefault("labels", {})
        labels["touched"] = str(int(labels.get("touched", "0")) + 1)
        obj["metadata"]["resourceVersion"] = self._next_version()

    def applied(self) -> list[str]:
        return [w.name for w in self.writes if w.applied]

    def conflicts(self) -> list[str]:
        return [w.name for w in self.writes if not w.applied]

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        assert api_version == API_VERSION
        obj = self.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def list_objects(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str = ""
    ) -> list[Any]:
        assert api_version == API_VERSION
        assert not label_selector
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind and (namespace is None or ns == namespace)
        ]

    async def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        resource_version: str | None = None,
    ) -> Any:
        assert api_version == API_VERSION
        if self.before_write:
            await self.before_write.pop(0)()
        if self.meddle_always:
            self.meddle(kind, name)
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            raise KubernetesApiError(404, "NotFound", f"{kind} {name} not found")
        current = obj["metadata"]["resourceVersion"]
        if resource_version is not None and resource_version != current:
            self.writes.append(Write(kind, name, resource_version, applied=False))
            raise ResourceVersionConflictError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind} "{name}": the object has been'
                " modified; please apply your changes to the latest version and try again",
            )
        if subresource == "status":
            _merge(obj, {"status": patch.get("status", {})})
        else:
            assert subresource is None
            _merge(obj, {k: v for k, v in patch.items() if k != "status"})
        obj["metadata"]["resourceVersion"] = self._next_version()
        self.writes.append(Write(kind, name, resource_version, applied=True))
        return copy.deepcopy(obj)


def _as_api(fake: FakeApi) -> KubernetesApi:
    return cast(KubernetesApi, fake)


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
def fake() -> FakeApi:
    return FakeApi()


@pytest.fixture
def api(fake: FakeApi) -> KubernetesApi:
    return _as_api(fake)


@pytest.fixture(scope="module")
def needs(catalog: Catalog) -> float:
    """GPU-hours the test plan is projected to use (8 GPUs, between 7.5 and 15)."""
    return plan(TrainingPlanSpec.model_validate(SPEC), catalog).gpu_hours


def _budget(
    spec: Mapping[str, Any], name: str = "team-a", status: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": GPU_BUDGET_KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": dict(spec),
    }
    if status is not None:
        body["status"] = dict(status)
    return body


def _ledger_status(*entries: PlanUsage) -> dict[str, Any]:
    return {"ledger": [entry.to_document() for entry in entries]}


def _plan_body(
    name: str,
    *,
    status: Mapping[str, Any] | None = None,
    budget_ref: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    document = {**SPEC, **spec}
    if budget_ref is not None:
        document["budgetRef"] = budget_ref
    return {
        "apiVersion": API_VERSION,
        "kind": TRAINING_PLAN_KIND,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": document,
        "status": dict(status or {}),
    }


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


async def _reserve(
    api: KubernetesApi,
    catalog: Catalog,
    name: str,
    *,
    uid: str | None = None,
    now: datetime = T0,
    **spec: Any,
) -> Reservation | None:
    return await reserve(
        api,
        namespace=NS,
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        spec=TrainingPlanSpec.model_validate({**SPEC, **spec}),
        catalog=catalog,
        now=now,
    )


def _entry(
    name: str,
    gpus: int = 8,
    projected: float = 40.0,
    *intervals: tuple[datetime, datetime | None],
    finished: bool = False,
    admitted: datetime = T0,
) -> PlanUsage:
    return PlanUsage(
        name=name,
        uid=f"uid-{name}",
        gpus=gpus,
        projected_gpu_hours=projected,
        admitted_gpu_hours=projected,
        admitted_time=admitted,
        intervals=tuple(UsageInterval(start=s, end=e) for s, e in intervals),
        finished=finished,
    )


def _ledger(fake: FakeApi, name: str = "team-a") -> list[PlanUsage]:
    return ledger_from_status(fake.budget(name).get("status", {}))


def _assert_valid_status(status: Mapping[str, Any]) -> None:
    validator = validator_for(committed_crd("gpubudgets"), "status")
    assert errors(validator, status) == []


# --- the fake itself -----------------------------------------------------------------------


async def test_fake_refuses_writes_onto_an_old_version(fake: FakeApi, api: KubernetesApi) -> None:
    first = fake.put(_budget({"gpuHours": 10}))
    version = first["metadata"]["resourceVersion"]
    written = await api.patch(
        API_VERSION,
        GPU_BUDGET_KIND,
        NS,
        "team-a",
        {"status": {"usedGPUHours": 1.0}, "spec": {"gpuHours": 99}},
        subresource="status",
        resource_version=version,
    )
    assert written["status"] == {"usedGPUHours": 1.0}
    assert written["spec"]["gpuHours"] == 10  # the status subresource ignores the rest
    assert written["metadata"]["resourceVersion"] != version
    with pytest.raises(ResourceVersionConflictError) as raised:
        await api.patch(
            API_VERSION,
            GPU_BUDGET_KIND,
            NS,
            "team-a",
            {"status": {"usedGPUHours": 2.0}},
            subresource="status",
            resource_version=version,
        )
    assert raised.value.status == 409
    assert fake.budget()["status"] == {"usedGPUHours": 1.0}
    # Without a precondition the write applies to whatever is there (last writer wins).
    await api.patch(
        API_VERSION,
        GPU_BUDGET_KIND,
        NS,
        "team-a",
        {"status": {"usedGPUHours": None}},
        subresource="status",
    )
    assert fake.budget()["status"] == {}


# --- budget_for -------------------------------------------------------------------------


async def test_budget_for_none_in_the_namespace(fake: FakeApi, api: KubernetesApi) -> None:
    other = _budget({"gpuHours": 10})
    other["metadata"]["namespace"] = "elsewhere"
    fake.put(other)
    assert await budget_for(api, NS, None) is None


async def test_budget_for_the_namespaces_only_budget(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_budget({"gpuHours": 10}))
    found = await budget_for(api, NS, None)
    assert found is not None
    assert found["metadata"]["name"] == "team-a"


async def test_budget_for_the_named_budget_among_several(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_budget({"gpuHours": 10}, "team-a"))
    fake.put(_budget({"gpuHours": 20}, "team-b"))
    found = await budget_for(api, NS, "team-b")
    assert found is not None
    assert found["spec"]["gpuHours"] == 20


async def test_budget_for_a_missing_ref(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_budget({"gpuHours": 10}, "team-a"))
    with pytest.raises(BudgetLookupError, match=r"^GPUBudget 'nope' not found in team$"):
        await budget_for(api, NS, "nope")


async def test_budget_for_several_without_a_ref_names_them(
    fake: FakeApi, api: KubernetesApi
) -> None:
    fake.put(_budget({"gpuHours": 10}, "team-b"))
    fake.put(_budget({"gpuHours": 10}, "team-a"))
    with pytest.raises(BudgetLookupError) as raised:
        await budget_for(api, NS, None)
    assert str(raised.value) == (
        "namespace team has 2 GPUBudgets (team-a, team-b); name one in spec.budgetRef"
    )


# --- malformed budgets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        ({"gpuHours": -1}, ["spec.gpuHours: Input should be greater than 0"]),
        ({}, ["spec.gpuHours: Field required"]),
        ({"gpuHours": 5, "period": "1mo"}, ["spec.period: invalid duration '1mo'"]),
        (
            {"gpuHours": 5, "maxGPUs": 0, "enforcement": "Shrink"},
            ["spec.maxGPUs: Input should be", "spec.enforcement: Input should be"],
        ),
    ],
)
async def test_malformed_budget_spec_names_the_field(
    spec: dict[str, Any], fields: list[str]
) -> None:
    with pytest.raises(ValueError, match=r"^GPUBudget team-a is invalid: ") as raised:
        budget_spec(_budget(spec))
    for field in fields:
        assert field in str(raised.value)


async def test_reserve_against_a_malformed_budget_raises_value_error(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    fake.put(_budget({"gpuHours": 10, "period": "0d"}))  # the CRD's pattern lets "0d" by
    with pytest.raises(ValueError, match=r"spec\.period: invalid duration '0d'"):
        await _reserve(api, catalog, "train")
    assert fake.writes == []


# --- verdict_for ---------------------------------------------------------------------------


def _spec(**changes: Any) -> TrainingPlanSpec:
    return TrainingPlanSpec.model_validate({**SPEC, **changes})


async def test_verdict_for_an_admitted_plan_is_the_same_as_before(
    catalog: Catalog, needs: float
) -> None:
    """The plan's own entry does not count against it when it is judged again."""
    admitted = _entry("train", 8, needs)
    body = _budget({"gpuHours": 15}, status=_ledger_status(admitted))
    again = verdict_for(body, name="train", uid="uid-train", spec=_spec(), catalog=catalog, now=T0)
    assert again.allowed
    assert again.plan is not None
    assert again.plan.gpu_hours == pytest.approx(needs)
    other = verdict_for(body, name="other", uid="uid-other", spec=_spec(), catalog=catalog, now=T0)
    assert not other.allowed
    assert other.message == (
        f"needs {needs:,.0f} GPU-hours at p50 (the estimate); team-a has {15 - needs:,.0f} of 15"
        " left in the last 30d"
    )


async def test_verdict_for_a_recreated_plan_counts_the_old_ones_use(
    catalog: Catalog, needs: float
) -> None:
    """Same name, new uid: the deleted plan's GPU-hours still count."""
    old = _entry("train", 8, needs, (T0 - timedelta(hours=1), T0), finished=True)
    body = _budget({"gpuHours": 15}, status=_ledger_status(old))
    verdict = verdict_for(body, name="train", uid="uid-new", spec=_spec(), catalog=catalog, now=T0)
    assert not verdict.allowed
    assert "team-a has 7 of 15 left" in verdict.message


async def test_verdict_for_a_spec_the_planner_refuses(catalog: Catalog) -> None:
    body = _budget({"gpuHours": 1000})
    bad_input = verdict_for(
        body,
        name="p",
        uid=None,
        spec=_spec(parallelism={"tensor": 3}),
        catalog=catalog,
        now=T0,
    )
    assert not bad_input.allowed
    assert bad_input.message == "spec.parallelism.tensor: 3 does not divide attentionHeads (8)"
    too_big = verdict_for(
        body,
        name="p",
        uid=None,
        spec=_spec(model={"preset": "llama3-70b"}, objective={"maxGPUs": 2}),
        catalog=catalog,
        now=T0,
    )
    assert not too_big.allowed
    assert "A100-SXM4-80GB has 80.0 GiB" in too_big.message
    assert too_big.plan is None


# --- reserve -------------------------------------------------------------------------------


async def test_reserve_without_a_budget_is_none(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    assert await _reserve(api, catalog, "train") is None
    assert fake.writes == []


async def test_reserve_with_a_missing_ref_raises(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    fake.put(_budget({"gpuHours": 100}))
    with pytest.raises(BudgetLookupError, match="GPUBudget 'team-z' not found in team"):
        await _reserve(api, catalog, "train", budgetRef="team-z")


async def test_reserve_admits_and_records_once(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog, needs: float
) -> None:
    fake.put(_budget({"gpuHours": 100, "period": "7d", "maxGPUs": 16}))
    before = fake.budget()["metadata"]["resourceVersion"]

    reservation = await _reserve(api, catalog, "train")
    assert reservation is not None
    assert reservation.budget == "team-a"
    assert reservation.verdict.allowed
    assert reservation.verdict.plan is not None
    assert reservation.verdict.plan.gpus == 8
    written = reservation.written
    assert written is not None
    assert written.key == (NS, "team-a")
    assert written.events == ()
    assert written.summary.committed_gpu_hours == pytest.approx(needs)

    stored = fake.budget()
    assert stored["metadata"]["resourceVersion"] != before
    assert fake.writes == [Write(GPU_BUDGET_KIND, "team-a", before, applied=True)]
    status = stored["status"]
    assert status["ledger"] == [
        {
            "name": "train",
            "uid": "uid-train",
            "gpus": 8,
            "projectedGPUHours": pytest.approx(needs),
            "admittedGPUHours": pytest.approx(needs),
            "chargedConfidence": 0.5,
            "admittedTime": "2026-11-23T08:00:00Z",
            "intervals": [],
            "finished": False,
        }
    ]
    assert status["usedGPUHours"] == 0
    assert status["committedGPUHours"] == pytest.approx(needs, abs=1e-3)
    assert status["remainingGPUHours"] == pytest.approx(100 - needs, abs=1e-3)
    assert status["activePlans"] == ["train"]
    assert status["gpusInUse"] == 8
    assert status["observedGeneration"] == 1
    assert status == written.status
    _assert_valid_status(status)

    # Again for the same plan (a retry, a resumed handler): admitted, nothing written.
    again = await _reserve(api, catalog, "train", now=T0 + timedelta(minutes=5))
    assert again is not None
    assert again.verdict.allowed
    assert again.written is None
    assert len(fake.writes) == 1
    assert [u.name for u in _ledger(fake)] == ["train"]


async def test_reserve_for_a_recreated_plan_adds_a_second_entry(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    fake.put(_budget({"gpuHours": 100}))
    await _reserve(api, catalog, "train", uid="u-1")
    second = await _reserve(api, catalog, "train", uid="u-2")
    assert second is not None
    assert second.written is not None
    assert [(u.name, u.uid) for u in _ledger(fake)] == [("train", "u-1"), ("train", "u-2")]


async def test_reserve_denied_writes_nothing(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog, needs: float
) -> None:
    fake.put(_budget({"gpuHours": 5}))
    reservation = await _reserve(api, catalog, "train")
    assert reservation is not None
    assert not reservation.verdict.allowed
    assert reservation.verdict.message == (
        f"needs {needs:,.0f} GPU-hours at p50 (the estimate); team-a has 5 of 5 left in the"
        " last 30d"
    )
    assert reservation.written is None
    assert fake.writes == []
    assert "status" not in fake.budget()


async def test_reserve_warn_records_the_plan_over_budget(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog, needs: float
) -> None:
    fake.put(_budget({"gpuHours": 5, "enforcement": "Warn"}))
    reservation = await _reserve(api, catalog, "train")
    assert reservation is not None
    assert reservation.verdict.allowed
    assert reservation.verdict.exceeded
    assert reservation.written is not None
    status = fake.budget()["status"]
    assert status["remainingGPUHours"] == pytest.approx(5 - needs, abs=1e-3)
    _assert_valid_status(status)


async def test_reserve_at_p90_records_the_charge_and_its_quantile(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog, needs: float
) -> None:
    fake.put(_budget({"gpuHours": 100, "chargeConfidence": 0.9}))
    reservation = await _reserve(api, catalog, "train")
    assert reservation is not None
    p90 = needs * catalog.calibration.gpu_hours_ratio_p90
    assert reservation.verdict.charged == f"{p90:,.0f} GPU-hours at p90 (estimate {needs:,.0f})"
    status = fake.budget()["status"]
    (entry,) = status["ledger"]
    assert entry["projectedGPUHours"] == pytest.approx(needs)
    assert entry["admittedGPUHours"] == pytest.approx(p90)
    assert entry["chargedConfidence"] == 0.9
    assert status["committedGPUHours"] == pytest.approx(p90, abs=1e-3)
    _assert_valid_status(status)


@pytest.mark.parametrize("at_p90", ["budget", "plan"])
async def test_a_plan_that_fits_at_p50_is_refused_at_p90(
    fake: FakeApi, catalog: Catalog, needs: float, at_p90: str
) -> None:
    """The budget's chargeConfidence, or the plan's own objective.confidence, sets p90."""
    p90 = needs * catalog.calibration.gpu_hours_ratio_p90
    allowance = (needs + p90) / 2
    fake.put(_budget({"gpuHours": allowance}))
    at_p50 = verdict_for(
        fake.budget(), name="train", uid="uid-train", spec=_spec(), catalog=catalog, now=T0
    )
    assert at_p50.allowed
    assert at_p50.charged == f"{needs:,.0f} GPU-hours at p50 (the estimate)"

    budget: dict[str, Any] = {"gpuHours": allowance}
    objective: dict[str, Any] = {"gpus": 8}
    if at_p90 == "budget":
        budget["chargeConfidence"] = 0.9
    else:
        objective["confidence"] = 0.9
    fake.put(_budget(budget))
    reservation = await _reserve(_as_api(fake), catalog, "train", objective=objective)
    assert reservation is not None
    assert not reservation.verdict.allowed
    assert reservation.verdict.message == (
        f"needs {p90:,.0f} GPU-hours at p90 (estimate {needs:,.0f}); team-a has"
        f" {allowance:,.0f} of {allowance:,.0f} left in the last 30d"
    )
    assert reservation.written is None
    assert fake.writes == []


async def test_reserve_downsize_records_the_smaller_plan(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    holder = _entry("holder", 4, 0.0)
    fake.put(
        _budget(
            {"gpuHours": 100, "maxGPUs": 8, "enforcement": "Downsize"},
            status=_ledger_status(holder),
        )
    )
    reservation = await _reserve(api, catalog, "train")
    assert reservation is not None
    assert reservation.verdict.allowed
    assert reservation.verdict.warnings[0].startswith("downsized to 4 GPUs to fit team-a")
    assert reservation.verdict.spec is not None
    assert reservation.verdict.spec.objective.max_gpus == 4
    ledger = _ledger(fake)
    assert [(u.name, u.gpus) for u in ledger] == [("holder", 4), ("train", 4)]
    assert fake.budget()["status"]["gpusInUse"] == 8


async def test_two_reservations_racing_for_one_remainder(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog, needs: float
) -> None:
    """ "a" judges the budget as it was; before its write lands, "b" reserves the same
    remainder. "a"'s write onto the old version is refused; it reads again and is denied."""
    fake.put(_budget({"gpuHours": 15}))
    results: dict[str, Reservation | None] = {}

    async def b_gets_in_first() -> None:
        results["b"] = await _reserve(api, catalog, "b")

    fake.before_write.append(b_gets_in_first)
    results["a"] = await _reserve(api, catalog, "a")

    b, a = results["b"], results["a"]
    assert b is not None
    assert b.verdict.allowed
    assert b.written is not None
    assert a is not None
    assert not a.verdict.allowed
    assert a.verdict.message == (
        f"needs {needs:,.0f} GPU-hours at p50 (the estimate); team-a has {15 - needs:,.0f} of 15"
        " left in the last 30d"
    )
    assert a.written is None
    assert [(w.name, w.applied) for w in fake.writes] == [("team-a", True), ("team-a", False)]
    assert [u.name for u in _ledger(fake)] == ["b"]


async def test_concurrent_reservations_admit_exactly_one(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    fake.put(_budget({"gpuHours": 15}))
    first, second = await asyncio.gather(
        _reserve(api, catalog, "first"), _reserve(api, catalog, "second")
    )
    assert first is not None
    assert second is not None
    verdicts = {"first": first.verdict.allowed, "second": second.verdict.allowed}
    assert sorted(verdicts.values()) == [False, True]
    (winner,) = [name for name, allowed in verdicts.items() if allowed]
    assert [u.name for u in _ledger(fake)] == [winner]
    assert len(fake.applied()) == 1


async def test_reserve_retries_until_the_budget_holds_still(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    fake.put(_budget({"gpuHours": 100}))

    async def meddle() -> None:
        fake.meddle()

    fake.before_write.extend([meddle] * (CONFLICT_ATTEMPTS - 1))
    reservation = await _reserve(api, catalog, "train")
    assert reservation is not None
    assert reservation.written is not None
    assert len(fake.conflicts()) == CONFLICT_ATTEMPTS - 1
    assert len(fake.applied()) == 1
    assert [u.name for u in _ledger(fake)] == ["train"]


async def test_reserve_gives_up_after_conflict_attempts(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    fake.put(_budget({"gpuHours": 100}))
    fake.meddle_always = True
    with pytest.raises(BudgetContentionError) as raised:
        await _reserve(api, catalog, "train")
    assert raised.value.status == 409
    assert "the budget of team/train kept changing" in str(raised.value)
    assert isinstance(raised.value, KubernetesApiError)
    assert len(fake.conflicts()) == CONFLICT_ATTEMPTS
    assert fake.applied() == []
    assert "status" not in fake.budget()


# --- follow_plan --------------------------------------------------------------------------


async def test_follow_plan_through_its_life(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_budget({"gpuHours": 1000, "period": "7d"}, status=_ledger_status(_entry("train"))))
    job_start = T0 + timedelta(minutes=10)
    status: dict[str, Any] = {"startTime": _iso(job_start)}

    async def follow(phase: str | None, now: datetime, **changes: Any) -> Any:
        status.update(changes)
        return await follow_plan(api, _plan_body("train", status=status), phase=phase, now=now)

    # Launching: nothing held yet, nothing written.
    assert await follow("Launching", T0 + timedelta(minutes=5)) is None
    assert fake.writes == []

    running = await follow("Running", T0 + timedelta(minutes=20))
    assert running is not None
    (entry,) = _ledger(fake)
    assert entry.intervals == (UsageInterval(start=job_start),)
    assert running.status["usedGPUHours"] == pytest.approx(8 * 10 / 60, abs=1e-3)

    # Restarting keeps the one open interval: nothing to write.
    assert await follow("Restarting", T0 + timedelta(hours=1)) is None
    assert len(fake.applied()) == 1

    # The ETA's projection is carried into the ledger.
    revised = await follow("Running", T0 + timedelta(hours=1), gpuHours={"projected": 60.0})
    assert revised is not None
    assert _ledger(fake)[0].projected_gpu_hours == 60.0

    suspended = await follow("Suspended", T0 + timedelta(hours=2))
    assert suspended is not None
    assert _ledger(fake)[0].intervals == (
        UsageInterval(start=job_start, end=T0 + timedelta(hours=2)),
    )
    assert suspended.summary.active_plans == ("train",)

    resumed = await follow("Running", T0 + timedelta(hours=3))
    assert resumed is not None
    assert [i.start for i in _ledger(fake)[0].intervals] == [job_start, T0 + timedelta(hours=3)]

    done_at = T0 + timedelta(hours=4)
    finished = await follow("Succeeded", T0 + timedelta(hours=5), completionTime=_iso(done_at))
    assert finished is not None
    (entry,) = _ledger(fake)
    assert entry.finished
    assert entry.intervals[-1] == UsageInterval(start=T0 + timedelta(hours=3), end=done_at)
    status_doc = fake.budget()["status"]
    held_hours = (2 * 60 - 10) / 60 + 1
    assert status_doc["usedGPUHours"] == pytest.approx(8 * held_hours, abs=1e-3)
    assert status_doc["committedGPUHours"] == 0
    assert status_doc["activePlans"] == []
    assert status_doc["gpusInUse"] == 0
    _assert_valid_status(status_doc)

    # A deleted plan that had finished: nothing changes.
    assert await follow(None, T0 + timedelta(hours=6)) is None


async def test_follow_plan_deleted_while_running_releases(
    fake: FakeApi, api: KubernetesApi
) -> None:
    running = _entry("train", 8, 40.0, (T0, None))
    fake.put(_budget({"gpuHours": 1000}, status=_ledger_status(running)))
    deleted_at = T0 + timedelta(hours=2)
    written = await follow_plan(api, _plan_body("train"), phase=None, now=deleted_at)
    assert written is not None
    (entry,) = _ledger(fake)
    assert entry.finished
    assert entry.intervals == (UsageInterval(start=T0, end=deleted_at),)
    assert written.status["usedGPUHours"] == pytest.approx(16)
    assert written.status["committedGPUHours"] == 0
    assert written.status["activePlans"] == []


async def test_follow_plan_first_seen_ended_counts_the_whole_run(
    fake: FakeApi, api: KubernetesApi
) -> None:
    """Launching, then Succeeded (the Running in between was missed): the run counts
    from the Job's start to its completion."""
    fake.put(_budget({"gpuHours": 1000}, status=_ledger_status(_entry("train"))))
    status = {"startTime": _iso(T0), "completionTime": _iso(T0 + timedelta(hours=2))}
    written = await follow_plan(
        api, _plan_body("train", status=status), phase="Succeeded", now=T0 + timedelta(hours=3)
    )
    assert written is not None
    (entry,) = _ledger(fake)
    assert entry.finished
    assert entry.intervals == (UsageInterval(start=T0, end=T0 + timedelta(hours=2)),)
    assert written.status["usedGPUHours"] == pytest.approx(16)


async def test_follow_plan_ignores_plans_not_in_the_ledger(
    fake: FakeApi, api: KubernetesApi
) -> None:
    fake.put(_budget({"gpuHours": 1000}, status=_ledger_status(_entry("other"))))
    for phase in ("Running", "Succeeded", None):
        assert await follow_plan(api, _plan_body("stranger"), phase=phase, now=T0) is None
    # Same name, another uid: a different plan.
    body = _plan_body("other")
    body["metadata"]["uid"] = "uid-recreated"
    assert await follow_plan(api, body, phase="Running", now=T0) is None
    assert fake.writes == []


async def test_follow_plan_without_a_budget_or_with_an_ambiguous_one(
    fake: FakeApi, api: KubernetesApi
) -> None:
    assert await follow_plan(api, _plan_body("train"), phase="Running", now=T0) is None
    fake.put(_budget({"gpuHours": 10}, "team-a", status=_ledger_status(_entry("train"))))
    fake.put(_budget({"gpuHours": 10}, "team-b", status=_ledger_status(_entry("train"))))
    assert await follow_plan(api, _plan_body("train"), phase="Running", now=T0) is None
    missing = _plan_body("train", budget_ref="team-z")
    assert await follow_plan(api, missing, phase="Running", now=T0) is None
    assert fake.writes == []
    # With a ref among several: that budget only.
    named = _plan_body("train", budget_ref="team-b")
    assert await follow_plan(api, named, phase="Running", now=T0) is not None
    assert _ledger(fake, "team-a")[0].intervals == ()
    assert _ledger(fake, "team-b")[0].intervals == (UsageInterval(start=T0),)


async def test_follow_plan_retries_on_conflict(fake: FakeApi, api: KubernetesApi) -> None:
    b = _entry("b", 8, 40.0, (T0 - timedelta(hours=1), None))
    fake.put(_budget({"gpuHours": 1000}, status=_ledger_status(_entry("train"), b)))

    async def another_plan_finishes() -> None:
        await follow_plan(
            api,
            _plan_body("b", status={"completionTime": _iso(T0)}),
            phase="Failed",
            now=T0,
        )

    fake.before_write.append(another_plan_finishes)
    written = await follow_plan(
        api, _plan_body("train", status={"startTime": _iso(T0)}), phase="Running", now=T0
    )
    assert written is not None
    assert [w.applied for w in fake.writes] == [True, False, True]
    ledger = {u.name: u for u in _ledger(fake)}
    assert ledger["b"].finished  # the other writer's change survives the retry
    assert ledger["b"].intervals == (UsageInterval(start=T0 - timedelta(hours=1), end=T0),)
    assert ledger["train"].intervals == (UsageInterval(start=T0),)


async def test_follow_plan_gives_up_after_conflict_attempts(
    fake: FakeApi, api: KubernetesApi
) -> None:
    fake.put(_budget({"gpuHours": 1000}, status=_ledger_status(_entry("train"))))
    fake.meddle_always = True
    with pytest.raises(BudgetContentionError, match="the budget of team/train kept changing"):
        await follow_plan(api, _plan_body("train"), phase="Running", now=T0)
    assert len(fake.conflicts()) == CONFLICT_ATTEMPTS


# --- refresh_budget -----------------------------------------------------------------------


def _launched(
    name: str,
    phase: str,
    *,
    start: datetime,
    gpus: int = 8,
    gpu_hours: float = 40.0,
    budget_ref: str | None = None,
    **status: Any,
) -> dict[str, Any]:
    return _plan_body(
        name,
        budget_ref=budget_ref,
        status={
            "phase": phase,
            "plan": {"gpus": gpus, "gpuHours": gpu_hours},
            "startTime": _iso(start),
            **status,
        },
    )


async def test_refresh_adopts_a_plan_launched_before_the_budget(
    fake: FakeApi, api: KubernetesApi
) -> None:
    started = T0 - timedelta(hours=3)
    fake.put(_launched("early", "Running", start=started, gpus=8, gpu_hours=40.0))
    budget = fake.put(_budget({"gpuHours": 100, "period": "7d"}))
    now = T0
    written = await refresh_budget(api, budget, now)
    (entry,) = _ledger(fake)
    assert (entry.name, entry.uid, entry.gpus) == ("early", "uid-early", 8)
    assert entry.projected_gpu_hours == 40.0
    assert entry.admitted_time == started
    assert entry.intervals == (UsageInterval(start=started),)
    assert written.status["usedGPUHours"] == pytest.approx(24)
    assert written.status["committedGPUHours"] == pytest.approx(16)
    assert written.status["remainingGPUHours"] == pytest.approx(60)
    assert written.status["activePlans"] == ["early"]
    assert written.status["gpusInUse"] == 8
    _assert_valid_status(fake.budget()["status"])

    # An hour later the same entry is revised, not adopted twice.
    later = await refresh_budget(api, fake.budget(), now + timedelta(hours=1))
    assert len(_ledger(fake)) == 1
    assert later.status["usedGPUHours"] == pytest.approx(32)
    assert later.status["committedGPUHours"] == pytest.approx(8)


async def test_refresh_adopts_a_plan_that_finished_before_the_budget(
    fake: FakeApi, api: KubernetesApi
) -> None:
    """Its run counts while it is in the window; once it left, the entry is dropped."""
    started, ended = T0 - timedelta(days=2), T0 - timedelta(days=2) + timedelta(hours=3)
    fake.put(_launched("done", "Succeeded", start=started, completionTime=_iso(ended)))
    budget = fake.put(_budget({"gpuHours": 100, "period": "7d"}))
    written = await refresh_budget(api, budget, T0)
    (entry,) = _ledger(fake)
    assert entry.finished
    assert entry.intervals == (UsageInterval(start=started, end=ended),)
    assert written.status["usedGPUHours"] == pytest.approx(24)
    assert written.status["committedGPUHours"] == 0
    assert written.status["activePlans"] == []

    # Refreshed again it is not counted twice; a week later it has left the window.
    again = await refresh_budget(api, fake.budget(), T0 + timedelta(hours=1))
    assert again.status["usedGPUHours"] == pytest.approx(24)
    gone = await refresh_budget(api, fake.budget(), T0 + timedelta(days=6))
    assert gone.status["usedGPUHours"] == 0
    assert gone.status["ledger"] == []


async def test_refresh_follows_the_eta_projection(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_launched("p", "Running", start=T0, gpu_hours=40.0, gpuHours={"projected": 64.0}))
    budget = fake.put(_budget({"gpuHours": 100}))
    written = await refresh_budget(api, budget, T0 + timedelta(hours=1))
    assert _ledger(fake)[0].projected_gpu_hours == 64.0
    assert written.status["committedGPUHours"] == pytest.approx(56)


def _rejected_then_fixed(generation: int, observed: int, rejected_at: datetime) -> dict[str, Any]:
    """A plan whose status still says Rejected (of `observed`, written at `rejected_at`)."""
    body = _plan_body(
        "fixed",
        status={
            "phase": "Rejected",
            "observedGeneration": observed,
            "lastUpdatedTime": _iso(rejected_at),
        },
    )
    body["metadata"]["generation"] = generation
    return body


@pytest.mark.parametrize(
    ("generation", "observed"),
    [(2, 1), (1, 1)],
    ids=["spec-fixed", "same-spec-admitted-again"],
)
async def test_refresh_between_admission_and_launch_keeps_the_entry(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog, generation: int, observed: int
) -> None:
    """Security review, finding 6: a Rejected plan admitted on a new judgement has its
    entry written before its status says so; a revision in that gap leaves it alone."""
    fake.put(_rejected_then_fixed(generation, observed, T0 - timedelta(minutes=1)))
    fake.put(_budget({"gpuHours": 100, "period": "7d"}))
    reservation = await _reserve(api, catalog, "fixed")
    assert reservation is not None
    assert reservation.written is not None

    gap = await refresh_budget(api, fake.budget(), T0 + timedelta(milliseconds=50))
    (entry,) = _ledger(fake)
    assert not entry.finished
    assert gap.status["activePlans"] == ["fixed"]
    assert gap.status["committedGPUHours"] > 0

    # Its status then says Launching: the entry goes on as any admitted plan's.
    launching = _plan_body(
        "fixed",
        status={
            "phase": "Launching",
            "observedGeneration": generation,
            "lastUpdatedTime": _iso(T0),
        },
    )
    launching["metadata"]["generation"] = generation
    fake.put(launching)
    await refresh_budget(api, fake.budget(), T0 + timedelta(seconds=1))
    (entry,) = _ledger(fake)
    assert not entry.finished


async def test_refresh_after_a_rejection_of_the_admitted_spec_finishes_the_entry(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    """Rejected after its admission (its Job's name taken): the entry ends and goes."""
    fake.put(_budget({"gpuHours": 100, "period": "7d"}))
    assert await _reserve(api, catalog, "fixed") is not None
    fake.put(_rejected_then_fixed(2, 2, T0 + timedelta(seconds=1)))
    written = await refresh_budget(api, fake.budget(), T0 + timedelta(seconds=2))
    assert written.status["ledger"] == []
    assert written.status["committedGPUHours"] == 0


async def test_refresh_reads_a_malformed_status_time_as_none(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    for malformed in ("yesterday", "2026-11-23T07:00:00"):  # unreadable; no zone
        fake.put(_budget({"gpuHours": 100, "period": "7d"}))
        assert await _reserve(api, catalog, "fixed") is not None
        body = _rejected_then_fixed(1, 1, T0)
        body["status"]["lastUpdatedTime"] = malformed
        fake.put(body)
        await refresh_budget(api, fake.budget(), T0 + timedelta(seconds=1))
        assert _ledger(fake) == []  # a Rejected status without a usable time is current


async def test_refresh_leaves_plans_that_are_not_its_own(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_plan_body("pending", status={"phase": "Pending"}))  # admission will take it
    fake.put(_plan_body("planned", status={"phase": "Planned", "plan": {"gpus": 8, "gpuHours": 1}}))
    fake.put(_launched("elsewhere", "Running", start=T0, budget_ref="team-b"))
    fake.put(_launched("mine", "Running", start=T0, budget_ref="team-a"))
    budget = fake.put(_budget({"gpuHours": 100}, "team-a"))
    await refresh_budget(api, budget, T0 + timedelta(hours=1))
    assert [u.name for u in _ledger(fake)] == ["mine"]


async def test_refresh_with_several_budgets_adopts_only_plans_that_name_it(
    fake: FakeApi, api: KubernetesApi
) -> None:
    fake.put(_launched("unnamed", "Running", start=T0))
    fake.put(_launched("named", "Running", start=T0, budget_ref="team-a"))
    budget = fake.put(_budget({"gpuHours": 100}, "team-a"))
    fake.put(_budget({"gpuHours": 100}, "team-b"))
    await refresh_budget(api, budget, T0 + timedelta(hours=1))
    assert [u.name for u in _ledger(fake)] == ["named"]


async def test_refresh_closes_the_entry_of_a_plan_that_disappeared(
    fake: FakeApi, api: KubernetesApi
) -> None:
    """The plan was deleted while the operator was away: its entry is closed now and it
    commits nothing more, but what it used stays counted."""
    running = _entry("vanished", 8, 40.0, (T0 - timedelta(hours=2), None))
    budget = fake.put(_budget({"gpuHours": 100}, status=_ledger_status(running)))
    written = await refresh_budget(api, budget, T0)
    (entry,) = _ledger(fake)
    assert entry.finished
    assert entry.intervals == (UsageInterval(start=T0 - timedelta(hours=2), end=T0),)
    assert written.status["usedGPUHours"] == pytest.approx(16)
    assert written.status["committedGPUHours"] == 0
    assert written.status["activePlans"] == []
    assert written.status["gpusInUse"] == 0

    # Later it uses no more.
    later = await refresh_budget(api, fake.budget(), T0 + timedelta(hours=5))
    assert later.status["usedGPUHours"] == pytest.approx(16)


async def test_refresh_closes_the_entry_of_a_plan_recreated_under_a_new_uid(
    fake: FakeApi, api: KubernetesApi
) -> None:
    old = _entry("train", 8, 40.0, (T0 - timedelta(hours=1), None))
    fake.put(_plan_body("train"))  # same name, not launched yet
    fake.objects[(TRAINING_PLAN_KIND, NS, "train")]["metadata"]["uid"] = "uid-new"
    budget = fake.put(_budget({"gpuHours": 100}, status=_ledger_status(old)))
    await refresh_budget(api, budget, T0)
    (entry,) = _ledger(fake)
    assert entry.uid == "uid-train"
    assert entry.finished


async def test_refresh_slides_the_window_and_prunes(fake: FakeApi, api: KubernetesApi) -> None:
    old = _entry("old", 8, 8.0, (T0 - timedelta(days=9), T0 - timedelta(days=8)), finished=True)
    recent = _entry(
        "recent", 4, 8.0, (T0 - timedelta(days=1), T0 - timedelta(hours=22)), finished=True
    )
    budget = fake.put(
        _budget({"gpuHours": 100, "period": "7d"}, status=_ledger_status(old, recent))
    )
    written = await refresh_budget(api, budget, T0)
    assert [u.name for u in _ledger(fake)] == ["recent"]
    assert written.status["usedGPUHours"] == pytest.approx(8)
    assert written.status["remainingGPUHours"] == pytest.approx(92)


async def test_refresh_reports_the_crossing_once(fake: FakeApi, api: KubernetesApi) -> None:
    fake.put(_launched("big", "Running", start=T0, gpus=10, gpu_hours=200.0))
    budget = fake.put(_budget({"gpuHours": 100}))
    # Adopted over budget: 80 used and 120 committed, overcommitted from the start.
    first = await refresh_budget(api, budget, T0 + timedelta(hours=8))
    assert [e[1] for e in first.events] == ["BudgetNearlyExhausted", "BudgetOvercommitted"]
    second = await refresh_budget(api, fake.budget(), T0 + timedelta(hours=9))
    assert second.events == ()
    third = await refresh_budget(api, fake.budget(), T0 + timedelta(hours=10))
    assert [e[1] for e in third.events] == ["BudgetExhausted"]
    assert third.events[0][2] == (
        "100 of 100 GPU-hours used (100%) and 100 committed: 100 over the allowance"
    )
    conditions = {c["type"]: c["status"] for c in fake.budget()["status"]["conditions"]}
    assert conditions == {"Valid": "True", "NearlyExhausted": "True", "Exhausted": "True"}


async def test_refresh_retries_on_conflict_with_the_fresh_budget(
    fake: FakeApi, api: KubernetesApi, catalog: Catalog
) -> None:
    """The body it was given is stale (a reservation landed since): the write is refused,
    it reads the budget again and keeps the newcomer's entry."""
    stale = fake.put(_budget({"gpuHours": 100}))
    await _reserve(api, catalog, "newcomer")
    assert fake.budget()["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    fake.put(_plan_body("newcomer", status={"phase": "Launching"}))

    written = await refresh_budget(api, stale, T0 + timedelta(minutes=1))
    assert [w.applied for w in fake.writes] == [True, False, True]
    assert [u.name for u in _ledger(fake)] == ["newcomer"]
    assert written.status["activePlans"] == ["newcomer"]


async def test_refresh_of_a_budget_deleted_before_its_write_raises_not_found(
    fake: FakeApi, api: KubernetesApi
) -> None:
    budget = fake.put(_budget({"gpuHours": 100}))

    async def delete_it() -> None:
        fake.meddle()
        fake.delete(GPU_BUDGET_KIND, "team-a")

    fake.before_write.append(delete_it)
    with pytest.raises(KubernetesApiError) as raised:
        await refresh_budget(api, budget, T0)
    assert raised.value.status == 404
    assert not isinstance(raised.value, ResourceVersionConflictError)


async def test_refresh_of_a_budget_deleted_after_a_conflict_raises_the_conflict(
    fake: FakeApi, api: KubernetesApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = fake.put(_budget({"gpuHours": 100}))
    fake.meddle()  # another writer: the body in hand is stale

    async def deleted_meanwhile(api_version: str, kind: str, namespace: str, name: str) -> Any:
        return None

    monkeypatch.setattr(fake, "get", deleted_meanwhile)
    with pytest.raises(ResourceVersionConflictError):
        await refresh_budget(api, stale, T0)
    assert fake.conflicts() == ["team-a"]
    assert fake.applied() == []


async def test_refresh_gives_up_after_conflict_attempts(fake: FakeApi, api: KubernetesApi) -> None:
    budget = fake.put(_budget({"gpuHours": 100}))
    fake.meddle_always = True
    with pytest.raises(BudgetContentionError, match="the budget team/team-a kept changing"):
        await refresh_budget(api, budget, T0)
    assert len(fake.conflicts()) == CONFLICT_ATTEMPTS
