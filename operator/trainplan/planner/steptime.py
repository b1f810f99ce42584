"""Time of one optimizer step for a layout (pure).

A step is the 1F1B pipeline schedule of Narayanan et al. 2021 (arXiv 2104.04473, section
2.2): m micro-batches through p stages take (m + (p - 1) / v) times the time of one
micro-batch on the slowest stage (v interleaved chunks per stage), plus what the
gradient reduction, point-to-point transfers and the optimizer step leave exposed.

Kernel time is an additive roofline (Williams et al. 2009): FLOPs at an achieved
fraction of the dense peak plus HBM bytes at an achieved fraction of the bandwidth, so
the efficiency of a matrix multiply depends on its shape rather than on one global MFU.
Collectives cost latency plus volume over bandwidth (`planner.collectives`: the ring and
tree costs and NCCL's latency model); a group spanning nodes uses the network ports of its
members in each node. A mixture-of-experts layer runs its router, its shared experts and,
on each expert-parallel rank, its local experts over the tokens routed to them (the
busiest rank's share sets the pace), with an all-to-all dispatch before and combine after
(`expert_comm_seconds_per_layer_pass`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trainplan.planner.calibration import ArchitectureEfficiency, Calibration
from trainplan.planner.collectives import (
    Communicator,
    all_gather_seconds,
    all_reduce_seconds,
    all_to_all_seconds,
    point_to_point_seconds,
    reduce_scatter_seconds,
)
from trainplan.planner.finetune import adapted_matrices
from trainplan.planner.flops import attention_core_flops_per_token
from trainplan.planner.layout import Layout, Workload
from trainplan.planner.memory import (
    activation_element_bytes,
    frozen_weight_bytes_per_parameter,
    local_tokens,
    module_recompute_bytes_per_token,
    stage_adapter_parameter_count,
    stage_expert_parameter_count,
    stage_parameter_count,
    state_bytes_per_parameter,
    zero_sharded,
)
from trainplan.planner.shapes import (
    ModelShape,
    attention_projections,
    latent_up_projections,
    layer_parameter_count,
)
from trainplan.planner.stages import split_of, warmup_chunk_passes

FLASH_CAUSAL_FRACTION = 0.5  # a causal fused kernel skips the masked half of the scores
_FLASH_BACKWARD_RATIO = 2.5  # flash backward recomputes the scores: 2.5 x forward FLOPs


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds of one optimizer step and where they go."""

    compute_seconds: float
    tensor_comm_seconds: float
    pipeline_bubble_seconds: float
    pipeline_comm_seconds: float
    data_comm_seconds: float
    optimizer_seconds: float
    context_comm_seconds: float = 0.0
    """Ring attention's key/value exchange left exposed behind the attention core."""
    expert_comm_seconds: float = 0.0
    """The experts' all-to-all dispatch and combine left exposed."""

    @property
    def step_seconds(self) -> float:
        return (
            self.compute_seconds
            + self.tensor_comm_seconds
            + self.context_comm_seconds
            + self.expert_comm_seconds
            + self.pipeline_bubble_seconds
            + self.pipeline_comm_seconds
            + self.data_comm_seconds
            + self.optimizer_seconds
        )


@dataclass(frozen=True, slots=True)
class _Device:
    """Achieved rates of one GPU for one precision."""

    flops_per_second: float
    hbm_bytes_per_second: float
    flash_flops_per_second: float
    kernel_overhead_seconds: float


def _higher_precision(precision: str) -> str:
    """What fp8 training keeps out of fp8: the attention core and the output layer run in
    bf16 (DeepSeek-AI 2024, arXiv 2412.19437, section 3.3.1: embedding, output head,
    normalization and attention operators retain BF16/FP32; Transformer Engine's FP8
    recipe casts only the linear layers' GEMMs)."""
    return "bf16" if precision == "fp8" else precision


def _device(workload: Workload, calibration: Calibration, gemm_precision: str = "") -> _Device:
    """Achieved rates for the layers' GEMMs in `gemm_precision` (default: the workload's),
    at the efficiency of the workload's kernels (`Workload.kernels`); fused attention
    always at the higher precision of fp8 training."""
    arch: ArchitectureEfficiency = calibration.architecture(workload.gpu.architecture)
    peak = workload.gpu.peak_flops_for(gemm_precision or workload.precision)
    attention_peak = workload.gpu.peak_flops_for(_higher_precision(workload.precision))
    hbm = workload.gpu.hbm_bandwidth_bytes_per_second
    return _Device(
        flops_per_second=peak * arch.gemm_efficiency_for(workload.kernels),
        hbm_bytes_per_second=hbm * arch.hbm_efficiency,
        flash_flops_per_second=attention_peak
        * arch.flash_attention_efficiency_for(workload.kernels),
        kernel_overhead_seconds=arch.kernel_overhead_seconds_per_layer,
    )


def gemm_seconds(device: _Device, m: float, n: float, k: float, element_bytes: int) -> float:
    """Forward time of an (m x k) by (k x n) matrix multiply: compute plus operand traffic."""
    flops = 2.0 * m * n * k
    traffic = element_bytes * (m * k + k * n + m * n)
    return flops / device.flops_per_second + traffic / device.hbm_bytes_per_second


