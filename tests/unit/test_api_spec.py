"""The TrainingPlan spec: camelCase names, strictness, cross-field rules and parsing."""

import copy
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from pydantic import ValidationError

from trainplan.api import (
    API_VERSION,
    DEFAULT_COMMAND,
    ApiModel,
    BatchSpec,
    DataSpec,
    EnvVar,
    GPUBudget,
    HardwareSpec,
    JobSpec,
    ModelSpec,
    ObjectiveSpec,
    ParallelismSpec,
    ReliabilitySpec,
    Toleration,
    TrainingPlan,
    TrainingPlanSpec,
    TrainingSpec,
    format_validation_errors,
    parse_training_plan_spec,
)


def full_spec() -> dict[str, Any]:
    """A spec document with every field set, in the API's camelCase."""
    return {
        "model": {
            "preset": "llama2-7b",
            "parameters": 6.74e9,
            "layers": 32,
            "hiddenSize": 4096,
            "attentionHeads": 32,
            "kvHeads": 8,
            "ffnHiddenSize": 11008,
            "gatedMLP": True,
            "vocabSize": 32000,
            "sequenceLength": 4096,
            "tiedEmbeddings": False,
        },
        "data": {"tokens": 2.0e12, "epochs": 1.0},
        "batch": {"globalBatchSize": 1024, "microBatchSize": 1},
        "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
        "objective": {"gpus": 512, "maxGPUs": 4096},
        "parallelism": {
            "tensor": 8,
            "pipeline": 4,
            "data": 16,
            "virtualPipelineStages": 2,
            "sequenceParallel": True,
            "zeroStage": 1,
            "activationCheckpointing": "selective",
        },
        "training": {
            "method": "pretrain",
            "precision": "bf16",
            "optimizer": "adamw",
            "attention": "flash",
        },
        "reliability": {
            "checkpointIntervalSteps": 500,
            "checkpointSeconds": 60.0,
            "maxRestarts": 10,
            "interruptionsPerGPUHour": 1e-5,
            "restartSeconds": 600.0,
        },
        "job": {
            "image": "registry.example/train:1.0",
            "command": ["python", "-m", "trainplan.runtime.train"],
            "args": ["--seed", "1"],
            "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
            "resources": {"cpu": "32", "memory": "256Gi"},
            "nodeSelector": {"pool": "a100"},
            "tolerations": [
                {
                    "key": "nvidia.com/gpu",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                    "tolerationSeconds": 30,
                    "value": "x",
                }
            ],
            "checkpointVolumeClaim": "ckpt-pvc",
            "launcher": "JobSet",
            "framework": "megatron",
            "queueName": "team-a",
            "suspend": False,
            "metricsPort": 9400,
            "securityContext": {
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 1000,
                "runAsNonRoot": True,
            },
            "shmSize": "32Gi",
        },
        "budgetRef": "team-a",
    }


def minimal_spec() -> dict[str, Any]:
    return {
        "model": {"preset": "llama2-7b"},
        "data": {"tokens": 1e9},
        "batch": {"globalBatchSize": 64},
    }


def resource(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingPlan",
        "metadata": {"name": "llama", "namespace": "team-a"},
        "spec": spec,
    }


SECTIONS: list[tuple[type[ApiModel], str]] = [
    (ModelSpec, "model"),
    (DataSpec, "data"),
    (BatchSpec, "batch"),
    (HardwareSpec, "hardware"),
    (ObjectiveSpec, "objective"),
    (ParallelismSpec, "parallelism"),
    (TrainingSpec, "training"),
    (ReliabilitySpec, "reliability"),
    (JobSpec, "job"),
]


def test_full_spec_round_trips_in_camel_case() -> None:
    document = full_spec()
    spec = TrainingPlanSpec.model_validate(document)
    assert spec.to_document() == document
    assert TrainingPlanSpec.model_validate(spec.model_dump(by_alias=True)) == spec


