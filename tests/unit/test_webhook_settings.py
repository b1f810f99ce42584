"""The admission webhook's settings: what `configure_kopf` gives Kopf, the self-signed
certificate, and the `trainplan operator --webhook-*` options. (The handler's decisions
are tested over HTTPS in tests/integration/test_webhook.py.)"""

from __future__ import annotations

import ipaddress
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
import pytest
from click.testing import CliRunner
from cryptography import x509

from trainplan.cli import operator_command
from trainplan.cli.main import main
from trainplan.controller import ControllerContext, OperatorConfig, build_registry
from trainplan.controller.config import configure_kopf
from trainplan.controller.tls import WebhookServer, self_signed_certificate


def _settings(config: OperatorConfig) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, config)
    return settings


def test_no_webhook_server_by_default() -> None:
    settings = _settings(OperatorConfig())
    assert settings.admission.server is None
    assert settings.admission.managed is None


def test_webhook_server_with_certificate_files() -> None:
    config = OperatorConfig(
        webhook_port=9443,
        webhook_address="10.0.0.5",
        webhook_host="trainplan-webhook.trainplan.svc",
        webhook_cert_path="/tls/tls.crt",
        webhook_key_path="/tls/tls.key",
    )
    settings = _settings(config)
    server = settings.admission.server
    assert isinstance(server, kopf.WebhookServer)
    assert (server.addr, server.port, server.host) == (
        "10.0.0.5",
        9443,
        "trainplan-webhook.trainplan.svc",
    )
    assert (server.certfile, server.pkeyfile) == ("/tls/tls.crt", "/tls/tls.key")
    assert not server.insecure
    assert settings.admission.managed is None


def test_self_signed_and_managed_webhook_server() -> None:
    settings = _settings(OperatorConfig(webhook_port=0, webhook_managed="trainplan.dev"))
    server = settings.admission.server
    assert isinstance(server, WebhookServer)
    assert (server.addr, server.port) == ("0.0.0.0", 0)
    assert server.certfile is None
    assert server.pkeyfile is None
    assert settings.admission.managed == "trainplan.dev"


def test_certificate_and_key_go_together() -> None:
    with pytest.raises(ValueError, match="together"):
        OperatorConfig(webhook_port=9443, webhook_cert_path="/tls/tls.crt")


def _handler_ids(config: OperatorConfig) -> list[str]:
    registry = build_registry(config=config)
    return [str(handler.id) for handler in registry._webhooks.get_all_handlers()]


def test_the_budget_handler_is_registered_only_with_a_webhook_server() -> None:
    assert _handler_ids(OperatorConfig()) == []
    assert _handler_ids(OperatorConfig(webhook_port=9443)) == ["budget"]


def test_self_signed_certificate_names_host_and_addresses(tmp_path: Path) -> None:
    hostnames = ["trainplan-webhook.trainplan.svc", "0.0.0.0", "127.0.0.1", "127.0.0.1"]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cert_pem, key_pem = self_signed_certificate(hostnames, now=now)
    certificate = x509.load_pem_x509_certificate(cert_pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["trainplan-webhook.trainplan.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    common_name = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    assert common_name[0].value == "trainplan-webhook.trainplan.svc"
    assert certificate.issuer == certificate.subject
    assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert certificate.not_valid_before_utc < now < certificate.not_valid_after_utc
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")


def test_self_signed_key_encrypted_with_a_password(tmp_path: Path) -> None:
    cert_pem, key_pem = WebhookServer.build_certificate(["localhost"], "s3cret")
    assert b"ENCRYPTED" in key_pem
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key", password="s3cret")


def test_no_name_to_certify() -> None:
    with pytest.raises(ValueError, match="no host name"):
        self_signed_certificate(["0.0.0.0"])


# --- trainplan operator --webhook-* -------------------------------------------------------


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[ControllerContext]:
    """Stands in for the operator: records the context the command would run with."""
    contexts: list[ControllerContext] = []

    async def run_operator(context: ControllerContext, **_: Any) -> None:
        contexts.append(context)

    monkeypatch.setattr(operator_command, "run_operator", run_operator)
    return contexts


def _operator(*args: str) -> Any:
    return CliRunner().invoke(main, ["operator", *args])


def test_operator_without_webhook(started: list[ControllerContext]) -> None:
    result = _operator()
    assert result.exit_code == 0, result.output
    assert started[0].config.webhook_port is None


def test_operator_webhook_options(started: list[ControllerContext], tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("cert")
    (tmp_path / "tls.key").write_text("key")
    result = _operator(
        "--webhook-port",
        "9443",
        "--webhook-address",
        "127.0.0.1",
        "--webhook-host",
        "trainplan-webhook.trainplan.svc",
        "--webhook-cert-dir",
        str(tmp_path),
        "--webhook-managed",
        "trainplan.dev",
    )
    assert result.exit_code == 0, result.output
    config = started[0].config
    assert config.webhook_port == 9443
    assert config.webhook_address == "127.0.0.1"
    assert config.webhook_host == "trainplan-webhook.trainplan.svc"
    assert config.webhook_cert_path == str(tmp_path / "tls.crt")
    assert config.webhook_key_path == str(tmp_path / "tls.key")
    assert config.webhook_managed == "trainplan.dev"


def test_operator_webhook_self_signed(started: list[ControllerContext]) -> None:
    result = _operator("--webhook-port", "9443")
    assert result.exit_code == 0, result.output
    config = started[0].config
    assert (config.webhook_port, config.webhook_address) == (9443, "0.0.0.0")
    assert config.webhook_cert_path is None
    assert config.webhook_key_path is None


def test_operator_webhook_cert_dir_without_its_files(
    started: list[ControllerContext], tmp_path: Path
) -> None:
    (tmp_path / "tls.crt").write_text("cert")
    result = _operator("--webhook-port", "9443", "--webhook-cert-dir", str(tmp_path))
    assert result.exit_code == 2
    assert "--webhook-cert-dir" in result.output
    assert "has no tls.key" in result.output
    assert started == []


def test_operator_webhook_options_need_a_port(started: list[ControllerContext]) -> None:
    result = _operator("--webhook-managed", "trainplan.dev")
    assert result.exit_code == 2
    assert "need --webhook-port" in result.output
    assert started == []


def test_operator_webhook_port_in_range(started: list[ControllerContext]) -> None:
    result = _operator("--webhook-port", "70000")
    assert result.exit_code == 2
    assert "--webhook-port" in result.output
    assert started == []