@dataclass(frozen=True, slots=True)
class LayerPassSeconds:
    """One layer, one micro-batch, on one GPU: forward and backward kernel time."""

    forward_seconds: float
    attention_forward_seconds: float
    backward_seconds: float
    attention_backward_seconds: float
    module_recompute_seconds: float = 0.0
    """What selective recomputation redoes beyond the attention core
    (`memory.module_recompute_bytes_per_token`): the norms, the experts' activation and
    latent attention's up-projections, forward."""
    matrix_forward_seconds: float = 0.0
    """The layer's matrix multiplies, forward (adapters and dequantization not included)."""
    elementwise_forward_seconds: float = 0.0
    """Its memory-bound elementwise kernels, forward, with the per-layer launch overhead."""
    per_op_matrix_recompute_seconds: float = 0.0
    """The matrix multiplies torchtitan's per-op selective recomputation redoes, forward
    (`per_op_recomputed_matrices`); 0 where the layout does not run that policy."""

    @property
    def selective_recompute_seconds(self) -> float:
        """Megatron-LM's selective recomputation: the attention core and the modules."""
        return self.attention_forward_seconds + self.module_recompute_seconds

    @property
    def per_op_recompute_seconds(self) -> float:
        """torchtitan's per-op selective recomputation: its matrix multiplies (every other
        one; all under fp8) and every elementwise op; the attention kernel's output is
        saved."""
        return self.per_op_matrix_recompute_seconds + self.elementwise_forward_seconds


def layer_pass_seconds(
    workload: Workload, layout: Layout, calibration: Calibration
) -> LayerPassSeconds:
    """Kernel time of one transformer layer for one micro-batch on one GPU."""
    shape = workload.shape
    device = _device(workload, calibration)
    e = activation_element_bytes(workload.precision)
    t = layout.tensor
    tokens = local_tokens(layout, shape)
    h = shape.hidden_size
    f = shape.ffn_hidden_size

    projections = attention_projections(shape)
    # Every projection's output is split over the tensor ranks but the last's input.
    terms = [gemm_seconds(device, tokens, d_out / t, d_in, e) for d_in, d_out in projections[:-1]]
    d_in, d_out = projections[-1]
    terms.append(gemm_seconds(device, tokens, d_out, d_in / t, e))
    terms += _mlp_gemm_seconds(workload, layout, calibration, device, tokens)
    gemms = sum(terms, 0.0)
    heads_per_gpu = shape.attention_heads / t
    query_rows = shape.sequence_length / layout.context  # a context rank's queries
    score_elements = layout.micro_batch_size * heads_per_gpu * query_rows * shape.sequence_length
    if workload.attention == "flash":
        if shape.latent_attention is None:
            width = shape.attention_width
            core_flops = 4.0 * tokens * shape.sequence_length * width / t * FLASH_CAUSAL_FRACTION
        else:
            core_flops = attention_core_flops_per_token(shape) * tokens / t * FLASH_CAUSAL_FRACTION
        attention_forward = core_flops / device.flash_flops_per_second
        attention_backward = _FLASH_BACKWARD_RATIO * attention_forward
    else:
        batches = layout.micro_batch_size * heads_per_gpu
        scores = _device(workload, calibration, _higher_precision(workload.precision))
        per_head = 2 * gemm_seconds(scores, query_rows, shape.sequence_length, shape.head_dim, e)
        softmax = (
            score_elements
            * calibration.standard_attention_bytes_per_score
            / device.hbm_bytes_per_second
        )
        attention_forward = batches * per_head + softmax
        attention_backward = 2.0 * attention_forward

    hidden_share = h / t if layout.sequence_parallel else h
    elementwise_bytes = tokens * (
        calibration.elementwise_bytes_per_hidden * hidden_share
        + e * (_active_mlp_width(shape, f) / t) * (3 if shape.gated_mlp else 2)
    )
    elementwise = elementwise_bytes / device.hbm_bytes_per_second
    forward = gemms + attention_forward + elementwise + device.kernel_overhead_seconds
    backward = 2.0 * (gemms + elementwise + device.kernel_overhead_seconds) + attention_backward
    tuning = workload.tuning
    if tuning.adapters:
        # Frozen matrices: the input gradient only (`finetune`); the adapters A (d_in x r)
        # and B (r x d_out) train fully, each split by the tensor degree.
        rank = tuning.lora_rank
        adapters = sum(
            gemm_seconds(device, tokens, rank, d_in / t, e)
            + gemm_seconds(device, tokens, d_out / t, rank, e)
            for d_in, d_out in adapted_matrices(shape, tuning.lora_targets)
        )
        # QLoRA dequantizes each 4-bit weight to the compute type on every pass: the
        # packed weights read and the dequantized ones written (the matrix multiply's own
        # read of them is in its traffic above).
        dequantize = 0.0
        if tuning.method == "qlora":
            packed = frozen_weight_bytes_per_parameter(workload)
            dequantize = layer_parameter_count(shape) / t * (packed + e)
            dequantize /= device.hbm_bytes_per_second
        forward += adapters + dequantize
        backward = (
            gemms
            + 2.0 * (adapters + elementwise + device.kernel_overhead_seconds)
            + attention_backward
            + dequantize
        )
    return LayerPassSeconds(
        forward_seconds=forward,
        attention_forward_seconds=attention_forward,
        backward_seconds=backward,
        attention_backward_seconds=attention_backward,
        module_recompute_seconds=_module_recompute_seconds(workload, layout, device, tokens),
        matrix_forward_seconds=gemms,
        elementwise_forward_seconds=elementwise + device.kernel_overhead_seconds,
        per_op_matrix_recompute_seconds=(
            per_op_recomputed_matrices(workload, layout, device, gemms)
            if layout.checkpointing == "selective"
            and workload.selective_recompute == "every-other-matmul"
            else 0.0
        ),
    )