@pytest.mark.parametrize(("model", "key"), SECTIONS)
def test_each_section_round_trips(model: type[ApiModel], key: str) -> None:
    section = model.model_validate(full_spec()[key])
    assert model.model_validate(section.model_dump(by_alias=True)) == section
    assert model.model_validate(section.to_document()) == section
    assert section.to_document() == full_spec()[key]


@pytest.mark.parametrize(
    "item",
    [
        EnvVar(name="A", value="1"),
        EnvVar(name="A"),
        Toleration(key="k", operator="Equal", value="v", effect="NoExecute", toleration_seconds=5),
        Toleration(operator="Exists"),
    ],
)
def test_job_items_round_trip(item: EnvVar | Toleration) -> None:
    assert type(item).model_validate(item.model_dump(by_alias=True)) == item


def test_minimal_spec_takes_the_documented_defaults() -> None:
    spec = TrainingPlanSpec.model_validate(minimal_spec())
    assert spec.hardware == HardwareSpec(gpu_type="A100-SXM4-80GB", gpus_per_node=8)
    assert spec.data.epochs == 1
    assert spec.training.precision == "bf16"
    assert spec.training.optimizer == "adamw"
    assert spec.training.attention == "flash"
    assert spec.reliability.checkpoint_seconds is None  # 60 s when planned (resolve)
    assert spec.reliability.max_restarts == 10
    assert spec.job.command == DEFAULT_COMMAND == ("python", "-m", "trainplan.runtime.train")
    assert spec.job.launcher == "Job"
    assert spec.job.framework == "reference"
    assert spec.job.metrics_port == 9400
    assert spec.job.suspend is False
    assert spec.objective == ObjectiveSpec()
    assert spec.parallelism == ParallelismSpec()
    document = spec.to_document()
    assert document["job"]["command"] == ["python", "-m", "trainplan.runtime.train"]
    assert document["job"]["args"] == []
    assert TrainingPlanSpec.model_validate(document) == spec


def test_json_names_keep_uppercase_acronyms() -> None:
    document = TrainingPlanSpec.model_validate(full_spec()).to_document()
    assert "maxGPUs" in document["objective"]
    assert "interruptionsPerGPUHour" in document["reliability"]
    assert "gatedMLP" in document["model"]


def test_python_names_are_accepted_too() -> None:
    objective = ObjectiveSpec(gpus=8, max_gpus=16)
    assert objective.to_document() == {"gpus": 8, "maxGPUs": 16}
    assert ReliabilitySpec(interruptions_per_gpu_hour=0.1).interruptions_per_gpu_hour == 0.1


def test_models_are_frozen() -> None:
    spec = TrainingPlanSpec.model_validate(minimal_spec())
    with pytest.raises(ValidationError, match="frozen"):
        spec.budget_ref = "x"  # type: ignore[misc]


