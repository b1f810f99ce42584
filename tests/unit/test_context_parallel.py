"""Context parallelism: a sequence split over ranks (ring attention), in the planner,
the API and the launcher (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from trainplan.api import TrainingPlanSpec
from trainplan.planner import Catalog, PlanInputError, plan
from trainplan.planner.frameworks import FRAMEWORK_LIMITS
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.memory import estimate_memory
from trainplan.planner.search import LayoutPins, context_degrees
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import layer_pass_seconds, step_time

LONG = ModelShape(32, 4096, 32, 8, 14336, True, 128256, 131072, False)


def workload(catalog: Catalog, shape: ModelShape = LONG) -> Workload:
    return Workload(
        shape=shape, gpu=catalog.gpu("H100-SXM5-80GB"), gpus_per_node=8, global_batch_size=8
    )


def layout(context: int) -> Layout:
    return Layout(
        tensor=1, pipeline=1, data=1, micro_batch_size=1, accumulation_steps=8, context=context
    )


def test_each_rank_holds_and_computes_its_share_of_the_sequence(catalog: Catalog) -> None:
    work = workload(catalog)
    calibration = catalog.calibration
    whole, split = (estimate_memory(work, layout(c), calibration) for c in (1, 8))
    assert split.activations_bytes == pytest.approx(whole.activations_bytes / 8, rel=1e-6)
    assert split.logits_bytes == pytest.approx(whole.logits_bytes / 8, rel=1e-6)
    assert split.weights_bytes == whole.weights_bytes  # the weights are replicated
    one, eight = (layer_pass_seconds(work, layout(c), calibration) for c in (1, 8))
    # Causal attention of 131,072 tokens dominates: split 8 ways, each rank does an eighth.
    assert eight.attention_forward_seconds == pytest.approx(one.attention_forward_seconds / 8)
    assert eight.forward_seconds < one.forward_seconds / 7


def test_the_ring_exchange_hides_behind_attention_on_nvlink(catalog: Catalog) -> None:
    work = workload(catalog)
    inside = step_time(work, layout(8), catalog.calibration)
    assert inside.context_comm_seconds == 0.0  # NVLink outruns the attention core here
    short = replace(LONG, sequence_length=8192, layers=2)
    across = step_time(
        Workload(
            shape=short,
            gpu=catalog.gpu("H100-SXM5-80GB"),
            gpus_per_node=1,
            global_batch_size=8,
        ),
        layout(8),
        catalog.calibration,
    )
    # One GPU a node: every hop crosses the network, and short chunks hide little.
    assert across.context_comm_seconds > 0.0
    assert across.step_seconds > across.compute_seconds


def test_context_is_searched_for_long_sequences_where_the_framework_splits_them(
    catalog: Catalog,
) -> None:
    work = workload(catalog)
    assert context_degrees(work, LayoutPins()) == [1, 2, 4, 8, 16, 32]
    reference = LayoutPins(framework=FRAMEWORK_LIMITS["reference"])
    assert context_degrees(work, reference) == [1]
    assert context_degrees(
        workload(catalog, replace(LONG, sequence_length=8192)), LayoutPins()
    ) == [1]
    assert context_degrees(work, LayoutPins(context=2)) == [2]


SPEC: dict[str, Any] = {
    "model": {"preset": "llama3-8b", "sequenceLength": 131072},
    "data": {"tokens": 1.0e10},
    "batch": {"globalBatchSize": 64},
    "hardware": {"gpuType": "H100-SXM5-80GB"},
    "objective": {"gpus": 64},
    "job": {"framework": "megatron"},
}


def test_a_long_context_plan_splits_its_sequences(catalog: Catalog) -> None:
    result = plan(TrainingPlanSpec.model_validate(SPEC), catalog)
    assert result.layout.context > 1
    assert result.layout.gpus == 64
    assert f"CP{result.layout.context}" in result.layout.summary
    assert any("context parallelism" in line for line in result.explanation)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": {"preset": "llama3-8b", "sequenceLength": 1000}, "parallelism": {"context": 16}},
         "must be divisible by parallelism.context"),
        ({"parallelism": {"tensor": 1, "pipeline": 1, "data": 64, "context": 2}},
         "x parallelism.context (1 x 1 x 64 x 2 = 128) must equal objective.gpus (64)"),
    ],
)  # fmt: skip
def test_context_pins_are_checked(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingPlanSpec.model_validate({**SPEC, **change})


@pytest.mark.parametrize(
    "job",
    [{"framework": "reference"}, {"framework": "deepspeed", "command": ["python", "x.py"]}],
)
def test_a_framework_without_context_parallelism_refuses_the_pin(
    job: dict[str, Any], catalog: Catalog
) -> None:
    spec = TrainingPlanSpec.model_validate({**SPEC, "job": job, "parallelism": {"context": 2}})
    with pytest.raises(PlanInputError) as caught:
        plan(spec, catalog)
    assert list(caught.value.problems) == [
        (
            "parallelism.context",
            f"job.framework {job['framework']} splits no sequence over ranks; use megatron or"
            " torchtitan",
        )
    ]
