"""`trainplan.planner.plan`: the plan object's invariants, each objective, pins, errors."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainplan.api import (
    ObjectiveSpec,
    Plan,
    PlanLayout,
    TrainingPlan,
    TrainingPlanSpec,
    format_duration,
    parse_duration_seconds,
)
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan
from trainplan.planner.planning import DEFAULT_GPU_CEILING
from trainplan.planner.resolve import resolve, resolve_shape
from trainplan.planner.search import candidate_gpu_counts
from trainplan.planner.shapes import parameter_count

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
EXAMPLE_IDS = [path.stem for path in EXAMPLES]
DEADLINE_EXAMPLES = ["llama2-7b-deadline", "megatron-1t"]

SMALL: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 8},
}
"""Llama 2 7B on a few A100-80GB nodes: quick to plan and feasible."""

OWN_PROGRAM: dict[str, Any] = {"command": ["python", "train.py"]}
"""`job` for a program of the user's own under the reference framework (it reads the
`TRAINPLAN_` environment): what the framework allows, pipelines included."""


_EXAMPLE_PLANS: dict[str, Plan] = {}


def example_spec(name: str) -> TrainingPlanSpec:
    text = (EXAMPLES_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    return TrainingPlan.model_validate(yaml.safe_load(text)).spec


def example_plan(name: str, catalog: Catalog) -> Plan:
    """The plan of an example, computed once per session."""
    if name not in _EXAMPLE_PLANS:
        _EXAMPLE_PLANS[name] = plan(example_spec(name), catalog)
    return _EXAMPLE_PLANS[name]


def spec_of(**sections: dict[str, Any]) -> TrainingPlanSpec:
    """SMALL with whole sections replaced (a section set to {} is removed)."""
    document = copy.deepcopy(SMALL)
    for name, value in sections.items():
        if value:
            document[name] = value
        else:
            document.pop(name, None)
    return TrainingPlanSpec.model_validate(document)


def with_objective(spec: TrainingPlanSpec, **objective: Any) -> TrainingPlanSpec:
    return spec.model_copy(update={"objective": ObjectiveSpec.model_validate(objective)})


def signature(layout: PlanLayout) -> tuple[int, int, int, int, str]:
    return (
        layout.tensor,
        layout.pipeline,
        layout.data,
        layout.zero_stage,
        layout.activation_checkpointing,
    )


# --------------------------------------------------------------------------- invariants


@pytest.mark.parametrize("name", EXAMPLE_IDS)
def test_every_example_plans_with_consistent_arithmetic(name: str, catalog: Catalog) -> None:
    spec = example_spec(name)
    result = example_plan(name, catalog)
    layout = result.layout
    shape, _ = resolve_shape(spec, catalog)

    assert result.gpu_type == catalog.gpu(spec.hardware.gpu_type).name
    assert result.gpus == layout.tensor * layout.pipeline * layout.data
    assert result.gpus_per_node == spec.hardware.gpus_per_node
    assert result.nodes == math.ceil(result.gpus / result.gpus_per_node)
    assert layout.global_batch_size == spec.batch.global_batch_size
    assert layout.global_batch_size == (
        layout.micro_batch_size * layout.data * layout.gradient_accumulation_steps
    )
    assert result.tokens_per_step == layout.global_batch_size * shape.sequence_length
    sequences = (
        spec.data.samples
        if spec.data.samples is not None
        else (spec.data.tokens or 0) / shape.sequence_length
    )
    assert result.total_steps == math.ceil(
        spec.data.epochs * sequences / spec.batch.global_batch_size
    )
    assert result.compute_seconds == pytest.approx(result.total_steps * result.step_seconds)
    assert result.duration_seconds == pytest.approx(
        result.compute_seconds + result.overhead_seconds
    )
    assert result.overhead_seconds >= 0
    assert result.gpu_hours == pytest.approx(result.gpus * result.duration_seconds / 3600)
    assert result.tokens_per_second_per_gpu == pytest.approx(
        result.tokens_per_step / result.step_seconds / result.gpus
    )
    assert 0 < result.mfu < 1


@pytest.mark.parametrize("name", EXAMPLE_IDS)
def test_memory_fits_and_is_the_sum_of_its_parts(name: str, catalog: Catalog) -> None:
    memory = example_plan(name, catalog).memory

    assert 0 < memory.total_bytes <= memory.capacity_bytes
    assert memory.total_bytes == (
        memory.weights_bytes
        + memory.gradients_bytes
        + memory.optimizer_bytes
        + memory.activations_bytes
        + memory.logits_bytes
        + memory.overhead_bytes
    )
    gpu = catalog.gpu(example_spec(name).hardware.gpu_type)
    assert memory.capacity_bytes <= gpu.memory_bytes


@pytest.mark.parametrize("name", EXAMPLE_IDS)
def test_step_time_is_the_sum_of_its_breakdown(name: str, catalog: Catalog) -> None:
    result = example_plan(name, catalog)
    step = result.step_breakdown

    assert result.step_seconds > 0
    assert result.step_seconds == pytest.approx(
        step.compute_seconds
        + step.tensor_comm_seconds
        + step.data_comm_seconds
        + step.pipeline_bubble_seconds
        + step.pipeline_comm_seconds
        + step.optimizer_seconds
    )


def test_the_plan_document_round_trips(catalog: Catalog) -> None:
    result = example_plan("gpt3-175b-ceiling", catalog)

    assert Plan.model_validate(result.to_document()) == result


# --------------------------------------------------------------------------- objectives


@pytest.mark.parametrize("name", ["llama2-70b-pinned", "tiny-local", "v100-fp16"])
def test_pinned_gpu_count_in_examples(name: str, catalog: Catalog) -> None:
    spec = example_spec(name)

    assert example_plan(name, catalog).gpus == spec.objective.gpus


@pytest.mark.parametrize(("gpus", "batch"), [(2, 64), (4, 64), (8, 64), (24, 96), (64, 64)])
def test_pinned_gpu_count_gives_exactly_that_many(gpus: int, batch: int, catalog: Catalog) -> None:
    spec = spec_of(batch={"globalBatchSize": batch}, objective={"gpus": gpus})

    result = plan(spec, catalog)

    assert result.gpus == gpus
    assert result.layout.tensor * result.layout.pipeline * result.layout.data == gpus
    assert "objective.gpus" in result.explanation[0]


@pytest.mark.parametrize("name", DEADLINE_EXAMPLES)
def test_deadline_plan_is_the_fewest_candidate_gpus_that_finish(
    name: str, catalog: Catalog
) -> None:
    spec = example_spec(name)
    deadline = spec.objective.deadline_seconds
    assert deadline is not None
    result = example_plan(name, catalog)

    assert result.duration_seconds <= deadline
    if spec.objective.max_gpus is not None:
        assert result.gpus <= spec.objective.max_gpus
    resolved = resolve(spec, catalog)
    counts = candidate_gpu_counts(
        resolved.workload, resolved.pins, spec.objective.max_gpus or DEFAULT_GPU_CEILING
    )
    assert result.gpus in counts
    smaller = [count for count in counts if count < result.gpus]
    assert smaller, "the example should leave room for a smaller plan"
    try:
        fewer = plan(with_objective(spec, gpus=max(smaller)), catalog)
    except InfeasiblePlanError:
        return
    assert fewer.duration_seconds > deadline


def test_deadline_on_a_small_spec(catalog: Catalog) -> None:
    spec = spec_of(objective={"deadline": "3h"})
    result = plan(spec, catalog)

    assert result.duration_seconds <= 3 * 3600
    resolved = resolve(spec, catalog)
    counts = candidate_gpu_counts(resolved.workload, resolved.pins, DEFAULT_GPU_CEILING)
    smaller = [count for count in counts if count < result.gpus]
    assert smaller
    try:
        fewer = plan(with_objective(spec, gpus=max(smaller)), catalog)
    except InfeasiblePlanError:
        return
    assert fewer.duration_seconds > 3 * 3600


def test_gpu_ceiling_example_stays_under_the_ceiling(catalog: Catalog) -> None:
    spec = example_spec("gpt3-175b-ceiling")
    assert spec.objective.gpus is None
    assert spec.objective.deadline is None
    assert spec.objective.max_gpus is not None

    result = example_plan("gpt3-175b-ceiling", catalog)

    assert result.gpus <= spec.objective.max_gpus
    assert "objective.maxGPUs" in result.explanation[0]


@pytest.mark.parametrize("ceiling", [3, 12, 40, 100, 1000])
def test_gpu_ceiling_alone_is_never_exceeded(ceiling: int, catalog: Catalog) -> None:
    result = plan(spec_of(objective={"maxGPUs": ceiling}), catalog)

    assert result.gpus <= ceiling
    assert all(other.gpus <= ceiling for other in result.alternatives)


def test_gpu_ceiling_with_a_fully_pinned_smaller_layout(catalog: Catalog) -> None:
    """maxGPUs is a cap: a pinned layout of 256 GPUs is within a cap of 1024.

    The same spec with maxGPUs 300 plans 256 GPUs; with 1024 it must too.
    """
    spec = spec_of(
        batch={"globalBatchSize": 1024},
        parallelism={"tensor": 8, "pipeline": 4, "data": 8},
        objective={"maxGPUs": 1024},
        job=OWN_PROGRAM,
    )
    under_tight_cap = plan(with_objective(spec, maxGPUs=300), catalog)
    assert under_tight_cap.gpus == 256

    result = plan(spec, catalog)

    assert result.gpus == 256
    assert (result.layout.tensor, result.layout.pipeline, result.layout.data) == (8, 4, 8)


# --------------------------------------------------------------------------- pins

PIN_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # name: (parallelism pins, batch, objective)
    "tensor": ({"tensor": 4}, {"globalBatchSize": 64}, {"gpus": 16}),
    "pipeline": ({"pipeline": 4}, {"globalBatchSize": 64}, {"gpus": 16}),
    "data": ({"data": 2}, {"globalBatchSize": 64}, {"gpus": 16}),
    "zero-stage": ({"zeroStage": 0}, {"globalBatchSize": 64}, {"gpus": 16}),
    "checkpointing": ({"activationCheckpointing": "full"}, {"globalBatchSize": 64}, {"gpus": 16}),
    "micro-batch": ({}, {"globalBatchSize": 64, "microBatchSize": 1}, {"gpus": 16}),
    "tensor-under-ceiling": ({"tensor": 2}, {"globalBatchSize": 64}, {"maxGPUs": 64}),
    "pipeline-for-deadline": ({"pipeline": 2}, {"globalBatchSize": 64}, {"deadline": "6h"}),
    "everything": (
        {
            "tensor": 2,
            "pipeline": 2,
            "data": 8,
            "zeroStage": 1,
            "activationCheckpointing": "full",
            "virtualPipelineStages": 2,
            "sequenceParallel": True,
        },
        {"globalBatchSize": 64, "microBatchSize": 2},
        {"gpus": 32},
    ),
}

_PIN_FIELDS = {
    "tensor": "tensor",
    "pipeline": "pipeline",
    "data": "data",
    "zeroStage": "zero_stage",
    "activationCheckpointing": "activation_checkpointing",
    "virtualPipelineStages": "virtual_pipeline_stages",
    "sequenceParallel": "sequence_parallel",
}


@pytest.mark.parametrize(("pins", "batch", "objective"), PIN_CASES.values(), ids=PIN_CASES.keys())
def test_every_pin_is_respected(
    pins: dict[str, Any], batch: dict[str, Any], objective: dict[str, Any], catalog: Catalog
) -> None:
    # A program of the user's own: the reference trainer runs no pipeline.
    spec = spec_of(parallelism=pins, batch=batch, objective=objective, job=OWN_PROGRAM)
    result = plan(spec, catalog)

    for key, value in pins.items():
        assert getattr(result.layout, _PIN_FIELDS[key]) == value, key
    if "microBatchSize" in batch:
        assert result.layout.micro_batch_size == batch["microBatchSize"]
    if "gpus" in objective:
        assert result.gpus == objective["gpus"]


# --------------------------------------------------------------------------- alternatives


@pytest.mark.parametrize("name", EXAMPLE_IDS)
def test_alternatives_differ_from_the_choice_and_say_why(name: str, catalog: Catalog) -> None:
    result = example_plan(name, catalog)
    chosen = signature(result.layout)

    signatures = [signature(other.layout) for other in result.alternatives]
    assert chosen not in signatures
    assert len(set(signatures)) == len(signatures)
    for other in result.alternatives:
        assert other.note.strip()
        assert "duration" in other.note
        assert other.gpus == other.layout.tensor * other.layout.pipeline * other.layout.data
        assert other.layout.global_batch_size == result.layout.global_batch_size


def test_examples_have_alternatives(catalog: Catalog) -> None:
    assert all(example_plan(name, catalog).alternatives for name in EXAMPLE_IDS)


# --------------------------------------------------------------------------- explanation

GOALS = {
    "gpt3-175b-ceiling": "objective.maxGPUs",
    "llama2-70b-pinned": "objective.gpus",
    "llama2-7b-deadline": "objective.deadline",
    "megatron-1t": "objective.deadline",
    "pod-template": "objective.gpus",
    "rdma-host-network": "objective.gpus",
    "tiny-local": "objective.gpus",
    "v100-fp16": "objective.gpus",
}


@pytest.mark.parametrize("name", EXAMPLE_IDS)
def test_explanation_has_goal_memory_and_step_lines(name: str, catalog: Catalog) -> None:
    result = example_plan(name, catalog)
    lines = result.explanation

    goal = [line for line in lines if line.startswith("Goal:")]
    assert len(goal) == 1
    assert GOALS[name] in goal[0]
    memory = [line for line in lines if line.startswith("Memory per GPU:")]
    assert len(memory) == 1
    assert "GiB" in memory[0]
    step = [line for line in lines if line.startswith("Step ")]
    assert len(step) == 1
    assert "MFU" in step[0]
    assert len(lines) == len(set(lines))


# --------------------------------------------------------------------------- errors

INPUT_ERRORS: dict[str, tuple[dict[str, dict[str, Any]], str, str]] = {
    # name: (sections replaced in SMALL, expected path, text in the message)
    "preset": ({"model": {"preset": "llama2-7bb"}}, "model.preset", "did you mean 'llama2-7b'"),
    "gpu-type": (
        {"hardware": {"gpuType": "H100-SXM5-80GBB"}},
        "hardware.gpuType",
        "did you mean 'H100-SXM5-80GB'",
    ),
    "precision": (
        {"hardware": {"gpuType": "V100-SXM2-32GB"}, "training": {"precision": "bf16"}},
        "training.precision",
        "fp16",
    ),
    "tensor-pin": (
        {"parallelism": {"tensor": 3}, "objective": {"gpus": 24}},
        "parallelism.tensor",
        "attentionHeads (32)",
    ),
}


@pytest.mark.parametrize(
    ("sections", "path", "text"), INPUT_ERRORS.values(), ids=INPUT_ERRORS.keys()
)
def test_input_errors_have_spec_relative_paths(
    sections: dict[str, dict[str, Any]], path: str, text: str, catalog: Catalog
) -> None:
    with pytest.raises(PlanInputError) as caught:
        plan(spec_of(**sections), catalog)

    assert [where for where, _ in caught.value.problems] == [path]
    assert text in caught.value.problems[0][1]
    assert not path.startswith("spec.")


def test_input_errors_list_every_problem(catalog: Catalog) -> None:
    """resolve() documents that it raises listing every problem."""
    spec = spec_of(model={"preset": "llama2-7bb"}, hardware={"gpuType": "H100-SXM5-80GBB"})

    with pytest.raises(PlanInputError) as caught:
        plan(spec, catalog)

    assert {where for where, _ in caught.value.problems} == {"model.preset", "hardware.gpuType"}


def test_no_objective_is_an_input_error(catalog: Catalog) -> None:
    spec = spec_of(objective={})
    assert spec.objective.gpus is None

    with pytest.raises(PlanInputError) as caught:
        plan(spec, catalog)

    assert "objective" in [where for where, _ in caught.value.problems]


def test_model_too_big_for_the_gpus_is_infeasible_and_says_by_how_much(
    catalog: Catalog,
) -> None:
    spec = spec_of(
        model={"preset": "llama2-70b"},
        hardware={"gpuType": "A100-SXM4-40GB", "gpusPerNode": 8},
    )

    with pytest.raises(InfeasiblePlanError) as caught:
        plan(spec, catalog)

    reasons = caught.value.reasons
    assert reasons
    assert all(reason.strip() for reason in reasons)
    text = " ".join(reasons)
    assert "A100-SXM4-40GB has 40.0 GiB" in text
    assert "short" in text
    assert str(caught.value) == text


def test_unreachable_deadline_is_infeasible_and_names_the_deadline(catalog: Catalog) -> None:
    spec = spec_of(
        data={"tokens": 2.0e12},
        batch={"globalBatchSize": 1024},
        objective={"deadline": "2d", "maxGPUs": 256},
    )

    with pytest.raises(InfeasiblePlanError) as caught:
        plan(spec, catalog)

    text = " ".join(caught.value.reasons)
    assert "deadline is 2d" in text
    assert "256 GPUs" in text


def test_no_legal_layout_is_infeasible_and_lists_the_rules(catalog: Catalog) -> None:
    # With data pinned to 5, tensor x pipeline would have to be 8 / 5.
    spec = spec_of(batch={"globalBatchSize": 60}, parallelism={"data": 5}, objective={"gpus": 8})

    with pytest.raises(InfeasiblePlanError) as caught:
        plan(spec, catalog)

    text = " ".join(caught.value.reasons)
    assert "8 GPUs" in text
    assert "globalBatchSize (60)" in text


# --------------------------------------------------------------------------- rule of thumb


def test_rule_of_thumb_for_llama2_7b_on_a100(catalog: Catalog) -> None:
    spec = example_spec("llama2-7b-deadline")
    result = example_plan("llama2-7b-deadline", catalog)
    preset = catalog.model("llama2-7b")
    assert spec.data.tokens is not None

    hours = result.duration_seconds / 3600
    expected = math.ceil(
        preset.parameters / 1e9 * (spec.data.tokens * spec.data.epochs) / 1e9 * 13.3 / hours
    )

    assert abs(result.rule_of_thumb_gpus - expected) <= 1


def test_rule_of_thumb_counts_every_epoch(catalog: Catalog) -> None:
    result = plan(spec_of(data={"tokens": 1.0e9, "epochs": 3}), catalog)
    parameters = catalog.model("llama2-7b").parameters

    hours = result.duration_seconds / 3600
    expected = math.ceil(parameters / 1e9 * 3.0 * 13.3 / hours)

    assert abs(result.rule_of_thumb_gpus - expected) <= 1


# --------------------------------------------------------------------------- data, model


@pytest.mark.parametrize("epochs", [1, 2.5])
def test_samples_and_tokens_give_the_same_plan(epochs: float, catalog: Catalog) -> None:
    sequence_length = catalog.model("llama2-7b").sequence_length
    samples = 300_000
    by_tokens = plan(
        spec_of(data={"tokens": float(samples * sequence_length), "epochs": epochs}), catalog
    )
    by_samples = plan(spec_of(data={"samples": samples, "epochs": epochs}), catalog)

    assert by_samples.total_steps == by_tokens.total_steps == math.ceil(epochs * samples / 64)
    assert by_samples.to_document() == by_tokens.to_document()


def test_explicit_model_fields_override_the_preset_field_by_field(catalog: Catalog) -> None:
    preset = catalog.model("llama2-7b")
    spec = spec_of(model={"preset": "llama2-7b", "layers": 16, "sequenceLength": 2048})

    shape, parameters = resolve_shape(spec, catalog)

    assert shape.layers == 16
    assert shape.sequence_length == 2048
    assert shape.hidden_size == preset.hidden_size
    assert shape.attention_heads == preset.attention_heads
    assert shape.kv_heads == preset.kv_heads
    assert shape.ffn_hidden_size == preset.ffn_hidden_size
    assert shape.gated_mlp == preset.gated_mlp
    assert shape.vocab_size == preset.vocab_size
    assert shape.tied_embeddings == preset.tied_embeddings
    assert parameters == parameter_count(shape)
    assert parameters < 0.6 * preset.parameters

    overridden = plan(spec, catalog)
    full = plan(spec_of(), catalog)
    assert overridden.tokens_per_step == 64 * 2048
    assert overridden.flops_per_step < 0.6 * full.flops_per_step
    assert overridden.memory.weights_bytes < full.memory.weights_bytes


def test_dropout_comes_from_the_preset_the_spec_or_megatron_lms_default(
    catalog: Catalog,
) -> None:
    # Llama 2 trains without dropout (its preset says so); a shape without a preset counts
    # Megatron-LM's default hidden and attention dropout of 0.1; the spec overrides both.
    assert catalog.model("llama2-7b").dropout is False
    assert catalog.model("megatron-1t").dropout is True
    preset, _ = resolve_shape(spec_of(), catalog)
    assert preset.dropout is False
    with_dropout, _ = resolve_shape(
        spec_of(model={"preset": "llama2-7b", "dropout": True}), catalog
    )
    assert with_dropout.dropout is True
    custom = {
        "layers": 4,
        "hiddenSize": 256,
        "attentionHeads": 4,
        "vocabSize": 1000,
        "sequenceLength": 512,
    }
    assert resolve_shape(spec_of(model=custom), catalog)[0].dropout is True
    without = resolve_shape(spec_of(model={**custom, "dropout": False}), catalog)[0]
    assert without.dropout is False
    # Less activation memory without the masks; the explanation says when it counts them.
    masked = plan(spec_of(model={"preset": "llama2-7b", "dropout": True}), catalog)
    plain = plan(spec_of(), catalog)
    assert plain.memory.activations_bytes < masked.memory.activations_bytes
    assert any("with dropout masks (model.dropout)" in line for line in masked.explanation)
    assert not any("dropout" in line for line in plain.explanation)


def test_overrides_equal_to_the_preset_keep_its_published_parameters(catalog: Catalog) -> None:
    preset = catalog.model("llama2-7b")
    spec = spec_of(model={"preset": "llama2-7b", "layers": preset.layers})

    _, parameters = resolve_shape(spec, catalog)

    assert parameters == preset.parameters
    assert plan(spec, catalog).to_document() == plan(spec_of(), catalog).to_document()


def test_explicit_parameters_win(catalog: Catalog) -> None:
    spec = spec_of(model={"preset": "llama2-7b", "parameters": 7.0e9})

    _, parameters = resolve_shape(spec, catalog)

    assert parameters == 7.0e9


def test_explicit_shape_without_preset(catalog: Catalog) -> None:
    spec = example_spec("v100-fp16")
    assert spec.model.preset is None

    shape, parameters = resolve_shape(spec, catalog)

    assert (shape.layers, shape.hidden_size, shape.attention_heads) == (24, 2048, 16)
    assert shape.kv_heads == 16
    assert parameters == parameter_count(shape)
    assert example_plan("v100-fp16", catalog).gpu_type == "V100-SXM2-32GB"


def test_pinned_checkpoint_interval_is_kept(catalog: Catalog) -> None:
    spec = example_spec("tiny-local")
    assert spec.reliability.checkpoint_interval_steps == 50

    assert example_plan("tiny-local", catalog).reliability.checkpoint_interval_steps == 50


@pytest.mark.parametrize(
    ("framework", "allowed"),
    [("megatron", {0, 1}), ("deepspeed", {0, 1, 2, 3}), ("torchtitan", {0, 1, 2, 3})],
)
def test_the_framework_bounds_the_zero_stage(
    catalog: Catalog, framework: str, allowed: set[int]
) -> None:
    document = {**SMALL, "objective": {"maxGPUs": 256}, "job": {"framework": framework}}
    result = plan(TrainingPlanSpec.model_validate(document), catalog)
    chosen = [result.layout, *(alternative.layout for alternative in result.alternatives)]
    assert {layout.zero_stage for layout in chosen} <= allowed
    for layout in chosen:
        if layout.pipeline > 1 and framework in ("deepspeed", "torchtitan"):
            assert layout.zero_stage <= 1


def test_torchtitan_pipelines_run_zero_1_at_most(catalog: Catalog) -> None:
    # torchtitan v0.2.2's apply_fsdp does not reshard after forward when pipelining, and
    # PyTorch's PipelineStage neither reshards nor syncs gradients before the last
    # backward: a pipelined stage holds whole weights and gradients, ZeRO-1's memory.
    document = {
        **SMALL,
        "parallelism": {"pipeline": 2, "zeroStage": 2},
        "job": {"framework": "torchtitan"},
    }
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate(document), catalog)
    ((path, message),) = raised.value.problems
    assert path == "parallelism.zeroStage"
    assert "runs ZeRO stage 0, 1 with this pipeline degree" in message
    document["parallelism"] = {"pipeline": 2, "zeroStage": 1}
    assert plan(TrainingPlanSpec.model_validate(document), catalog).layout.zero_stage == 1


@pytest.mark.parametrize(
    ("framework", "overlaps"),
    [("megatron", True), ("torchtitan", True), ("deepspeed", False), ("reference", False)],
)
def test_megatron_and_torchtitan_plan_overlapped_pipeline_transfers(
    catalog: Catalog, framework: str, overlaps: bool
) -> None:
    # Megatron-LM's overlap_p2p_comm is on by default (core_v0.19.0 training/arguments.py:
    # --no-overlap-p2p-communication, store_false) and the launcher leaves it on.
    # PyTorch's interleaved schedule runtime posts receives early (torch 2.13
    # pipelining/schedules.py, _add_send_recv); the reference trainer does not pipeline.
    spec = spec_of(job={"framework": framework})
    assert resolve(spec, catalog).workload.pipeline_p2p_overlap is overlaps
    # DeepSpeed reduces gradients after the backward pass without ZeRO or with a
    # pipeline, the reference trainer with ZeRO-0 and tensor parallelism (its DDP cannot
    # take DTensor parameters); the others overlap the reduction in every layout.
    expected = {
        "deepspeed": "sharded-without-pipeline",
        "reference": "except-unsharded-with-tensor",
    }.get(framework, "always")
    assert resolve(spec, catalog).workload.reduction_overlap == expected
    # torchtitan's selective recomputation is its per-op policy; the others recompute the
    # attention core.
    selective = "every-other-matmul" if framework == "torchtitan" else "attention"
    assert resolve(spec, catalog).workload.selective_recompute == selective
    # torchtitan alone synchronises gradients on every micro-batch (without a pipeline).
    every = framework == "torchtitan"
    assert resolve(spec, catalog).workload.sync_every_micro_batch is every


def test_a_zero_pin_the_framework_cannot_run_names_those_that_can(catalog: Catalog) -> None:
    document = {**SMALL, "parallelism": {"zeroStage": 3}, "job": {"framework": "megatron"}}
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate(document), catalog)
    ((path, message),) = raised.value.problems
    assert path == "parallelism.zeroStage"
    assert "megatron" in message
    assert "deepspeed" in message


def test_reference_trainer_tensor_degrees_split_every_width(catalog: Catalog) -> None:
    odd_vocab = {
        **SMALL,
        "model": {"preset": "llama2-7b", "vocabSize": 32001},
        "objective": {"maxGPUs": 64},
    }
    result = plan(TrainingPlanSpec.model_validate(odd_vocab), catalog)
    layouts = [result.layout, *(a.layout for a in result.alternatives)]
    assert {layout.tensor for layout in layouts} == {1}
    megatron = {**odd_vocab, "job": {"framework": "megatron"}}
    padded = plan(TrainingPlanSpec.model_validate(megatron), catalog)
    assert any(
        layout.tensor > 1 for layout in [padded.layout, *(a.layout for a in padded.alternatives)]
    )
    pinned = {**odd_vocab, "parallelism": {"tensor": 2}, "objective": {"gpus": 8}}
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate(pinned), catalog)
    ((path, message),) = raised.value.problems
    assert path == "parallelism.tensor"
    assert "vocabSize (32001)" in message


@pytest.mark.parametrize(("batch", "deadline"), [(16_777_216, "10m"), (1024, "0.001s")])
def test_a_deadline_shorter_than_one_step_names_the_batch(
    catalog: Catalog, batch: int, deadline: str
) -> None:
    """When one optimizer step alone outlasts the deadline, more GPUs cannot help: the
    reason says so and names the batch, and never rounds the deadline to 0s."""
    spec = spec_of(batch={"globalBatchSize": batch}, objective={"deadline": deadline})
    with pytest.raises(InfeasiblePlanError) as caught:
        plan(spec, catalog)
    (reason,) = caught.value.reasons
    assert reason.startswith(f"One optimizer step of the global batch ({batch:,} sequences")
    assert "batch.globalBatchSize" in reason
    assert "deadline of 0s" not in reason
    assert f"deadline of {format_duration(parse_duration_seconds(deadline))}." in reason


WIDE_70B: dict[str, Any] = {
    "model": {"preset": "llama2-70b"},
    "data": {"tokens": 2.0e12},
    "batch": {"globalBatchSize": 1024},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 2048},
}
"""Llama 2 70B on 2,048 GPUs, where Megatron-LM's best layouts are pipelined."""