def _mapping_paths(
    document: dict[str, Any], path: tuple[str | int, ...] = ()
) -> Iterator[tuple[str | int, ...]]:
    """Paths of every object in the document that is a model (not a free-form map)."""
    yield path
    for key, value in document.items():
        if key in {"resources", "nodeSelector"}:
            continue
        if isinstance(value, dict):
            yield from _mapping_paths(value, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _mapping_paths(item, (*path, key, index))


def _at(document: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


SPEC_PATHS = list(_mapping_paths(full_spec()))


@pytest.mark.parametrize(
    "path", SPEC_PATHS, ids=[".".join(map(str, p)) or "spec" for p in SPEC_PATHS]
)
def test_unknown_fields_are_rejected_at_every_level(path: tuple[str | int, ...]) -> None:
    document = full_spec()
    _at(document, path)["bogusField"] = 1
    with pytest.raises(ValidationError) as caught:
        TrainingPlanSpec.model_validate(document)
    [error] = caught.value.errors()
    assert error["type"] == "extra_forbidden"
    assert error["loc"] == (*path, "bogusField")


def test_unknown_top_level_resource_field_is_rejected() -> None:
    document = resource(minimal_spec())
    document["spek"] = {}
    with pytest.raises(ValidationError, match="spek"):
        parse_training_plan_spec(document)


def test_resource_metadata_keeps_what_kubernetes_adds() -> None:
    document = resource(minimal_spec())
    document["metadata"] |= {
        "creationTimestamp": "2024-05-01T12:00:00Z",
        "managedFields": [{"manager": "kubectl"}],
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u", "controller": True}
        ],
    }
    plan = TrainingPlan.model_validate(document)
    assert plan.metadata.name == "llama"
    assert plan.to_document()["metadata"] == document["metadata"]
    assert TrainingPlan.model_validate(plan.model_dump(by_alias=True)) == plan


def test_resource_quantities_accept_bare_numbers() -> None:
    job = JobSpec.model_validate({"resources": {"cpu": 32, "memory": "256Gi"}})
    assert job.resources == {"cpu": "32", "memory": "256Gi"}
    with pytest.raises(ValidationError):
        JobSpec.model_validate({"resources": {"cpu": True}})


def test_deadline_seconds() -> None:
    assert ObjectiveSpec(deadline="1d12h").deadline_seconds == 36 * 3600
    assert ObjectiveSpec().deadline_seconds is None
    with pytest.raises(ValidationError, match="accepted forms"):
        ObjectiveSpec(deadline="two weeks")


@pytest.mark.parametrize(
    "model",
    [
        {"preset": "llama2-7b", "numExperts": 8, "topK": 2},
        {"preset": "llama2-7b", "imageSize": 224},
        {"preset": "llama2-7b", "encoderLayers": 12},
    ],
)
def test_a_model_field_the_planner_lacks_says_what_it_supports(model: dict[str, Any]) -> None:
    """Vision or encoder-only fields, or MoE fields under other names: each unknown field
    is named, with the sentence saying which models the planner can express (experts and
    expertsPerToken among them); also below a resource's spec."""
    extra = set(model) - {"preset"}
    with pytest.raises(ValidationError) as caught:
        TrainingPlanSpec.model_validate(minimal_spec() | {"model": model})
    lines = format_validation_errors(caught.value)
    assert {line.split(":")[0] for line in lines} == {f"model.{name}" for name in extra}
    for line in lines:
        assert "Extra inputs are not permitted" in line
        assert "decoder-only transformer language models, dense or mixture-of-experts" in line
        assert "experts and expertsPerToken" in line
    with pytest.raises(ValidationError) as nested:
        TrainingPlan.model_validate(
            {
                "apiVersion": API_VERSION,
                "kind": "TrainingPlan",
                "metadata": {"name": "moe"},
                "spec": minimal_spec() | {"model": model},
            }
        )
    assert all("decoder-only" in line for line in format_validation_errors(nested.value))


def test_other_extra_fields_are_plain() -> None:
    with pytest.raises(ValidationError) as caught:
        TrainingPlanSpec.model_validate(minimal_spec() | {"data": {"tokens": 1e9, "x": 1}})
    [line] = format_validation_errors(caught.value)
    assert line == "data.x: Extra inputs are not permitted"


@pytest.mark.parametrize(
    ("document", "fields"),
    [
        ({"model": {"layers": 2}}, ["preset", "hiddenSize", "attentionHeads", "vocabSize"]),
        ({"model": {"preset": "x", "hiddenSize": 100, "attentionHeads": 3}}, ["hiddenSize"]),
        ({"model": {"preset": "x", "attentionHeads": 8, "kvHeads": 16}}, ["kvHeads"]),
        ({"model": {"preset": "x", "attentionHeads": 12, "kvHeads": 8}}, ["attentionHeads"]),
        ({"data": {"tokens": 1e9, "samples": 10}}, ["tokens", "samples"]),
        ({"data": {"epochs": 2}}, ["tokens", "samples"]),
        ({"batch": {"globalBatchSize": 8, "microBatchSize": 16}}, ["microBatchSize"]),
        ({"batch": {"globalBatchSize": 10, "microBatchSize": 4}}, ["globalBatchSize"]),
        ({"objective": {"gpus": 8, "deadline": "1d"}}, ["gpus", "deadline", "use maxGPUs"]),
        ({"objective": {"gpus": 64, "maxGPUs": 32}}, ["gpus", "maxGPUs"]),
        ({"parallelism": {"pipeline": 1, "virtualPipelineStages": 2}}, ["virtualPipelineStages"]),
    ],
)
def test_section_rules(document: dict[str, Any], fields: list[str]) -> None:
    spec = minimal_spec() | document
    section = next(iter(document))
    with pytest.raises(ValidationError) as caught:
        TrainingPlanSpec.model_validate(spec)
    [line] = format_validation_errors(caught.value)
    assert line.startswith(f"{section}: ")
    for field in fields:
        assert field in line


@pytest.mark.parametrize(
    "document",
    [
        {
            "model": {
                "layers": 2,
                "hiddenSize": 64,
                "attentionHeads": 4,
                "vocabSize": 100,
                "sequenceLength": 16,
            }
        },
        {"model": {"preset": "x", "hiddenSize": 96, "attentionHeads": 3, "kvHeads": 1}},
        {"model": {"preset": "x", "attentionHeads": 8, "kvHeads": 8}},
        {"data": {"samples": 10, "epochs": 0.5}},
        {"batch": {"globalBatchSize": 8, "microBatchSize": 8}},
        {"objective": {"gpus": 32, "maxGPUs": 32}},
        {"objective": {"deadline": "P14D", "maxGPUs": 32}},
        {"parallelism": {"virtualPipelineStages": 2}},
        {"parallelism": {"pipeline": 2, "virtualPipelineStages": 2}},
        {"parallelism": {"pipeline": 1, "virtualPipelineStages": 1}},
    ],
)
def test_section_rules_accept_valid_values(document: dict[str, Any]) -> None:
    TrainingPlanSpec.model_validate(minimal_spec() | document)


def _with(**sections: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(minimal_spec())
    for key, value in sections.items():
        spec[key] = spec.get(key, {}) | value
    return spec


CROSS_FIELD_CASES = [
    pytest.param(
        _with(parallelism={"tensor": 8, "pipeline": 2, "data": 4}, objective={"gpus": 64}),
        _with(parallelism={"tensor": 8, "pipeline": 2, "data": 3}, objective={"gpus": 64}),
        ["parallelism.tensor", "parallelism.pipeline", "parallelism.data", "objective.gpus"],
        id="layout-equals-gpus",
    ),
    pytest.param(
        _with(objective={"gpus": 4}),
        _with(objective={"gpus": 12}),
        ["objective.gpus", "hardware.gpusPerNode"],
        id="whole-nodes",
    ),
    pytest.param(
        _with(objective={"gpus": 48}, hardware={"gpusPerNode": 4}),
        _with(objective={"gpus": 50}, hardware={"gpusPerNode": 4}),
        ["objective.gpus", "hardware.gpusPerNode"],
        id="whole-nodes-other-node-size",
    ),
    pytest.param(
        _with(batch={"globalBatchSize": 64, "microBatchSize": 2}, parallelism={"data": 8}),
        _with(batch={"globalBatchSize": 64, "microBatchSize": 2}, parallelism={"data": 64}),
        ["batch.globalBatchSize", "batch.microBatchSize", "parallelism.data"],
        id="micro-times-data-divides-global",
    ),
    pytest.param(
        _with(parallelism={"data": 16}),
        _with(parallelism={"data": 48}),
        ["batch.globalBatchSize", "parallelism.data"],
        id="data-divides-global",
    ),
    pytest.param(
        _with(model={"attentionHeads": 32}, parallelism={"tensor": 8}),
        _with(model={"attentionHeads": 20}, parallelism={"tensor": 8}),
        ["model.attentionHeads", "parallelism.tensor"],
        id="tensor-divides-heads",
    ),
    pytest.param(
        _with(model={"attentionHeads": 32, "kvHeads": 2}, parallelism={"tensor": 8}),
        _with(model={"attentionHeads": 48, "kvHeads": 12}, parallelism={"tensor": 8}),
        ["model.kvHeads", "parallelism.tensor"],
        id="tensor-and-kv-heads-divide",
    ),
    pytest.param(
        # Uneven and interleaved splits are the planner's to judge (it knows the
        # framework): only a stage without a layer is refused here.
        _with(model={"layers": 30}, parallelism={"pipeline": 4, "virtualPipelineStages": 2}),
        _with(model={"layers": 3}, parallelism={"pipeline": 4, "virtualPipelineStages": 2}),
        ["model.layers", "parallelism.pipeline"],
        id="layers-per-stage",
    ),
    pytest.param(
        # Uneven stages are the planner's to judge (30 layers on 4 stages: 7, 8, 8, 7);
        # the spec refuses only a stage without a layer.
        _with(model={"layers": 30}, parallelism={"pipeline": 4}),
        _with(model={"layers": 3}, parallelism={"pipeline": 4}),
        ["model.layers", "parallelism.pipeline"],
        id="a-layer-per-stage",
    ),
    pytest.param(
        _with(parallelism={"zeroStage": 3, "pipeline": 1}),
        _with(parallelism={"zeroStage": 3, "pipeline": 2}),
        ["parallelism.zeroStage", "parallelism.pipeline"],
        id="zero3-without-pipeline",
    ),
]


@pytest.mark.parametrize(("valid", "invalid", "fields"), CROSS_FIELD_CASES)
def test_cross_field_rules(
    valid: dict[str, Any], invalid: dict[str, Any], fields: list[str]
) -> None:
    TrainingPlanSpec.model_validate(valid)
    with pytest.raises(ValidationError) as caught:
        parse_training_plan_spec(resource(invalid))
    [line] = format_validation_errors(caught.value)
    assert line.startswith("spec: ")
    for field in fields:
        assert field in line


def test_cross_field_problems_are_all_reported() -> None:
    spec = _with(
        objective={"gpus": 12},
        parallelism={"tensor": 8, "pipeline": 2, "data": 3, "zeroStage": 3},
    )
    with pytest.raises(ValidationError) as caught:
        TrainingPlanSpec.model_validate(spec)
    [line] = format_validation_errors(caught.value)
    for part in (
        "objective.gpus (12)",
        "hardware.gpusPerNode",
        "parallelism.data (3)",
        "zeroStage",
    ):
        assert part in line


def test_parse_whole_resource_and_bare_spec_agree() -> None:
    from_resource = parse_training_plan_spec(resource(full_spec()))
    from_bare = parse_training_plan_spec(full_spec())
    assert from_resource == from_bare == TrainingPlanSpec.model_validate(full_spec())


def test_parse_resource_with_spec_only() -> None:
    assert parse_training_plan_spec({"spec": minimal_spec()}).batch.global_batch_size == 64


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ({"kind": "GPUBudget"}, "kind: Input should be 'TrainingPlan' (got 'GPUBudget')"),
        (
            {"apiVersion": "trainplan.dev/v1"},
            "apiVersion: Input should be 'trainplan.dev/v1alpha1'",
        ),
    ],
)
def test_parse_wrong_kind_or_version_is_the_only_error(
    header: dict[str, str], expected: str
) -> None:
    document = resource({"model": {}}) | header
    with pytest.raises(ValidationError) as caught:
        parse_training_plan_spec(document)
    [line] = format_validation_errors(caught.value)
    assert line.startswith(expected)


