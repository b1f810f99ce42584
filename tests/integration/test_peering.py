"""Two `trainplan operator` replicas peered through Kopf (`--peering`), as real
processes against the emulated API: the older one leads, the younger one stands by
without touching a plan (but serves the admission webhook), and when the leader is
killed (SIGKILL: no goodbye) in the middle of a launch, the standby takes over once the
leader's record expires and finishes that launch, with one Job and one Service and
nothing created twice.

The leader dies waiting for the answer to its Job's creation, which the API server has
already stored (kmock stores a write before it answers): the standby must adopt that Job,
not make a second one or report a name conflict."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import kmock
import pytest

from tests.integration.harness import (
    JOBS,
    SERVICES,
    TRAINING_PLANS,
    Cluster,
    InternalServerError,
    OperatorCommand,
    free_port,
    small_plan,
)
from tests.integration.test_webhook import HOST, Webhook

pytestmark = pytest.mark.asyncio

PEERING = "trainplan"
LIFETIME_SECONDS = 3
"""Each replica's peering record lives this long (the chart's default is 60 s)."""


def _by(cluster: Cluster, token: str, *criteria: Any) -> list[Any]:
    """The requests matching `criteria` that the operator with `token` sent."""
    return [
        request
        for request in cluster.emulator[criteria]
        if request.headers.get("Authorization") == f"Bearer {token}"
    ]


async def test_the_standby_finishes_the_launch_of_a_killed_leader(
    cluster: Cluster, tmp_path: Path
) -> None:
    await cluster.create_cluster_peering(PEERING)
    create_job = (kmock.action.CREATE, kmock.resource(JOBS))
    held, released = asyncio.Event(), asyncio.Event()

    async def hold(_: Any) -> Any:
        held.set()
        await released.wait()
        return InternalServerError()

    # The first Job creation is stored but its answer hangs: the leader is killed meanwhile.
    _ = cluster.emulator[create_job][:1] << hold
    args = ("--peering", PEERING, "--peering-lifetime", str(LIFETIME_SECONDS))
    leader = OperatorCommand(cluster, tmp_path, *args, token="leader")
    webhook_port = free_port()
    webhook = ("--webhook-port", str(webhook_port), "--webhook-address", HOST)
    standby = OperatorCommand(cluster, tmp_path, *args, *webhook, token="standby")
    try:
        await leader.start(env={"POD_ID": "leader"})
        await cluster.wait_for(lambda: "leader" in cluster.peers(PEERING), "the leader's record")
        await standby.start(env={"POD_ID": "standby"})
        # Kopf starts a peered operator paused, and it stays so while a peer outranks it.
        await cluster.wait_for(lambda: "standby" in cluster.peers(PEERING), "the standby's record")
        assert (
            cluster.peers(PEERING)["leader"]["priority"]
            > (cluster.peers(PEERING)["standby"]["priority"])
        )

        # The standby answers admission reviews while it stands by (a self-signed
        # certificate: the API server would trust the chart's cert-manager one).
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        served = Webhook(webhook_port, unverified)
        await served.wait_until_serving()
        assert (await served.review(small_plan("reviewed")["spec"]))["allowed"] is True

        name = await cluster.apply_plan(small_plan("failover"))
        await asyncio.wait_for(held.wait(), 30)
        services = cluster.objects(SERVICES)
        assert list(services) != [], "the leader created the Service before the Job"
        plans = (kmock.resource(TRAINING_PLANS),)
        assert _by(cluster, "standby", *plans) == [], "a standby touches no plan"

        leader.kill()
        assert await leader.stop() < 0
        released.set()

        assert cluster.plan(name).get("status", {}).get("phase") is None
        await cluster.wait_for(
            lambda: cluster.plan(name).get("status", {}).get("phase") == "Launching",
            "the standby to finish the launch",
            timeout_seconds=30,
        )
        plan = cluster.plan(name)
        assert "Resuming operations after the pause" in standby.log()
        assert f"Job {name} adopted" in standby.log()
        assert len(_by(cluster, "leader", *create_job)) == 1  # the one killed mid-way
        assert len(_by(cluster, "standby", *create_job)) == 1  # 409: it exists; adopted
        assert list(cluster.objects(JOBS)) == [plan["status"]["jobName"]]
        assert cluster.objects(SERVICES).keys() == services.keys()
        assert "leader" not in cluster.peers(PEERING), "the dead leader's record is cleaned"
    finally:
        released.set()
        leader.kill()
        await leader.stop()
        code = await standby.stop()
    assert code == 0, standby.log()
    assert cluster.peers(PEERING) == {}, "a replica that stops says goodbye"
