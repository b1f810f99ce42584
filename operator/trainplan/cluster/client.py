"""An async Kubernetes API client on aiohttp: just the calls the operator makes, and
`get_object_once` for a command that reads one object.

Apply is create-or-adopt: create the object; when it exists already and carries the same
controller owner (the same TrainingPlan uid) it is adopted as is, so a restarted
operator never creates a second Job; an object owned by someone else is a conflict.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from types import TracebackType
from typing import Any, Final, Literal, Self
from urllib.parse import urlencode

import aiohttp

from trainplan.cluster.ownership import (
    OwnershipConflict,
    controller_of,
    owner_state,
)
from trainplan.cluster.resources import resource_path

JSON = dict[str, Any]
_MERGE_PATCH = "application/merge-patch+json"


_SECRET_FIELDS: Final = frozenset({"token", "password", "certificate_data", "private_key_data"})
"""Connection fields whose values a repr never shows (only whether they are set)."""


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the API server is and how to authenticate (as resolved at login).

    A client certificate and its key are files (`certificate_path`, `private_key_path`)
    or a kubeconfig's inline data (`certificate_data`, `private_key_data`: PEM, or base64
    of it); `username` and `password` are basic auth, used only when there is no `token`.
    The repr shows none of the token, password, certificate or key."""

    server: str
    token: str | None = None
    ca_path: str | None = None
    ca_data: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None
    insecure: bool = False
    request_timeout_seconds: float = 30.0
    certificate_data: str | None = None
    private_key_data: str | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in _SECRET_FIELDS and value is not None:
                shown.append(f"{item.name}=<hidden>")
            else:
                shown.append(f"{item.name}={value!r}")
        return f"Connection({', '.join(shown)})"

    def authorization(self) -> str | None:
        """The Authorization header: the bearer token, else basic auth, else none."""
        if self.token:
            return f"Bearer {self.token}"
        if self.username and self.password:
            pair = f"{self.username}:{self.password}".encode()
            return f"Basic {base64.b64encode(pair).decode('ascii')}"
        return None


ANSWER_TEXT_MAX_CHARS: Final = 200
"""Most characters kept, on one line, of an answer that is not JSON (a proxy's HTML page,
a plain-text 502) as an error's message."""


class KubernetesApiError(Exception):
    """A non-success answer of the API server, with its status code and message (the
    server's own for a Kubernetes Status; else `NotJsonAnswerError`)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")

    def is_status(self, status: int) -> bool:
        """Whether the API server itself answered `status` (e.g. 404: no such object)."""
        return self.status == status


class NotJsonAnswerError(KubernetesApiError):
    """An answer whose body is not JSON, so not the API server's own: an error status
    (a proxy's HTML 403, a plain-text 502) or a success status (a web page where the API
    server should be). The message is the body on one line, cut to
    `ANSWER_TEXT_MAX_CHARS`; `is_status` is never true (a proxy's 404 says nothing of an
    object)."""

    def is_status(self, status: int) -> bool:
        return False


class ApiServerUnreachableError(Exception):
    """No usable answer from the API server at `server`: not reached (refused, DNS, TLS),
    none within the request timeout, or a body that is not JSON; `why` says which."""

    def __init__(self, server: str, why: str) -> None:
        self.server = server
        self.why = why
        super().__init__(f"{server}: {why}")


class ResourceVersionConflictError(KubernetesApiError):
    """409: the object changed since it was read (optimistic concurrency); read it again."""


class StatusKeptChangingError(Exception):
    """`KubernetesApi.update_status` met a concurrent write on every attempt."""


class OwnershipConflictError(Exception):
    """An object of the same name exists but is not controlled by this plan."""


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What `apply` did with one object."""

    kind: str
    name: str
    action: Literal["created", "adopted"]
    object: JSON