def per_op_recomputed_matrices(
    workload: Workload, layout: Layout, device: _Device, gemms_seconds: float
) -> float:
    """Forward seconds of the matrix multiplies of one layer that torchtitan's per-op
    policy recomputes (torchtitan v0.2.2 `distributed/activation_checkpoint.py`,
    `_apply_op_sac`, with `models/llama3/infra/parallelize.py`'s `_op_sac_save_list`).
    It counts the layer's `aten.mm` calls and saves the odd ones' outputs, so the even
    ones run again: its Llama layer runs wq, wk, wv, wo, then w1, w3, w2 (gated) or the
    two MLP matrices, so wk, wo and w3 (or the second MLP matrix) run again. Models whose
    layer runs other matrices (experts, latent attention) are priced at half their matrix
    multiplies. Under fp8 the linear layers run `aten._scaled_mm`, which the save list does
    not hold, so all of them run again."""
    if workload.precision == "fp8":
        return gemms_seconds
    shape = workload.shape
    if shape.experts is not None or shape.latent_attention is not None:
        return gemms_seconds / 2.0
    e = activation_element_bytes(workload.precision)
    t = layout.tensor
    tokens = local_tokens(layout, shape)
    h = shape.hidden_size
    f = shape.ffn_hidden_size
    key = gemm_seconds(device, tokens, shape.kv_heads * shape.head_dim / t, h, e)
    output = gemm_seconds(device, tokens, h, shape.attention_width / t, e)
    if shape.gated_mlp:
        mlp = gemm_seconds(device, tokens, f / t, h, e)  # w3, the up projection
    else:
        mlp = gemm_seconds(device, tokens, h, f / t, e)  # the down projection
    return key + output + mlp


def _module_recompute_seconds(
    workload: Workload, layout: Layout, device: _Device, tokens: float
) -> float:
    """Forward time of the modules selective recomputation rebuilds on an MoE or
    latent-attention model: the freed bytes written again by elementwise kernels that
    read their inputs (twice the traffic), and latent attention's up-projection GEMMs."""
    shape = workload.shape
    if not shape.recomputes_modules:
        return 0.0
    freed = module_recompute_bytes_per_token(shape, layout, workload.precision)
    seconds = 2.0 * tokens * freed / device.hbm_bytes_per_second
    e = activation_element_bytes(workload.precision)
    for d_in, d_out in latent_up_projections(shape):
        seconds += gemm_seconds(device, tokens, d_out / layout.tensor, d_in, e)
    return seconds


def _active_mlp_width(shape: ModelShape, dense_width: int) -> float:
    """Inner MLP width a token passes through in the mean layer: the dense width, or an
    MoE layer's top-k experts and its shared ones."""
    experts = shape.experts
    if experts is None:
        return dense_width
    moe = experts.per_token * experts.ffn_hidden_size + experts.shared_width
    fraction = shape.moe_layer_fraction
    return (1.0 - fraction) * dense_width + fraction * moe


def routed_rows_factor(workload: Workload, layout: Layout, calibration: Calibration) -> float:
    """Tokens the busiest expert-parallel rank processes over an even share: with one
    rank, all of them (1); else the calibration's dropless imbalance, capped by an expert
    capacity factor, which drops what exceeds it (Fedus et al. 2021, section 2.2)."""
    if layout.expert == 1:
        return 1.0
    imbalance = calibration.moe_load_imbalance
    capacity = workload.expert_capacity_factor
    return imbalance if capacity is None else min(imbalance, capacity)