def _chosen_layouts(result: Plan) -> list[Any]:
    return [result.layout, *(alternative.layout for alternative in result.alternatives)]


def test_the_reference_trainer_is_planned_without_a_pipeline(catalog: Catalog) -> None:
    megatron_spec = {**WIDE_70B, "job": {"framework": "megatron"}}
    megatron = plan(TrainingPlanSpec.model_validate(megatron_spec), catalog)
    assert megatron.layout.pipeline > 1
    default = plan(TrainingPlanSpec.model_validate(WIDE_70B), catalog)
    assert {layout.pipeline for layout in _chosen_layouts(default)} == {1}
    assert {layout.virtual_pipeline_stages for layout in _chosen_layouts(default)} == {1}
    # (tests/unit/test_plans_launch.py runs the trainer's own checks on such plans.)
    # A program of the user's own under the reference framework reads the same
    # environment and may pipeline: the search offers pipelines again.
    own = {**WIDE_70B, "job": OWN_PROGRAM}
    mine = plan(TrainingPlanSpec.model_validate(own), catalog)
    assert any(layout.pipeline > 1 for layout in _chosen_layouts(mine))


@pytest.mark.parametrize(
    ("section", "value", "path"),
    [
        ("parallelism", {"pipeline": 2}, "parallelism.pipeline"),
        ("training", {"precision": "fp8"}, "training.precision"),
    ],
)
def test_what_the_reference_trainer_refuses_is_refused_when_planned(
    catalog: Catalog, section: str, value: dict[str, Any], path: str
) -> None:
    document = {**SMALL, "hardware": {"gpuType": "H100-SXM5-80GB", "gpusPerNode": 8}}
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate({**document, section: value}), catalog)
    ((where, message),) = raised.value.problems
    assert where == path
    assert "reference trainer" in message
    assert "megatron" in message
    assert "torchtitan" in message
    # Megatron-LM runs both, and so may the user's own program.
    for job in ({"framework": "megatron"}, OWN_PROGRAM):
        plan(TrainingPlanSpec.model_validate({**document, section: value, "job": job}), catalog)