def test_format_validation_errors_gives_dotted_camel_case_paths() -> None:
    document = resource(
        _with(
            model={"kvHeads": 0},
            data={"samples": 10},
            job={"env": [{"name": "A"}, {"name": ""}], "launcher": "Pod"},
        )
    )
    with pytest.raises(ValidationError) as caught:
        parse_training_plan_spec(document)
    lines = format_validation_errors(caught.value)
    assert lines[0] == "spec.model.kvHeads: Input should be greater than or equal to 1"
    assert lines[1] == "spec.data: give exactly one of tokens or samples"
    assert lines[2] == "spec.job.env[1].name: String should have at least 1 character"
    assert lines[3].startswith("spec.job.launcher: Input should be 'Job' or 'JobSet'")
    assert len(lines) == 4


def test_format_validation_errors_on_a_bare_spec() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_training_plan_spec({"model": {"preset": "x"}, "batch": {"globalBatchSize": 0}})
    assert format_validation_errors(caught.value) == [
        "data: Field required",
        "batch.globalBatchSize: Input should be greater than or equal to 1",
    ]
    with pytest.raises(ValidationError) as caught:
        parse_training_plan_spec(_with(objective={"gpus": 12}))
    [line] = format_validation_errors(caught.value)
    assert line.startswith("(root): objective.gpus (12)")