def _mlp_gemm_seconds(
    workload: Workload, layout: Layout, calibration: Calibration, device: _Device, tokens: float
) -> list[float]:
    """The MLP's matrix multiplies of the mean layer, each term one kernel (or one kernel
    weighted by the share of layers that run it).

    Dense: the up (and gate) projection and the down projection. MoE: the router
    (h x experts, not split), the shared experts, and the local experts (experts / EP of
    them, each split over the expert-tensor ranks) over the busiest rank's tokens
    (`routed_rows_factor`), one GEMM per expert, so that small per-expert batches pay for
    their weights' traffic; plus the token permutation before and after (each routed copy
    read and written twice)."""
    shape = workload.shape
    e = activation_element_bytes(workload.precision)
    t = layout.tensor
    h = shape.hidden_size
    gate = 2 if shape.gated_mlp else 1

    def mlp(rows: float, width: float) -> list[float]:
        return [
            gemm_seconds(device, rows, width * gate / t, h, e),
            gemm_seconds(device, rows, h, width / t, e),
        ]

    dense = mlp(tokens, shape.ffn_hidden_size)
    experts = shape.experts
    if experts is None:
        return dense
    local_experts = experts.routed / layout.expert
    # A rank dispatches its sequence-parallel share (tokens / t); each of the busiest
    # rank's experts then sees its share of the k copies, gathered over expert-tensor ranks.
    rows = (
        tokens
        * experts.per_token
        * routed_rows_factor(workload, layout, calibration)
        * layout.expert_tensor
        / t
    )
    etp = layout.expert_tensor
    routed_terms = [
        gemm_seconds(device, rows / local_experts, experts.ffn_hidden_size * gate / etp, h, e),
        gemm_seconds(device, rows / local_experts, h, experts.ffn_hidden_size / etp, e),
    ]
    routed = sum(routed_terms, 0.0) * local_experts
    shared = sum(mlp(tokens, experts.shared_width), 0.0) if experts.shared_width else 0.0
    router = gemm_seconds(device, tokens, experts.routed, h, e)
    permute = 4.0 * rows * h * e / device.hbm_bytes_per_second
    fraction = shape.moe_layer_fraction
    moe = router + shared + routed + permute
    return [(1.0 - fraction) * term for term in dense] + [fraction * moe]


@dataclass(frozen=True, slots=True)
class LogitsPassSeconds:
    """The output layer and the loss, forward and backward, one micro-batch on one GPU."""

    matrix_seconds: float
    loss_seconds: float

    @property
    def seconds(self) -> float:
        return self.matrix_seconds + self.loss_seconds


def logits_pass(workload: Workload, layout: Layout, calibration: Calibration) -> LogitsPassSeconds:
    """Output layer and cross-entropy, forward and backward, one micro-batch on one GPU
    (the output layer in bf16 under fp8 training)."""
    shape = workload.shape
    device = _device(workload, calibration, _higher_precision(workload.precision))
    e = activation_element_bytes(workload.precision)
    tokens = local_tokens(layout, shape)
    vocab_share = shape.vocab_size / layout.tensor
    gemm = gemm_seconds(device, tokens, vocab_share, shape.hidden_size, e)
    # Softmax cross-entropy reads and writes fp32 logits forward and backward.
    loss = tokens * vocab_share * 4 * 4 / device.hbm_bytes_per_second
    # A frozen output layer (adapters only) computes its input gradient alone.
    passes = 2.0 if workload.tuning.adapters else 3.0
    return LogitsPassSeconds(matrix_seconds=passes * gemm, loss_seconds=loss)


def logits_pass_seconds(workload: Workload, layout: Layout, calibration: Calibration) -> float:
    """`logits_pass` in seconds."""
    return logits_pass(workload, layout, calibration).seconds


def collective_bandwidth_bytes_per_second(
    workload: Workload, group_size: int, members_per_node: int, calibration: Calibration
) -> float:
    """Achieved per-GPU bandwidth of a collective over a group.

    Inside one node: NVLink (or PCIe), or the card's PCIe where a node's members span
    more than one NVLink bridge group (`GPUSpec.nvlink_domain_gpus` below the node).
    Across nodes: the network ports of the group's members in each node work in parallel
    (hierarchical rings, one per port), capped by the intra-node link.
    """
    gpu = workload.gpu
    intra = gpu.nvlink_bandwidth_bytes_per_second * calibration.nvlink_efficiency
    bridge = gpu.nvlink_domain_gpus
    pcie = gpu.pcie_bandwidth_bytes_per_second
    if bridge is not None and pcie is not None and min(group_size, members_per_node) > bridge:
        intra = pcie * calibration.nvlink_efficiency
    if group_size <= members_per_node:
        return intra
    inter = members_per_node * gpu.network_bandwidth_bytes_per_second
    return min(intra, inter * calibration.network_efficiency)


