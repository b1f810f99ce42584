"""`trainplan.cluster.KubernetesApi` against a tiny API server stand-in on 127.0.0.1: it
presents a kubeconfig's inline client certificate over TLS and sends basic auth."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from tests.client_certificates import client_certificate
from trainplan.cluster import ApiServerUnreachableError, Connection, KubernetesApi
from trainplan.cluster.client import get_object_once
from trainplan.controller.tls import self_signed_certificate

pytestmark = pytest.mark.asyncio

PASSWORD = "password-sekrit-0123456789"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _whoami(request: web.Request) -> web.Response:
    """The client certificate's common name and the Authorization header, as a ConfigMap."""
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    subject = dict(item for part in (peer or {}).get("subject", ()) for item in part)
    data = {
        "commonName": subject.get("commonName", ""),
        "authorization": request.headers.get("Authorization", ""),
    }
    return web.json_response({"kind": "ConfigMap", "data": data})


async def _serve(app: web.Application, context: ssl.SSLContext | None) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"{'https' if context else 'http'}://127.0.0.1:{port}"
    await runner.cleanup()


def _app() -> web.Application:
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/configmaps/whoami", _whoami)
    return app


@dataclass(frozen=True)
class TlsServer:
    url: str
    server_certificate: bytes


@pytest.fixture
def client_pair() -> tuple[bytes, bytes]:
    return client_certificate("kind-admin")


@pytest_asyncio.fixture()
async def tls_server(tmp_path: Path, client_pair: tuple[bytes, bytes]) -> AsyncIterator[TlsServer]:
    """HTTPS on 127.0.0.1 that requires a client certificate: `client_pair`'s."""
    certificate, key = self_signed_certificate(["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(certificate)
    (tmp_path / "tls.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=client_pair[0].decode())
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    context.verify_mode = ssl.CERT_REQUIRED
    async for url in _serve(_app(), context):
        yield TlsServer(url, certificate)


@pytest_asyncio.fixture()
async def http_server() -> AsyncIterator[str]:
    async for url in _serve(_app(), None):
        yield url


async def test_an_inline_client_certificate_is_presented(
    tls_server: TlsServer, client_pair: tuple[bytes, bytes]
) -> None:
    certificate, key = client_pair
    connection = Connection(
        server=tls_server.url,
        ca_data=_b64(tls_server.server_certificate),
        certificate_data=_b64(certificate),
        private_key_data=_b64(key),
        request_timeout_seconds=5.0,
    )
    found = await get_object_once(connection, "v1", "ConfigMap", "default", "whoami")
    assert found is not None
    assert found["data"] == {"commonName": "kind-admin", "authorization": ""}


async def test_without_the_client_certificate_the_handshake_fails(tls_server: TlsServer) -> None:
    connection = Connection(
        server=tls_server.url,
        ca_data=_b64(tls_server.server_certificate),
        request_timeout_seconds=5.0,
    )
    with pytest.raises(ApiServerUnreachableError):
        await get_object_once(connection, "v1", "ConfigMap", "default", "whoami")


async def test_basic_auth_is_sent_when_there_is_no_token(http_server: str) -> None:
    connection = Connection(server=http_server, username="admin", password=PASSWORD)
    async with KubernetesApi(connection) as api:
        found = await api.get("v1", "ConfigMap", "default", "whoami")
    assert found is not None
    expected = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    assert found["data"]["authorization"] == expected
