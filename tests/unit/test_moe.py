"""Mixture-of-experts models: shapes, FLOPs, memory, step time, search, the API's checks
and the frameworks' arguments (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import pytest
from pydantic import ValidationError

from tests import torchtitan_upstream
from tests.rendered_examples import training_container
from trainplan.api import TrainingPlanSpec
from trainplan.launcher import LauncherError, PlanRef, render_for
from trainplan.launcher.frameworks import moe_layer_pattern
from trainplan.planner import Catalog, InfeasiblePlanError, PlanInputError, plan
from trainplan.planner.collectives import Communicator, all_to_all_seconds
from trainplan.planner.flops import model_flops_per_token
from trainplan.planner.frameworks import FRAMEWORK_LIMITS
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.memory import (
    estimate_memory,
    module_recompute_bytes_per_token,
    stage_expert_parameter_count,
)
from trainplan.planner.search import LayoutPins, expert_degrees, generate_layouts
from trainplan.planner.serving import ServingLoad, kv_cache_bytes_per_token, price_replica
from trainplan.planner.shapes import (
    Experts,
    ModelShape,
    active_parameter_count,
    embedding_parameter_count,
    parameter_count,
)
from trainplan.planner.steptime import step_time
from trainplan.runtime.config import ConfigError, load_config

UPSTREAM: Final = Path(__file__).resolve().parents[1] / "data" / "upstream"
REF: Final = PlanRef(name="moe", namespace="team-a", uid="5f1c2d3e-0000-4000-8000-000000000002")
MIXTRAL_SPEC: Final[dict[str, Any]] = {
    "model": {"preset": "mixtral-8x7b", "sequenceLength": 4096},
    "data": {"tokens": 1.0e10},
    "batch": {"globalBatchSize": 256},
    "hardware": {"gpuType": "H100-SXM5-80GB", "gpusPerNode": 8},
    "objective": {"gpus": 32},
    "job": {"image": "registry.example/train:1.0", "framework": "megatron"},
}


def spec_with(**sections: dict[str, Any]) -> TrainingPlanSpec:
    document = {key: dict(value) for key, value in MIXTRAL_SPEC.items()}
    for key, value in sections.items():
        document[key] = {**document.get(key, {}), **value}
    return TrainingPlanSpec.model_validate(document)


def mixtral_workload(catalog: Catalog, **changes: Any) -> Workload:
    shape = replace(catalog.model("mixtral-8x7b").shape, sequence_length=4096)
    return Workload(
        shape=shape,
        gpu=catalog.gpu("H100-SXM5-80GB"),
        gpus_per_node=8,
        global_batch_size=256,
        **changes,
    )


def data_layout(expert: int, data: int = 32, **changes: Any) -> Layout:
    return Layout(
        tensor=1,
        pipeline=1,
        data=data,
        micro_batch_size=1,
        accumulation_steps=256 // data,
        zero_stage=1,
        expert=expert,
        **changes,
    )


# --- shapes ------------------------------------------------------------------------------


def test_each_preset_shape_counts_its_published_parameters(catalog: Catalog) -> None:
    """Each MoE preset's total and active counts against the figures its source publishes
    (models.yaml: model cards, papers, configs), within 1.5% and 2.5%."""
    presets = [preset for preset in catalog.models if preset.experts is not None]
    assert len(presets) == 13
    for preset in presets:
        total = parameter_count(preset.shape)
        assert total == pytest.approx(preset.parameters, rel=0.015), preset.name
        if preset.active_parameters is not None and preset.name != "deepseek-v2-lite":
            active = active_parameter_count(preset.shape)
            assert active == pytest.approx(preset.active_parameters, rel=0.025), preset.name


def test_deepseek_v2_lite_publishes_its_active_count_without_the_input_embedding(
    catalog: Catalog,
) -> None:
    """DeepSeek-V2-Lite's 2.4B active parameters leave out its 102,400 x 2,048 input
    embedding (a lookup, no multiply): the shape's count with it is 2.66B."""
    shape = catalog.model("deepseek-v2-lite").shape
    without = active_parameter_count(shape) - embedding_parameter_count(shape) / 2
    assert without == pytest.approx(2.4e9, rel=0.025)