def test_deepspeed_plans_its_tensor_parallelism_with_zero_2_at_most(catalog: Catalog) -> None:
    # DeepSpeed's AutoTP works with ZeRO 0-2; its launcher refuses stage 3 with it.
    job = {"framework": "deepspeed", "command": ["python", "train.py"]}
    result = plan(TrainingPlanSpec.model_validate({**WIDE_70B, "job": job}), catalog)
    chosen = _chosen_layouts(result)
    assert any(layout.tensor > 1 for layout in chosen)
    assert all(layout.zero_stage <= 2 for layout in chosen if layout.tensor > 1)
    # AutoTP shards the linear layers only: no sequence parallelism, and the plan's
    # activations count whole norms and residuals on every tensor rank.
    assert not any(layout.sequence_parallel for layout in chosen)
    with_sp = {**WIDE_70B, "job": job, "parallelism": {"tensor": 2, "sequenceParallel": True}}
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate(with_sp), catalog)
    ((path, _),) = raised.value.problems
    assert path == "parallelism.sequenceParallel"
    pinned = {**WIDE_70B, "job": job, "parallelism": {"tensor": 2, "zeroStage": 3}}
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate(pinned), catalog)
    ((path, message),) = raised.value.problems
    assert path == "parallelism.zeroStage"
    assert "deepspeed runs ZeRO stage 0, 1, 2 with this pipeline and tensor degree" in message


