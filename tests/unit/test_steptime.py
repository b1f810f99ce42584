"""Step time: ring collectives, tensor-parallel traffic, the 1F1B bubble and kernel time."""

from dataclasses import replace

import pytest

from tests.builders import make_layout
from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import Catalog, GPUSpec
from trainplan.planner.collectives import all_reduce_seconds
from trainplan.planner.layout import (
    AttentionKernel,
    Checkpointing,
    Layout,
    ReductionOverlap,
    Workload,
)
from trainplan.planner.shapes import ModelShape
from trainplan.planner.steptime import (
    StepTime,
    collective_bandwidth_bytes_per_second,
    communicator,
    data_comm_seconds,
    gemm_seconds,
    layer_pass_seconds,
    logits_pass_seconds,
    overlapped_transfers,
    pipeline_transfer_seconds,
    step_time,
    tensor_comm_seconds_per_layer_pass,
)
from trainplan.planner.steptime import _device as steptime_device


def shape(layers: int = 32, hidden: int = 4096, heads: int = 32) -> ModelShape:
    return ModelShape(
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=heads,
        ffn_hidden_size=4 * hidden,
        gated_mlp=False,
        vocab_size=50304,
        sequence_length=2048,
        tied_embeddings=False,
    )


def workload(gpu: GPUSpec, attention: AttentionKernel = "flash", batch: int = 512) -> Workload:
    return Workload(
        shape=shape(),
        gpu=gpu,
        gpus_per_node=8,
        global_batch_size=batch,
        precision="bf16",
        optimizer="adamw",
        attention=attention,
    )


layout = make_layout


# ----------------------------------------------------------------- collectives


@pytest.mark.parametrize("group", [2, 4, 8])
def test_collective_inside_a_node_uses_nvlink(
    a100: GPUSpec, calibration: Calibration, group: int
) -> None:
    bandwidth = collective_bandwidth_bytes_per_second(workload(a100), group, group, calibration)
    assert bandwidth == pytest.approx(
        a100.nvlink_bandwidth_bytes_per_second * calibration.nvlink_efficiency
    )


@pytest.mark.parametrize(("group", "members"), [(16, 8), (64, 8), (16, 1), (32, 4)])
def test_collective_across_nodes_uses_the_network_capped_by_nvlink(
    a100: GPUSpec, calibration: Calibration, group: int, members: int
) -> None:
    intra = a100.nvlink_bandwidth_bytes_per_second * calibration.nvlink_efficiency
    inter = members * a100.network_bandwidth_bytes_per_second * calibration.network_efficiency
    bandwidth = collective_bandwidth_bytes_per_second(workload(a100), group, members, calibration)
    assert bandwidth == pytest.approx(min(intra, inter))
    assert bandwidth <= intra
    # A network faster than NVLink cannot lift the collective above the intra-node link.
    fast = replace(a100, network_bandwidth_bytes_per_second=1e15)
    capped = collective_bandwidth_bytes_per_second(workload(fast), group, members, calibration)
    assert capped == pytest.approx(intra)


# ----------------------------------------------------------------- tensor parallelism


@pytest.mark.parametrize("tensor", [2, 4, 8])
def test_tensor_comm_is_four_all_reduces_of_the_activations(
    a100: GPUSpec, calibration: Calibration, tensor: int
) -> None:
    # Shoeybi et al. 2019, Figure 4: two all-reduces forward and two backward per layer.
    work = workload(a100)
    lay = layout(tensor, micro=2)
    size = 2 * work.shape.sequence_length * work.shape.hidden_size * 2  # b s h bf16 bytes
    group = communicator(work, tensor, tensor, calibration)
    assert group.nodes == 1
    assert tensor_comm_seconds_per_layer_pass(work, lay, calibration) == pytest.approx(
        4 * all_reduce_seconds(size, group)
    )


@pytest.mark.parametrize("tensor", [2, 4, 8, 16])
def test_full_recompute_adds_two_all_reduces(
    a100: GPUSpec, calibration: Calibration, tensor: int
) -> None:
    work = workload(a100)
    none, selective, full = (
        tensor_comm_seconds_per_layer_pass(work, layout(tensor, checkpointing=c), calibration)
        for c in ("none", "selective", "full")
    )
    assert none > 0
    assert full / none == pytest.approx(6 / 4)
    assert selective == pytest.approx(none)