def test_gpu_budget_is_not_a_training_plan() -> None:
    budget = {"apiVersion": API_VERSION, "kind": "GPUBudget", "spec": {"gpuHours": 100}}
    assert GPUBudget.model_validate(budget).spec.gpu_hours == 100
    with pytest.raises(ValidationError, match="kind"):
        parse_training_plan_spec(budget)


def test_api_imports_only_pydantic_and_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import trainplan.api; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    root = Path(__file__).resolve().parents[2] / "operator"
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root)},
    )
    allowed = {"pydantic", "pydantic_core", "typing_extensions", "annotated_types"}
    allowed |= {"typing_inspection", "trainplan"}
    foreign = {
        name
        for name in result.stdout.split()
        if name.split(".")[0] not in sys.stdlib_module_names | allowed
        and not name.startswith("_sysconfigdata")
    }
    assert not foreign


@pytest.mark.parametrize(
    "command",
    [
        ["--nproc-per-node=64", "train.py"],
        ["-m", "train"],
        ["python", "-m", "--nnodes=99"],
        ["python3", "-m", "-c"],
    ],
)
def test_a_command_cannot_smuggle_torchrun_flags(command: list[str]) -> None:
    """torchrun parses its own flags up to the program: a command that starts with an
    option (or a `python -m` whose module is one) would override the planned layout."""
    document = minimal_spec()
    document["job"] = {"command": command}
    with pytest.raises(ValidationError) as raised:
        TrainingPlanSpec.model_validate(document)
    (error,) = raised.value.errors()
    assert error["loc"] == ("job",)
    assert "torchrun would take it as its own flag" in error["msg"]
    assert "nproc" not in error["msg"]  # the value itself is not echoed
    assert "nnodes" not in error["msg"]