def test_torchtitan_fp16_is_refused_when_planned(catalog: Catalog) -> None:
    # torchtitan has no loss scaling; its launcher refuses fp16 as well.
    document = {**SMALL, "training": {"precision": "fp16"}, "job": {"framework": "torchtitan"}}
    with pytest.raises(PlanInputError) as raised:
        plan(TrainingPlanSpec.model_validate(document), catalog)
    ((path, message),) = raised.value.problems
    assert path == "training.precision"
    assert "torchtitan has no fp16 training" in message
    document["job"] = {"framework": "megatron"}
    assert plan(TrainingPlanSpec.model_validate(document), catalog).gpus == 8


@pytest.mark.parametrize(
    ("framework", "kernels", "gather_overlap"),
    [
        ("megatron", "megatron-core", True),
        ("reference", "pytorch", False),
        ("torchtitan", "pytorch", False),
        ("deepspeed", "pytorch", False),
    ],
)
def test_the_framework_picks_the_kernels(
    catalog: Catalog, framework: str, kernels: str, gather_overlap: bool
) -> None:
    document = {**SMALL, "job": {"framework": framework}}
    resolved = resolve(TrainingPlanSpec.model_validate(document), catalog)
    assert resolved.workload.kernels == kernels
    # Megatron-LM's launcher writes --overlap-param-gather with its distributed optimizer.
    assert resolved.workload.param_gather_overlap is gather_overlap


def test_megatron_plans_hopper_faster_than_pytorch_kernels(catalog: Catalog) -> None:
    # NeMo's published H100 steps (Megatron-Core) are shorter than PyTorch's on the same
    # part: the same run planned for Megatron-LM takes less time there.
    def seconds(gpu: str, framework: str) -> float:
        document = {
            **SMALL,
            "hardware": {"gpuType": gpu, "gpusPerNode": 8},
            "batch": {"globalBatchSize": 64, "microBatchSize": 1},
            "parallelism": {"tensor": 1, "pipeline": 1, "zeroStage": 1},
            "job": {"framework": framework},
        }
        return plan(TrainingPlanSpec.model_validate(document), catalog).step_seconds

    assert seconds("H100-SXM5-80GB", "megatron") < 0.9 * seconds("H100-SXM5-80GB", "torchtitan")