def test_mixtral_count_is_exact(catalog: Catalog) -> None:
    """Mixtral 8x7B's released checkpoint holds 46,702,792,704 parameters."""
    assert parameter_count(catalog.model("mixtral-8x7b").shape) == 46_702_792_704


def test_moe_layers_follow_dense_prefix_and_interval(catalog: Catalog) -> None:
    deepseek = catalog.model("deepseek-v3").shape
    maverick = catalog.model("llama4-maverick").shape
    assert (deepseek.layers, deepseek.moe_layers) == (61, 58)  # first three dense
    assert (maverick.layers, maverick.moe_layers) == (48, 24)  # every other layer
    for shape in (deepseek, maverick, catalog.model("mixtral-8x7b").shape):
        assert sum(moe_layer_pattern(shape)) == shape.moe_layers
    assert moe_layer_pattern(deepseek)[:4] == [0, 0, 0, 1]
    assert moe_layer_pattern(maverick)[:4] == [0, 1, 0, 1]


def test_experts_are_checked() -> None:
    with pytest.raises(ValueError, match="per_token"):
        Experts(routed=8, per_token=9, ffn_hidden_size=1024)
    assert Experts(routed=8, per_token=2, ffn_hidden_size=1024, shared=2).shared_width == 2048


def test_flops_follow_the_active_parameters(catalog: Catalog) -> None:
    """6 x active parameters per token, plus attention over the sequence: Mixtral's
    ~12.9B active parameters, not its 46.7B."""
    shape = replace(catalog.model("mixtral-8x7b").shape, sequence_length=4096)
    six_n = 6 * active_parameter_count(shape)
    assert six_n < model_flops_per_token(shape) < 1.15 * six_n
    dense = replace(shape, experts=None)
    assert model_flops_per_token(dense) < model_flops_per_token(shape)  # top-2 > one MLP


# --- memory and step time ----------------------------------------------------------------


def test_expert_parallelism_splits_the_experts_not_the_rest(catalog: Catalog) -> None:
    work = mixtral_workload(catalog)
    calibration = catalog.calibration
    one, eight = (estimate_memory(work, data_layout(ep), calibration) for ep in (1, 8))
    experts_one = stage_expert_parameter_count(work.shape, data_layout(1))
    experts_eight = stage_expert_parameter_count(work.shape, data_layout(8))
    assert experts_eight == pytest.approx(experts_one / 8)
    saved = (experts_one - experts_eight) * 2  # bf16 weights
    assert one.weights_bytes - eight.weights_bytes == pytest.approx(saved, rel=1e-9)
    assert one.gradients_bytes - eight.gradients_bytes == pytest.approx(2 * saved, rel=1e-6)
    # ZeRO-1: each rank keeps 1/32 of all optimizer state either way: the experts' state
    # shards over 32 data ranks, or an eighth of it over the 4 expert-data ranks.
    assert eight.optimizer_bytes == pytest.approx(one.optimizer_bytes, rel=1e-9)
    assert eight.activations_bytes == one.activations_bytes


def test_the_all_to_all_costs_nothing_without_expert_parallelism(catalog: Catalog) -> None:
    work = mixtral_workload(catalog)
    assert step_time(work, data_layout(1), catalog.calibration).expert_comm_seconds == 0.0
    assert step_time(work, data_layout(8), catalog.calibration).expert_comm_seconds > 0.0


def test_tokens_cross_nodes_once_per_node(catalog: Catalog) -> None:
    """With 8 of 16 experts per node and top-8 routing, a token's copies reach the other
    node once (1 - 0.5^8 of the time), not 4 times (DeepSeek-V3, section 3.2.2)."""
    shape = replace(
        catalog.model("qwen3-30b-a3b").shape, sequence_length=4096
    )  # 128 experts, top-8
    work = Workload(
        shape=shape, gpu=catalog.gpu("H100-SXM5-80GB"), gpus_per_node=8, global_batch_size=16
    )
    layout = Layout(
        tensor=1, pipeline=1, data=16, micro_batch_size=1, accumulation_steps=1, expert=16
    )
    seconds = step_time(work, layout, catalog.calibration).expert_comm_seconds
    row = 4096 * shape.hidden_size * 2
    network = work.gpu.network_bandwidth_bytes_per_second * catalog.calibration.network_efficiency
    per_all_to_all = row * (1 - 0.5**8) / network
    expected = 4 * per_all_to_all * shape.moe_layers
    assert seconds == pytest.approx(expected, rel=0.05)


