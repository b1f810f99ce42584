"""Everything the handlers share for one operator process: the catalog, the clock, the
settings and the API client (created at login). Held in Kopf's operator memo."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import kopf

from trainplan.cluster import Connection, KubernetesApi
from trainplan.controller.config import OperatorConfig
from trainplan.planner import Catalog


def utc_now() -> datetime:
    """The wall clock, tz-aware."""
    return datetime.now(tz=UTC)


def _path(value: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None) -> str | None:
    return None if value is None else os.fsdecode(value)


def connection_from(info: kopf.ConnectionInfo, timeout_seconds: float) -> Connection:
    """The cluster client's connection from Kopf's login result."""
    return Connection(
        server=info.server,
        token=info.token,
        ca_path=_path(info.ca_path),
        ca_data=info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data,
        certificate_path=_path(info.certificate_path),
        private_key_path=_path(info.private_key_path),
        insecure=bool(info.insecure),
        request_timeout_seconds=timeout_seconds,
    )


@dataclass
class ControllerContext:
    """Shared state of one operator process; the API client appears after login."""

    catalog: Catalog
    config: OperatorConfig = field(default_factory=OperatorConfig)
    clock: Callable[[], datetime] = utc_now
    connection: Connection | None = None
    _api: KubernetesApi | None = field(default=None, repr=False)

    def api(self) -> KubernetesApi:
        """The API client for the current login (made on first use)."""
        if self.connection is None:
            raise RuntimeError("the operator has not logged in to the API server yet")
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
        if self._api is not None:
            await self._api.close()
            self._api = None