def test_no_tensor_comm_without_tensor_parallelism(a100: GPUSpec, calibration: Calibration) -> None:
    work = workload(a100)
    assert tensor_comm_seconds_per_layer_pass(work, layout(1), calibration) == 0.0
    assert step_time(work, layout(1), calibration).tensor_comm_seconds == 0.0


@pytest.mark.parametrize("gpu_name", ["A100-SXM4-80GB", "H100-SXM5-80GB"])
def test_tensor_group_across_nodes_is_slower(
    catalog: Catalog, calibration: Calibration, gpu_name: str
) -> None:
    """t = 16 on 8-GPU nodes crosses the network; t = 8 stays on NVLink."""
    work = workload(catalog.gpu(gpu_name))
    within = step_time(work, layout(8, sp=True), calibration)
    across = step_time(work, layout(16, sp=True), calibration)
    assert across.tensor_comm_seconds > within.tensor_comm_seconds
    assert tensor_comm_seconds_per_layer_pass(
        work, layout(16), calibration
    ) > tensor_comm_seconds_per_layer_pass(work, layout(8), calibration)


# ----------------------------------------------------------------- pipeline and step


@pytest.mark.parametrize("schedule", [(p, v) for p in (2, 4, 8) for v in (1, 2, 4)])
@pytest.mark.parametrize(("accumulation", "tensor"), [(m, t) for m in (8, 16, 32) for t in (1, 4)])
def test_pipeline_bubble_is_p_minus_1_over_v_micro_batches(
    a100: GPUSpec,
    calibration: Calibration,
    schedule: tuple[int, int],
    accumulation: int,
    tensor: int,
) -> None:
    """`schedule` is (pipeline stages p, interleaved chunks v)."""
    # Narayanan et al. 2021, section 2.2.2: bubble = (p - 1) / v x one micro-batch's time.
    pipeline, virtual = schedule
    work = workload(a100)
    lay = layout(tensor, pipeline, accumulation=accumulation, virtual=virtual, sp=tensor > 1)
    step = step_time(work, lay, calibration)
    per_micro_batch = (step.compute_seconds + step.tensor_comm_seconds) / accumulation
    assert step.pipeline_bubble_seconds / per_micro_batch == pytest.approx((pipeline - 1) / virtual)


def _p2p(work: Workload, lay: Layout, calibration: Calibration) -> float:
    return step_time(work, lay, calibration).pipeline_comm_seconds


@pytest.mark.parametrize(("accumulation", "virtual"), [(32, 2), (64, 3), (128, 4)])
def test_megatron_hides_the_steady_phase_transfers_of_an_interleaved_pipeline(
    a100: GPUSpec, calibration: Calibration, accumulation: int, virtual: int
) -> None:
    # Megatron-LM's overlap_p2p_comm (core_v0.19.0): the first stage's m v - warm-up steady
    # passes hide their forward and backward transfers under one chunk's forward pass each;
    # the warm-up's and the flush's stay blocking, as do every other framework's.
    pipeline = 8
    blocking = workload(a100)
    overlapping = replace(blocking, pipeline_p2p_overlap=True)
    # Adjacent stages 8 x 4 + 1 ranks apart: across nodes, so each transfer is sizeable.
    lay = layout(8, pipeline, 4, accumulation=accumulation, virtual=virtual, sp=True)
    transfer = pipeline_transfer_seconds(blocking, lay, calibration)
    chunk_forward = (
        blocking.shape.layers
        / pipeline
        / virtual
        * (layer_pass_seconds(blocking, lay, calibration).forward_seconds)
    )
    warm_up = 2 * (pipeline - 1) + (virtual - 1) * pipeline
    steady = accumulation * virtual - warm_up
    assert overlapped_transfers(pipeline, accumulation, virtual) == steady > 0
    full = _p2p(blocking, lay, calibration)
    assert full == pytest.approx(
        calibration.pipeline_p2p_exposed * 2 * virtual * (accumulation + pipeline - 1) * transfer
    )
    hidden = calibration.pipeline_p2p_exposed * 2 * steady * min(transfer, chunk_forward)
    assert _p2p(overlapping, lay, calibration) == pytest.approx(full - hidden)
    assert 0 < _p2p(overlapping, lay, calibration) < full


