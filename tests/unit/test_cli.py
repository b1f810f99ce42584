"""`trainplan plan`: table, JSON and YAML output, exit codes and error lines.

Driven through click's CliRunner (stdout and stderr kept apart), and once through the
installed console script in a real subprocess.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from trainplan.api import Plan, TrainingPlan
from trainplan.cli.main import main
from trainplan.planner import Catalog, plan

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
EXAMPLE_IDS = [path.stem for path in EXAMPLES]

# Rich reads these when it builds a console: a wide, colourless terminal keeps the table
# rows on one line each and the text free of escape codes.
CLI_ENV: dict[str, str | None] = {
    "COLUMNS": "200",
    "LINES": "50",
    "NO_COLOR": "1",
    "FORCE_COLOR": None,
    "TTY_COMPATIBLE": None,
    "TTY_INTERACTIVE": None,
}

# DESIGN.md "The plan", plus the documented additions.
PLAN_KEYS = {
    "gpuType",
    "gpus",
    "nodes",
    "gpusPerNode",
    "layout",
    "memory",
    "parameters",
    "stepSecondsRange",
    "durationSecondsRange",
    "gpuHoursRange",
    "flopsPerStep",
    "stepSeconds",
    "stepBreakdown",
    "tokensPerStep",
    "totalSteps",
    "computeSeconds",
    "overheadSeconds",
    "durationSeconds",
    "gpuHours",
    "mfu",
    "tokensPerSecondPerGPU",
    "reliability",
    "ruleOfThumbGPUs",
    "alternatives",
    "explanation",
}
LAYOUT_KEYS = {
    "tensor",
    "pipeline",
    "data",
    "zeroStage",
    "activationCheckpointing",
    "microBatchSize",
    "gradientAccumulationSteps",
    "globalBatchSize",
    "virtualPipelineStages",
    "sequenceParallel",
    "context",
    "expert",
    "expertTensor",
}
MEMORY_KEYS = {
    "capacityBytes",
    "totalBytes",
    "weightsBytes",
    "gradientsBytes",
    "optimizerBytes",
    "activationsBytes",
    "logitsBytes",
    "overheadBytes",
}
STEP_BREAKDOWN_KEYS = {
    "computeSeconds",
    "tensorCommSeconds",
    "contextCommSeconds",
    "expertCommSeconds",
    "dataCommSeconds",
    "pipelineBubbleSeconds",
    "pipelineCommSeconds",
    "optimizerSeconds",
}
RELIABILITY_KEYS = {
    "expectedInterruptions",
    "checkpointIntervalSteps",
    "restartSeconds",
    "checkpointSeconds",
    "checkpointBytes",
    "meanSecondsBetweenInterruptions",
    "lostWorkSeconds",
}
ALTERNATIVE_KEYS = {
    "gpus",
    "nodes",
    "layout",
    "stepSeconds",
    "durationSeconds",
    "gpuHours",
    "mfu",
    "memoryTotalBytes",
    "note",
}

SMALL_SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 8},
}
"""A quick, feasible spec; the error cases below each break one thing in it."""


def invoke(args: Sequence[str]) -> Result:
    """Run `trainplan ARGS` in-process; fail on any exception other than a clean exit."""
    result = CliRunner(env=CLI_ENV).invoke(main, list(args))
    if result.exc_info is not None and result.exc_info[0] is not SystemExit:
        raise AssertionError(
            f"trainplan {' '.join(args)} raised {result.exception!r} (exit {result.exit_code})"
        )
    assert "Traceback" not in result.output
    assert "Traceback" not in result.stderr
    return result


def resource(spec: dict[str, Any], name: str = "case") -> dict[str, Any]:
    """A whole TrainingPlan resource around `spec`."""
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": spec,
    }


def edited(*edits: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """SMALL_SPEC with `edits` applied, in order, to a deep copy."""
    spec = copy.deepcopy(SMALL_SPEC)
    for edit in edits:
        edit(spec)
    return spec


def write_yaml(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def load_example(path: Path) -> TrainingPlan:
    return TrainingPlan.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


_PLANS: dict[Path, Plan] = {}


def planned(path: Path, catalog: Catalog) -> Plan:
    """The planner's answer for an example, computed once per test session."""
    if path not in _PLANS:
        _PLANS[path] = plan(load_example(path).spec, catalog)
    return _PLANS[path]


