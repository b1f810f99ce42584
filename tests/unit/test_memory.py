"""Memory per GPU against Korthikanti et al. 2022 (activations) and ZeRO (model states)."""

import dataclasses
from itertools import pairwise
from typing import Any

import pytest

from tests.builders import make_layout
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import GPUSpec
from trainplan.planner.layout import (
    AttentionKernel,
    Layout,
    Optimizer,
    Precision,
    Workload,
)
from trainplan.planner.memory import (
    checkpoint_bytes,
    checkpointed_layer_bytes_per_token,
    estimate_memory,
    in_flight_layer_passes,
    layer_activation_bytes_per_token,
    stage_parameter_count,
    state_bytes_per_parameter,
)
from trainplan.planner.search import divisors
from trainplan.planner.shapes import ModelShape, layer_parameter_count, parameter_count
from trainplan.planner.stages import split_of

MICRO_BATCH = 4


def gpt(
    layers: int = 24,
    hidden: int = 2048,
    heads: int = 16,
    seq: int = 2048,
    vocab: int = 51200,
    *,
    tied: bool = True,
) -> ModelShape:
    """A GPT with multi-head attention and a non-gated 4h MLP, as in Korthikanti et al."""
    return ModelShape(
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=heads,
        ffn_hidden_size=4 * hidden,
        gated_mlp=False,
        vocab_size=vocab,
        sequence_length=seq,
        tied_embeddings=tied,
    )


SHAPES = [
    gpt(),
    gpt(96, 12288, 96, 2048),  # GPT-3 175B (Korthikanti et al. 2022, Table 3)
    gpt(4, 512, 8, 4096),  # s > h
]


def layout(tensor: int = 1, pipeline: int = 1, data: int = 1, **options: Any) -> Layout:
    """`make_layout` with this file's micro-batch by default."""
    options.setdefault("micro", MICRO_BATCH)
    return make_layout(tensor, pipeline, data, **options)


def layer_bytes(
    shape: ModelShape,
    lay: Layout,
    attention: AttentionKernel = "standard",
) -> float:
    """Activation bytes of one layer for one micro-batch (s x b tokens), bf16."""
    tokens = shape.sequence_length * lay.micro_batch_size
    return layer_activation_bytes_per_token(shape, lay, "bf16", attention) * tokens


def checkpointed_bytes(
    shape: ModelShape, lay: Layout, attention: AttentionKernel = "standard"
) -> float:
    tokens = shape.sequence_length * lay.micro_batch_size
    return checkpointed_layer_bytes_per_token(shape, lay, "bf16", attention) * tokens


def sbh(shape: ModelShape, micro: int = MICRO_BATCH) -> float:
    return shape.sequence_length * micro * shape.hidden_size


def score_ratio(shape: ModelShape) -> float:
    """a s / h of Korthikanti et al.: score-matrix bytes relative to s b h."""
    return shape.attention_heads * shape.sequence_length / shape.hidden_size


# ----------------------------------------------------------------- activations


@pytest.mark.parametrize("shape", SHAPES)
def test_activations_without_parallelism_match_korthikanti_eq1(shape: ModelShape) -> None:
    # Korthikanti et al. 2022, eq. (1): s b h (34 + 5 a s / h) bytes per layer.
    expected = sbh(shape) * (34 + 5 * score_ratio(shape))
    assert layer_bytes(shape, layout()) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tensor", [2, 4, 8])