@pytest.mark.parametrize(
    "lay",
    [
        # Not interleaved: Megatron-LM turns the overlap off.
        layout(8, 8, 4, accumulation=64, sp=True),
        # m v no more than the warm-up (m = p): the whole step is warm-up and flush.
        layout(8, 8, 4, accumulation=8, virtual=4, sp=True),
    ],
    ids=lambda lay: lay.describe(),
)
def test_no_transfer_hides_without_a_steady_interleaved_phase(
    a100: GPUSpec, calibration: Calibration, lay: Layout
) -> None:
    blocking = workload(a100)
    overlapping = replace(blocking, pipeline_p2p_overlap=True)
    assert _p2p(overlapping, lay, calibration) == _p2p(blocking, lay, calibration) > 0


@pytest.mark.parametrize(
    ("overlap", "lay", "hidden"),
    [
        # ZeRO-1/2 without a pipeline: DeepSpeed's ZeRO optimizer overlaps (overlap_comm).
        ("sharded-without-pipeline", layout(1, 1, 8, zero=1, accumulation=4), True),
        ("sharded-without-pipeline", layout(1, 1, 8, zero=2, accumulation=4), True),
        # Without ZeRO its engine all-reduces after the backward pass.
        ("sharded-without-pipeline", layout(1, 1, 8, zero=0, accumulation=4), False),
        # Its pipeline engine reduces after the flush (ReduceGrads after the last backward).
        ("sharded-without-pipeline", layout(1, 2, 8, zero=1, accumulation=4), False),
        # The reference trainer: with ZeRO-0 and tensor parallelism its DDP cannot take
        # DTensor parameters, so it all-reduces after the last backward pass
        # (runtime.parallel); DDP without tensor parallelism and FSDP2 overlap.
        ("except-unsharded-with-tensor", layout(2, 1, 8, zero=0, accumulation=2), False),
        ("except-unsharded-with-tensor", layout(1, 1, 8, zero=0, accumulation=2), True),
        ("except-unsharded-with-tensor", layout(2, 1, 8, zero=1, accumulation=2), True),
        ("except-unsharded-with-tensor", layout(2, 1, 8, zero=2, accumulation=2), True),
    ],
    ids=lambda value: value.describe() if isinstance(value, Layout) else str(value),
)
def test_where_the_framework_leaves_the_gradient_reduction_exposed(
    a100: GPUSpec, calibration: Calibration, overlap: ReductionOverlap, lay: Layout, hidden: bool
) -> None:
    always = workload(a100)
    framework = replace(always, reduction_overlap=overlap)
    overlapped = step_time(always, lay, calibration).data_comm_seconds
    priced = step_time(framework, lay, calibration).data_comm_seconds
    if hidden:
        assert priced == overlapped
    else:
        assert priced > overlapped > 0


def test_gather_under_the_next_forward_pass_hides_only_the_weights_all_gather(
    a100: GPUSpec, calibration: Calibration
) -> None:
    # Megatron-LM's --overlap-param-gather: ZeRO-1's weight all-gather waits in the next
    # step's first forward pass, not after the optimizer step; the gradient
    # reduce-scatter still hides behind the last backward pass alone.
    after_step = workload(a100)
    next_forward = replace(after_step, param_gather_overlap=True)
    sharded = layout(8, 1, 48, zero=1, accumulation=1, sp=True)
    backward, forward = 0.02, 0.01
    plain = data_comm_seconds(after_step, sharded, calibration, backward, forward)
    gathered = data_comm_seconds(next_forward, sharded, calibration, backward, forward)
    assert 0 < gathered < plain
    # Without a forward pass to hide under, the gather is as exposed as it was alone.
    bare = data_comm_seconds(next_forward, sharded, calibration, backward, 0.0)
    assert bare >= gathered
    # Nothing to gather without ZeRO: an all-reduce, priced the same either way.
    replicated = replace(sharded, zero_stage=0)
    assert data_comm_seconds(
        next_forward, replicated, calibration, backward, forward
    ) == data_comm_seconds(after_step, replicated, calibration, backward, forward)


