"""Pipeline degrees that do not divide the layers (issue: published layouts such as
Llama 3 405B's 126 layers on 16 stages): the split (`planner.stages`), the planner's time
and memory of the slowest and fullest stage, the search and the pins, and the framework
arguments that place the stages (Megatron-LM's first and last stage layer counts,
torchtitan's split points) or the refusal (DeepSpeed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests import torchtitan_upstream
from tests.unit.test_launcher import (  # noqa: F401 (the autouse fixture planned() needs)
    _remember_catalog,
    flag_values,
    merged,
    objects_for,
    planned,
    program_args,
)
from trainplan.api import TrainingPlanSpec
from trainplan.launcher import frameworks
from trainplan.planner import Catalog, PlanInputError, plan
from trainplan.planner.frameworks import FRAMEWORK_LIMITS
from trainplan.planner.layout import Layout
from trainplan.planner.memory import estimate_memory, stage_parameter_count
from trainplan.planner.resolve import resolve
from trainplan.planner.search import LayoutPins, generate_layouts, pipeline_degrees
from trainplan.planner.shapes import ModelShape, layer_parameter_count
from trainplan.planner.stages import (
    StageSplit,
    chunk_layers,
    interleaved_placement,
    split_of,
    stage_layers,
)
from trainplan.planner.steptime import step_time

UPSTREAM = Path(__file__).resolve().parent.parent / "data" / "upstream"

# --- the split ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pipeline", "split"),
    [
        (32, 4, (8, 8, 8, 8)),
        (30, 4, (7, 8, 8, 7)),
        (27, 4, (7, 7, 7, 6)),
        (5, 2, (3, 2)),
        (40, 3, (13, 14, 13)),
        # Llama 3 405B: 126 layers on 16 stages, one layer fewer on the first and the last
        # (Dubey et al. 2024, arXiv 2407.21783, section 3.3.2).
        (126, 16, (7, *(8,) * 14, 7)),
    ],
)
def test_the_middle_stages_hold_the_most_and_the_edges_the_rest(
    layers: int, pipeline: int, split: tuple[int, ...]
) -> None:
    assert stage_layers(layers, pipeline) == split


@pytest.mark.parametrize(("layers", "pipeline"), [(9, 8), (3, 4), (7, 0)])
def test_a_split_that_cannot_be_made_is_none(layers: int, pipeline: int) -> None:
    assert stage_layers(layers, pipeline) is None


def test_every_split_holds_every_layer_once() -> None:
    for layers in range(1, 161):
        for pipeline in range(1, layers + 1):
            split = stage_layers(layers, pipeline)
            if split is None:
                continue
            assert sum(split) == layers
            assert len(split) == pipeline
            assert min(split) >= 1
            assert max(split) == split[len(split) // 2] or pipeline <= 2
            assert split[0] >= split[-1]


def test_a_degree_without_a_split_is_priced_evenly() -> None:
    assert split_of(9, 8) == StageSplit(9 / 8, 9 / 8, 9 / 8, 8)
    assert split_of(30, 4) == StageSplit(7.0, 8.0, 7.0, 4)


@pytest.mark.parametrize(("layers", "pipeline"), [(30, 4), (5, 2), (96, 7), (70, 12), (8, 1)])
def test_the_split_summary_agrees_with_the_stages(layers: int, pipeline: int) -> None:
    stages = stage_layers(layers, pipeline)
    assert stages is not None
    split = split_of(layers, pipeline)
    assert split.most == max(stages)
    assert split.most_before_last == max(stages[:-1], default=0)
    for micro_batches in (1, 2, pipeline, 3 * pipeline):
        expected = max(
            count * min(pipeline - index, micro_batches) for index, count in enumerate(stages)
        )
        assert split.most_in_flight(micro_batches) == expected


# --- time and memory ----------------------------------------------------------------------

SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b", "layers": 30},
    "data": {"tokens": 1.0e9},
    "batch": {"globalBatchSize": 64, "microBatchSize": 1},
    "hardware": {"gpuType": "A100-SXM4-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 16},
    "parallelism": {"tensor": 1, "pipeline": 4, "zeroStage": 1},
    "job": {"framework": "megatron"},
}
"""A 30-layer Llama 2 7B on 4 pipeline stages of 7, 8, 8 and 7 layers."""


def _workload_and_layout(catalog: Catalog, layers: int) -> tuple[Any, Layout]:
    spec = TrainingPlanSpec.model_validate(merged(SPEC, {"model": {"layers": layers}}))
    resolved = resolve(spec, catalog)
    layout = Layout(
        tensor=1,
        pipeline=4,
        data=4,
        micro_batch_size=1,
        accumulation_steps=16,
        zero_stage=1,
        checkpointing="none",
    )
    return resolved.workload, layout


def test_the_slowest_stage_sets_the_time(catalog: Catalog) -> None:
    """30 layers on 4 stages (7, 8, 8, 7) run at the pace of an 8-layer stage: slower
    than 28 layers (7 per stage, the last with the logits), not slower than 32 (8 per
    stage, the last with the logits)."""
    calibration = catalog.calibration
    uneven = step_time(*_workload_and_layout(catalog, 30), calibration)
    even = step_time(*_workload_and_layout(catalog, 32), calibration)
    seven = step_time(*_workload_and_layout(catalog, 28), calibration)
    assert seven.compute_seconds < uneven.compute_seconds <= even.compute_seconds
    assert seven.pipeline_bubble_seconds < uneven.pipeline_bubble_seconds


def test_the_fullest_stage_sets_the_memory(catalog: Catalog) -> None:
    """A middle stage's 8 layers outweigh an edge stage's 7 layers and its vocabulary
    matrix (32,000 x 4,096), so it sets the weights per GPU."""
    workload, layout = _workload_and_layout(catalog, 30)
    shape = workload.shape
    assert stage_parameter_count(shape, layout) == 8 * layer_parameter_count(shape)
    assert 7 * layer_parameter_count(shape) + shape.vocab_size * shape.hidden_size < (
        8 * layer_parameter_count(shape)
    )
    even_workload, even_layout = _workload_and_layout(catalog, 28)
    assert estimate_memory(workload, layout, catalog.calibration).total_bytes > (
        estimate_memory(even_workload, even_layout, catalog.calibration).total_bytes
    )


# --- search and pins ----------------------------------------------------------------------


def test_the_search_adds_uneven_powers_of_two_where_the_framework_places_them(
    catalog: Catalog,
) -> None:
    spec = TrainingPlanSpec.model_validate(merged(SPEC, {"parallelism": None}))
    workload = resolve(spec, catalog).workload
    for framework, uneven in (("megatron", True), ("torchtitan", True), ("deepspeed", False)):
        pins = LayoutPins(framework=FRAMEWORK_LIMITS[framework])
        degrees = pipeline_degrees(workload, pins)
        assert {1, 2, 3, 5, 6, 10, 15} <= set(degrees)  # the divisors of 30
        assert (4 in degrees and 8 in degrees) == uneven, framework


def test_a_pinned_uneven_degree_is_planned(catalog: Catalog) -> None:
    spec = merged(SPEC, {"parallelism": {"virtualPipelineStages": 1}})
    result = plan(TrainingPlanSpec.model_validate(spec), catalog)
    assert (result.layout.pipeline, result.gpus) == (4, 16)
    assert any(
        "4 pipeline stages (7 layers on the first, 7 on the last, 8 on each other)" in line
        for line in result.explanation
    )


def test_deepspeed_refuses_an_uneven_pin(catalog: Catalog) -> None:
    spec = TrainingPlanSpec.model_validate(merged(SPEC, {"job": {"framework": "deepspeed"}}))
    with pytest.raises(PlanInputError) as caught:
        plan(spec, catalog)
    ((path, message),) = caught.value.problems
    assert path == "parallelism.pipeline"
    assert "4 does not divide layers (30)" in message
    assert "megatron and torchtitan place uneven stages" in message


@pytest.mark.parametrize(
    ("layers", "pipeline", "chunks", "placement"),
    [
        (32, 4, 2, "even"),
        (32, 4, 3, None),
        # 36 on 5 stages: 6, 8, 8, 8, 6; the chunk count divides every stage.
        (36, 5, 2, "first-last"),
        (36, 5, 4, None),
        # 30 on 4 stages: 7, 8, 8, 7 = (30 + 2) / 4 - 1 on the edges.
        (30, 4, 2, "embedding-loss"),
        (30, 4, 8, "embedding-loss"),
        (30, 4, 3, None),
        # Llama 3 405B: 16 ranks of 8 chunks, the first holding only the embedding and the
        # last only the output layer and loss (arXiv 2407.21783, section 3.3.2).
        (126, 16, 8, "embedding-loss"),
        (27, 4, 2, None),
        (9, 8, 1, None),
    ],
)
def test_interleaved_chunks_are_placed_where_megatron_places_them(
    layers: int, pipeline: int, chunks: int, placement: str | None
) -> None:
    assert interleaved_placement(layers, pipeline, chunks) == placement


@pytest.mark.parametrize(
    ("layers", "pipeline", "chunks", "sizes"),
    [
        (32, 4, 1, (8, 8, 8, 8)),
        (32, 2, 2, (8, 8, 8, 8)),
        (30, 4, 1, (7, 8, 8, 7)),
        # 36 on 5 stages (6, 8, 8, 8, 6) in 2 chunks: each rank's share halved, in the
        # looped order (chunk k on rank k mod 5).
        (36, 5, 2, (3, 4, 4, 4, 3, 3, 4, 4, 4, 3)),
        # 30 on 4 stages in 2 chunks, embedding and loss counted: 32 slots, 4 a chunk.
        (30, 4, 2, (3, 4, 4, 4, 4, 4, 4, 3)),
        (30, 4, 3, None),
    ],
)
def test_chunks_hold_their_stages_layers_in_model_order(
    layers: int, pipeline: int, chunks: int, sizes: tuple[int, ...] | None
) -> None:
    found = chunk_layers(layers, pipeline, chunks)
    assert found == sizes
    if found is not None:
        assert sum(found) == layers
        per_rank = [sum(found[k::pipeline]) for k in range(pipeline)]
        assert tuple(per_rank) == stage_layers(layers, pipeline)


def test_llama3_405b_chunks_leave_the_embedding_and_the_loss_alone() -> None:
    """126 layers on 16 ranks of 8 chunks: one layer a chunk, but the first chunk holds
    only the embedding and the last only the output layer and loss (arXiv 2407.21783,
    section 3.3.2)."""
    sizes = chunk_layers(126, 16, 8)
    assert sizes is not None
    assert (len(sizes), sizes[0], sizes[-1], set(sizes[1:-1])) == (128, 0, 0, {1})


def test_the_search_interleaves_an_uneven_split_where_the_framework_can(
    catalog: Catalog,
) -> None:
    workload = resolve(TrainingPlanSpec.model_validate(SPEC), catalog).workload
    chunks = {
        framework: {
            layout.virtual_stages
            for layout in generate_layouts(
                workload, 16, LayoutPins(pipeline=4, framework=FRAMEWORK_LIMITS[framework])
            )
        }
        for framework in ("megatron", "torchtitan", "deepspeed")
    }
    # DeepSpeed splits a pipeline evenly only: no layout at all on 4 stages of 30 layers.
    assert chunks == {"megatron": {1, 2, 4, 8}, "torchtitan": {1, 2, 4, 8}, "deepspeed": set()}


def test_interleaving_shrinks_the_bubble_of_an_uneven_split(catalog: Catalog) -> None:
    workload, layout = _workload_and_layout(catalog, 30)
    plain = step_time(workload, layout, catalog.calibration)
    interleaved = step_time(
        workload, dataclasses.replace(layout, virtual_stages=4), catalog.calibration
    )
    assert interleaved.pipeline_bubble_seconds == pytest.approx(plain.pipeline_bubble_seconds / 4)
    assert interleaved.compute_seconds == plain.compute_seconds


def test_a_pinned_interleaving_of_an_uneven_split_is_planned(catalog: Catalog) -> None:
    spec = merged(SPEC, {"parallelism": {"virtualPipelineStages": 2}})
    result = plan(TrainingPlanSpec.model_validate(spec), catalog)
    assert (result.layout.pipeline, result.layout.virtual_pipeline_stages) == (4, 2)
    assert any(
        "4 pipeline stages (7 layers on the first, 7 on the last, 8 on each other; 2"
        " interleaved chunks each, the embedding and the loss counted as layers)" in line
        for line in result.explanation
    )


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_an_interleaving_that_cannot_be_placed_is_refused(catalog: Catalog, framework: str) -> None:
    message = "3 chunks per stage cannot split 7 layers on the first stage, 8 on"
    change = {"parallelism": {"virtualPipelineStages": 3}, "job": {"framework": framework}}
    spec = TrainingPlanSpec.model_validate(merged(SPEC, change))
    with pytest.raises(PlanInputError) as caught:
        plan(spec, catalog)
    ((path, text),) = caught.value.problems
    assert path == "parallelism.virtualPipelineStages"
    assert message in text


def test_a_stage_without_a_layer_is_refused() -> None:
    change = {"model": {"layers": 3}}
    with pytest.raises(ValidationError, match=r"model.layers \(3\) must be at least"):
        TrainingPlanSpec.model_validate(merged(SPEC, change))


# --- framework arguments ------------------------------------------------------------------

UNEVEN_JOB: dict[str, Any] = {
    "model": {"layers": 30},
    "parallelism": {"tensor": 1, "pipeline": 4, "virtualPipelineStages": 1, "zeroStage": 1},
}


def test_megatron_gets_the_first_and_last_stage_layer_counts() -> None:
    change = merged(UNEVEN_JOB, {"job": {"framework": "megatron"}})
    flags = flag_values(program_args(objects_for(**change)))
    assert flags["--pipeline-model-parallel-size"] == "4"
    assert flags["--num-layers"] == "30"
    # Megatron-LM splits the other 16 evenly over the 2 middle stages: 8 each.
    assert flags["--decoder-first-pipeline-num-layers"] == "7"
    assert flags["--decoder-last-pipeline-num-layers"] == "7"


def _megatron_pipeline_flags() -> set[str]:
    lines = (UPSTREAM / "megatron-lm-core_v0.19.0-pipeline-flags.txt").read_text().splitlines()
    return {line.split()[0] for line in lines if line.startswith("--")}


def _pipeline_flags(args: list[str]) -> set[str]:
    return {a for a in args if a.startswith("--") and ("pipeline" in a or "virtual" in a)}


def test_megatron_interleaves_with_the_embedding_and_loss_counted_as_layers() -> None:
    """7, 8, 8, 7 layers in 2 chunks per stage: (30 + 2) / 4 = 8 slots per stage, the
    first and last stages' first and last slots the embedding and the loss."""
    change = merged(
        UNEVEN_JOB,
        {"parallelism": {"virtualPipelineStages": 2}, "job": {"framework": "megatron"}},
    )
    args = program_args(objects_for(**change))
    flags = flag_values(args)
    assert flags["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args
    assert "--decoder-first-pipeline-num-layers" not in flags
    assert "--num-layers-per-virtual-pipeline-stage" not in flags
    assert _pipeline_flags(args) <= _megatron_pipeline_flags()


def test_megatron_interleaves_with_first_and_last_stage_counts() -> None:
    """36 layers on 5 stages (6, 8, 8, 8, 6) in 2 chunks: every count divides by 2."""
    change = {
        "model": {"layers": 36},
        "batch": {"globalBatchSize": 80},
        "objective": {"gpus": 40},
        "parallelism": {"tensor": 1, "pipeline": 5, "virtualPipelineStages": 2, "zeroStage": 1},
        "job": {"framework": "megatron"},
    }
    args = program_args(objects_for(**change))
    flags = flag_values(args)
    assert flags["--decoder-first-pipeline-num-layers"] == "6"
    assert flags["--decoder-last-pipeline-num-layers"] == "6"
    assert flags["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--account-for-embedding-in-pipeline-split" not in args
    assert _pipeline_flags(args) <= _megatron_pipeline_flags()


def test_megatron_gets_no_stage_counts_for_an_even_split() -> None:
    change = {"parallelism": {"tensor": 1, "pipeline": 4}, "job": {"framework": "megatron"}}
    flags = flag_values(program_args(objects_for(**change)))
    assert "--decoder-first-pipeline-num-layers" not in flags


def _layer_counts(parts: list[list[str]]) -> list[int]:
    return [sum(1 for name in part if name.startswith("layers.")) for part in parts]


def test_torchtitan_interleaves_an_uneven_split_with_a_module_list_per_chunk() -> None:
    """7, 8, 8, 7 layers in 2 chunks per rank, embedding and loss counted as layers: 8
    chunks of 3, 4, 4, 4, 4, 4, 4, 3 layers, chunk k on rank k mod 4."""
    change = merged(
        UNEVEN_JOB,
        {"parallelism": {"virtualPipelineStages": 2}, "job": {"framework": "torchtitan"}},
    )
    args = program_args(objects_for(**change))
    flags = flag_values(args)
    assert flags["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    parts = torchtitan_upstream.parse(args[2:]).parallelism.module_fqns_per_model_part
    assert _layer_counts(parts) == [3, 4, 4, 4, 4, 4, 4, 3]
    assert parts[0] == ["tok_embeddings", "layers.0", "layers.1", "layers.2"]
    assert parts[-1] == ["layers.27", "layers.28", "layers.29", "norm", "output"]


def test_torchtitan_gets_each_stage_s_modules() -> None:
    change = merged(UNEVEN_JOB, {"job": {"framework": "torchtitan"}})
    _, result = planned(**change)
    args = program_args(objects_for(**change))
    flags = flag_values(args)
    assert result.layout.pipeline == 4
    parts = torchtitan_upstream.parse(args[2:]).parallelism.module_fqns_per_model_part
    assert _layer_counts(parts) == [7, 8, 8, 7]
    assert "--parallelism.pipeline_parallel_layers_per_stage" not in flags


def test_torchtitan_places_a_chunk_with_the_embedding_alone() -> None:
    """Llama 3 405B's placement: 126 layers on 16 stages of 8 chunks, (126 + 2) / 128 = 1
    slot per chunk, so the first chunk holds only the embedding and the last only the
    final norm and the output layer (arXiv 2407.21783, section 3.3.2)."""
    parts_args = frameworks._torchtitan_model_parts(
        ModelShape(
            layers=126,
            hidden_size=16384,
            attention_heads=128,
            kv_heads=8,
            ffn_hidden_size=53248,
            gated_mlp=True,
            vocab_size=128256,
            sequence_length=8192,
            tied_embeddings=False,
        ),
        16,
        8,
    )
    degree = ["--parallelism.pipeline_parallel_degree", "16"]
    config = torchtitan_upstream.parse(
        [*degree, "--parallelism.module_fqns_per_model_part", *parts_args]
    )
    parts = config.parallelism.module_fqns_per_model_part
    assert len(parts) == 128
    assert parts[0] == ["tok_embeddings"]
    assert parts[-1] == ["norm", "output"]
    assert _layer_counts(parts) == [0, *[1] * 126, 0]
