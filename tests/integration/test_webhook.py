"""Integration: the GPU-budget admission webhook over real HTTPS. The real operator (Kopf's
webhook server) runs against kmock's emulator holding GPUBudgets; AdmissionReview requests
go to it as the API server would send them, over TLS verified against its certificate."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import socket
import ssl
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.integration.harness import WAIT_SECONDS, Cluster, OperatorProcess
from trainplan.api import TrainingPlanSpec
from trainplan.controller import OperatorConfig
from trainplan.controller.tls import self_signed_certificate
from trainplan.planner import Catalog, plan

pytestmark = pytest.mark.asyncio

HOST = "127.0.0.1"
SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0"},
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _hours(value: float) -> str:
    return f"{value:,.0f}"


@pytest.fixture
def gpu_hours(catalog: Catalog) -> float:
    """GPU-hours of SPEC's plan (8 GPUs)."""
    return plan(TrainingPlanSpec.model_validate(SPEC), catalog).gpu_hours


class Webhook:
    """The operator's webhook server as the API server calls it."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port = port
        self.url = f"https://{HOST}:{port}/budget"  # Kopf routes /<handler id>
        self.context = context

    async def review(
        self,
        spec: dict[str, Any],
        *,
        namespace: str = "default",
        name: str = "job",
        operation: str = "CREATE",
        object_uid: str | None = None,
        object_namespace: str | None = "",
        session: aiohttp.ClientSession | None = None,
    ) -> dict[str, Any]:
        """Send one AdmissionReview for a TrainingPlan (new, unless `operation` says
        otherwise); its `response`. The object's uid is random unless given, and its
        namespace the request's unless given (None: left out)."""
        uid = str(uuid.uuid4())
        metadata: dict[str, Any] = {"name": name, "uid": object_uid or str(uuid.uuid4())}
        if object_namespace is not None:
            metadata["namespace"] = object_namespace or namespace
        request: dict[str, Any] = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "trainplan.dev", "version": "v1alpha1", "kind": "TrainingPlan"},
                "resource": {
                    "group": "trainplan.dev",
                    "version": "v1alpha1",
                    "resource": "trainingplans",
                },
                "name": name,
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                "object": {
                    "apiVersion": "trainplan.dev/v1alpha1",
                    "kind": "TrainingPlan",
                    "metadata": metadata,
                    "spec": spec,
                },
                "dryRun": False,
            },
        }
        if operation != "CREATE":
            request["request"]["oldObject"] = request["request"]["object"]
        timeout = aiohttp.ClientTimeout(total=WAIT_SECONDS)
        async with contextlib.AsyncExitStack() as stack:
            if session is None:
                session = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
            response = await stack.enter_async_context(
                session.post(self.url, json=request, ssl=self.context)
            )
            assert response.status == 200, await response.text()
            review: dict[str, Any] = await response.json()
        assert review["kind"] == "AdmissionReview"
        answer: dict[str, Any] = review["response"]
        assert answer["uid"] == uid
        return answer

    async def wait_until_serving(self) -> None:
        """Kopf starts its webhook server once it has discovered the resources."""
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while True:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 1.0)
            except (OSError, TimeoutError):
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError("the webhook server did not start") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def _create_budget(
    cluster: Cluster, name: str, spec: dict[str, Any], namespace: str = "default"
) -> None:
    """`kubectl apply` of a GPUBudget (in `default` unless told)."""
    body = {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "GPUBudget",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "generation": 1,
        },
        "spec": {"period": "30d", **spec},
    }
    url = f"{cluster.url}/apis/trainplan.dev/v1alpha1/namespaces/{namespace}/gpubudgets"
    timeout = aiohttp.ClientTimeout(total=WAIT_SECONDS)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, json=body) as response,
    ):
        assert response.status in (200, 201), await response.text()


@pytest.fixture
def certificate(tmp_path: Path) -> Path:
    """A mounted kubernetes.io/tls Secret: tls.crt and tls.key for 127.0.0.1."""
    cert_pem, key_pem = self_signed_certificate([HOST])
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    return tmp_path