@pytest.mark.parametrize("gated", [True, False])
def test_torchtitan_selective_recomputes_every_other_matrix_and_the_elementwise_ops(
    a100: GPUSpec, catalog: Catalog, calibration: Calibration, gated: bool
) -> None:
    # torchtitan's per-op policy counts a layer's mm calls (wq, wk, wv, wo, then the MLP's)
    # and recomputes the even ones: wk, wo and w3 (gated) or the down projection, plus
    # every elementwise op; Megatron-LM's recomputes the attention core.
    megatron = replace(workload(a100), shape=replace(shape(), kv_heads=8, gated_mlp=gated))
    titan = replace(megatron, selective_recompute="every-other-matmul")
    lay = layout(2, 1, 4, accumulation=2, sp=True, checkpointing="selective")
    layer = layer_pass_seconds(titan, lay, calibration)
    s = titan.shape
    tokens = lay.micro_batch_size * s.sequence_length  # each rank's matrices take them all
    device = steptime_device(titan, calibration)
    f, h = s.ffn_hidden_size, s.hidden_size
    mlp = (f / 2, h) if gated else (h, f / 2)  # w3, or the down projection
    expected = (
        gemm_seconds(device, tokens, s.kv_heads * s.head_dim / 2, s.hidden_size, 2)
        + gemm_seconds(device, tokens, s.hidden_size, s.attention_width / 2, 2)
        + gemm_seconds(device, tokens, mlp[0], mlp[1], 2)
    )
    assert layer.per_op_matrix_recompute_seconds == pytest.approx(expected)
    assert layer.per_op_recompute_seconds == pytest.approx(
        expected + layer.elementwise_forward_seconds
    )
    assert 0 < layer.per_op_matrix_recompute_seconds < layer.matrix_forward_seconds
    none = replace(lay, checkpointing="none")
    full = replace(lay, checkpointing="full")
    steps = {
        name: step_time(work, chosen, calibration).compute_seconds
        for name, work, chosen in (
            ("none", titan, none),
            ("megatron", megatron, lay),
            ("titan", titan, lay),
            ("full", titan, full),
        )
    }
    assert steps["none"] < steps["megatron"] < steps["titan"] < steps["full"]
    recompute = steps["titan"] - steps["none"]
    assert recompute == pytest.approx(
        s.layers * lay.accumulation_steps * layer.per_op_recompute_seconds
    )
    # Under fp8 the linear layers run aten._scaled_mm, which the policy's save list does
    # not hold: every matrix multiply runs again.
    hopper = replace(titan, precision="fp8", gpu=catalog.gpu("H100-SXM5-80GB"))
    fp8 = layer_pass_seconds(hopper, lay, calibration)
    assert fp8.per_op_matrix_recompute_seconds == fp8.matrix_forward_seconds


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("pipeline", [1, 2])
def test_torchtitan_exchanges_weights_and_gradients_on_every_micro_batch_without_a_pipeline(
    a100: GPUSpec, calibration: Calibration, zero: int, pipeline: int
) -> None:
    # torchtitan v0.2.2's train_step keeps gradient synchronisation on for every
    # micro-batch; PyTorch's pipeline stage synchronises on the last backward only, and
    # ZeRO-3 is priced per micro-batch whatever the framework.
    held = workload(a100)
    every = replace(held, sync_every_micro_batch=True)
    accumulation = 4
    lay = layout(1, pipeline, 8, zero=zero, accumulation=accumulation)
    once = step_time(held, lay, calibration).data_comm_seconds
    each = step_time(every, lay, calibration).data_comm_seconds
    if pipeline == 1 and zero < 3:
        # ZeRO-2 already reduce-scatters on every micro-batch; torchtitan adds the
        # gathers (and, for 0-1, the reductions held back).
        if zero == 2:
            assert once < each < accumulation * once
        else:
            assert each == pytest.approx(accumulation * once)
        assert once > 0
    else:
        assert each == once