def test_all_to_all_takes_the_slower_path() -> None:
    group = Communicator(
        ranks=16,
        nodes=2,
        bandwidth_bytes_per_second=400e9,
        base_latency_seconds=0.0,
        intra_node_hop_seconds=0.0,
        network_hop_seconds=0.0,
    )
    assert all_to_all_seconds(400e6, 50e6, group, 50e9) == pytest.approx(1e-3)
    assert all_to_all_seconds(4e9, 0.0, group, 50e9) == pytest.approx(1e-2)


def test_an_overlapping_schedule_hides_the_all_to_all(catalog: Catalog) -> None:
    calibration = catalog.calibration
    layout = data_layout(8)
    exposed = step_time(mixtral_workload(catalog), layout, calibration).expert_comm_seconds
    overlapped = mixtral_workload(catalog, expert_comm_overlap=True)
    hidden = step_time(overlapped, layout, calibration).expert_comm_seconds
    assert hidden < exposed
    # A plain (not interleaved) pipeline has no combined 1F1B: nothing hidden.
    piped = Layout(
        tensor=1, pipeline=2, data=16, micro_batch_size=1, accumulation_steps=16, expert=8
    )
    plain = step_time(mixtral_workload(catalog), piped, calibration).expert_comm_seconds
    assert step_time(overlapped, piped, calibration).expert_comm_seconds == plain


def test_dropped_tokens_cap_the_imbalance(catalog: Catalog) -> None:
    calibration = replace(catalog.calibration, moe_load_imbalance=1.3)
    layout = data_layout(8)
    dropless = step_time(mixtral_workload(catalog), layout, calibration)
    capped = step_time(mixtral_workload(catalog, expert_capacity_factor=1.0), layout, calibration)
    balanced = step_time(mixtral_workload(catalog), layout, catalog.calibration)
    assert capped.step_seconds == pytest.approx(balanced.step_seconds)
    assert dropless.step_seconds > capped.step_seconds


# --- search and resolution ---------------------------------------------------------------


def test_expert_degrees_are_searched_where_the_framework_places_them(catalog: Catalog) -> None:
    work = mixtral_workload(catalog)
    assert expert_degrees(work, LayoutPins(framework=FRAMEWORK_LIMITS["megatron"])) == [1, 2, 4, 8]
    assert expert_degrees(work, LayoutPins(framework=FRAMEWORK_LIMITS["deepspeed"])) == [1]
    dense = replace(work, shape=replace(work.shape, experts=None))
    assert expert_degrees(dense, LayoutPins()) == [1]
    layouts = list(generate_layouts(work, 16, LayoutPins(tensor=2, pipeline=1, zero_stage=1)))
    # Expert ranks come from the 2 x 8 tensor x data ranks: degree 2 x (1, 2, 4, 8) <= 16.
    assert {layout.expert for layout in layouts} == {1, 2, 4, 8}


def test_an_moe_plan_carries_the_wider_moe_ranges(catalog: Catalog) -> None:
    calibration = catalog.calibration
    result = plan(spec_with(), catalog)
    assert result.step_seconds_range is not None
    low = calibration.step_seconds_ratio_p10 * calibration.moe_range_spread_p10
    assert result.step_seconds_range.p10 == pytest.approx(result.step_seconds * low)
    assert calibration.moe_range_spread_p10 < 1.0 < calibration.moe_range_spread_p90
    dense = plan(spec_with(model={"preset": "llama3-8b"}), catalog)
    assert dense.step_seconds_range is not None
    assert dense.step_seconds_range.p90 == pytest.approx(
        dense.step_seconds * calibration.step_seconds_ratio_p90
    )