@pytest.mark.parametrize(
    "command",
    [["python", "train.py", "--lr", "1e-4"], ["python", "-m", "my.trainer"], ["bash", "-c"]],
)
def test_commands_that_start_with_the_program_are_kept(command: list[str]) -> None:
    document = minimal_spec()
    document["job"] = {"command": command}
    assert TrainingPlanSpec.model_validate(document).job.command == tuple(command)


# --- job.managedBy (MultiKueue) --------------------------------------------------------------

MULTIKUEUE_JOB: Final = {
    "queueName": "team-a",
    "launcher": "JobSet",
    "managedBy": "kueue.x-k8s.io/multikueue",
}


def test_managed_by_is_kept_for_a_queued_jobset() -> None:
    spec = TrainingPlanSpec.model_validate(_with(job=MULTIKUEUE_JOB))
    assert spec.job.managed_by == "kueue.x-k8s.io/multikueue"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"queueName": None}, "job.managedBy needs job.queueName (Kueue)"),
        ({"launcher": "Job"}, "job.managedBy needs job.launcher JobSet"),
        ({"framework": "deepspeed"}, "job.managedBy cannot run framework deepspeed"),
        ({"managedBy": "multikueue"}, "String should match pattern"),
        ({"managedBy": "Kueue.x-k8s.io/multikueue"}, "String should match pattern"),
        ({"managedBy": "kueue.x-k8s.io/" + "m" * 49}, "at most 63 characters"),
    ],
)
def test_managed_by_needs_a_queued_jobset_and_a_domain_prefixed_path(
    change: dict[str, Any], message: str
) -> None:
    job = {key: value for key, value in {**MULTIKUEUE_JOB, **change}.items() if value is not None}
    with pytest.raises(ValidationError, match=re.escape(message)):
        TrainingPlanSpec.model_validate(_with(job=job))