@pytest.mark.parametrize("pipeline", [1, 2])
def test_zero_2_reduce_scatters_every_micro_batch_and_zero_1_once(
    a100: GPUSpec, calibration: Calibration, pipeline: int
) -> None:
    # ZeRO-2 keeps only its shard of the gradients, so each micro-batch's backward ends in
    # a reduce-scatter (DeepSpeed stage_1_and_2.py reduces when it partitions gradients);
    # ZeRO-1 accumulates whole gradients and reduces at the boundary, as does a pipeline
    # stage, which synchronises on its last backward. The weights' all-gather follows
    # the optimizer step, once.
    held = workload(a100)

    def exchange(zero: int, accumulation: int) -> float:
        lay = layout(1, pipeline, 8, zero=zero, accumulation=accumulation)
        return step_time(held, lay, calibration).data_comm_seconds

    assert exchange(1, 4) == pytest.approx(exchange(1, 1))
    assert exchange(2, 1) == pytest.approx(exchange(1, 1))
    extra_scatters = exchange(2, 4) - exchange(2, 1)
    if pipeline > 1:
        assert extra_scatters == pytest.approx(0.0)
        return
    assert extra_scatters > 0
    # Three more reduce-scatters, each cheaper than a whole exchange with its gather.
    assert extra_scatters < 3 * exchange(2, 1)


def test_no_bubble_and_no_p2p_without_pipeline(a100: GPUSpec, calibration: Calibration) -> None:
    step = step_time(workload(a100), layout(2, 1, 4, sp=True), calibration)
    assert step.pipeline_bubble_seconds == 0.0
    assert step.pipeline_comm_seconds == 0.0


@pytest.mark.parametrize(
    "lay",
    [
        layout(),
        layout(8, 4, 2, zero=1, sp=True, virtual=2),
        layout(2, 1, 8, zero=3, checkpointing="full", micro=2, accumulation=4),
        layout(4, 2, 4, zero=2, checkpointing="selective"),
    ],
    ids=lambda lay: lay.describe(),
)
@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_step_seconds_is_the_sum_of_its_parts(
    a100: GPUSpec, calibration: Calibration, lay: Layout, attention: AttentionKernel
) -> None:
    step = step_time(workload(a100, attention), lay, calibration)
    parts = (
        step.compute_seconds,
        step.tensor_comm_seconds,
        step.pipeline_bubble_seconds,
        step.pipeline_comm_seconds,
        step.data_comm_seconds,
        step.optimizer_seconds,
    )
    assert all(part >= 0 for part in parts)
    assert step.step_seconds == pytest.approx(sum(parts))


