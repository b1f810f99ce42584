"""`trainplan render`: YAML documents on stdout, problems on stderr, the exit codes of
`trainplan plan` (0, 2 invalid input, 3 infeasible).

Driven through click's CliRunner on `trainplan.cli.render_command.command` (stdout and
stderr kept apart); the error lines are compared with those of `trainplan plan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.rendered_examples import ROOT
from trainplan.cli.main import main
from trainplan.cli.render_command import RenderError, command, render_documents
from trainplan.planner import Catalog

EXAMPLE = ROOT / "deploy" / "examples" / "llama2-7b-deadline.yaml"

SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 16},
    "job": {"image": "registry.example/train:1.0"},
}
"""Quick and feasible: 16 GPUs, 2 nodes."""

TOO_BIG: dict[str, Any] = {
    "model": {"preset": "llama2-70b"},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-40GB", "gpusPerNode": 8},
    "objective": {"gpus": 8},
    "job": {"image": "registry.example/train:1.0"},
}
"""Llama 2 70B on 8 A100-40GB GPUs: does not fit, no feasible plan."""


def invoke(args: Sequence[str]) -> Result:
    """`trainplan render ARGS` in-process; fails on any exception but a clean exit."""
    result = CliRunner().invoke(command, list(args))
    if result.exc_info is not None and result.exc_info[0] is not SystemExit:
        raise AssertionError(f"render {args} raised {result.exception!r}")
    assert "Traceback" not in result.output
    return result


def write_yaml(path: Path, *documents: Any) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return path


def resource(spec: dict[str, Any], name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "trainplan.dev/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": metadata,
        "spec": spec,
    }


def stderr_lines(result: Result) -> list[str]:
    return result.stderr.splitlines()


def test_an_example_renders_as_yaml_documents(catalog: Catalog) -> None:
    result = invoke([str(EXAMPLE)])

    assert result.exit_code == 0
    assert result.stderr == ""
    assert result.stdout.startswith(f"---\n# Source: {EXAMPLE}\n# TrainingPlan default/")
    documents = list(yaml.safe_load_all(result.stdout))
    assert [document["kind"] for document in documents] == ["Service", "Job"]
    assert all(document["metadata"]["name"] == "llama2-7b-deadline" for document in documents)
    assert all("ownerReferences" not in document["metadata"] for document in documents)
    assert result.stdout == render_documents(EXAMPLE, catalog)


def test_output_option_accepts_yaml_only() -> None:
    assert invoke(["-o", "yaml", str(EXAMPLE)]).exit_code == 0
    rejected = invoke(["-o", "json", str(EXAMPLE)])
    assert rejected.exit_code == 2
    assert "json" in rejected.stderr


def test_names_and_namespaces_come_from_metadata_or_the_file(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "two.yaml",
        resource(SPEC, "first", "research"),
        resource({**SPEC, "job": {**SPEC["job"], "launcher": "JobSet"}}, "second"),
    )
    bare = write_yaml(tmp_path / "bare-spec.yaml", SPEC)

    result = invoke([str(path), str(bare)])

    assert result.exit_code == 0
    documents = list(yaml.safe_load_all(result.stdout))
    assert [(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]) for d in documents] == [
        ("Service", "research", "first"),
        ("Job", "research", "first"),
        ("JobSet", "default", "second"),
        ("Service", "default", "bare-spec"),
        ("Job", "default", "bare-spec"),
    ]
    comments = [line for line in result.stdout.splitlines() if line.startswith("# Source: ")]
    assert comments == [
        f"# Source: {path}[0]",
        f"# Source: {path}[1]",
        f"# Source: {bare}",
    ]


def test_invalid_input_exits_2_with_the_same_lines_as_plan(tmp_path: Path) -> None:
    broken = resource({**SPEC, "batch": {"globalBatchSize": 0}, "foo": 1}, "broken")
    path = write_yaml(tmp_path / "broken.yaml", broken)

    result = invoke([str(path)])
    planned = CliRunner().invoke(main, ["plan", str(path)])

    assert result.exit_code == planned.exit_code == 2
    assert result.stdout == ""
    assert stderr_lines(result) == stderr_lines(planned)
    assert any(line.startswith(f"{path}: spec.foo: ") for line in stderr_lines(result))


def test_a_spec_the_launcher_cannot_render_exits_2(tmp_path: Path) -> None:
    no_image = {key: value for key, value in SPEC.items() if key != "job"}
    path = write_yaml(tmp_path / "no-image.yaml", resource(no_image, "no-image"))
    bare = write_yaml(tmp_path / "bare.yaml", {**SPEC, "job": {"framework": "deepspeed"}})

    result = invoke([str(path), str(bare)])

    assert result.exit_code == 2
    assert result.stdout == ""
    assert stderr_lines(result) == [
        f"{path}: spec.job.image: required to render the training job (a container image)",
        f"{bare}: job.image: required to render the training job (a container image)",
        f"{bare}: job.command: framework deepspeed needs the training script that calls "
        f"DeepSpeed (e.g. [python, train.py]); DeepSpeed is a library, not a program",
    ]


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    result = invoke([str(missing)])

    assert result.exit_code == 2
    assert stderr_lines(result) == [f"{missing}: cannot read: No such file or directory"]


def test_an_infeasible_plan_exits_3_with_the_same_lines_as_plan(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "too-big.yaml", resource(TOO_BIG, "too-big"))

    result = invoke([str(path)])
    planned = CliRunner().invoke(main, ["plan", str(path)])

    assert result.exit_code == planned.exit_code == 3
    assert result.stdout == ""
    assert stderr_lines(result)[0] == f"{path}: no feasible plan"
    assert stderr_lines(result) == stderr_lines(planned)


def test_a_renderable_and_an_infeasible_plan_exit_3_and_print_the_renderable_one(
    tmp_path: Path,
) -> None:
    good = write_yaml(tmp_path / "good.yaml", resource(SPEC, "good"))
    bad = write_yaml(tmp_path / "too-big.yaml", resource(TOO_BIG, "too-big"))

    result = invoke([str(bad), str(good)])

    assert result.exit_code == 3
    kinds = [document["kind"] for document in yaml.safe_load_all(result.stdout)]
    assert kinds == ["Service", "Job"]


@pytest.mark.parametrize("invalid_first", [True, False])
def test_invalid_outranks_infeasible(invalid_first: bool, tmp_path: Path) -> None:
    bad = write_yaml(tmp_path / "too-big.yaml", resource(TOO_BIG, "too-big"))
    no_image = write_yaml(
        tmp_path / "no-image.yaml", resource({**SPEC, "job": {"framework": "reference"}}, "x")
    )
    files = [no_image, bad] if invalid_first else [bad, no_image]

    assert invoke([str(path) for path in files]).exit_code == 2


def test_render_documents_raises_with_the_status_and_lines(
    tmp_path: Path, catalog: Catalog
) -> None:
    path = write_yaml(tmp_path / "too-big.yaml", resource(TOO_BIG, "too-big"))

    with pytest.raises(RenderError) as caught:
        render_documents(path, catalog)

    assert caught.value.status == 3
    assert caught.value.lines[0] == f"{path}: no feasible plan"


def test_help() -> None:
    result = invoke(["--help"])

    assert result.exit_code == 0
    assert "FILES" in result.stdout
    assert "Exit status" in result.stdout
