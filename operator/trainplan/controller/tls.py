"""The admission webhook's HTTPS server: Kopf's, with its self-signed certificate made by
`cryptography` (Kopf's own generator needs `certbuilder` and `oscrypto`, and oscrypto
cannot load OpenSSL 3.0.10 or later), client certificates verified when a CA is given,
and no state kept per review.

Kopf's admission entry point looks up each reviewed object's memory by its uid and, for
any operation but CREATE, stores a new one, which only a watch's deletion event of a real
object would remove: every UPDATE or DELETE review of a made-up uid would grow the
operator for good. The server hands Kopf a memory store that keeps nothing instead
(`StatelessMemories`): each review gets its own copy of the operator's memo and leaves
nothing behind."""

from __future__ import annotations

import copy
import functools
import ipaddress
import ssl
from collections.abc import AsyncIterator, Collection
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SELF_SIGNED_DAYS = 365
"""How long a self-signed certificate is valid, in days."""
CLOCK_SKEW = timedelta(minutes=5)
"""A self-signed certificate is valid from this long before it was made."""


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def self_signed_certificate(
    hostnames: Collection[str], password: str | None = None, *, now: datetime | None = None
) -> tuple[bytes, bytes]:
    """A self-signed certificate (its own CA) for `hostnames` (names and IP addresses;
    unspecified ones such as 0.0.0.0 are left out), and its ECDSA P-256 private key,
    both PEM; the key is encrypted with `password` when one is given. The first name
    that is not an address is the common name."""
    names = list(dict.fromkeys(hostnames))
    addresses = [a for a in map(_address, names) if a is not None and not a.is_unspecified]
    domains = [name for name in names if _address(name) is None]
    if not domains and not addresses:
        raise ValueError(f"no host name or address to certify in {list(hostnames)}")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, domains[0] if domains else str(addresses[0]))]
    )
    start = (now or datetime.now(tz=UTC)) - CLOCK_SKEW
    alternative_names: list[x509.GeneralName] = [x509.DNSName(name) for name in domains]
    alternative_names += [x509.IPAddress(address) for address in addresses]
    public_key = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(public_key), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


class StatelessMemories:
    """Kopf's per-object memories as the admission webhook sees them: nothing is looked
    up or kept; each review gets a fresh copy of the operator's memo (as Kopf gives a
    CREATE review), which goes when the review is answered."""

    async def recall_memo(
        self, raw_body: Any, *, memobase: Any = None, ephemeral: bool = False
    ) -> Any:
        return copy.copy(memobase) if memobase is not None else kopf.Memo()


def stateless(fn: kopf.WebhookFn) -> kopf.WebhookFn:
    """Kopf's admission entry point `fn` (`serve_admission_request` with the operator's
    memories bound) with `StatelessMemories` in their place. TypeError when `fn` is not
    that (a Kopf release that builds it otherwise): the webhook must not start keeping
    state unnoticed."""
    if not (isinstance(fn, functools.partial) and "memories" in fn.keywords):
        raise TypeError(f"cannot make Kopf's admission function stateless: {fn!r}")
    keywords = {**fn.keywords, "memories": StatelessMemories()}
    wrapped: kopf.WebhookFn = functools.partial(fn.func, *fn.args, **keywords)
    return wrapped


class WebhookServer(kopf.WebhookServer):
    """Kopf's webhook server. With `certfile` and `pkeyfile` it serves them (and re-reads
    them when they change); without, a self-signed certificate for `host` and the
    listening address, which it also offers as the CA bundle of a managed configuration.
    With `client_ca` (a PEM bundle's path), a client must present a certificate signed by
    it, or the TLS handshake fails. Reviews leave no state behind (`stateless`)."""

    def __init__(self, *, client_ca: str | None = None, **kwargs: Any) -> None:
        if client_ca is not None:
            kwargs.update(verify_cafile=client_ca, verify_mode=ssl.CERT_REQUIRED)
        super().__init__(**kwargs)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for client_config in super().__call__(stateless(fn)):
            yield client_config

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        return self_signed_certificate(hostnames, password)