def test_step_time_of_handmade_parts() -> None:
    step = StepTime(1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    assert step.step_seconds == 21.0


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_no_data_comm_with_one_data_rank(
    a100: GPUSpec, calibration: Calibration, zero: int
) -> None:
    work = workload(a100)
    lay = layout(8, 1, 1, zero=zero, sp=True)
    assert data_comm_seconds(work, lay, calibration, 1.0) == 0.0
    assert step_time(work, lay, calibration).data_comm_seconds == 0.0
    if zero < 3:  # ZeRO-3 traffic may hide entirely behind compute
        two_ranks = step_time(work, layout(8, 1, 2, zero=zero, sp=True), calibration)
        assert two_ranks.data_comm_seconds > 0


@pytest.mark.parametrize("attention", ["flash", "standard"])
@pytest.mark.parametrize("tensor", [1, 2, 8])
@pytest.mark.parametrize("micro", [1, 2, 4, 8, 16])
def test_doubling_the_micro_batch_never_shortens_kernels(
    a100: GPUSpec, calibration: Calibration, attention: AttentionKernel, tensor: int, micro: int
) -> None:
    work = workload(a100, attention)
    small = layout(tensor, micro=micro, sp=tensor > 1)
    large = replace(small, micro_batch_size=2 * micro, accumulation_steps=4)
    one, two = (layer_pass_seconds(work, lay, calibration) for lay in (small, large))
    assert two.forward_seconds >= one.forward_seconds
    assert two.backward_seconds >= one.backward_seconds
    assert two.attention_forward_seconds >= one.attention_forward_seconds
    assert logits_pass_seconds(work, large, calibration) >= logits_pass_seconds(
        work, small, calibration
    )


@pytest.mark.parametrize("checkpointing", ["selective", "full"])
@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_recompute_costs_compute_time(
    a100: GPUSpec,
    calibration: Calibration,
    checkpointing: Checkpointing,
    attention: AttentionKernel,
) -> None:
    work = workload(a100, attention)
    plain = step_time(work, layout(2, sp=True), calibration)
    recomputed = step_time(work, layout(2, sp=True, checkpointing=checkpointing), calibration)
    assert recomputed.compute_seconds > plain.compute_seconds


def test_fp8_keeps_attention_and_the_output_layer_in_bf16(catalog: Catalog) -> None:
    """fp8 speeds the layers' linear GEMMs only (DeepSeek-V3's and Transformer Engine's
    recipe): the fused attention core and the logits cost what they cost in bf16."""
    gpu = catalog.gpu("H100-SXM5-80GB")
    shape = ModelShape(32, 4096, 32, 8, 14336, True, 128256, 8192, False)
    bf16 = Workload(shape=shape, gpu=gpu, gpus_per_node=8, global_batch_size=8)
    fp8 = replace(bf16, precision="fp8")
    layout = Layout(tensor=1, pipeline=1, data=8, micro_batch_size=1, accumulation_steps=1)
    calibration = catalog.calibration
    assert logits_pass_seconds(fp8, layout, calibration) == logits_pass_seconds(
        bf16, layout, calibration
    )
    fast, slow = (layer_pass_seconds(w, layout, calibration) for w in (fp8, bf16))
    assert fast.attention_forward_seconds == slow.attention_forward_seconds
    assert fast.forward_seconds < slow.forward_seconds


def test_tensor_comm_overlap_hides_the_collectives_under_the_matrix_multiplies(
    catalog: Catalog, calibration: Calibration
) -> None:
    # Megatron-Core's --tp-comm-overlap: only what exceeds the layer's matrix multiplies
    # stays exposed, and only with sequence parallelism (its all-gathers and scatters).
    h100 = workload(catalog.gpu("H100-SXM5-80GB"))
    layout = make_layout(tensor=8, data=8, micro=2, sp=True)
    plain = step_time(h100, layout, calibration)
    overlapped = step_time(replace(h100, tensor_comm_overlap=True), layout, calibration)
    assert plain.tensor_comm_seconds > 0
    layer = layer_pass_seconds(h100, layout, calibration)
    per_layer = tensor_comm_seconds_per_layer_pass(h100, layout, calibration)
    exposed = max(0.0, per_layer - 3 * layer.matrix_forward_seconds)
    assert overlapped.tensor_comm_seconds == pytest.approx(
        plain.tensor_comm_seconds * exposed / per_layer
    )
    assert overlapped.compute_seconds == plain.compute_seconds
    without_sp = replace(layout, sequence_parallel=False)
    assert (
        step_time(
            replace(h100, tensor_comm_overlap=True), without_sp, calibration
        ).tensor_comm_seconds
        == step_time(h100, without_sp, calibration).tensor_comm_seconds
    )


@pytest.mark.parametrize(
    ("gpu_name", "faster"), [("H100-SXM5-80GB", True), ("A100-SXM4-80GB", False)]
)
def test_megatron_core_kernels_have_their_own_efficiencies_where_measured(
    catalog: Catalog, calibration: Calibration, gpu_name: str, faster: bool
) -> None:
    # Hopper has Megatron-Core values of its own (NeMo's rows); the A100 shares one set.
    pytorch = workload(catalog.gpu(gpu_name))
    megatron = replace(pytorch, kernels="megatron-core")
    layout = make_layout(data=8, micro=2)
    kernels = step_time(pytorch, layout, calibration).compute_seconds
    if faster:
        assert step_time(megatron, layout, calibration).compute_seconds < 0.9 * kernels
    else:
        assert step_time(megatron, layout, calibration).compute_seconds == kernels