def test_tensor_parallel_without_sp_matches_korthikanti_eq2(shape: ModelShape, tensor: int) -> None:
    # Korthikanti et al. 2022, eq. (2): s b h (10 + 24 / t + 5 a s / (h t)).
    expected = sbh(shape) * (10 + 24 / tensor + 5 * score_ratio(shape) / tensor)
    assert layer_bytes(shape, layout(tensor)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tensor", [2, 4, 8])
def test_sequence_parallel_divides_everything_by_t(shape: ModelShape, tensor: int) -> None:
    # Korthikanti et al. 2022, eq. (4) / Table 2: s b h (34 + 5 a s / h) / t.
    expected = sbh(shape) * (34 + 5 * score_ratio(shape)) / tensor
    assert layer_bytes(shape, layout(tensor, sp=True)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tensor", [1, 2, 8])
def test_a_model_without_dropout_keeps_no_masks(shape: ModelShape, tensor: int) -> None:
    # Korthikanti et al. 2022, section 4.1: of eq. (2)'s 10 s b h outside the tensor-parallel
    # region 2 s b h are the two dropout masks, and of the 5 a s^2 b of the scores the mask
    # (a s^2 b) and the dropout output (2 a s^2 b); at p = 0 PyTorch keeps neither.
    plain = dataclasses.replace(shape, dropout=False)
    expected = sbh(shape) * (8 + 24 / tensor + 2 * score_ratio(shape) / tensor)
    assert layer_bytes(plain, layout(tensor)) == pytest.approx(expected, rel=1e-12)
    assert layer_bytes(plain, layout(tensor), "flash") == pytest.approx(
        sbh(shape) * (8 + 24 / tensor), rel=1e-12
    )
    assert layer_bytes(plain, layout(tensor, sp=True), "flash") == pytest.approx(
        sbh(shape) * 32 / tensor, rel=1e-12
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tensor", [1, 2, 8])
def test_flash_attention_drops_the_score_term(shape: ModelShape, tensor: int) -> None:
    # Dao et al. 2022: a fused kernel stores no s x s matrix, leaving eq. (2) without 5as/ht.
    expected = sbh(shape) * (10 + 24 / tensor)
    assert layer_bytes(shape, layout(tensor), "flash") == pytest.approx(expected, rel=1e-12)
    with_sp = layout(tensor, sp=True)
    assert layer_bytes(shape, with_sp, "flash") == pytest.approx(
        sbh(shape) * 34 / tensor, rel=1e-12
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tensor", [1, 2, 8])
def test_full_checkpointing_keeps_only_the_layer_input(shape: ModelShape, tensor: int) -> None:
    # Korthikanti et al. 2022, Table 2, full recompute: 2 s b h per layer (e = 2 bytes).
    for attention in ("standard", "flash"):
        lay = layout(tensor, checkpointing="full")
        assert checkpointed_bytes(shape, lay, attention) == pytest.approx(2 * sbh(shape))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tensor", [1, 2, 8])
def test_selective_checkpointing_drops_only_the_scores(shape: ModelShape, tensor: int) -> None:
    # Korthikanti et al. 2022, Table 2: s b h (10 + 24/t) without SP, s b h 34 / t with SP.
    plain = layout(tensor, checkpointing="selective")
    assert checkpointed_bytes(shape, plain) == pytest.approx(
        sbh(shape) * (10 + 24 / tensor), rel=1e-12
    )
    with_sp = layout(tensor, checkpointing="selective", sp=True)
    assert checkpointed_bytes(shape, with_sp) == pytest.approx(sbh(shape) * 34 / tensor, rel=1e-12)
    # With a fused kernel there is no score matrix to drop: selective keeps everything.
    assert checkpointed_bytes(shape, plain, "flash") == pytest.approx(
        layer_bytes(shape, layout(tensor), "flash"), rel=1e-12
    )


def test_no_checkpointing_keeps_all_activations() -> None:
    shape = gpt()
    lay = layout(2)
    assert checkpointed_bytes(shape, lay) == layer_bytes(shape, lay)


# ----------------------------------------------------------------- model states


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [
        # ZeRO section 3.1: 12 bytes of Adam state; gradients kept in fp32 as Megatron-LM does.
        ("bf16", "adamw", (2.0, 4.0, 12.0)),
        ("fp16", "adamw", (2.0, 4.0, 12.0)),
        ("fp32", "adamw", (4.0, 4.0, 8.0)),  # two fp32 moments, no master copy
        ("bf16", "sgd", (2.0, 4.0, 8.0)),  # master copy and momentum
        ("fp16", "sgd", (2.0, 4.0, 8.0)),
        ("fp32", "sgd", (4.0, 4.0, 4.0)),  # momentum only
        ("fp8", "adamw", (3.0, 4.0, 12.0)),  # bf16 weights plus a 1-byte fp8 copy
    ],
)
def test_state_bytes_per_parameter(
    precision: Precision, optimizer: Optimizer, expected: tuple[float, float, float]
) -> None:
    state = state_bytes_per_parameter(precision, optimizer)
    assert (state.weights, state.gradients, state.optimizer) == expected
    # A checkpoint holds the weights and the optimizer state, not the gradients.
    assert checkpoint_bytes(1e9, precision, optimizer) == 1e9 * (expected[0] + expected[2])


def workload(gpu: GPUSpec, shape: ModelShape, attention: AttentionKernel = "flash") -> Workload:
    return Workload(
        shape=shape,
        gpu=gpu,
        gpus_per_node=8,
        global_batch_size=256,
        precision="bf16",
        optimizer="adamw",
        attention=attention,
    )


@pytest.mark.parametrize("tensor", [1, 2])
def test_zero_stages_shard_optimizer_then_gradients_then_weights(
    a100: GPUSpec, calibration: Calibration, tensor: int
) -> None:
    """ZeRO (Rajbhandari et al. 2020, section 5): P_os, P_os+g, P_os+g+p over d ranks."""
    work = workload(a100, gpt())
    d = 8
    base = estimate_memory(work, layout(tensor, data=d, zero=0), calibration)
    stages = {
        z: estimate_memory(work, layout(tensor, data=d, zero=z), calibration) for z in (1, 2, 3)
    }

    def close(value: int, reference: float) -> bool:
        return value == pytest.approx(reference, abs=1)

    assert close(stages[1].optimizer_bytes, base.optimizer_bytes / d)
    assert stages[1].gradients_bytes == base.gradients_bytes
    assert stages[1].weights_bytes == base.weights_bytes
    assert close(stages[2].optimizer_bytes, base.optimizer_bytes / d)
    assert close(stages[2].gradients_bytes, base.gradients_bytes / d)
    assert stages[2].weights_bytes == base.weights_bytes
    assert close(stages[3].optimizer_bytes, base.optimizer_bytes / d)
    assert close(stages[3].gradients_bytes, base.gradients_bytes / d)
    assert close(stages[3].weights_bytes, base.weights_bytes / d)
    # Activations do not depend on how the model states are sharded.
    for estimate in stages.values():
        assert estimate.activations_bytes == base.activations_bytes


def test_model_states_are_bytes_per_parameter_times_stage_parameters(
    a100: GPUSpec, calibration: Calibration
) -> None:
    shape = gpt()
    lay = layout(2, 2, 2)
    estimate = estimate_memory(workload(a100, shape), lay, calibration)
    params = stage_parameter_count(shape, lay)
    assert estimate.weights_bytes == round(2 * params)
    assert estimate.gradients_bytes == round(4 * params)
    assert estimate.optimizer_bytes == round(12 * params)
    assert estimate.model_state_bytes == round(2 * params) + round(4 * params) + round(12 * params)


def test_total_is_the_sum_of_the_parts(a100: GPUSpec, calibration: Calibration) -> None:
    estimate = estimate_memory(workload(a100, gpt()), layout(2, 2, 2, zero=1), calibration)
    parts = (
        estimate.weights_bytes
        + estimate.gradients_bytes
        + estimate.optimizer_bytes
        + estimate.activations_bytes
        + estimate.logits_bytes
        + estimate.overhead_bytes
    )
    assert estimate.total_bytes == parts
    assert estimate.fits == (parts <= a100.memory_bytes)
    assert estimate.capacity_bytes == a100.memory_bytes


@pytest.mark.parametrize("pipeline", [1, 2, 4, 8])
@pytest.mark.parametrize("accumulation", [1, 2, 3, 4, 8, 16])
def test_in_flight_passes_are_layers_per_stage_times_min_p_m(
    pipeline: int, accumulation: int
) -> None:
    # Korthikanti et al. 2022, section 4.2.3: the first stage holds p micro-batches of L/p
    # layers under 1F1B, or m when there are fewer micro-batches.
    shape = gpt(layers=48)
    lay = layout(1, pipeline, accumulation=accumulation)
    expected = shape.layers / pipeline * min(pipeline, accumulation)
    assert in_flight_layer_passes(shape, lay) == pytest.approx(expected)


@pytest.mark.parametrize("pipeline", [2, 4, 8])
@pytest.mark.parametrize("virtual", [2, 3])
def test_interleaving_multiplies_in_flight_passes(pipeline: int, virtual: int) -> None:
    # Korthikanti et al. 2022, section 4.2.3: interleaving with v chunks adds 1 + (p-1)/(p v).
    shape = gpt(layers=48)
    accumulation = 2 * pipeline
    plain = in_flight_layer_passes(shape, layout(1, pipeline, accumulation=accumulation))
    interleaved = in_flight_layer_passes(
        shape, layout(1, pipeline, accumulation=accumulation, virtual=virtual)
    )
    assert interleaved == pytest.approx(plain * (1 + (pipeline - 1) / (pipeline * virtual)))


@pytest.mark.parametrize(("pipeline", "virtual"), [(4, 2), (8, 3), (16, 8)])
def test_interleaving_holds_no_more_than_every_pass_of_the_step(
    pipeline: int, virtual: int
) -> None:
    # With m = p micro-batches, Megatron-LM's interleaved warm-up (2 (p - 1) + (v - 1) p
    # chunk passes on the first stage) exceeds the step's m v passes: the whole step is
    # warm-up and the first stage holds every micro-batch of its layers, as without
    # interleaving, not Korthikanti et al.'s 1 + (p - 1) / (p v) times more. Llama 3 405B
    # (arXiv 2407.21783, Table 4 and section 3.3.2) ran 16 micro-batches on 16 stages so.
    shape = gpt(layers=16 * pipeline)
    interleaved = layout(1, pipeline, accumulation=pipeline, virtual=virtual)
    assert in_flight_layer_passes(shape, interleaved) == pytest.approx(16 * pipeline)
    plain = layout(1, pipeline, accumulation=pipeline)
    assert in_flight_layer_passes(shape, plain) == in_flight_layer_passes(shape, interleaved)


@pytest.mark.parametrize(("pipeline", "virtual", "accumulation"), [(4, 2, 8), (8, 4, 32)])
def test_the_last_interleaved_stage_holds_its_warm_up(
    pipeline: int, virtual: int, accumulation: int
) -> None:
    # Without interleaving the last stage runs each forward's backward at once (one
    # micro-batch held); interleaved, it first runs (v - 1) p forwards of its earlier chunks
    # (Megatron-LM's warm-up), so it holds (v - 1) p + 1 chunk passes of L / (p v) layers.
    split = split_of(48, pipeline)
    passes = (virtual - 1) * pipeline + 1
    assert split.last_in_flight(accumulation, virtual) == pytest.approx(
        48 / pipeline * passes / virtual
    )
    assert split.last_in_flight(accumulation) == 48 / pipeline


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tensor", [1, 2, 8])
def test_more_pipeline_stages_never_increase_weights_per_gpu(
    a100: GPUSpec, calibration: Calibration, tied: bool, tensor: int
) -> None:
    shape = gpt(layers=48, tied=tied)
    work = workload(a100, shape)
    weights = [
        estimate_memory(work, layout(tensor, p), calibration).weights_bytes
        for p in divisors(shape.layers)
    ]
    params = [stage_parameter_count(shape, layout(tensor, p)) for p in divisors(shape.layers)]
    assert all(later <= earlier for earlier, later in pairwise(weights))
    assert all(later <= earlier for earlier, later in pairwise(params))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tensor", [1, 2, 4, 8])
def test_single_stage_holds_the_whole_model_over_t(tied: bool, tensor: int) -> None:
    """With one stage, t x the stage's parameters is the model without its final norm."""
    shape = gpt(tied=tied)
    stage = stage_parameter_count(shape, layout(tensor))
    assert stage * tensor == pytest.approx(parameter_count(shape) - shape.hidden_size, rel=1e-12)


def test_zero3_gathers_two_full_layers(a100: GPUSpec, calibration: Calibration) -> None:
    """ZeRO-3 overhead exceeds ZeRO-2's by the current and the prefetched layer's weights."""
    shape = gpt()
    work = workload(a100, shape)
    two = estimate_memory(work, layout(data=8, zero=2), calibration)
    three = estimate_memory(work, layout(data=8, zero=3), calibration)
    # bf16 weights: 2 bytes each, for two layers.
    expected = 2 * layer_parameter_count(shape) * 2
    assert three.overhead_bytes - two.overhead_bytes == pytest.approx(expected, abs=2)