def communicator(
    workload: Workload, group_size: int, members_per_node: int, calibration: Calibration
) -> Communicator:
    """The group of `group_size` ranks, `members_per_node` of them in each node."""
    members = max(1, min(group_size, members_per_node))
    intra_hop = (
        calibration.nvlink_hop_latency_seconds
        if workload.gpu.intra_node_link != "pcie"
        else calibration.pcie_hop_latency_seconds
    )
    return Communicator(
        ranks=group_size,
        nodes=-(-group_size // members),
        bandwidth_bytes_per_second=collective_bandwidth_bytes_per_second(
            workload, group_size, members, calibration
        ),
        base_latency_seconds=calibration.collective_base_latency_seconds,
        intra_node_hop_seconds=intra_hop,
        network_hop_seconds=calibration.network_hop_latency_seconds,
    )


def _tensor_members_per_node(workload: Workload, layout: Layout) -> int:
    # "Node" in the collectives means NVLink reach: the node, or a larger NVLink domain.
    return min(layout.tensor, workload.nvlink_domain_gpus)


def _data_members_per_node(workload: Workload, layout: Layout) -> int:
    # Ranks are ordered tensor fastest, then data, then pipeline (Megatron-LM's order).
    # With context parallelism the gradients reduce over data x context ranks, ordered
    # tensor, context, data (Megatron-LM's order).
    return max(1, min(layout.replicas, workload.nvlink_domain_gpus // layout.tensor))


def tensor_comm_seconds_per_layer_pass(
    workload: Workload, layout: Layout, calibration: Calibration
) -> float:
    """Tensor-parallel collectives of one layer, one micro-batch, forward and backward.

    Two all-reduces forward and two backward (Shoeybi et al. 2019, arXiv 1909.08053,
    Figure 4), two more when the forward is recomputed; with sequence parallelism each is
    an all-gather plus a reduce-scatter of the same total volume (Korthikanti et al. 2022).
    """
    t = layout.tensor
    if t == 1:
        return 0.0
    shape = workload.shape
    tokens = local_tokens(layout, shape)
    size = tokens * shape.hidden_size * activation_element_bytes(workload.precision)
    group = communicator(workload, t, _tensor_members_per_node(workload, layout), calibration)
    count = 6 if layout.checkpointing == "full" else 4
    return count * all_reduce_seconds(size, group)


def exposed_tensor_comm_seconds_per_layer_pass(
    workload: Workload, layout: Layout, calibration: Calibration, layer: LayerPassSeconds
) -> float:
    """`tensor_comm_seconds_per_layer_pass` left exposed. Where the framework overlaps it
    (`Workload.tensor_comm_overlap`, with sequence parallelism), each collective is split
    into chunks that run while the matrix multiply beside it computes on the others
    (Wang et al. 2023, "Overlap Communication with Dependent Computation via
    Decomposition", ASPLOS '23, section 3; Transformer Engine's userbuffers), so only what
    exceeds the layer's matrix multiplies (forward, both of backward, and the recomputed
    forward) stays exposed."""
    seconds = tensor_comm_seconds_per_layer_pass(workload, layout, calibration)
    if not (workload.tensor_comm_overlap and layout.sequence_parallel):
        return seconds
    passes = 4 if layout.checkpointing == "full" else 3
    return max(0.0, seconds - passes * layer.matrix_forward_seconds)


def pipeline_transfer_seconds(
    workload: Workload, layout: Layout, calibration: Calibration
) -> float:
    """One activation transfer between stages, split over the tensor ranks (scatter-gather,
    Narayanan et al. 2021, section 4.1); adjacent stages are tensor x data ranks apart."""
    shape = workload.shape
    tokens = local_tokens(layout, shape)
    size = tokens * shape.hidden_size * activation_element_bytes(workload.precision) / layout.tensor
    return _pair_transfer_seconds(workload, size, layout.tensor * layout.replicas + 1, calibration)


def _pair_transfer_seconds(
    workload: Workload, size_bytes: float, span_gpus: int, calibration: Calibration
) -> float:
    """One point-to-point transfer between two ranks that lie within `span_gpus`
    consecutive ranks: over NVLink when the span fits its reach (an NVLink bridge group,
    the node or a larger NVLink domain), over the cards' PCIe between the bridge groups of
    one node, else over the network."""
    gpu = workload.gpu
    bridge = gpu.nvlink_domain_gpus
    pcie = gpu.pcie_bandwidth_bytes_per_second
    inside = span_gpus <= workload.nvlink_domain_gpus
    if not inside:
        link = gpu.network_bandwidth_bytes_per_second * calibration.network_efficiency
    elif bridge is not None and pcie is not None and span_gpus > bridge:
        link = pcie * calibration.nvlink_efficiency
    else:
        link = gpu.nvlink_bandwidth_bytes_per_second * calibration.nvlink_efficiency
    pair = communicator(workload, 2, 2 if inside else 1, calibration)
    return point_to_point_seconds(size_bytes, replace(pair, bandwidth_bytes_per_second=link))


def context_comm_seconds_per_layer_pass(
    workload: Workload, layout: Layout, calibration: Calibration, layer: LayerPassSeconds
) -> float:
    """Ring attention's exposed exchange of one layer, one micro-batch, forward and backward.

    Each of the `context` ranks passes its chunk's keys and values around the ring:
    context - 1 transfers forward, twice that backward (keys and values, then their
    gradients), once more forward under full recompute, each overlapped with the attention
    core of the chunk in hand (Liu et al. 2023, arXiv 2310.01889, section 3; Megatron-LM's
    context parallelism overlaps them the same way); only what the core does not hide is
    exposed. The ring's neighbours lie within its tensor x context ranks
    (`_pair_transfer_seconds`).
    """
    c = layout.context
    if c == 1:
        return 0.0
    shape = workload.shape
    kv_heads_per_gpu = max(1.0, shape.kv_heads / layout.tensor)
    size = (
        local_tokens(layout, shape)
        * 2
        * kv_heads_per_gpu
        * shape.head_dim
        * activation_element_bytes(workload.precision)
    )
    transfer = _pair_transfer_seconds(workload, size, layout.tensor * c, calibration)
    forward = (c - 1) * transfer
    exposed = max(0.0, forward - layer.attention_forward_seconds) + max(
        0.0, 2 * forward - layer.attention_backward_seconds
    )
    if layout.checkpointing == "full":
        exposed += max(0.0, forward - layer.attention_forward_seconds)
    return exposed


def expert_comm_seconds_per_layer_pass(
    workload: Workload, layout: Layout, calibration: Calibration, layer: LayerPassSeconds
) -> float:
    """The experts' exposed all-to-all of the mean layer, one micro-batch, forward and
    backward.

    An MoE layer dispatches each token's k copies to the ranks holding their experts and
    combines the results back: two all-to-alls forward, two backward (their gradients),
    two more when the forward is recomputed (Lepikhin et al. 2020, GShard, arXiv
    2006.16668, section 2.2). A rank sends its sequence-parallel share of the tokens
    (tokens / t), the busiest receiving `routed_rows_factor` times an even share.
    Expert-parallel ranks lie expert-tensor ranks apart (Megatron-Core's expert rank
    order: expert-tensor, expert, expert-data), `members` of them on a node and the rest
    on n - 1 other nodes. Across nodes a token goes once to each node that holds one of
    its experts and is forwarded inside it over NVLink (DeepSeek-AI 2024, DeepSeek-V3,
    arXiv 2412.19437, section 3.2.2; DeepEP's internode kernels; Megatron-Core's flex
    dispatcher): with experts spread evenly, (n - 1) (1 - (1 - 1/n)^k) network copies a
    token; its k (members - 1) / members copies within nodes move over NVLink. Under fp8
    training the forward dispatch sends fp8 activations (one byte, section 3.3 of the
    same report); the combine and the gradients stay bf16. Where the framework overlaps
    them (`Workload.expert_comm_overlap`), only what the layer's compute does not hide is
    exposed (DeepSeek-V3's DualPipe, section 3.2.1; Megatron-Core's combined 1F1B).
    """
    experts = workload.shape.experts
    ep = layout.expert
    if experts is None or ep == 1:
        return 0.0
    shape = workload.shape
    tokens = (
        local_tokens(layout, shape)
        * routed_rows_factor(workload, layout, calibration)
        / layout.tensor
    )
    members = max(1, min(ep, workload.nvlink_domain_gpus // layout.expert_tensor))
    nodes = -(-ep // members)
    k = experts.per_token
    network_copies = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** k)
    intra_copies = k * (members - 1) / members
    group = communicator(workload, ep, members, calibration)
    intra = collective_bandwidth_bytes_per_second(workload, members, members, calibration)
    group = replace(group, bandwidth_bytes_per_second=intra)
    network = workload.gpu.network_bandwidth_bytes_per_second * calibration.network_efficiency
    e = activation_element_bytes(workload.precision)
    dispatch_bytes = 1 if workload.precision == "fp8" else e

    def one(element_bytes: int) -> float:
        row = tokens * shape.hidden_size * element_bytes
        return all_to_all_seconds(row * intra_copies, row * network_copies, group, network)

    # Forward dispatch and combine; backward: the gradients of both.
    seconds = one(dispatch_bytes) + 3 * one(e)
    if layout.checkpointing == "full":
        seconds += one(dispatch_bytes) + one(e)
    seconds *= shape.moe_layer_fraction
    if workload.expert_comm_overlap and (layout.pipeline == 1 or layout.virtual_stages > 1):
        # Combined 1F1B: one micro-batch's all-to-all runs under another's layer compute
        # (Megatron-Core's EP overlap needs no pipeline or an interleaved one).
        hidden = calibration.expert_comm_overlap * (layer.forward_seconds + layer.backward_seconds)
        return max(0.0, seconds - hidden)
    return seconds


def gradient_buckets(layout: Layout, parameters: float, calibration: Calibration) -> int:
    """Collectives per step of a bucketed data-parallel reduction (ZeRO 0-2): the
    parameters over Megatron-LM's default bucket, max(40M, 1M x data ranks) parameters."""
    bucket = max(
        calibration.gradient_bucket_min_parameters,
        calibration.gradient_bucket_parameters_per_data_rank * layout.replicas,
    )
    return max(1, math.ceil(parameters / bucket))


def data_comm_seconds(
    workload: Workload,
    layout: Layout,
    calibration: Calibration,
    backward_seconds_per_micro_batch: float,
    forward_seconds_per_micro_batch: float = 0.0,
) -> float:
    """Exposed gradient reduction (ZeRO 0-2) or parameter gathers and gradient scatters
    (ZeRO-3) per step.

    ZeRO 0 all-reduces fp32 gradients; stages 1 and 2 reduce-scatter them and all-gather
    updated weights (Rajbhandari et al. 2020, section 7), bucket by bucket
    (`gradient_buckets`). Stage 3 gathers each layer's weights forward and again backward
    and reduce-scatters its gradients, for every micro-batch: one collective per layer
    and pass (FSDP's per-layer units, Zhao et al. 2023, arXiv 2304.11277, section 3), so
    its volume per GPU does not shrink with the batch per GPU and its latency grows with
    the layers and the ring's length. Stages 0-2 hide part of the reduction behind the last
    micro-batch's backward pass where the framework overlaps it (`Workload.reduction_overlap`),
    none where it reduces after the backward pass; a framework that synchronises on every
    micro-batch (`Workload.sync_every_micro_batch`) pays the exchange on each. ZeRO-2
    keeps only its shard of the gradients, so it reduce-scatters them after every
    micro-batch's backward pass, not once per step: DeepSpeed's stage 1-2 optimizer
    reduces a micro-batch's gradients when it partitions them or at the accumulation
    boundary (`reduce_ready_partitions_and_remove_grads`, deepspeed/runtime/zero/
    stage_1_and_2.py), as the reference trainer's FSDP2 does for stage 2; the updated
    weights are gathered once per step. A pipeline stage synchronises on its last
    backward pass only (PyTorch's pipeline schedules; DeepSpeed's pipeline engine runs
    ZeRO-1 at most), so pipelined stages reduce once. Where the framework gathers the
    updated weights of ZeRO 1-2 under the next step's first forward pass
    (`Workload.param_gather_overlap`: Megatron-LM's forward pre-hook waits for a bucket's
    all-gather and starts the next one's, core_v0.19.0 `distributed_data_parallel.py`
    `_make_forward_pre_hook`), the gather hides behind that forward pass as the
    reduce-scatter does behind the last backward pass.
    """
    if layout.replicas == 1:
        return 0.0
    seconds = _exchange_seconds(workload, layout, calibration, gradients_only=False)
    if layout.zero_stage >= 3:
        hidden = calibration.zero3_overlap * 3.0 * backward_seconds_per_micro_batch / 2.0
        return max(0.0, seconds - layout.accumulation_steps * hidden)
    overlaps = _reduction_overlaps(workload, layout)
    overlap = calibration.data_parallel_overlap

    def exposed(
        exchange_seconds: float, under_seconds: float = backward_seconds_per_micro_batch
    ) -> float:
        """What of `exchange_seconds` the compute of `under_seconds` does not hide."""
        if not overlaps:
            return exchange_seconds
        return max(exchange_seconds * (1 - overlap), exchange_seconds - overlap * under_seconds)

    # Every micro-batch syncs where the framework does not hold gradients back until the
    # last one (`Workload.sync_every_micro_batch`): the whole exchange, each time.
    if workload.sync_every_micro_batch and layout.pipeline == 1:
        return layout.accumulation_steps * exposed(seconds)
    earlier = layout.accumulation_steps - 1
    if layout.zero_stage == 2 and earlier and layout.pipeline == 1:
        scatter = _exchange_seconds(workload, layout, calibration, gradients_only=True)
        return exposed(seconds) + earlier * exposed(scatter)
    if workload.param_gather_overlap and layout.zero_stage >= 1:
        scatter = _exchange_seconds(workload, layout, calibration, gradients_only=True)
        return exposed(scatter) + exposed(seconds - scatter, forward_seconds_per_micro_batch)
    return exposed(seconds)


def _reduction_overlaps(workload: Workload, layout: Layout) -> bool:
    """Whether the framework overlaps the ZeRO 0-2 gradient reduction with the backward
    pass in this layout (`Workload.reduction_overlap`)."""
    if workload.reduction_overlap == "sharded-without-pipeline":
        return layout.zero_stage > 0 and layout.pipeline == 1
    if workload.reduction_overlap == "except-unsharded-with-tensor":
        return layout.zero_stage > 0 or layout.tensor == 1
    return True


def _exchange_seconds(
    workload: Workload, layout: Layout, calibration: Calibration, *, gradients_only: bool
) -> float:
    """`_reduction_seconds` over the stage's dense weights and its routed experts; with
    `gradients_only`, the gradients' reduce-scatter without the weights' all-gather."""
    params = stage_parameter_count(workload.shape, layout)
    experts = stage_expert_parameter_count(workload.shape, layout)
    # Routed experts reduce over their expert-data ranks, tensor x expert ranks apart;
    # the other weights over all data x context ranks.
    seconds = _reduction_seconds(
        workload,
        layout,
        calibration,
        params - experts,
        ranks=layout.replicas,
        spacing=layout.tensor,
        gradients_only=gradients_only,
    )
    if experts:
        seconds += _reduction_seconds(
            workload,
            layout,
            calibration,
            experts,
            ranks=layout.expert_replicas,
            spacing=layout.expert * layout.expert_tensor,
            gradients_only=gradients_only,
        )
    return seconds


def _reduction_seconds(
    workload: Workload,
    layout: Layout,
    calibration: Calibration,
    params: float,
    *,
    ranks: int,
    spacing: int,
    gradients_only: bool = False,
) -> float:
    """Collective seconds of one step (`data_comm_seconds`, before overlap) for `params`
    of one GPU, reduced over `ranks` ranks that lie `spacing` ranks apart (ZeRO 1-2 with
    `gradients_only`: the reduce-scatter alone)."""
    if ranks == 1 or params <= 0:
        return 0.0
    state = state_bytes_per_parameter(workload.precision, workload.optimizer)
    # Gradients exist for what trains: every weight, or the adapters on a frozen base.
    trained = (
        stage_adapter_parameter_count(workload, layout) if workload.tuning.adapters else params
    )
    members = max(1, min(ranks, workload.nvlink_domain_gpus // spacing))
    group = communicator(workload, ranks, members, calibration)
    if layout.zero_stage >= 3:
        # The stage's layers plus one unit for the embedding and output layer.
        units = split_of(workload.shape.layers, layout.pipeline).most + 1
        weight_bytes = frozen_weight_bytes_per_parameter(workload)
        per_micro_batch = units * (
            2 * all_gather_seconds(params / units * weight_bytes, group)
            + reduce_scatter_seconds(trained / units * state.gradients, group)
        )
        return layout.accumulation_steps * per_micro_batch
    buckets = gradient_buckets(layout, trained, calibration)
    per_bucket = trained / buckets
    if layout.zero_stage >= 1:
        gather = 0.0 if gradients_only else all_gather_seconds(per_bucket * state.weights, group)
        return buckets * (reduce_scatter_seconds(per_bucket * state.gradients, group) + gather)
    return buckets * all_reduce_seconds(per_bucket * state.gradients, group)


def optimizer_seconds(workload: Workload, layout: Layout, calibration: Calibration) -> float:
    """The optimizer update: memory-bound over the local (ZeRO-sharded) trained parameters."""
    if workload.tuning.adapters:
        params = stage_adapter_parameter_count(workload, layout)
        if layout.zero_stage >= 1:
            params /= layout.replicas
    else:
        params = zero_sharded(
            stage_parameter_count(workload.shape, layout),
            stage_expert_parameter_count(workload.shape, layout),
            layout,
            layout.zero_stage >= 1,
        )
    arch = calibration.architecture(workload.gpu.architecture)
    bandwidth = workload.gpu.hbm_bandwidth_bytes_per_second * arch.hbm_efficiency
    return params * calibration.optimizer_bytes_per_parameter / bandwidth


def overlapped_transfers(pipeline: int, micro_batches: int, chunks: int) -> int:
    """Forward (and as many backward) chunk passes of the interleaved schedule whose
    transfers can hide under compute where the framework overlaps them: the first stage's
    steady 1F1B passes, all m v passes less its warm-up (`stages.warmup_chunk_passes`).
    Megatron-LM posts each steady-state send and receive before the chunk's compute and
    waits for it after (core_v0.19.0 `pipeline_parallel/schedules.py`,
    `forward_backward_pipelining_with_interleaving` with `overlap_p2p_comm`), so each
    transfer costs only what exceeds one chunk's forward pass; the warm-up's and the
    flush's stay blocking. With m v at most the warm-up (few micro-batches, e.g. m = p),
    the whole step is warm-up and nothing overlaps."""
    return micro_batches * chunks - warmup_chunk_passes(0, pipeline, micro_batches, chunks)


def step_time(workload: Workload, layout: Layout, calibration: Calibration) -> StepTime:
    """Seconds of one optimizer step under `layout`."""
    shape: ModelShape = workload.shape
    layer = layer_pass_seconds(workload, layout, calibration)
    recompute = 0.0
    if layout.checkpointing == "full":
        recompute = layer.forward_seconds
    elif layout.checkpointing == "selective":
        recompute = (
            layer.per_op_recompute_seconds
            if workload.selective_recompute == "every-other-matmul"
            else layer.selective_recompute_seconds
        )
    # The slowest stage sets the pace: the last (its layers and the logits) or, with an
    # uneven split (`planner.stages`), possibly a middle one with more layers.
    split = split_of(shape.layers, layout.pipeline)
    layer_pass = layer.forward_seconds + layer.backward_seconds + recompute
    logits = logits_pass_seconds(workload, layout, calibration)
    inner = split.most_before_last
    if inner * layer_pass > split.last * layer_pass + logits:
        slowest_layers, slowest_logits = inner, 0.0
    else:
        slowest_layers, slowest_logits = split.last, logits
    stage_compute = slowest_layers * layer_pass + slowest_logits
    stage_tensor = slowest_layers * exposed_tensor_comm_seconds_per_layer_pass(
        workload, layout, calibration, layer
    )
    stage_context = slowest_layers * context_comm_seconds_per_layer_pass(
        workload, layout, calibration, layer
    )
    stage_expert = slowest_layers * expert_comm_seconds_per_layer_pass(
        workload, layout, calibration, layer
    )
    m = layout.accumulation_steps
    p = layout.pipeline
    v = layout.virtual_stages
    bubble = (p - 1) / v * (stage_compute + stage_tensor + stage_context + stage_expert)

    p2p = 0.0
    if p > 1:
        transfer = pipeline_transfer_seconds(workload, layout, calibration)
        exposed = 2 * v * (m + p - 1) * transfer
        if workload.pipeline_p2p_overlap and v > 1:
            exposed -= (
                2
                * overlapped_transfers(p, m, v)
                * min(transfer, slowest_layers / v * layer.forward_seconds)
            )
        p2p = calibration.pipeline_p2p_exposed * exposed
    backward_per_micro_batch = split.most * (layer.backward_seconds + recompute)
    forward_per_micro_batch = split.most * layer.forward_seconds
    data = data_comm_seconds(
        workload, layout, calibration, backward_per_micro_batch, forward_per_micro_batch
    )
    # A cluster's measured / planned ratio scales every part alike (`planner.cluster_fit`).
    factor = calibration.step_seconds_factor
    return StepTime(
        compute_seconds=factor * m * stage_compute,
        tensor_comm_seconds=factor * m * stage_tensor,
        context_comm_seconds=factor * m * stage_context,
        expert_comm_seconds=factor * m * stage_expert,
        pipeline_bubble_seconds=factor * bubble,
        pipeline_comm_seconds=factor * p2p,
        data_comm_seconds=factor * data,
        optimizer_seconds=factor * optimizer_seconds(workload, layout, calibration),
    )