def test_a_mixtral_plan_splits_its_experts(catalog: Catalog) -> None:
    result = plan(spec_with(), catalog)
    assert result.layout.expert > 1
    assert result.active_parameters == round(
        active_parameter_count(replace(catalog.model("mixtral-8x7b").shape))
    )
    assert result.parameters is not None
    assert result.parameters > 3 * result.active_parameters
    text = " ".join(result.explanation)
    assert "active per token: 2 of 8 routed experts" in text
    assert f"{result.layout.expert}-way expert parallelism" in text


@pytest.mark.parametrize(
    ("sections", "path", "message"),
    [
        ({"parallelism": {"expert": 3}}, "parallelism.expert", "3 does not divide experts (8)"),
        ({"job": {"framework": "reference"}}, "job.framework", "runs no mixture-of-experts"),
        ({"job": {"framework": "deepspeed"}, "parallelism": {"expert": 8}},
         "parallelism.expert", "places no expert parallelism"),
        ({"training": {"method": "lora"}, "job": {"framework": "deepspeed"}},
         "training.method", "not modelled"),
        ({"job": {"framework": "torchtitan"}, "parallelism": {"tensor": 2, "expertTensor": 4}},
         "parallelism.expertTensor", "1 or parallelism.tensor"),
        ({"job": {"framework": "deepspeed"}, "parallelism": {"zeroStage": 3}},
         "parallelism.zeroStage", "and experts"),
    ],
)  # fmt: skip
def test_what_cannot_run_is_refused_with_its_field(
    catalog: Catalog, sections: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(PlanInputError) as caught:
        plan(spec_with(**sections), catalog)
    assert any(p == path and message in text for p, text in caught.value.problems), (
        caught.value.problems
    )


def test_expert_settings_on_a_dense_model_are_refused(catalog: Catalog) -> None:
    spec = spec_with(
        model={"preset": "llama3-8b"},
        parallelism={"expert": 2},
        training={"expertCapacityFactor": 1.25},
    )
    with pytest.raises(PlanInputError) as caught:
        plan(spec, catalog)
    paths = {path for path, _ in caught.value.problems}
    assert {"parallelism.expert", "training.expertCapacityFactor"} <= paths


def test_an_explicit_moe_shape_plans(catalog: Catalog) -> None:
    spec = spec_with(
        model={
            "preset": None,
            "layers": 16,
            "hiddenSize": 2048,
            "attentionHeads": 16,
            "kvHeads": 8,
            "ffnHiddenSize": 1024,
            "gatedMLP": True,
            "vocabSize": 50304,
            "sequenceLength": 4096,
            "experts": 64,
            "expertsPerToken": 8,
        },
        objective={"gpus": 8},
    )
    result = plan(spec, catalog)
    shape = ModelShape(16, 2048, 16, 8, 1024, True, 50304, 4096, False,
                       experts=Experts(routed=64, per_token=8, ffn_hidden_size=1024))  # fmt: skip
    assert result.parameters == round(parameter_count(shape))
    assert result.active_parameters == round(active_parameter_count(shape))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"experts": 8, "expertsPerToken": 9}, "must not exceed experts"),
        ({"expertsPerToken": 2}, "need experts"),
        ({"experts": 8}, "needs expertsPerToken"),
    ],
)
def test_the_api_checks_the_expert_fields(model: dict[str, Any], message: str) -> None:
    shape = {
        "layers": 4,
        "hiddenSize": 512,
        "attentionHeads": 8,
        "vocabSize": 1000,
        "sequenceLength": 128,
    }
    document = {**MIXTRAL_SPEC, "model": shape | model}
    with pytest.raises(ValidationError, match=message):
        TrainingPlanSpec.model_validate(document)


# --- frameworks ---------------------------------------------------------------------------


def _program_args(objects: list[dict[str, Any]]) -> list[str]:
    args: list[str] = training_container(objects)["args"]
    start = next(i for i, arg in enumerate(args) if arg.startswith("--max-restarts="))
    return args[start + 1 :]


def _env(objects: list[dict[str, Any]]) -> dict[str, str]:
    env = training_container(objects)["env"]
    return {entry["name"]: entry.get("value", "") for entry in env}


def _rendered(catalog: Catalog, spec: TrainingPlanSpec) -> list[dict[str, Any]]:
    return render_for(REF, spec, plan(spec, catalog), catalog)


