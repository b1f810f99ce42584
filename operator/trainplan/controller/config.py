"""Operator settings with their units, and how they set Kopf's (pure)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

import kopf

from trainplan.api import GROUP
from trainplan.controller.tls import WebhookServer
from trainplan.eta import StallPolicy


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """What `trainplan operator` can tune. Every duration is in seconds."""

    watch_server_timeout_seconds: float = 300.0
    """The API server closes a watch after this long; Kopf then re-lists and re-watches."""
    watch_client_timeout_seconds: float = 360.0
    """The operator gives up on a silent watch connection after this long."""
    connect_timeout_seconds: float = 10.0
    """Connecting to the API server."""
    request_timeout_seconds: float = 30.0
    """One API request, start to end."""
    event_level: int = logging.WARNING
    """Log records at this level or above become Kubernetes Events on the object."""
    eta_interval_seconds: float = 30.0
    """How often each running plan's ETA is revised."""
    budget_interval_seconds: float = 60.0
    """How often each GPUBudget's used, committed and remaining GPU-hours are revised."""
    scrape_timeout_seconds: float = 5.0
    """One scrape of a training pod's metrics."""
    scrape_max_bytes: int = 1 << 20
    """The largest metrics page read from a pod, in bytes (a reporter's page is a few KiB);
    a larger one is a scrape error."""
    scrape_parse_timeout_seconds: float = 2.0
    """Parsing one page (off the event loop) may take this long; longer is a scrape
    error."""
    scrape_concurrency: int = 16
    """How many of one plan's pods are scraped at once."""
    prometheus_url: str | None = None
    """Read training metrics from this Prometheus server instead of scraping pods."""
    stall_policy: StallPolicy = field(default_factory=StallPolicy)
    """When no completed step counts as a stall."""
    metrics_port: int | None = 8080
    """Serve the operator metrics on this port (`/metrics`); None: not served."""
    metrics_address: str = "0.0.0.0"
    """Address of the operator metrics server: every interface by default (a pod's
    network). `/metrics` has no authentication; limit who reaches it (the chart's
    NetworkPolicy), or listen on 127.0.0.1 outside a cluster."""
    webhook_port: int | None = None
    """Serve the GPU-budget admission webhook (HTTPS) on this port; None: no webhook
    server and no admission handler (the reconcile path still enforces budgets)."""
    webhook_address: str = "0.0.0.0"
    """Address the webhook server listens on: every interface by default (the API server
    calls it over the pod network); limit who reaches it with a NetworkPolicy and
    `webhook_client_ca_path`."""
    webhook_host: str | None = None
    """Host name the API server calls the webhook at (e.g. the Service's
    `NAME.NAMESPACE.svc`): the self-signed certificate's name and the managed
    configuration's URL; None: the listening address."""
    webhook_cert_path: str | None = None
    """PEM certificate (chain) of the webhook server, e.g. `tls.crt` of a Secret issued by
    cert-manager; re-read when it changes. None, with no key: a self-signed certificate is
    made at start-up (development)."""
    webhook_key_path: str | None = None
    """PEM private key of `webhook_cert_path` (`tls.key`)."""
    webhook_managed: str | None = None
    """When set, the operator creates and keeps the ValidatingWebhookConfiguration of this
    name itself, pointing at its server with its CA (development); None: the deployment
    provides the configuration."""
    webhook_client_ca_path: str | None = None
    """PEM bundle of the CA(s) that sign the API server's client certificate: when set,
    the webhook server requires a client certificate signed by one of them (the TLS
    handshake fails without); None: any client that reaches the port may call it."""
    webhook_namespaces: tuple[str, ...] = ()
    """The namespaces whose plans the webhook judges (the operator's watched namespaces);
    a plan elsewhere is allowed without a look at any budget. Empty: every namespace."""

    peering_name: str | None = None
    """Run as one of several replicas through Kopf's peering objects of this name (the
    ClusterKopfPeering cluster-wide; with watched namespaces, the KopfPeering in each):
    only the replica with the highest priority handles plans and budgets, the others
    stand by, serve the admission webhook and take over when its record expires. The
    objects must exist; until they do, the operator pauses. None: standalone (one
    replica only)."""
    peering_priority: int | None = None
    """This replica's peering priority; None: from its start time
    (`seniority_priority`), so a running leader keeps the lead over replicas started
    after it."""
    peering_lifetime_seconds: int = 60
    """How long this replica's peering record counts as alive: it renews it 5-10 s before
    it expires, and a standby takes over at most this long after the leader is killed
    without a goodbye (a clean stop removes the record at once)."""

    def __post_init__(self) -> None:
        if (self.webhook_cert_path is None) != (self.webhook_key_path is None):
            raise ValueError("webhook_cert_path and webhook_key_path are given together")
        if self.peering_lifetime_seconds < 1:
            raise ValueError("peering_lifetime_seconds is at least 1")


