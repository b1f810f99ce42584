"""Everything the handlers share for one operator process: the catalog, the clock, the
settings and the API client (created at login). Held in Kopf's operator memo."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from trainplan.cluster import Connection, KubernetesApi
from trainplan.controller.config import OperatorConfig
from trainplan.controller.metrics import OperatorMetrics, serve_metrics
from trainplan.controller.revision import EtaRevisions
from trainplan.planner import Catalog


def utc_now() -> datetime:
    """The wall clock, tz-aware."""
    return datetime.now(tz=UTC)


def _path(value: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None) -> str | None:
    return None if value is None else os.fsdecode(value)


def _text(value: str | bytes | None) -> str | None:
    return value.decode("ascii", errors="replace") if isinstance(value, bytes) else value


def connection_from(info: kopf.ConnectionInfo, timeout_seconds: float) -> Connection:
    """The cluster client's connection from Kopf's login result: the server, its CA, and a
    token, a client certificate (files, or a kubeconfig's inline base64 data) or basic
    auth."""
    return Connection(
        server=info.server,
        token=info.token,
        ca_path=_path(info.ca_path),
        ca_data=_text(info.ca_data),
        certificate_path=_path(info.certificate_path),
        private_key_path=_path(info.private_key_path),
        insecure=bool(info.insecure),
        request_timeout_seconds=timeout_seconds,
        certificate_data=_text(info.certificate_data),
        private_key_data=_text(info.private_key_data),
        username=info.username,
        password=info.password,
    )


@dataclass
class ControllerContext:
    """Shared state of one operator process; the API client appears after login."""

    catalog: Catalog
    config: OperatorConfig = field(default_factory=OperatorConfig)
    clock: Callable[[], datetime] = utc_now
    connection: Connection | None = None
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    metrics_port: int | None = None
    """The port the operator metrics are served on, once started."""
    revisions: EtaRevisions = field(init=False, repr=False)
    """The running plans' ETA trackers (made with the context, from `config`)."""
    _api: KubernetesApi | None = field(default=None, repr=False)
    _metrics_server: Any = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.revisions = EtaRevisions(config=self.config)

    def serve_metrics(self) -> int | None:
        """Start the operator metrics server (once); returns its port."""
        if self.config.metrics_port is None:
            return None
        if self._metrics_server is None:
            self._metrics_server, self.metrics_port = serve_metrics(
                self.metrics, self.config.metrics_port, self.config.metrics_address
            )
        return self.metrics_port

    def api(self) -> KubernetesApi:
        """The API client for the current login (made on first use)."""
        if self.connection is None:
            raise RuntimeError("the operator has not logged in to the API server yet")
        if self._closed:
            # A handler still running as the operator stops: a new client would never close.
            raise RuntimeError("the operator is stopping")
        if self._api is None:
            self._api = KubernetesApi(self.connection)
        return self._api

    async def login(self, connection: Connection) -> None:
        """Use a (new) login: the next `api()` call connects with it."""
        if self._api is not None and connection != self.connection:
            await self._api.close()
            self._api = None
        self.connection = connection

    async def close(self) -> None:
        """Close the API client, the scrape session and the metrics server; from now on
        `api()` and the revisions' session refuse (no client is made that nothing closes)."""
        self._closed = True
        await self.revisions.close()
        if self._api is not None:
            await self._api.close()
            self._api = None
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