def _megatron_flags() -> set[str]:
    lines = (UPSTREAM / "megatron-lm-core_v0.19.0-moe-flags.txt").read_text().splitlines()
    return {line.split()[0] for line in lines if line.startswith("--")}


def test_megatron_gets_the_experts_and_their_degrees(catalog: Catalog) -> None:
    spec = spec_with()
    objects = _rendered(catalog, spec)
    args = _program_args(objects)
    result = plan(spec, catalog)
    pairs = dict(zip(args, [*args[1:], ""], strict=True))
    assert pairs["--num-experts"] == "8"
    assert pairs["--moe-router-topk"] == "2"
    assert pairs["--moe-ffn-hidden-size"] == "14336"
    assert pairs["--expert-model-parallel-size"] == str(result.layout.expert)
    assert pairs["--expert-tensor-parallel-size"] == "1"
    assert "--moe-layer-freq" not in args  # every layer is MoE
    env = _env(objects)
    assert env["TRAINPLAN_EXPERT_PARALLEL"] == str(result.layout.expert)
    assert env["TRAINPLAN_EXPERT_TENSOR_PARALLEL"] == "1"
    moe_flags = {a for a in args if a.startswith("--") and ("moe" in a or "expert" in a)}
    assert moe_flags <= _megatron_flags()


def test_megatron_gets_latent_attention_and_dense_layers(catalog: Catalog) -> None:
    spec = spec_with(
        model={"preset": "deepseek-v2-lite"},
        objective={"gpus": 16},
        training={"expertCapacityFactor": 1.5},
    )
    args = _program_args(_rendered(catalog, spec))
    pairs = dict(zip(args, [*args[1:], ""], strict=True))
    assert "--multi-latent-attention" in args
    assert pairs["--kv-lora-rank"] == "512"
    assert "--q-lora-rank" not in args  # V2-Lite projects queries directly
    assert (pairs["--qk-head-dim"], pairs["--qk-pos-emb-head-dim"]) == ("128", "64")
    assert pairs["--moe-layer-freq"] == "[0," + ",".join(["1"] * 26) + "]"
    assert pairs["--moe-shared-expert-intermediate-size"] == "2816"
    assert pairs["--moe-expert-capacity-factor"] == "1.5"
    flags = {a for a in args if a.startswith("--")}
    attention = {a for a in flags if "lora" in a or "head-dim" in a or "latent" in a}
    assert attention <= _megatron_flags()


def test_torchtitan_gets_the_expert_degrees_of_its_release(catalog: Catalog) -> None:
    spec = spec_with(job={"framework": "torchtitan"})
    layout = plan(spec, catalog).layout
    args = _program_args(_rendered(catalog, spec))
    expert = [a for a in args if a.startswith("--parallelism.expert")]
    assert expert == [
        "--parallelism.expert_parallel_degree",
        "--parallelism.expert_tensor_parallel_degree",
    ]
    # The same flags as every other plan's: torchtitan 0.2.2 takes them all together.
    config = torchtitan_upstream.parse(args[args.index("torchtitan.train") + 1 :])
    assert config.parallelism.expert_parallel_degree == layout.expert
    assert config.parallelism.expert_tensor_parallel_degree == layout.expert_tensor
    assert config.checkpoint.enable is True


def test_the_launcher_refuses_experts_a_framework_cannot_place(catalog: Catalog) -> None:
    spec = spec_with()
    result = plan(spec, catalog)
    assert result.layout.expert > 1
    for framework, path in (("deepspeed", "parallelism.expert"), ("reference", "job.framework")):
        other = spec.model_copy(
            update={"job": spec.job.model_copy(update={"framework": framework})}
        )
        with pytest.raises(LauncherError) as caught:
            render_for(REF, other, result, catalog)
        assert path in {p for p, _ in caught.value.problems}


def test_the_reference_trainer_refuses_expert_parallelism() -> None:
    with pytest.raises(ConfigError, match="has no experts"):
        load_config([], {"TRAINPLAN_EXPERT_PARALLEL": "2", "WORLD_SIZE": "2"})


# --- serving ------------------------------------------------------------------------------


