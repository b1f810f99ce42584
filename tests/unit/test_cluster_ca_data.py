"""The cluster client's TLS settings: a kubeconfig's `certificate-authority-data` (base64
of the PEM, as Kopf's kubeconfig login passes it on) is trusted as the PEM itself."""

from __future__ import annotations

import base64
import ssl

import pytest

from trainplan.cluster import Connection
from trainplan.cluster.client import _ssl_context
from trainplan.controller.tls import self_signed_certificate


@pytest.mark.parametrize("encoded", [True, False])
def test_ca_data_is_trusted_as_pem_or_as_base64_of_it(encoded: bool) -> None:
    certificate, _ = self_signed_certificate(["kubernetes.example"])
    data = base64.b64encode(certificate).decode() if encoded else certificate.decode()
    context = _ssl_context(Connection(server="https://kubernetes.example", ca_data=data))
    assert isinstance(context, ssl.SSLContext)
    assert context.cert_store_stats()["x509_ca"] == 1


def test_ca_data_that_is_neither_is_refused_by_ssl() -> None:
    with pytest.raises(ssl.SSLError):
        _ssl_context(Connection(server="https://kubernetes.example", ca_data="not a cert!"))
