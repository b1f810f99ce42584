"""A kubeconfig's inline client certificate and basic auth reach the cluster client: Kopf's
login result carries them into `Connection`, the SSL context loads the certificate from a
private temporary file that is gone afterwards (error or not), and no repr shows a secret."""

from __future__ import annotations

import base64
import os
import ssl
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.client_certificates import client_certificate
from trainplan.cli.calibration_source import kubeconfig_connection, read_named_calibration
from trainplan.cluster import Connection, KubernetesApi
from trainplan.cluster.client import _ssl_context
from trainplan.controller.context import ControllerContext, connection_from
from trainplan.planner import Catalog

SERVER = "https://kubernetes.example:6443"
TOKEN = "token-sekrit-0123456789"
PASSWORD = "password-sekrit-0123456789"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class LoadSpy:
    """Records what `SSLContext.load_cert_chain` found in its files while it loaded them,
    and every temporary file made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loaded: list[tuple[str, int, str]] = []
        self.made: list[str] = []
        original_load = ssl.SSLContext.load_cert_chain
        original_mkstemp: Callable[..., tuple[int, str]] = tempfile.mkstemp

        def load(context: ssl.SSLContext, certfile: Any, keyfile: Any = None, **kw: Any) -> None:
            for path in (certfile, keyfile):
                if path is not None:
                    mode = stat.S_IMODE(os.stat(path).st_mode)
                    self.loaded.append((str(path), mode, Path(path).read_text()))
            original_load(context, certfile, keyfile, **kw)

        def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
            descriptor, path = original_mkstemp(*args, **kwargs)
            self.made.append(path)
            return descriptor, path

        monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", load)
        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("encode", [b64, bytes.decode], ids=["base64", "pem"])
def test_inline_certificate_and_key_are_loaded_from_private_files_then_removed(
    monkeypatch: pytest.MonkeyPatch, encode: Callable[[bytes], str]
) -> None:
    certificate, key = client_certificate()
    spy = LoadSpy(monkeypatch)
    connection = Connection(
        server=SERVER, certificate_data=encode(certificate), private_key_data=encode(key)
    )
    context = _ssl_context(connection)
    assert isinstance(context, ssl.SSLContext)
    assert [(mode, text) for _, mode, text in spy.loaded] == [
        (0o600, certificate.decode()),
        (0o600, key.decode()),
    ]
    assert len(spy.made) == 2
    assert not any(Path(path).exists() for path in spy.made)


def test_inline_data_mixes_with_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    certificate, key = client_certificate()
    (tmp_path / "key.pem").write_bytes(key)
    spy = LoadSpy(monkeypatch)
    connection = Connection(
        server=SERVER, certificate_data=b64(certificate), private_key_path=str(tmp_path / "key.pem")
    )
    assert isinstance(_ssl_context(connection), ssl.SSLContext)
    assert spy.loaded[1][0] == str(tmp_path / "key.pem")
    assert len(spy.made) == 1
    assert not Path(spy.made[0]).exists()


def test_a_key_that_does_not_match_fails_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    certificate, _ = client_certificate()
    _, other_key = client_certificate()
    spy = LoadSpy(monkeypatch)
    connection = Connection(
        server=SERVER, certificate_data=b64(certificate), private_key_data=b64(other_key)
    )
    with pytest.raises(ssl.SSLError) as raised:
        _ssl_context(connection)
    assert len(spy.made) == 2
    assert not any(Path(path).exists() for path in spy.made)
    assert b64(other_key) not in str(raised.value)
    assert "PRIVATE KEY" not in str(raised.value)


def test_key_data_that_is_not_a_key_fails_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    certificate, _ = client_certificate()
    spy = LoadSpy(monkeypatch)
    connection = Connection(
        server=SERVER, certificate_data=b64(certificate), private_key_data="not-a-key-sekrit"
    )
    with pytest.raises(ssl.SSLError) as raised:
        _ssl_context(connection)
    assert not any(Path(path).exists() for path in spy.made)
    assert "sekrit" not in str(raised.value)


def test_an_encrypted_key_is_refused_not_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    certificate, _ = client_certificate()
    spy = LoadSpy(monkeypatch)
    with pytest.raises(ssl.SSLError):
        _ssl_context(
            Connection(
                server=SERVER, certificate_data=b64(certificate), private_key_data=b64(encrypted)
            )
        )
    assert not any(Path(path).exists() for path in spy.made)


def test_insecure_still_presents_the_client_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    certificate, key = client_certificate()
    spy = LoadSpy(monkeypatch)
    context = _ssl_context(
        Connection(
            server=SERVER,
            insecure=True,
            certificate_data=b64(certificate),
            private_key_data=b64(key),
        )
    )
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE
    assert len(spy.loaded) == 2


def test_plain_http_needs_no_context_and_writes_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    certificate, key = client_certificate()
    spy = LoadSpy(monkeypatch)
    connection = Connection(
        server="http://127.0.0.1:8001", certificate_data=b64(certificate), private_key_data=b64(key)
    )
    assert _ssl_context(connection) is True
    assert spy.made == []


def _info(**credentials: Any) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=SERVER, **credentials)


@pytest.mark.parametrize("as_bytes", [False, True])
def test_connection_from_carries_inline_certificates(as_bytes: bool) -> None:
    certificate, key = client_certificate()
    cert_data, key_data = b64(certificate), b64(key)
    info = _info(
        certificate_data=cert_data.encode() if as_bytes else cert_data,
        private_key_data=key_data.encode() if as_bytes else key_data,
    )
    connection = connection_from(info, 5.0)
    assert (connection.certificate_data, connection.private_key_data) == (cert_data, key_data)
    assert connection.certificate_path is None


def test_connection_from_carries_basic_auth() -> None:
    connection = connection_from(_info(username="admin", password=PASSWORD), 5.0)
    assert (connection.username, connection.password) == ("admin", PASSWORD)
    expected = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    assert connection.authorization() == expected


def test_a_token_wins_over_basic_auth() -> None:
    connection = Connection(server=SERVER, token=TOKEN, username="admin", password=PASSWORD)
    assert connection.authorization() == f"Bearer {TOKEN}"
    assert Connection(server=SERVER, username="admin").authorization() is None
    assert Connection(server=SERVER).authorization() is None


def test_a_kubeconfig_with_inline_certificates_reaches_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kind's kubeconfig: `client-certificate-data` and `client-key-data`, base64."""
    certificate, key = client_certificate()
    user = {"client-certificate-data": b64(certificate), "client-key-data": b64(key)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kind", "cluster": {"server": SERVER}}],
        "users": [{"name": "kind", "user": user}],
        "contexts": [{"name": "kind", "context": {"cluster": "kind", "user": "kind"}}],
        "current-context": "kind",
    }
    (tmp_path / "config").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    connection = kubeconfig_connection(5.0)
    assert isinstance(connection, Connection)
    assert connection.certificate_data == b64(certificate)
    assert connection.private_key_data == b64(key)
    assert isinstance(_ssl_context(connection), ssl.SSLContext)