async def _start(
    cluster: Cluster,
    catalog: Catalog,
    port: int,
    certificate: Path | None,
    *,
    client_ca: Path | None = None,
    namespaces: tuple[str, ...] = (),
) -> OperatorProcess:
    config = OperatorConfig(
        metrics_port=0,
        metrics_address=HOST,
        webhook_port=port,
        webhook_address=HOST,
        webhook_cert_path=None if certificate is None else str(certificate / "tls.crt"),
        webhook_key_path=None if certificate is None else str(certificate / "tls.key"),
        webhook_client_ca_path=None if client_ca is None else str(client_ca),
        webhook_namespaces=namespaces,
    )
    process = OperatorProcess(cluster, catalog, config)
    await process.start()
    return process


@pytest_asyncio.fixture()
async def webhook(
    cluster: Cluster, catalog: Catalog, certificate: Path, gpu_hours: float
) -> AsyncIterator[Webhook]:
    """The operator serving the webhook with the Secret's certificate, and five budgets in
    `default`: roomy and tight (Reject, above and below the plan's GPU-hours), lenient
    (Warn, below), capped (Downsize, 4 GPUs at most) and broken (a malformed spec)."""
    budgets = {
        "roomy": {"gpuHours": gpu_hours * 1.5, "enforcement": "Reject"},
        "tight": {"gpuHours": gpu_hours * 0.6, "enforcement": "Reject"},
        "lenient": {"gpuHours": gpu_hours * 0.6, "enforcement": "Warn"},
        "capped": {"gpuHours": gpu_hours * 10, "maxGPUs": 4, "enforcement": "Downsize"},
        "broken": {"gpuHours": -1},
    }
    for name, spec in budgets.items():
        await _create_budget(cluster, name, spec)
    port = _free_port()
    process = await _start(cluster, catalog, port, certificate)
    try:
        verified = ssl.create_default_context(cafile=certificate / "tls.crt")
        served = Webhook(port, verified)
        await served.wait_until_serving()
        yield served
    finally:
        await process.stop()


def _with_budget(budget: str | None) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    if budget is not None:
        spec["budgetRef"] = budget
    return spec


async def test_a_plan_that_fits_is_allowed(webhook: Webhook) -> None:
    answer = await webhook.review(_with_budget("roomy"))
    assert answer["allowed"] is True
    assert "warnings" not in answer
    assert "status" not in answer


async def test_a_plan_over_the_gpu_hours_is_denied(webhook: Webhook, gpu_hours: float) -> None:
    answer = await webhook.review(_with_budget("tight"))
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    left = _hours(gpu_hours * 0.6)
    assert answer["status"]["message"] == (
        f"needs {_hours(gpu_hours)} GPU-hours at p50 (the estimate); tight has {left} of {left}"
        " left in the last 30d"
    )


async def test_warn_allows_with_a_warning(webhook: Webhook, gpu_hours: float) -> None:
    answer = await webhook.review(_with_budget("lenient"))
    assert answer["allowed"] is True
    left = _hours(gpu_hours * 0.6)
    assert answer["warnings"] == [
        f"over budget: needs {_hours(gpu_hours)} GPU-hours at p50 (the estimate); lenient has"
        f" {left} of {left} left in the last 30d"
    ]


async def test_downsize_allows_on_fewer_gpus_with_a_warning(webhook: Webhook) -> None:
    answer = await webhook.review(_with_budget("capped"))
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        "downsized to 4 GPUs to fit capped (needs 8 GPUs at once; capped allows 4 and 0 are in use)"
    ]


async def test_a_malformed_spec_is_denied_with_its_field_path(webhook: Webhook) -> None:
    spec = _with_budget("roomy")
    spec["data"] = {"tokens": -1.0}
    spec["batch"]["globalBatchSize"] = "many"
    answer = await webhook.review(spec)
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    message = answer["status"]["message"]
    assert "spec.data.tokens" in message
    assert "spec.batch.globalBatchSize" in message


