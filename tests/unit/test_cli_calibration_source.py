"""`trainplan plan --calibration FILE|NAME`: which one a value means, the kubeconfig's
problems and the API server's failures, each one bounded line and exit 2 (the reads
that succeed are in tests/integration/test_plan_calibration_by_name.py)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from pydantic import ValidationError

from trainplan.api import HardwareSpec, is_calibration_name
from trainplan.cli.calibration_source import (
    CALIBRATION_REQUEST_TIMEOUT_SECONDS,
    SERVER_PROBLEMS_MAX,
    SERVER_TEXT_MAX_CHARS,
    CalibrationFile,
    CalibrationName,
    api_error_line,
    calibration_source,
    invalid_lines,
    not_found_line,
    one_line,
    read_named_calibration,
)
from trainplan.cli.main import main

SPEC = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "objective": {"gpus": 8},
}
SERVER = "https://10.0.0.1:6443"


def kubeconfig(path: Path, server: str, **changes: Any) -> Path:
    """A kubeconfig at `path` for `server`, with its top-level fields changed."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    } | changes
    path.write_text(yaml.safe_dump({k: v for k, v in config.items() if v is not None}))
    return path


def run_plan(tmp_path: Path, value: str, kubeconfig_path: Path | None) -> Result:
    """`trainplan plan --calibration VALUE` on a small spec, with only that kubeconfig."""
    spec_file = tmp_path / "plan.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    env = {
        "KUBECONFIG": None if kubeconfig_path is None else str(kubeconfig_path),
        "HOME": str(tmp_path),
    }
    return CliRunner().invoke(main, ["plan", "--calibration", value, str(spec_file)], env=env)


def the_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    return line


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- which one a value means ----------------------------------------------------------------


def test_an_existing_file_is_a_file_even_when_it_reads_as_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a100-east").write_text("{}")
    Path("cal.yaml").write_text("{}")
    Path("a100-west").mkdir()
    Path("Dir").mkdir()
    assert calibration_source("a100-east") == CalibrationFile(Path("a100-east"))
    assert calibration_source("cal.yaml") == CalibrationFile(Path("cal.yaml"))
    # A directory is no calibration file: a name, when it is one; else the file reader
    # says what is wrong with it.
    assert calibration_source("a100-west") == CalibrationName("a100-west")
    assert calibration_source("Dir") == CalibrationFile(Path("Dir"))
    # A file that does not exist but could be a name is a name.
    assert calibration_source("a100-east.yaml") == CalibrationName("a100-east.yaml")


@pytest.mark.parametrize(
    "value",
    ["", "A100-east", "./cal.yaml", "cal/x", "-a", "a-", "a_b", "a b", "é", "a" * 254, "a" * 5000],
)
def test_neither_a_file_nor_a_name(value: str, tmp_path: Path) -> None:
    assert calibration_source(str(tmp_path / "missing" / "x.yaml")) is None
    assert calibration_source(value) is None


@pytest.mark.parametrize(
    "value", ["a", "a100-east", "a.b", "a..b", "0", "a" * 253, "A", "a-", "a\n", "x/y", "", "-"]
)
def test_a_name_is_what_hardware_calibration_accepts(value: str) -> None:
    try:
        HardwareSpec.model_validate({"calibration": value})
        accepted = True
    except ValidationError:
        accepted = False
    assert is_calibration_name(value) == accepted


# --- the lines -------------------------------------------------------------------------------


def test_server_text_becomes_one_bounded_line() -> None:
    assert one_line("a\nb\t c\x1b[31m d") == "a b c [31m d"
    long = one_line("word " * 10_000)
    assert len(long) == SERVER_TEXT_MAX_CHARS
    assert long.endswith("...")
    assert one_line("") == ""


def test_forbidden_and_unauthorized_say_which_permission() -> None:
    forbidden = api_error_line("a100-east", SERVER, 403, "Forbidden", "no\n" + "x" * 5000)
    assert forbidden.startswith(f"ClusterCalibration a100-east: the API server at {SERVER}")
    assert "(403 Forbidden)" in forbidden
    assert "`get` clustercalibrations.trainplan.dev" in forbidden
    assert "\n" not in forbidden
    assert len(forbidden) < 2 * SERVER_TEXT_MAX_CHARS + 200
    unauthorized = api_error_line("a100-east", SERVER, 401, "Unauthorized", "")
    assert "did not accept the kubeconfig's credentials (401 Unauthorized)" in unauthorized
    assert "`get` clustercalibrations.trainplan.dev" in unauthorized
    assert not unauthorized.endswith("it said: ")
    other = api_error_line("a100-east", SERVER, 500, "InternalError" * 100, "etcd timed out")
    reason = other.split("answered 500 ")[1].split("; it said: ")[0]
    assert reason.startswith("InternalErrorInternalError")
    assert reason.endswith("...")
    assert len(reason) <= 40
    assert other.endswith("; it said: etcd timed out")