def test_reprs_hide_secrets(catalog: Catalog) -> None:
    certificate, key = client_certificate()
    connection = Connection(
        server=SERVER,
        token=TOKEN,
        certificate_data=b64(certificate),
        private_key_data=b64(key),
        username="admin",
        password=PASSWORD,
    )
    context = ControllerContext(catalog=catalog, connection=connection)
    for text in (repr(connection), str(connection), repr(context)):
        for secret in (TOKEN, PASSWORD, b64(key), key.decode(), b64(certificate)):
            assert secret not in text
    assert "token=<hidden>" in repr(connection)
    assert "username='admin'" in repr(connection)
    assert "<hidden>" not in repr(Connection(server=SERVER))


@pytest.mark.asyncio
async def test_the_client_sends_basic_auth_without_a_token() -> None:
    async with KubernetesApi(
        Connection(server="http://127.0.0.1:1", username="admin", password=PASSWORD)
    ) as api:
        header = api._session.headers["Authorization"]
    assert header == "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()


def test_a_broken_key_says_so_in_the_one_line_of_a_named_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certificate, _ = client_certificate()
    _, other_key = client_certificate()
    user = {"client-certificate-data": b64(certificate), "client-key-data": b64(other_key)}
    config = {
        "clusters": [{"name": "c", "cluster": {"server": SERVER}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "config").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    resource, lines = read_named_calibration("a100-east", timeout_seconds=1.0)
    assert resource is None
    assert len(lines) == 1
    assert lines[0].startswith(
        f"ClusterCalibration a100-east: cannot read it from the API server at {SERVER}:"
        " cannot load the client certificate and key: "
    )
    assert b64(other_key) not in lines[0]