async def test_budget_lookup_failures_are_denied(webhook: Webhook) -> None:
    missing = await webhook.review(_with_budget("nonexistent"))
    assert missing["allowed"] is False
    assert missing["status"]["code"] == 403
    assert missing["status"]["message"] == "GPUBudget 'nonexistent' not found in default"
    ambiguous = await webhook.review(_with_budget(None))
    assert ambiguous["allowed"] is False
    assert "namespace default has 5 GPUBudgets" in ambiguous["status"]["message"]
    assert "name one in spec.budgetRef" in ambiguous["status"]["message"]
    broken = await webhook.review(_with_budget("broken"))
    assert broken["allowed"] is False
    assert broken["status"]["code"] == 403
    assert broken["status"]["message"].startswith("GPUBudget broken is invalid: spec.gpuHours")


async def test_a_namespace_without_budget_allows(webhook: Webhook) -> None:
    answer = await webhook.review(_with_budget(None), namespace="unbudgeted")
    assert answer["allowed"] is True
    assert "status" not in answer


async def _served_certificate(port: int) -> str:
    """The certificate the server presents (read without verifying it), PEM."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(HOST, port, ssl=unverified), WAIT_SECONDS
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return ssl.DER_cert_to_PEM_cert(der)


async def test_self_signed_mode(cluster: Cluster, catalog: Catalog, gpu_hours: float) -> None:
    """Without certificate files the server makes its own for its address; a client that
    trusts that certificate (as a managed configuration's caBundle does) verifies it."""
    await _create_budget(cluster, "tight", {"gpuHours": gpu_hours * 0.6})
    port = _free_port()
    process = await _start(cluster, catalog, port, None)
    try:
        await Webhook(port, ssl.create_default_context()).wait_until_serving()
        pem = await _served_certificate(port)
        webhook = Webhook(port, ssl.create_default_context(cadata=pem))
        answer = await webhook.review(SPEC)
        assert answer["allowed"] is False
        assert answer["status"]["code"] == 403
        assert answer["status"]["message"].startswith(f"needs {_hours(gpu_hours)} GPU-hours")
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await Webhook(port, ssl.create_default_context()).review(SPEC)
    finally:
        await process.stop()


# --- who can call it, what it says, what it keeps -----------------------------------------


async def test_a_budget_ref_cannot_reach_another_namespaces_budget(
    webhook: Webhook, cluster: Cluster, gpu_hours: float
) -> None:
    """A budgetRef shaped as a path (`../../team-a/gpubudgets/secret`) would make the
    lookup URL another namespace's budget: it is refused as a malformed name, and nothing
    of team-a's budget (its name, its figures) is in the answer."""
    await _create_budget(cluster, "secret", {"gpuHours": gpu_hours * 0.6}, namespace="team-a")
    for ref in ("../../team-a/gpubudgets/secret", "..%2F..%2Fteam-a%2Fgpubudgets%2Fsecret"):
        answer = await webhook.review(_with_budget(ref))
        assert answer["allowed"] is False
        assert answer["status"]["code"] == 422
        message = answer["status"]["message"]
        assert message.startswith("spec.budgetRef: ")
        assert "secret" not in message
        assert "team-a" not in message
        assert _hours(gpu_hours * 0.6) not in message


async def test_a_plan_without_a_namespace_is_not_judged_in_default(webhook: Webhook) -> None:
    """An object without metadata.namespace (the API server always sets it; a forged
    review need not) is denied without a word about `default`'s budgets."""
    answer = await webhook.review(_with_budget(None), object_namespace=None)
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    message = answer["status"]["message"]
    assert message == "the TrainingPlan has no valid metadata.namespace"
    for budget in ("roomy", "tight", "lenient", "capped", "broken"):
        assert budget not in message


REVIEWS = 20
"""Reviews of made-up objects per kind in the state test: each would leave a memory."""


def _kopf_memory_keys() -> set[str]:
    """The object uids Kopf holds a per-object memory for in this process (all its
    operators')."""
    from kopf._core.reactor.inventory import ResourceMemories

    gc.collect()
    # type(), not isinstance(): isinstance reads `__class__`, which some lazy module
    # objects (torch's) answer with a deprecation warning.
    return {
        key
        for obj in gc.get_objects()
        if type(obj) is ResourceMemories
        for key in obj._items  # Kopf has no public view of its memories
    }


async def test_reviews_leave_no_state_behind(webhook: Webhook) -> None:
    """Kopf keeps a memory per reviewed object's uid for any operation but CREATE, and
    drops it only on a watch's deletion event: 1,000 UPDATE reviews of made-up objects
    would leave 1,000 memories for good (here: `REVIEWS` of each kind). None is kept,
    for distinct objects or the same one, whatever the operation. (The operator's own
    watches keep memories of the budgets it lists, maybe still arriving: only the
    reviewed uids are looked for.)"""
    same = str(uuid.uuid4())
    reviewed = {same}
    timeout = aiohttp.ClientTimeout(total=WAIT_SECONDS * 8)
    rounds = [
        ("UPDATE", None, REVIEWS),
        ("UPDATE", same, REVIEWS),
        ("DELETE", None, REVIEWS // 10),
        ("CREATE", same, REVIEWS // 10),
    ]
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for operation, uid, count in rounds:
            for _ in range(count):  # one at a time: the count matters, not the load
                object_uid = uid or str(uuid.uuid4())
                reviewed.add(object_uid)
                answer = await webhook.review(
                    _with_budget("roomy"),
                    operation=operation,
                    object_uid=object_uid,
                    session=session,
                )
                assert answer["allowed"] is True
    assert len(reviewed) == REVIEWS + REVIEWS // 10 + 1
    assert _kopf_memory_keys() & reviewed == set()


async def test_plans_in_unwatched_namespaces_are_allowed_unjudged(
    cluster: Cluster, catalog: Catalog, certificate: Path, gpu_hours: float
) -> None:
    """An operator watching team-a judges team-a's plans only (it may read no budget
    elsewhere, with the chart's per-namespace Roles)."""
    for namespace in ("default", "team-a"):
        await _create_budget(cluster, "tight", {"gpuHours": gpu_hours * 0.6}, namespace)
    port = _free_port()
    process = await _start(cluster, catalog, port, certificate, namespaces=("team-a",))
    try:
        webhook = Webhook(port, ssl.create_default_context(cafile=certificate / "tls.crt"))
        await webhook.wait_until_serving()
        elsewhere = await webhook.review(_with_budget("tight"), namespace="default")
        assert elsewhere["allowed"] is True
        assert "status" not in elsewhere
        watched = await webhook.review(_with_budget("tight"), namespace="team-a")
        assert watched["allowed"] is False
        assert watched["status"]["message"].startswith(f"needs {_hours(gpu_hours)} GPU-hours")
    finally:
        await process.stop()


def _certificate_authority(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(tz=UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, certificate


def _client_certificate(
    authority: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], directory: Path
) -> tuple[Path, Path]:
    """A client certificate (clientAuth) signed by `authority`: its PEM files."""
    ca_key, ca_certificate = authority
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(tz=UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "client.crt", directory / "client.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_client_certificates_are_required_with_a_client_ca(
    cluster: Cluster, catalog: Catalog, certificate: Path, tmp_path: Path, gpu_hours: float
) -> None:
    """With `webhook_client_ca_path`, only a client whose certificate that CA signed
    gets an answer; no certificate, or one from another CA, fails the handshake."""
    await _create_budget(cluster, "tight", {"gpuHours": gpu_hours * 0.6})
    api_server_ca = _certificate_authority("api-server-client-ca")
    other_ca = _certificate_authority("someone-else")
    bundle = tmp_path / "client-ca.crt"
    bundle.write_bytes(api_server_ca[1].public_bytes(serialization.Encoding.PEM))
    port = _free_port()
    process = await _start(cluster, catalog, port, certificate, client_ca=bundle)
    try:

        def client(authority: Any | None) -> Webhook:
            context = ssl.create_default_context(cafile=certificate / "tls.crt")
            if authority is not None:
                cert, key = _client_certificate(authority, tmp_path / str(uuid.uuid4()))
                context.load_cert_chain(cert, key)
            return Webhook(port, context)

        await client(None).wait_until_serving()
        answer = await client(api_server_ca).review(SPEC)
        assert answer["allowed"] is False
        assert answer["status"]["message"].startswith(f"needs {_hours(gpu_hours)} GPU-hours")
        for stranger in (None, other_ca):
            with pytest.raises(aiohttp.ClientError):
                await client(stranger).review(SPEC)
    finally:
        await process.stop()