def test_not_found_says_the_name_and_that_no_file_has_it() -> None:
    assert not_found_line("a100-east", SERVER) == (
        f"ClusterCalibration a100-east: not found in the cluster at {SERVER}, and no file of"
        " that name exists either"
    )


def test_the_problems_of_a_resource_from_the_server_are_bounded() -> None:
    problems = [f"status.records[{i}].gpuHours: {'y' * 1000}" for i in range(50)]
    lines = invalid_lines("a100-east", problems)
    assert len(lines) == SERVER_PROBLEMS_MAX + 1
    assert (
        lines[-1]
        == f"ClusterCalibration a100-east: ... and {50 - SERVER_PROBLEMS_MAX} more problems"
    )
    assert all(len(line) < SERVER_TEXT_MAX_CHARS + 40 for line in lines)


# --- the command -----------------------------------------------------------------------------


def test_a_value_that_is_neither_is_one_line(tmp_path: Path) -> None:
    line = the_line(run_plan(tmp_path, "./missing.yaml", None))
    assert line.startswith("--calibration ./missing.yaml: no such file, and not a")


def test_without_a_kubeconfig_a_name_says_how_to_give_one(tmp_path: Path) -> None:
    line = the_line(run_plan(tmp_path, "a100-east", None))
    assert line.startswith("ClusterCalibration a100-east: no file of that name, and no kubeconfig")
    assert "KUBECONFIG" in line


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"current-context": None}, "the kubeconfig sets no current context"),
        ({"current-context": "y"}, "current context cannot be resolved ('y' is not defined)"),
        ({"clusters": [{"name": "c", "cluster": {}}]}, "current cluster has no server"),
    ],
)
def test_a_kubeconfig_without_a_usable_context_is_one_line(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    path = kubeconfig(tmp_path / "config", SERVER, **changes)
    line = the_line(run_plan(tmp_path, "a100-east", path))
    assert line.startswith("ClusterCalibration a100-east: ")
    assert expected in line


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    line = the_line(run_plan(tmp_path, "a100-east", tmp_path / "nowhere"))
    missing = tmp_path / "nowhere"
    assert line == (
        f"ClusterCalibration a100-east: cannot read the kubeconfig {missing}:"
        " No such file or directory"
    )


def test_an_unreachable_server_is_named(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{closed_port()}"
    line = the_line(run_plan(tmp_path, "a100-east", kubeconfig(tmp_path / "config", server)))
    assert line.startswith(
        f"ClusterCalibration a100-east: cannot read it from the API server at {server}: "
    )
    assert "Cannot connect" in line


def test_a_server_without_a_scheme_is_refused(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", "10.0.0.1:6443")
    line = the_line(run_plan(tmp_path, "a100-east", path))
    assert line.endswith("at 10.0.0.1:6443: not an http:// or https:// URL")


def test_the_request_is_bounded_by_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert 1 <= CALIBRATION_REQUEST_TIMEOUT_SECONDS <= 30
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        server = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", server)))
        started = time.monotonic()
        resource, lines = read_named_calibration("a100-east", timeout_seconds=0.3)
        elapsed = time.monotonic() - started
    assert resource is None
    assert lines == (
        f"ClusterCalibration a100-east: cannot read it from the API server at {server}:"
        " no answer within 0.3 s",
    )
    assert elapsed < 3


class _HtmlPage(http.server.BaseHTTPRequestHandler):
    """A proxy's page where the API server should be."""

    def do_GET(self) -> None:
        body = b"<html>" + b"x" * 10_000 + b"</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HtmlPage)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_that_is_not_json_is_one_line(tmp_path: Path, html_server: str) -> None:
    line = the_line(run_plan(tmp_path, "a100-east", kubeconfig(tmp_path / "config", html_server)))
    assert line == (
        f"ClusterCalibration a100-east: cannot read it from the API server at {html_server}:"
        " its answer is not JSON"
    )
