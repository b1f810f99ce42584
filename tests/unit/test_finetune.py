"""Fine-tuning methods in the planner: adapters, frozen bases, 4-bit weights (pure)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from trainplan.api import TrainingPlanSpec
from trainplan.planner import Catalog, plan
from trainplan.planner.finetune import (
    NF4_BYTES_PER_PARAMETER,
    FineTuning,
    adapted_matrices,
    lora_layer_parameter_count,
)
from trainplan.planner.flops import model_flops_per_token
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.memory import estimate_memory
from trainplan.planner.shapes import ModelShape, embedding_parameter_count, parameter_count
from trainplan.planner.steptime import StepTime, step_time

LLAMA2_7B = ModelShape(32, 4096, 32, 32, 11008, True, 32000, 2048, False)
LORA = FineTuning(method="lora", lora_rank=8, lora_targets="query-value")
LAYOUT = Layout(tensor=1, pipeline=1, data=1, micro_batch_size=1, accumulation_steps=1)


def workload(catalog: Catalog, tuning: FineTuning) -> Workload:
    return Workload(
        shape=LLAMA2_7B,
        gpu=catalog.gpu("A100-SXM4-80GB"),
        gpus_per_node=8,
        global_batch_size=1,
        tuning=tuning,
    )


def test_adapter_count_equals_litgpts_published_one() -> None:
    """litgpt's resource table trains 4,194,304 parameters of Llama 2 7B at rank 8 on the
    query and value projections: 2 adapters x 8 x (4096 + 4096) x 32 layers."""
    assert LLAMA2_7B.layers * lora_layer_parameter_count(LLAMA2_7B, LORA) == 4_194_304
    every = replace(LORA, lora_targets="all-linear")
    # q, k, v, o: 4 x (h + h); gate, up: 2 x (h + f); down: f + h.
    per_layer = 8 * (4 * 8192 + 3 * (4096 + 11008))
    assert lora_layer_parameter_count(LLAMA2_7B, every) == per_layer
    assert lora_layer_parameter_count(LLAMA2_7B, FineTuning(method="full")) == 0


def test_frozen_weights_cost_one_backward_multiply() -> None:
    full = model_flops_per_token(LLAMA2_7B)
    lora = model_flops_per_token(LLAMA2_7B, LORA)
    # About 4N instead of 6N: the attention core keeps its 2x backward.
    assert 0.66 < lora / full < 0.70
    assert model_flops_per_token(LLAMA2_7B, FineTuning(method="full")) == full


def test_memory_holds_state_only_for_what_trains(catalog: Catalog) -> None:
    full = estimate_memory(
        workload(catalog, FineTuning(method="full")), LAYOUT, catalog.calibration
    )
    lora = estimate_memory(workload(catalog, LORA), LAYOUT, catalog.calibration)
    qlora = estimate_memory(
        workload(catalog, replace(LORA, method="qlora")), LAYOUT, catalog.calibration
    )
    adapters = 4_194_304
    parameters = parameter_count(LLAMA2_7B)
    assert lora.gradients_bytes == round(adapters * 4)
    assert lora.optimizer_bytes == round(adapters * 12)
    assert lora.weights_bytes == pytest.approx(parameters * 2 + adapters * 2, rel=1e-6)
    # 4-bit layers; the embedding and output matrices stay in bf16.
    matrices = embedding_parameter_count(LLAMA2_7B)
    assert qlora.weights_bytes == pytest.approx(
        (parameters - matrices) * NF4_BYTES_PER_PARAMETER + matrices * 2 + adapters * 2, rel=1e-6
    )
    assert full.gradients_bytes > 1000 * lora.gradients_bytes
    assert qlora.activations_bytes == lora.activations_bytes == full.activations_bytes
    assert qlora.total_bytes < lora.total_bytes < full.total_bytes


def test_adapters_step_faster_and_qlora_dequantizes(catalog: Catalog) -> None:
    def step(tuning: FineTuning) -> StepTime:
        return step_time(workload(catalog, tuning), LAYOUT, catalog.calibration)

    full, lora, qlora = (
        step(FineTuning(method="full")),
        step(LORA),
        step(replace(LORA, method="qlora")),
    )
    # Kernels: about the FLOP ratio (2/3); the optimizer: 4 million parameters, not 6.7 billion.
    assert 0.6 * full.compute_seconds < lora.compute_seconds < 0.75 * full.compute_seconds
    assert lora.optimizer_seconds < full.optimizer_seconds / 1000
    assert lora.step_seconds < qlora.step_seconds < 1.1 * lora.step_seconds


SPEC: dict[str, Any] = {
    "model": {"preset": "llama2-7b"},
    "data": {"samples": 52_000, "epochs": 3},
    "batch": {"globalBatchSize": 128},
    "objective": {"gpus": 8},
}


def test_a_lora_plan_trains_the_adapters(catalog: Catalog) -> None:
    training = {"method": "lora", "lora": {"rank": 8, "targets": "query-value"}}
    result = plan(TrainingPlanSpec.model_validate({**SPEC, "training": training}), catalog)
    full = plan(TrainingPlanSpec.model_validate({**SPEC, "training": {"method": "full"}}), catalog)
    assert result.trainable_parameters == 4_194_304
    assert full.trainable_parameters is None
    assert result.total_steps == full.total_steps == math.ceil(3 * 52_000 / 128)
    assert result.step_seconds < full.step_seconds
    assert result.flops_per_step < full.flops_per_step
    # A checkpoint holds the adapters and their optimizer state alone.
    assert result.reliability.checkpoint_bytes == pytest.approx(4_194_304 * 14)
    assert any("LoRA r8 query-value: 4.19 million adapter parameters" in line
               for line in result.explanation)  # fmt: skip


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"lora": {"rank": 8}}, "lora is set but method is pretrain"),
        ({"method": "qlora", "precision": "fp32"}, "qlora computes in bf16 or fp16"),
        ({"method": "lora", "lora": {"rank": 0}}, "greater than or equal to 1"),
        ({"method": "lora", "lora": {"targets": "everything"}}, "query-value"),
    ],
)
def test_adapter_settings_are_checked(training: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainingPlanSpec.model_validate({**SPEC, "training": training})


def test_adapters_follow_a_declared_head_width(catalog: Catalog) -> None:
    """Gemma 2 9B's query projection is 3,584 x 4,096 (16 heads of 256), its output
    projection 4,096 x 3,584."""
    shape = catalog.model("gemma-2-9b").shape
    matrices = adapted_matrices(shape, "attention")
    assert matrices == ((3584, 4096), (3584, 2048), (3584, 2048), (4096, 3584))
