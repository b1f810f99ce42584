"""Where `trainplan plan --calibration` reads its ClusterCalibration: a FILE holding the
resource, or the NAME of the cluster-scoped resource, read from the API server through
the current kubeconfig (`KUBECONFIG`, else ~/.kube/config). `NO_CALIBRATION` ("none")
reads nothing: the plan command plans from the published constants.

`calibration_source` (what a value means) and the error lines are pure. `read_calibration`
reads the file, or the kubeconfig and the API server: it logs in as `trainplan operator`
does outside a cluster (Kopf's kubeconfig login, `controller.context.connection_from`)
and reads through `trainplan.cluster`, both imported only when a name is read, so that
planning from files never loads the operator stack."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pydantic import ValidationError

from trainplan.api import (
    API_VERSION,
    CLUSTER_CALIBRATION_KIND,
    CLUSTER_CALIBRATION_PLURAL,
    GROUP,
    ClusterCalibration,
    format_validation_errors,
    is_calibration_name,
)
from trainplan.cli.inputs import read_cluster_calibration

if TYPE_CHECKING:
    from trainplan.cluster import Connection

NO_CALIBRATION: Final = "none"
"""`--calibration none`: plan without a calibration, as `hardware.calibration: none` does
(never a file or a ClusterCalibration of that name: give a file as `./none`)."""
CALIBRATION_REQUEST_TIMEOUT_SECONDS: Final = 5.0
"""Seconds for the one request that reads a ClusterCalibration by name: connecting, TLS
and the whole answer (then the command gives up with one line naming the server)."""
SERVER_TEXT_MAX_CHARS: Final = 200
"""Most characters shown of any text that comes from the server or the connection (the
API server's message, a connection error, a validation problem of the object read): the
rest is cut."""
SERVER_PROBLEMS_MAX: Final = 20
"""Most validation problems shown for an invalid ClusterCalibration read from the cluster
(the count of the rest is given)."""
CALIBRATION_RESOURCE: Final = f"{CLUSTER_CALIBRATION_PLURAL}.{GROUP}"
"""The resource reading a calibration by name needs `get` on (RBAC)."""


@dataclass(frozen=True, slots=True)
class CalibrationFile:
    """A file holding a ClusterCalibration resource (YAML or JSON)."""

    path: Path


@dataclass(frozen=True, slots=True)
class CalibrationName:
    """The name of a cluster-scoped ClusterCalibration in the current cluster."""

    name: str


def calibration_source(value: str) -> CalibrationFile | CalibrationName | None:
    """What a `--calibration` value means: a path that exists and is no directory is a
    file, as it always was; else a ClusterCalibration name (`hardware.calibration`'s
    pattern) is a name; else any other existing path is a file (reading it says what is
    wrong); else None: neither."""
    path = Path(value)
    try:
        exists, is_dir = bool(value) and path.exists(), path.is_dir()
    except OSError:  # a name too long for the file system, say: no file
        exists, is_dir = False, False
    if exists and not is_dir:
        return CalibrationFile(path)
    if is_calibration_name(value):
        return CalibrationName(value)
    return CalibrationFile(path) if exists else None


def one_line(text: str, limit: int = SERVER_TEXT_MAX_CHARS) -> str:
    """`text` on one line of at most `limit` characters: control characters and runs of
    whitespace become one space, and a longer text is cut (ending with "...")."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text[: 4 * limit]).split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def without_calibration_problem(spec_calibration: str | None) -> str | None:
    """Why a spec cannot be planned with `--calibration none`: it names a ClusterCalibration
    (as with a file or name of another one, refused rather than planned uncorrected);
    None when it names none or opts out itself."""
    if spec_calibration is None or spec_calibration == NO_CALIBRATION:
        return None
    return (
        f"names ClusterCalibration {spec_calibration!r}, but --calibration none plans without"
        " one: drop one of them"
    )


def neither_line(value: str) -> str:
    """The line for a value that is neither an existing file nor a ClusterCalibration name."""
    return (
        f"--calibration {one_line(value)}: no such file, and not a ClusterCalibration name"
        " (lowercase letters, digits, '-' and '.', a letter or digit at each end, at most"
        " 253 characters)"
    )


def not_found_line(name: str, server: str) -> str:
    """The line for a name the cluster has no ClusterCalibration of."""
    return (
        f"ClusterCalibration {name}: not found in the cluster at {one_line(server)}, and"
        " no file of that name exists either"
    )


def unreachable_line(name: str, server: str, why: str) -> str:
    """The line for an API server that gave no usable answer."""
    return (
        f"ClusterCalibration {name}: cannot read it from the API server at"
        f" {one_line(server)}: {one_line(why)}"
    )


def api_error_line(name: str, server: str, status: int, reason: str, message: str) -> str:
    """The line for an error answer of the API server: a 401 or 403 says which permission
    reading needs; the server's own words are cut to `SERVER_TEXT_MAX_CHARS`."""
    answer = f"{status} {one_line(reason, 40)}".rstrip()
    said = f"; it said: {one_line(message)}" if one_line(message) else ""
    where = f"the API server at {one_line(server)}"
    if status == 401:
        return (
            f"ClusterCalibration {name}: {where} did not accept the kubeconfig's credentials"
            f" ({answer}); reading it needs a user allowed to `get` {CALIBRATION_RESOURCE}"
            f"{said}"
        )
    if status == 403:
        return (
            f"ClusterCalibration {name}: {where} refused to let the kubeconfig's user read it"
            f" ({answer}): it needs permission to `get` {CALIBRATION_RESOURCE}{said}"
        )
    return f"ClusterCalibration {name}: {where} answered {answer}{said}"


def invalid_lines(name: str, problems: list[str]) -> tuple[str, ...]:
    """One line per validation problem of a ClusterCalibration read from the cluster,
    each cut, at most `SERVER_PROBLEMS_MAX` of them."""
    lines = [f"ClusterCalibration {name}: {one_line(p)}" for p in problems[:SERVER_PROBLEMS_MAX]]
    if len(problems) > SERVER_PROBLEMS_MAX:
        more = len(problems) - SERVER_PROBLEMS_MAX
        lines.append(f"ClusterCalibration {name}: ... and {more} more problems")
    return tuple(lines)


def read_calibration(
    value: str, timeout_seconds: float = CALIBRATION_REQUEST_TIMEOUT_SECONDS
) -> tuple[ClusterCalibration | None, tuple[str, ...]]:
    """The ClusterCalibration a `--calibration` value names (`calibration_source`), or
    None and one line per problem: a file's lines start with its path (field paths as
    `status.records[0].gpuHours: ...`), a name's with `ClusterCalibration NAME:`."""
    source = calibration_source(value)
    if source is None:
        return None, (neither_line(value),)
    if isinstance(source, CalibrationFile):
        resource, problems = read_cluster_calibration(source.path)
        return resource, tuple(f"{source.path}: {problem}" for problem in problems)
    return read_named_calibration(source.name, timeout_seconds)


def read_named_calibration(
    name: str, timeout_seconds: float = CALIBRATION_REQUEST_TIMEOUT_SECONDS
) -> tuple[ClusterCalibration | None, tuple[str, ...]]:
    """The cluster's ClusterCalibration `name`, read through the current kubeconfig with a
    request of at most `timeout_seconds`, or None and the lines that say why."""
    from trainplan.cluster import ApiServerUnreachableError, KubernetesApiError, get_object_once

    connection = kubeconfig_connection(timeout_seconds)
    if isinstance(connection, str):
        return None, (f"ClusterCalibration {name}: {connection}",)
    try:
        document = asyncio.run(
            get_object_once(connection, API_VERSION, CLUSTER_CALIBRATION_KIND, "", name)
        )
    except ApiServerUnreachableError as error:
        return None, (unreachable_line(name, error.server, error.why),)
    except KubernetesApiError as error:
        line = api_error_line(name, connection.server, error.status, error.reason, error.message)
        return None, (line,)
    if document is None:
        return None, (not_found_line(name, connection.server),)
    try:
        return ClusterCalibration.model_validate(document), ()
    except ValidationError as error:
        return None, invalid_lines(name, format_validation_errors(error))


def kubeconfig_connection(timeout_seconds: float) -> Connection | str:
    """The current kubeconfig's connection (`KUBECONFIG`, else ~/.kube/config), read as
    `trainplan operator` reads it outside a cluster, or the one line that says why there
    is none."""
    import kopf
    import yaml

    from trainplan.controller.context import connection_from

    try:
        info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    except kopf.LoginError:
        return "the kubeconfig sets no current context (kubectl config use-context NAME)"
    except OSError as error:
        where = f" {one_line(str(error.filename))}" if error.filename else ""
        return f"cannot read the kubeconfig{where}: {error.strerror or error}"
    except yaml.YAMLError:
        return "the kubeconfig is not YAML"
    except KeyError as error:
        missing = one_line(str(error.args[0]) if error.args else "", 80)
        return f"the kubeconfig's current context cannot be resolved ({missing!r} is not defined)"
    except (AttributeError, TypeError, ValueError) as error:
        return f"the kubeconfig cannot be used: {one_line(str(error) or type(error).__name__)}"
    if info is None:
        return (
            "no file of that name, and no kubeconfig to read it from the cluster with"
            " (set KUBECONFIG, or write ~/.kube/config)"
        )
    if not info.server:
        return "the kubeconfig's current cluster has no server"
    return connection_from(info, timeout_seconds)