def _pem(data: str | None) -> str | None:
    """PEM data: a kubeconfig's `certificate-authority-data`, `client-certificate-data` and
    `client-key-data` are base64 of the PEM."""
    if data is None or data.lstrip().startswith("-----BEGIN "):
        return data
    try:
        return base64.b64decode(data, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return data  # not base64: let ssl say what is wrong with it


@contextlib.contextmanager
def _private_pem_file(data: str | None) -> Iterator[str | None]:
    """A path holding `data` as PEM, for the length of the `with` only: a temporary file
    only its owner can read (0600), removed on the way out, error or not. None for None."""
    pem = _pem(data)
    if pem is None:
        yield None
        return
    descriptor, path = tempfile.mkstemp(prefix="trainplan-", suffix=".pem")
    try:
        with open(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(pem)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _no_key_password() -> str:
    """An encrypted private key is refused (ssl.SSLError) rather than asked for on a
    terminal: kubeconfigs hold unencrypted keys."""
    return ""


def _ssl_context(connection: Connection) -> ssl.SSLContext | bool:
    """The TLS settings for `connection.server`: its CA (none checked when `insecure`)
    and the client certificate, if any. True (aiohttp's default) for plain http."""
    if not connection.server.startswith("https"):
        return True
    if connection.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(
            cafile=connection.ca_path, cadata=_pem(connection.ca_data)
        )
    with (
        _private_pem_file(connection.certificate_data) as certificate_file,
        _private_pem_file(connection.private_key_data) as key_file,
    ):
        certificate = connection.certificate_path or certificate_file
        if certificate:
            key = connection.private_key_path or key_file
            try:
                context.load_cert_chain(certificate, key, password=_no_key_password)
            except ssl.SSLError as error:  # its text names no file and shows no key
                why = f"cannot load the client certificate and key: {error.reason or error}"
                raise ssl.SSLError(error.errno, why) from error
    return context


def _one_line(text: str, limit: int = ANSWER_TEXT_MAX_CHARS) -> str:
    """`text` on one line of at most `limit` characters: control characters and runs of
    whitespace become one space; a longer text is cut, ending with "..."."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text[: 4 * limit]).split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    owner = controller_of(obj)
    return None if owner is None else owner.uid


class KubernetesApi:
    """The calls trainplan makes, over one aiohttp session. Use as an async context
    manager, or call `close()`."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        headers = {"Accept": "application/json"}
        authorization = connection.authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        self._session = aiohttp.ClientSession(
            base_url=connection.server.rstrip("/") + "/",
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=connection.request_timeout_seconds),
            connector=aiohttp.TCPConnector(ssl=_ssl_context(connection)),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def _request(
        self, method: str, url: str, *, body: Any = None, content_type: str | None = None
    ) -> JSON:
        headers = {"Content-Type": content_type} if content_type else None
        async with self._session.request(
            method, url.lstrip("/"), json=body, headers=headers
        ) as response:
            answer = await response.read()
            status, reason = response.status, _one_line(response.reason or "", 80)
        try:
            payload: Any = json.loads(answer) if answer.strip() else None
        except ValueError:  # not JSON, or not UTF-8
            said = answer.decode("utf-8", errors="replace")
            if status < 400:
                said = f"the answer is not JSON: {said}"
            raise NotJsonAnswerError(status, reason, _one_line(said)) from None
        if status >= 400:
            if isinstance(payload, dict):
                reason = str(payload.get("reason") or reason)
                message = str(payload.get("message") or "")
            else:
                message = _one_line(answer.decode("utf-8", errors="replace"))
            error_type = ResourceVersionConflictError if status == 409 else KubernetesApiError
            raise error_type(status, reason, message)
        return payload if isinstance(payload, dict) else {}

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        """The object, or None when it does not exist."""
        url = resource_path(api_version, kind).item(namespace, name)
        try:
            return await self._request("GET", url)
        except KubernetesApiError as error:
            if error.is_status(404):
                return None
            raise

    async def list_objects(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str = ""
    ) -> list[JSON]:
        """Objects of a kind, optionally filtered by a label selector."""
        url = resource_path(api_version, kind).collection(namespace)
        if label_selector:
            url += "?" + urlencode({"labelSelector": label_selector})
        items = (await self._request("GET", url)).get("items", [])
        return [item for item in items if isinstance(item, dict)]

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        """Create `obj` in its namespace."""
        meta = obj.get("metadata", {})
        path = resource_path(obj["apiVersion"], obj["kind"])
        return await self._request("POST", path.collection(meta.get("namespace")), body=obj)

    async def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        """A JSON merge patch (RFC 7386), optionally of a subresource such as `status`.
        With `resource_version`, it applies only to that version of the object, else
        ResourceVersionConflictError (the API server's optimistic concurrency)."""
        url = resource_path(api_version, kind).item(namespace, name, subresource)
        if resource_version is not None:
            metadata = {**patch.get("metadata", {}), "resourceVersion": resource_version}
            patch = {**patch, "metadata": metadata}
        return await self._request("PATCH", url, body=patch, content_type=_MERGE_PATCH)

    async def update_status(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        compute: Callable[[JSON], Awaitable[Mapping[str, Any] | None]],
        *,
        attempts: int,
    ) -> tuple[JSON, Mapping[str, Any]] | None:
        """Read the object, patch its status with what `compute` makes of it onto the
        version read, and read again after a concurrent write (at most `attempts` times,
        then StatusKeptChangingError). Returns the object read and the status patch
        written, or None when the object is gone or `compute` has nothing to write."""
        for _ in range(attempts):
            current = await self.get(api_version, kind, namespace, name)
            if current is None:
                return None
            update = await compute(current)
            if update is None:
                return None
            try:
                await self.patch(
                    api_version,
                    kind,
                    namespace,
                    name,
                    {"status": update},
                    subresource="status",
                    resource_version=(current.get("metadata") or {}).get("resourceVersion"),
                )
            except ResourceVersionConflictError:
                continue
            return current, update
        raise StatusKeptChangingError(f"the status of {kind} {namespace}/{name} kept changing")

    async def ownership_conflicts(
        self, objects: Iterable[Mapping[str, Any]]
    ) -> list[OwnershipConflict]:
        """Each object that exists under another controller owner (or none), with what is
        known of it: whether it is being deleted and, when its controller is an owner of
        the same kind and name as the wanted one (another uid), what became of that owner
        (`ownership.judge_ownership` tells a conflict from a wait)."""
        conflicts = []
        for obj in objects:
            meta = obj["metadata"]
            namespace = meta["namespace"]
            existing = await self.get(obj["apiVersion"], obj["kind"], namespace, meta["name"])
            if existing is None:
                continue
            if _controller_uid(obj) == _controller_uid(existing):
                continue
            wanted, found = controller_of(obj), controller_of(existing)
            deleting = bool(existing.get("metadata", {}).get("deletionTimestamp"))
            state = None
            if not deleting and wanted and found and found.same_owner_name(wanted):
                owner = await self.get(wanted.api_version, wanted.kind, namespace, found.name)
                state = owner_state(found, owner)
            conflicts.append(
                OwnershipConflict(
                    kind=obj["kind"],
                    namespace=namespace,
                    name=meta["name"],
                    wanted=wanted,
                    found=found,
                    deleting=deleting,
                    found_state=state,
                )
            )
        return conflicts

    async def apply(self, obj: Mapping[str, Any]) -> ApplyResult:
        """Create `obj`, or adopt the existing object of that name when it has the same
        controller owner. Raises `OwnershipConflictError` for someone else's object."""
        meta = obj["metadata"]
        try:
            created = await self.create(obj)
            return ApplyResult(obj["kind"], meta["name"], "created", created)
        except KubernetesApiError as error:
            if not error.is_status(409):  # AlreadyExists
                raise
        existing = await self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if existing is None:  # deleted in between: try once more
            created = await self.create(obj)
            return ApplyResult(obj["kind"], meta["name"], "created", created)
        wanted, found = _controller_uid(obj), _controller_uid(existing)
        if wanted != found:
            raise OwnershipConflictError(
                f"{obj['kind']} {meta['namespace']}/{meta['name']} exists and is controlled by"
                f" {found or 'nothing'}, not by this plan ({wanted or 'no owner'})"
            )
        return ApplyResult(obj["kind"], meta["name"], "adopted", existing)


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


EVENT_NAME_MAX_LENGTH: Final = 253
"""Longest Event name (a DNS subdomain)."""


def _event_name(object_name: str, reason: str, digest: str) -> str:
    """`<object>.<reason>.<digest>`, the object's name cut so that the whole stays a
    DNS subdomain of at most 253 characters (a plan's name may itself have 253)."""
    suffix = f".{reason.lower()}.{digest}"[: EVENT_NAME_MAX_LENGTH // 2]
    head = object_name[: EVENT_NAME_MAX_LENGTH - len(suffix)].rstrip(".-")
    return f"{head}{suffix}"


def event_for(
    obj: Mapping[str, Any], event_type: str, reason: str, message: str, now_iso: str
) -> JSON:
    """A core/v1 Event about `obj`, as `kubectl describe` shows it."""
    meta = obj.get("metadata", {})
    name = str(meta.get("name", ""))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": _event_name(name, reason, _short_hash(now_iso, reason, message)),
            "namespace": meta.get("namespace", "default"),
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "trainplan"},
        "firstTimestamp": now_iso,
        "lastTimestamp": now_iso,
        "count": 1,
    }


async def get_object_once(
    connection: Connection, api_version: str, kind: str, namespace: str, name: str
) -> JSON | None:
    """One object read with a client of its own (opened and closed here), for a command:
    the object, or None when it does not exist. `KubernetesApiError` for any other error
    answer (`NotJsonAnswerError` when its body is not JSON); `ApiServerUnreachableError`
    when no usable answer came within the connection's request timeout, a success answer
    is not JSON, or the connection's server or TLS files cannot be used."""
    server = connection.server
    if not server.startswith(("http://", "https://")):
        raise ApiServerUnreachableError(server, "not an http:// or https:// URL")
    try:
        async with KubernetesApi(connection) as api:
            return await api.get(api_version, kind, namespace, name)
    except TimeoutError:
        raise ApiServerUnreachableError(
            server, f"no answer within {connection.request_timeout_seconds:g} s"
        ) from None
    except NotJsonAnswerError as error:
        if error.status >= 400:
            raise
        raise ApiServerUnreachableError(server, "its answer is not JSON") from None
    except (aiohttp.ClientError, OSError) as error:  # OSError: ssl.SSLError, a missing CA file
        raise ApiServerUnreachableError(server, str(error) or type(error).__name__) from None
