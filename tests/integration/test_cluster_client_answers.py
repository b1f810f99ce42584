"""`trainplan.cluster.KubernetesApi` against a tiny API server stand-in on 127.0.0.1: it
presents a kubeconfig's inline client certificate over TLS and sends basic auth, and an
answer that is not JSON (a proxy's page) is a `KubernetesApiError` with its status and
one bounded line, never a bare ValueError."""

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
from trainplan.cluster import (
    ApiServerUnreachableError,
    Connection,
    KubernetesApi,
    KubernetesApiError,
    NotJsonAnswerError,
    ResourceVersionConflictError,
    get_object_once,
)
from trainplan.cluster.client import ANSWER_TEXT_MAX_CHARS
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


PAGES: dict[str, tuple[int, str, str]] = {
    "html-403": (403, "text/html", "<html>\n<body>\n<h1>Forbidden</h1>" + "x" * 5000 + "</html>"),
    "text-502": (502, "text/plain", "upstream connect error\r\nor disconnect"),
    "html-404": (404, "text/html", "<html><body>no such page</body></html>"),
    "html-409": (409, "text/html", "<html>conflict</html>"),
    "empty-500": (500, "text/plain", ""),
    "html-200": (200, "text/html", "<html>" + "\x00\x1b" * 300 + "sign in</html>"),
    "latin1-200": (200, "text/plain", "caf\xe9"),
}
"""ConfigMap name: the status, content type and body the stand-in answers with."""


async def _page(request: web.Request) -> web.Response:
    status, content_type, text = PAGES[request.match_info["name"]]
    body = text.encode("latin-1" if "latin1" in request.match_info["name"] else "utf-8")
    return web.Response(status=status, body=body, content_type=content_type)


async def _status(request: web.Request) -> web.Response:
    """The API server's own 404: a Kubernetes Status."""
    status = {"kind": "Status", "reason": "NotFound", "message": 'configmaps "x" not found'}
    return web.json_response({**status, "code": 404}, status=404)


def _app() -> web.Application:
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/configmaps/whoami", _whoami)
    app.router.add_get("/api/v1/namespaces/default/configmaps/x", _status)
    app.router.add_route("*", "/api/v1/namespaces/default/configmaps/{name}", _page)
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


@pytest.mark.parametrize(
    ("name", "status", "reason"),
    [
        ("html-403", 403, "Forbidden"),
        ("text-502", 502, "Bad Gateway"),
        ("empty-500", 500, "Internal Server Error"),
    ],
)
async def test_an_error_status_is_an_api_error_whatever_its_body(
    http_server: str, name: str, status: int, reason: str
) -> None:
    async with KubernetesApi(Connection(server=http_server)) as api:
        with pytest.raises(KubernetesApiError) as raised:
            await api.get("v1", "ConfigMap", "default", name)
    error = raised.value
    assert (error.status, error.reason) == (status, reason)
    assert len(error.message) <= ANSWER_TEXT_MAX_CHARS
    assert "\n" not in str(error)
    assert "\r" not in str(error)
    assert not isinstance(error, ResourceVersionConflictError)


async def test_a_page_is_cut_to_one_bounded_line(http_server: str) -> None:
    async with KubernetesApi(Connection(server=http_server)) as api:
        with pytest.raises(NotJsonAnswerError) as raised:
            await api.get("v1", "ConfigMap", "default", "html-403")
        with pytest.raises(NotJsonAnswerError) as plain:
            await api.get("v1", "ConfigMap", "default", "text-502")
    assert raised.value.message.startswith("<html> <body> <h1>Forbidden</h1>xxx")
    assert raised.value.message.endswith("...")
    assert len(raised.value.message) == ANSWER_TEXT_MAX_CHARS
    assert str(plain.value) == "502 Bad Gateway: upstream connect error or disconnect"


async def test_a_proxys_404_is_no_answer_about_the_object(http_server: str) -> None:
    """Only the API server's own 404 (a Status) means the object does not exist."""
    async with KubernetesApi(Connection(server=http_server)) as api:
        assert await api.get("v1", "ConfigMap", "default", "x") is None
        with pytest.raises(NotJsonAnswerError) as raised:
            await api.get("v1", "ConfigMap", "default", "html-404")
    assert raised.value.status == 404
    assert not raised.value.is_status(404)


async def test_a_proxys_409_is_no_conflict_to_adopt(http_server: str) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "html-409", "namespace": "default"},
    }
    async with KubernetesApi(Connection(server=http_server)) as api:
        with pytest.raises(NotJsonAnswerError):
            await api.patch(
                "v1", "ConfigMap", "default", "html-409", {"data": {}}, resource_version="1"
            )
        with pytest.raises(NotJsonAnswerError):
            await api.create(config_map)


@pytest.mark.parametrize("name", ["html-200", "latin1-200"])
async def test_a_success_that_is_not_json_is_an_api_error(http_server: str, name: str) -> None:
    async with KubernetesApi(Connection(server=http_server)) as api:
        with pytest.raises(NotJsonAnswerError) as raised:
            await api.get("v1", "ConfigMap", "default", name)
    error = raised.value
    assert error.status == 200
    assert error.message.startswith("the answer is not JSON: ")
    assert len(error.message) <= ANSWER_TEXT_MAX_CHARS
    assert error.message.isprintable()


async def test_a_single_read_says_not_json_or_passes_the_error_on(http_server: str) -> None:
    connection = Connection(server=http_server)
    with pytest.raises(ApiServerUnreachableError, match="its answer is not JSON"):
        await get_object_once(connection, "v1", "ConfigMap", "default", "html-200")
    with pytest.raises(KubernetesApiError) as raised:
        await get_object_once(connection, "v1", "ConfigMap", "default", "html-403")
    assert raised.value.status == 403