PRIORITY_TIEBREAK_VALUES = 1024
"""How many tie-breaking values `seniority_priority` adds below the start millisecond."""
_MILLISECONDS_CEILING = 1 << 42
"""A start time in ms since the Unix epoch below this (the year 2109) gives a positive
priority; every priority stays below 2**53, an integer exact in JSON's doubles."""


def seniority_priority(started: datetime, tiebreak: int) -> int:
    """A peering priority that is higher the earlier the replica `started` (tz-aware):
    Kopf lets only the highest-priority live peer work and pauses every peer with an
    equal one, so the oldest replica leads, and `tiebreak` (0 to 1023, drawn at random)
    separates two replicas that start in the same millisecond."""
    if not 0 <= tiebreak < PRIORITY_TIEBREAK_VALUES:
        raise ValueError(f"tiebreak is in [0, {PRIORITY_TIEBREAK_VALUES})")
    milliseconds = int(started.timestamp() * 1000)
    return (_MILLISECONDS_CEILING - milliseconds) * PRIORITY_TIEBREAK_VALUES + tiebreak


TIMER_STOP_POLLING_SECONDS = 1.0
"""Seconds between Kopf's checks that a deleted plan's ETA timer has stopped. A plan is
deleted only once its timer has exited; when a revision is still running at the
deletion, Kopf checks again after this many seconds (its default, 60, kept a deleted
plan and a plan applied again under its name waiting a minute: `kopf._core.engines.
daemons`, timers poll `settings.background.cancellation_polling`)."""


class SpecDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's last-handled state in an annotation, built from only what it keeps.

    Kopf builds the essence it compares (the body less its status and system metadata)
    on every watch event, by deep-copying the whole body and then deleting what it does
    not keep. A running plan's status (its plan, estimate and conditions) is most of its
    body and is written every ETA revision, so that copy was 4% of the operator's round
    at 1,000 plans. The essence is the same: the status and the metadata Kopf drops
    (managed fields, versions, finalizers) are left out before the copy, not after
    (unless a handler follows a status or metadata field, when Kopf's own build runs)."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[kopf.FieldSpec] | None = None,
    ) -> kopf.BodyEssence:
        fields = list(extra_fields or ())
        if not any(_top_level(field) in _NOT_ESSENCE for field in fields):
            meta = body.get("metadata") or {}
            raw = {key: value for key, value in body.items() if key not in _NOT_ESSENCE}
            raw["metadata"] = {key: meta[key] for key in _ESSENCE_METADATA if key in meta}
            body = kopf.Body(cast(kopf.RawBody, raw))
        return super().build(body=body, extra_fields=fields)


def _top_level(field: kopf.FieldSpec) -> str | None:
    """The top-level key a field (dotted, or as a path) lies under."""
    if not field:
        return None
    return field.split(".", 1)[0] if isinstance(field, str) else field[0]


_NOT_ESSENCE = frozenset({"status", "metadata"})
_ESSENCE_METADATA = ("labels", "annotations", "ownerReferences")
"""What Kopf's essence keeps of the metadata (labels, its own annotations removed), and
what it reads to name its annotation (the owners)."""


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """Kopf's settings for trainplan: progress, last-handled state and the finalizer under
    the `trainplan.dev` prefix (annotations, so `status` holds only trainplan's fields),
    watch and request timeouts, which log records become Events, how soon a deleted
    plan's stopped timer is noticed, and the admission webhook server when `webhook_port`
    is set."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = SpecDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.watching.server_timeout = int(config.watch_server_timeout_seconds)
    settings.watching.client_timeout = int(config.watch_client_timeout_seconds)
    settings.watching.connect_timeout = int(config.connect_timeout_seconds)
    settings.networking.connect_timeout = config.connect_timeout_seconds
    settings.networking.request_timeout = config.request_timeout_seconds
    settings.posting.level = config.event_level
    settings.peering.lifetime = config.peering_lifetime_seconds
    settings.peering.stealth = True  # no log line per keep-alive
    settings.background.cancellation_polling = TIMER_STOP_POLLING_SECONDS
    if config.webhook_port is not None:
        settings.admission.server = webhook_server(config)
        settings.admission.managed = config.webhook_managed


def webhook_server(config: OperatorConfig) -> WebhookServer:
    """Kopf's HTTPS webhook server for `config` (a self-signed certificate without cert
    files; client certificates required with `webhook_client_ca_path`)."""
    assert config.webhook_port is not None
    return WebhookServer(
        addr=config.webhook_address,
        port=config.webhook_port,
        host=config.webhook_host,
        certfile=config.webhook_cert_path,
        pkeyfile=config.webhook_key_path,
        client_ca=config.webhook_client_ca_path,
    )