def expected_document(path: Path, catalog: Catalog, source: Path | None = None) -> dict[str, Any]:
    """What `-o json` prints for the example `path` (read from `source`, if given): the
    plan's document led by the plan's name and the file it came from."""
    name = load_example(path).metadata.name
    labels = {"name": name, "source": str(source or path)}
    return labels | planned(path, catalog).to_document()


LABELS = {"name", "source"}


def without_labels(document: dict[str, Any]) -> dict[str, Any]:
    """A printed plan without the name and source `-o json` leads it with."""
    return {key: value for key, value in document.items() if key not in LABELS}


def stderr_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def panels(output: str) -> list[list[str]]:
    """The lines of each rich panel (from its ╭ top border to its ╰ bottom border)."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("╭"):
            current = [line]
        elif current is not None:
            current.append(line)
            if line.startswith("╰"):
                found.append(current)
                current = None
    return found


def cell_texts(panel: list[str]) -> list[str]:
    """Each panel line with the panel border and table rules stripped."""
    return [line.strip("│ ").strip() for line in panel]


# --------------------------------------------------------------------------- table


def test_table_for_every_example(catalog: Catalog) -> None:
    result = invoke(["plan", *map(str, EXAMPLES)])

    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    found = panels(result.stdout)
    assert len(found) == len(EXAMPLES)
    for path, panel in zip(EXAMPLES, found, strict=True):
        example = load_example(path)
        expected = planned(path, catalog)
        title = panel[0]
        assert f"{example.metadata.name}: {expected.gpus:,} x {expected.gpu_type}," in title
        texts = cell_texts(panel)
        for table_title in ("Layout", "Memory per GPU", "Step time", "Run"):
            assert texts.count(table_title) == 1, (path.stem, table_title)
        rule = [line for line in panel if "Rule of thumb" in line]
        assert len(rule) == 1
        assert f"{expected.rule_of_thumb_gpus:,} GPUs for the same duration" in rule[0]
        assert f"this plan: {expected.gpus:,}" in rule[0]
    # The explanation follows each panel, one bullet per line.
    assert result.stdout.count("• Goal:") == len(EXAMPLES)


def test_the_table_can_be_checked_by_hand() -> None:
    """Parameters and tokens shown; recomputation named as such, never "ckpt";
    communication labelled exposed; counts with thousands separators and the right
    number."""
    result = invoke(["plan", str(EXAMPLES_DIR / "llama2-7b-deadline.yaml")])

    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "ckpt" not in text
    assert "Activation recomputation" in text
    assert "Parameters │ 6,738,415,616 (6.74 billion parameters)" in text
    assert "(2 trillion tokens)" in text
    assert "exposed data-parallel communication" in text
    assert "exposed tensor-parallel communication" in text
    assert "Global batch │ 1,024 = micro 4 x data 256 x accumulation 1" in text
    assert re.search(r"; \d{1,3}(,\d{3})* layouts priced\.", text)
    assert "Checkpoint every │ 2,422 steps" in text
    assert "256 = 32 nodes x 8" in text
    assert "no-recompute" in text


# --------------------------------------------------------------------------- json, yaml


@pytest.mark.parametrize("path", EXAMPLES, ids=EXAMPLE_IDS)
def test_json_is_the_plan_document_led_by_name_and_source(path: Path, catalog: Catalog) -> None:
    result = invoke(["plan", "-o", "json", str(path)])

    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == expected_document(path, catalog)
    assert list(printed)[:2] == ["name", "source"]
    assert without_labels(printed) == planned(path, catalog).to_document()


def test_json_keys_are_the_documented_ones() -> None:
    path = EXAMPLES_DIR / "llama2-7b-deadline.yaml"
    result = invoke(["plan", "--output", "json", str(path)])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)

    assert set(document) == PLAN_KEYS | LABELS
    assert set(document["layout"]) == LAYOUT_KEYS
    assert set(document["memory"]) == MEMORY_KEYS
    assert set(document["stepBreakdown"]) == STEP_BREAKDOWN_KEYS
    assert set(document["reliability"]) == RELIABILITY_KEYS
    assert document["alternatives"], "this example has runner-ups"
    for alternative in document["alternatives"]:
        assert set(alternative) == ALTERNATIVE_KEYS
        assert set(alternative["layout"]) == LAYOUT_KEYS
    assert document["explanation"]
    assert all(isinstance(line, str) for line in document["explanation"])


def test_json_with_several_files_is_a_list_in_file_order(catalog: Catalog) -> None:
    chosen = [EXAMPLES_DIR / "tiny-local.yaml", EXAMPLES_DIR / "v100-fp16.yaml"]
    result = invoke(["plan", "-o", "json", *map(str, chosen)])

    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert isinstance(document, list)
    assert document == [expected_document(path, catalog) for path in chosen]


def test_yaml_documents_equal_the_json() -> None:
    chosen = [str(EXAMPLES_DIR / "tiny-local.yaml"), str(EXAMPLES_DIR / "llama2-70b-pinned.yaml")]
    as_yaml = invoke(["plan", "-o", "yaml", *chosen])
    as_json = invoke(["plan", "-o", "json", *chosen])

    assert as_yaml.exit_code == as_json.exit_code == 0
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)


def test_yaml_single_file_is_one_document() -> None:
    path = str(EXAMPLES_DIR / "v100-fp16.yaml")
    as_yaml = invoke(["plan", "-o", "yaml", path])
    as_json = invoke(["plan", "-o", "json", path])

    assert as_yaml.exit_code == as_json.exit_code == 0
    assert list(yaml.safe_load_all(as_yaml.stdout)) == [json.loads(as_json.stdout)]
    assert isinstance(json.loads(as_json.stdout), dict)


@pytest.mark.parametrize("name", ["llama2-7b-deadline", "tiny-local"])
def test_bare_spec_plans_like_the_whole_resource(name: str, tmp_path: Path) -> None:
    whole = EXAMPLES_DIR / f"{name}.yaml"
    bare = write_yaml(tmp_path / "bare.yaml", yaml.safe_load(whole.read_text())["spec"])

    from_whole = invoke(["plan", "-o", "json", str(whole)])
    from_bare = invoke(["plan", "-o", "json", str(bare)])

    assert from_whole.exit_code == from_bare.exit_code == 0
    printed_bare, printed_whole = json.loads(from_bare.stdout), json.loads(from_whole.stdout)
    assert without_labels(printed_bare) == without_labels(printed_whole)
    # A bare spec has no metadata.name: the file's stem names it.
    assert (printed_bare["name"], printed_bare["source"]) == ("bare", str(bare))
    assert (printed_whole["name"], printed_whole["source"]) == (name, str(whole))


def test_json_file_input(tmp_path: Path, catalog: Catalog) -> None:
    source = EXAMPLES_DIR / "tiny-local.yaml"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(yaml.safe_load(source.read_text())), encoding="utf-8")

    result = invoke(["plan", "-o", "json", str(path)])

    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == expected_document(source, catalog, source=path)


# --------------------------------------------------------------------------- invalid input

InvalidCase = tuple[Callable[[Path], Path], tuple[str, ...]]


def _doc(document: Any) -> Callable[[Path], Path]:
    return lambda path: write_yaml(path, document)


def _text(text: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_text(text, encoding="utf-8")
        return path

    return make


def _bytes(data: bytes) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_bytes(data)
        return path

    return make


def _missing(path: Path) -> Path:
    return path.parent / "does-not-exist.yaml"


def _set(section: str, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        spec.setdefault(section, {}).update(fields)

    return edit


def _replace(section: str, value: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        spec[section] = value

    return edit


def _add_top(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        spec[key] = value

    return edit


EXPLICIT_SHAPE = {
    "layers": 4,
    "hiddenSize": 320,
    "attentionHeads": 10,
    "vocabSize": 256,
    "sequenceLength": 128,
}

INVALID: dict[str, InvalidCase] = {
    "unknown-field-in-resource": (
        _doc(resource(edited(_add_top("foo", 1)))),
        ("spec.foo", "Extra inputs are not permitted"),
    ),
    "unknown-field-in-bare-spec": (
        _doc(edited(_add_top("foo", 1))),
        ("foo: Extra inputs are not permitted",),
    ),
    "unknown-nested-field": (
        _doc(resource(edited(_set("batch", microBatch=2)))),
        ("spec.batch.microBatch",),
    ),
    "tokens-and-samples": (
        _doc(resource(edited(_set("data", tokens=1.0e9, samples=1000)))),
        ("spec.data", "tokens or samples"),
    ),
    "gpus-and-deadline": (
        _doc(resource(edited(_set("objective", gpus=8, deadline="2d")))),
        ("spec.objective", "gpus or deadline"),
    ),
    "bad-duration": (
        _doc(resource(edited(_replace("objective", {"deadline": "3x"})))),
        ("spec.objective.deadline", "'3x'"),
    ),
    "kv-heads-not-dividing-heads-explicit": (
        _doc(resource(edited(_replace("model", {**EXPLICIT_SHAPE, "kvHeads": 4})))),
        ("spec.model", "kvHeads (4)", "attentionHeads (10)"),
    ),
    "kv-heads-not-dividing-preset-heads": (
        _doc(resource(edited(_set("model", kvHeads=5)))),
        ("spec.model", "kvHeads", "5"),
    ),
    "unknown-preset": (
        _doc(resource(edited(_set("model", preset="llama2-7bb")))),
        ("spec.model.preset", "'llama2-7bb'", "did you mean 'llama2-7b'?"),
    ),
    "unknown-gpu-type": (
        _doc(resource(edited(_set("hardware", gpuType="A100-SXM4-80GBB")))),
        ("spec.hardware.gpuType", "'A100-SXM4-80GBB'", "did you mean 'A100-SXM4-80GB'?"),
    ),
    "bf16-on-v100": (
        _doc(
            resource(
                edited(
                    _set("hardware", gpuType="V100-SXM2-32GB"),
                    _replace("training", {"precision": "bf16"}),
                )
            )
        ),
        ("spec.training.precision", "'bf16'", "fp16", "fp32"),
    ),
    "tensor-pin-not-dividing-preset-heads": (
        _doc(resource(edited(_replace("parallelism", {"tensor": 3}), _set("objective", gpus=24)))),
        ("spec.parallelism.tensor", "3", "attentionHeads (32)"),
    ),
    "missing-file": (_missing, ("cannot read",)),
    "not-yaml-syntax": (_text("model: [1, 2\nbatch: }\n"), ("not YAML",)),
    "not-yaml-binary": (_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"), ()),
    "yaml-list": (_text("- model: {preset: tiny}\n- 2\n"), ("expected a mapping", "list")),
    "empty-file": (_text(""), ("no document",)),
    "duplicate-key-yaml": (
        _text("model: {preset: tiny}\nmodel: {preset: llama2-7b}\n"),
        ("not YAML or JSON", "the key 'model' is given twice", "line 2"),
    ),
    "duplicate-key-json": (
        _text('{"data": {"tokens": 1e9, "tokens": 2e9}}'),
        ("the key 'tokens' is given twice",),
    ),
    "over-one-mib": (_text("# " + "x" * (1 << 20) + "\n"), ("larger than 1048576 bytes",)),
    "comments-only": (_text("# nothing here\n---\n"), ("no document",)),
}


@pytest.mark.parametrize(("make", "expected"), INVALID.values(), ids=INVALID.keys())
def test_invalid_input_exits_2_with_one_prefixed_line_per_problem(
    make: Callable[[Path], Path], expected: tuple[str, ...], tmp_path: Path
) -> None:
    path = make(tmp_path / "plan.yaml")

    result = invoke(["plan", str(path)])

    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = stderr_lines(result)
    assert lines, "no problem reported"
    for line in lines:
        assert line.startswith(f"{path}: "), f"not prefixed with the file name: {line!r}"
    problems = "\n".join(lines)
    for text in expected:
        assert text in problems
    assert "no feasible plan" not in problems
    assert result.stdout.strip() == ""


def test_several_problems_each_on_its_own_line(tmp_path: Path) -> None:
    spec = edited(_add_top("foo", 1))
    spec["objective"] = {"deadline": "3x"}
    path = write_yaml(tmp_path / "two.yaml", resource(spec))

    result = invoke(["plan", str(path)])

    assert result.exit_code == 2
    lines = stderr_lines(result)
    assert len(lines) == 2
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert any(f"{path}: spec.foo: " in line for line in lines)
    assert any(f"{path}: spec.objective.deadline: " in line for line in lines)


def test_each_document_of_a_multi_document_file_is_labelled(tmp_path: Path) -> None:
    good = resource(copy.deepcopy(SMALL_SPEC), "good")
    bad = resource(edited(_set("model", preset="llama2-7bb")), "bad")
    path = tmp_path / "multi.yaml"
    path.write_text(yaml.safe_dump_all([good, bad], sort_keys=False), encoding="utf-8")

    result = invoke(["plan", "-o", "json", str(path)])

    assert result.exit_code == 2
    assert [line.split(": ")[0] for line in stderr_lines(result)] == [f"{path}[1]"]
    # One file of two documents: a list of two, each with its index in the file.
    first, second = json.loads(result.stdout)
    assert (first["name"], first["source"], first["document"], first["gpus"]) == (
        "good",
        str(path),
        0,
        8,
    )
    assert (second["name"], second["source"], second["document"]) == ("bad", str(path), 1)
    assert second["error"].startswith("invalid input: spec.model.preset: ")
    assert second["reasons"][0].startswith("spec.model.preset: ")


# --------------------------------------------------------------------------- infeasible

LLAMA70B_ON_40GB = resource(
    {
        "model": {"preset": "llama2-70b"},
        "data": {"tokens": 1.0e9},
        "batch": {"globalBatchSize": 64},
        "hardware": {"gpuType": "A100-SXM4-40GB", "gpusPerNode": 8},
        "objective": {"gpus": 8},
    },
    "too-big",
)
LLAMA7B_IN_TWO_DAYS = resource(
    {
        "model": {"preset": "llama2-7b"},
        "data": {"tokens": 2.0e12},
        "batch": {"globalBatchSize": 1024},
        "objective": {"deadline": "2d", "maxGPUs": 256},
    },
    "too-soon",
)


def test_model_that_cannot_fit_exits_3(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "too-big.yaml", LLAMA70B_ON_40GB)

    result = invoke(["plan", str(path)])

    assert result.exit_code == 3
    assert result.stdout.strip() == ""
    assert stderr_lines(result)[0] == f"{path}: no feasible plan"
    assert "GiB" in result.stderr
    assert "A100-SXM4-40GB has 40.0 GiB" in result.stderr


def test_deadline_that_cannot_be_met_exits_3(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "too-soon.yaml", LLAMA7B_IN_TWO_DAYS)

    result = invoke(["plan", "-o", "json", str(path)])

    assert result.exit_code == 3
    assert stderr_lines(result)[0] == f"{path}: no feasible plan"
    assert "deadline is 2d" in result.stderr
    # One file: one object, with the reasons instead of a plan.
    printed = json.loads(result.stdout)
    assert set(printed) == {"name", "source", "error", "reasons"}
    assert (printed["name"], printed["source"]) == ("too-soon", str(path))
    assert printed["error"].startswith("no feasible plan: ")
    assert any("deadline is 2d" in reason for reason in printed["reasons"])
    assert all(reason in printed["error"] for reason in printed["reasons"])
    assert "256 GPUs" in result.stderr


@pytest.mark.parametrize("invalid_first", [True, False], ids=["invalid-first", "infeasible-first"])
def test_invalid_and_infeasible_together_exit_2(invalid_first: bool, tmp_path: Path) -> None:
    infeasible = write_yaml(tmp_path / "too-big.yaml", LLAMA70B_ON_40GB)
    invalid = write_yaml(tmp_path / "typo.yaml", resource(edited(_add_top("foo", 1))))
    files = [invalid, infeasible] if invalid_first else [infeasible, invalid]

    result = invoke(["plan", *map(str, files)])

    assert result.exit_code == 2
    assert f"{invalid}: spec.foo: " in result.stderr
    assert f"{infeasible}: no feasible plan" in result.stderr


def test_valid_and_infeasible_together_exit_3_and_print_the_valid_plan(
    tmp_path: Path, catalog: Catalog
) -> None:
    infeasible = write_yaml(tmp_path / "too-big.yaml", LLAMA70B_ON_40GB)
    valid = EXAMPLES_DIR / "tiny-local.yaml"

    result = invoke(["plan", "-o", "json", str(valid), str(infeasible)])

    assert result.exit_code == 3
    printed, failed = json.loads(result.stdout)
    assert printed == expected_document(valid, catalog)
    assert (failed["name"], failed["source"]) == ("too-big", str(infeasible))
    assert "A100-SXM4-40GB has 40.0 GiB" in failed["error"]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_several_files_are_always_a_list_with_each_failure_named(
    output: str, tmp_path: Path, catalog: Catalog
) -> None:
    valid = EXAMPLES_DIR / "tiny-local.yaml"
    typo = write_yaml(tmp_path / "typo.yaml", edited(_add_top("foo", 1)))  # a bare spec

    both = invoke(["plan", "-o", output, str(typo), str(valid)])
    alone = invoke(["plan", "-o", output, str(typo)])

    assert both.exit_code == alone.exit_code == 2
    load = json.loads if output == "json" else yaml.safe_load
    failed, printed = load(both.stdout)
    assert printed == expected_document(valid, catalog)
    assert (failed["name"], failed["source"]) == ("typo", str(typo))
    assert failed["error"].startswith("invalid input: foo: ")
    assert failed["reasons"] == [failed["error"].removeprefix("invalid input: ")]
    assert load(alone.stdout) == failed


# --------------------------------------------------------------------------- help, usage


def test_help() -> None:
    top = invoke(["--help"])
    sub = invoke(["plan", "--help"])

    assert top.exit_code == sub.exit_code == 0
    assert "plan" in top.stdout
    assert "FILES" in sub.stdout
    assert "table|json|yaml" in sub.stdout
    assert "2 when any input is invalid" in " ".join(sub.stdout.split())


def test_plan_needs_a_file_and_a_known_output_format() -> None:
    assert invoke(["plan"]).exit_code == 2
    path = str(EXAMPLES_DIR / "tiny-local.yaml")
    assert invoke(["plan", "-o", "xml", path]).exit_code == 2


# --------------------------------------------------------------------------- console script


def test_console_script_in_a_subprocess(tmp_path: Path, catalog: Catalog) -> None:
    script = Path(sys.executable).parent / "trainplan"
    valid = EXAMPLES_DIR / "tiny-local.yaml"
    invalid = tmp_path / "list.yaml"
    invalid.write_text("- 1\n- 2\n", encoding="utf-8")

    completed = subprocess.run(
        [str(script), "plan", "-o", "json", str(valid), str(invalid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stdout + completed.stderr
    printed, failed = json.loads(completed.stdout)
    assert printed == expected_document(valid, catalog)
    assert failed == {
        "name": "list",
        "source": str(invalid),
        "error": "invalid input: (root): expected a mapping, got list",
        "reasons": ["(root): expected a mapping, got list"],
    }
    assert completed.stderr.splitlines() == [f"{invalid}: (root): expected a mapping, got list"]


def test_ctrl_c_before_a_command_handles_signals_exits_130(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while a subcommand's modules import (before it installs its own handlers)
    ends with one line and the shell's status for SIGINT, not click's "Aborted!"."""
    import click

    import trainplan.cli.main as cli_main

    @click.command()
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "load_command", lambda name: interrupted)
    monkeypatch.setattr(cli_main.main, "commands", {})  # forget commands loaded earlier
    result = CliRunner().invoke(cli_main.main, ["plan"])
    assert result.exit_code == cli_main.INTERRUPTED_EXIT_CODE == 130
    assert result.stderr.strip() == "trainplan: interrupted"
    assert "Aborted" not in result.output
