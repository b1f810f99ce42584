"""`trainplan.cluster.KubernetesApi` against kmock's emulator: create-or-adopt apply,
ownership conflicts, get, list, merge patches of objects and of status."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.harness import JOBS, Cluster
from trainplan.cluster import Connection, KubernetesApi, KubernetesApiError

pytestmark = pytest.mark.asyncio


def _job(name: str, owner_uid: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"a": "b"}}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "trainplan.dev/v1alpha1",
                "kind": "TrainingPlan",
                "name": "p",
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"x": 1}}


async def test_apply_creates_then_adopts_and_refuses_foreign_objects(cluster: Cluster) -> None:
    async with KubernetesApi(Connection(server=cluster.url)) as api:
        first = await api.apply(_job("j", "u-1"))
        again = await api.apply(_job("j", "u-1"))
        assert (first.action, again.action) == ("created", "adopted")
        assert list(cluster.objects(JOBS)) == ["j"]

        assert await api.ownership_conflicts([_job("j", "u-1")]) == []
        conflicts = await api.ownership_conflicts([_job("j", "u-2"), _job("other", "u-2")])
        assert [(c.kind, c.name, c.deleting) for c in conflicts] == [("Job", "j", False)]
        assert "default/j" in conflicts[0].message
        assert "u-1" in conflicts[0].message
        # Its owner (plan "p", uid u-1) does not exist: it was looked up and found gone.
        assert conflicts[0].found_state == "gone"


async def test_conflicts_say_what_became_of_an_earlier_owner_of_the_name(
    cluster: Cluster,
) -> None:
    async with KubernetesApi(Connection(server=cluster.url)) as api:
        await api.create(_job("j", "u-1"))
        assert [c.found_state for c in await api.ownership_conflicts([_job("j", "u-2")])] == [
            "gone"
        ]
        plan = {
            "apiVersion": "trainplan.dev/v1alpha1",
            "kind": "TrainingPlan",
            "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
        }
        await api.create(plan)
        assert [c.found_state for c in await api.ownership_conflicts([_job("j", "u-2")])] == [
            "present"
        ]
        # A Job of nobody is never looked up: a conflict with no owner state.
        await api.create(_job("free", None))
        (free,) = await api.ownership_conflicts([_job("free", "u-2")])
        assert (free.found, free.found_state) == (None, None)


async def test_get_list_and_patch(cluster: Cluster) -> None:
    async with KubernetesApi(Connection(server=cluster.url)) as api:
        assert await api.get("batch/v1", "Job", "default", "missing") is None
        await api.create(_job("j", None))
        fetched = await api.get("batch/v1", "Job", "default", "j")
        assert fetched is not None
        assert fetched["spec"] == {"x": 1}
        listed = await api.list_objects("batch/v1", "Job", "default")
        assert [item["metadata"]["name"] for item in listed] == ["j"]

        await api.patch("batch/v1", "Job", "default", "j", {"spec": {"suspend": True}})
        await api.patch(
            "batch/v1", "Job", "default", "j", {"status": {"active": 2}}, subresource="status"
        )
        job = cluster.objects(JOBS)["j"]
        assert job["spec"] == {"x": 1, "suspend": True}
        assert job["status"] == {"active": 2}


async def test_errors_carry_status_codes(cluster: Cluster) -> None:
    async with KubernetesApi(Connection(server=cluster.url)) as api:
        await api.create(_job("j", None))
        with pytest.raises(KubernetesApiError) as raised:
            await api.create(_job("j", None))
        assert raised.value.status == 409
        with pytest.raises(KubernetesApiError) as missing:
            await api.patch("batch/v1", "Job", "default", "absent", {"spec": {}})
        assert missing.value.status == 404