def test_latent_attention_caches_its_latent(catalog: Catalog) -> None:
    """DeepSeek-V3 keeps 512 + 64 values a token a layer (DeepSeek-V2, section 2.1.2), on
    every tensor rank, not 2 x 128 heads x 128."""
    shape = catalog.model("deepseek-v3").shape
    for tensor in (1, 8):
        assert kv_cache_bytes_per_token(shape, "bf16", tensor) == 61 * 576 * 2


def test_a_small_decode_batch_reads_only_the_experts_it_reaches(catalog: Catalog) -> None:
    shape = catalog.model("mixtral-8x7b").shape
    work = Workload(
        shape=shape, gpu=catalog.gpu("H100-SXM5-80GB"), gpus_per_node=8, global_batch_size=1
    )
    load = ServingLoad(requests_per_second=1.0, prompt_tokens=512, output_tokens=128)
    total = parameter_count(shape)
    one, many = (
        price_replica(work, total, load, catalog.calibration, tensor=2, batch=batch)
        for batch in (1, 64)
    )
    dense = replace(work, shape=replace(shape, experts=None, ffn_hidden_size=2 * 14336))
    dense_one = price_replica(
        dense, active_parameter_count(shape), load, catalog.calibration, tensor=2, batch=1
    )
    # One token reads 2 of 8 experts: about the step of a dense model of its active size.
    assert one.decode_step_seconds == pytest.approx(dense_one.decode_step_seconds, rel=0.05)
    # 64 tokens reach every expert: the whole 46.7B are read.
    assert many.decode_step_seconds > 3 * one.decode_step_seconds


# --- selective recomputation of modules -------------------------------------------------


def test_selective_recompute_rebuilds_modules_on_moe_and_latent_models(catalog: Catalog) -> None:
    """On an MoE or latent-attention model, selective recomputation frees the norms'
    outputs, the experts' activations and latent attention's per-head queries, keys and
    values, for their forward again; on a dense model it is the attention core alone, as
    before."""
    shape = replace(catalog.model("deepseek-v2-lite").shape, sequence_length=4096)
    work = Workload(
        shape=shape, gpu=catalog.gpu("H100-SXM5-80GB"), gpus_per_node=8, global_batch_size=8
    )
    calibration = catalog.calibration
    none, selective = (
        Layout(
            tensor=1,
            pipeline=1,
            data=1,
            micro_batch_size=1,
            accumulation_steps=8,
            checkpointing=level,
        )
        for level in ("none", "selective")
    )
    freed = module_recompute_bytes_per_token(shape, selective, "bf16")
    heads = shape.attention_heads
    assert freed == pytest.approx(
        2 * 2 * 2048  # two norm outputs
        + 2 * (6 * 1408 + 2816) * 26 / 27  # the experts' activations, 26 of 27 layers MoE
        + 2 * heads * (2 * 192 + 128)  # queries, keys and values of 16 heads
    )
    kept = estimate_memory(work, none, calibration).activations_bytes
    assert estimate_memory(work, selective, calibration).activations_bytes < 0.8 * kept
    slower = step_time(work, selective, calibration).compute_seconds
    assert step_time(work, none, calibration).compute_seconds < slower
    dense = replace(shape, experts=None, latent_attention=None)
    assert module_recompute_bytes_per_token(dense, selective, "bf16") == 0.0


def test_megatron_recomputes_the_modules_the_plan_priced(catalog: Catalog) -> None:
    spec = spec_with(
        model={"preset": "deepseek-v2-lite"},
        objective={"gpus": 16},
        parallelism={"activationCheckpointing": "selective"},
    )
    args = _program_args(_rendered(catalog, spec))
    start = args.index("--recompute-modules")
    assert args[start + 1 : start + 5] == ["core_attn", "layernorm", "moe_act", "mla_up_proj"]
    assert "--recompute-modules" in _megatron_flags()


def test_no_layout_for_an_expert_pin_says_why(catalog: Catalog) -> None:
    spec = spec_with(objective={"gpus": 4}, parallelism={"expert": 8})
    with pytest.raises(InfeasiblePlanError) as caught:
        plan(spec, catalog)
    assert "expert x expertTensor must divide tensor x context x data" in str(caught.value)
