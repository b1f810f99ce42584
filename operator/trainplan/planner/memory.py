"""Memory per GPU of a layout (pure).

Model states follow Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054, section 3.1): with
mixed-precision AdamW each parameter holds 2 bytes of weights, 4 of fp32 gradients and 12
of optimizer state (fp32 master copy, momentum, variance), Megatron-LM's default; ZeRO
stages 1, 2 and 3 shard the optimizer state, then gradients, then weights over the
data-parallel ranks. Activations per layer follow Korthikanti et al. 2022 (arXiv
2205.05198, section 4, Table 2), generalised to grouped-query attention, gated MLPs and
fused (flash) attention, which stores no score matrix (Dao et al. 2022, arXiv 2205.14135).
Mixture-of-experts layers hold all their experts, split over the expert-parallel ranks,
whose ZeRO shards span the expert-data group (`Layout.expert_replicas`); their
activations are those of the experts each token visits, plus the dispatched copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.planner.calibration import Calibration
from trainplan.planner.finetune import NF4_BYTES_PER_PARAMETER, lora_layer_parameter_count
from trainplan.planner.layout import Layout, Precision, Workload
from trainplan.planner.shapes import (
    ModelShape,
    embedding_parameter_count,
    expert_layer_parameter_count,
    layer_parameter_count,
)
from trainplan.planner.stages import split_of

_MASK_BYTES = 1  # dropout masks are stored as one byte per element


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes per GPU on the most loaded pipeline stage."""

    capacity_bytes: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    overhead_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.logits_bytes
            + self.overhead_bytes
        )

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def model_state_bytes(self) -> int:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


@dataclass(frozen=True, slots=True)
class StateBytesPerParameter:
    """Bytes per parameter of weights, gradients and optimizer state."""

    weights: float
    gradients: float
    optimizer: float


def state_bytes_per_parameter(precision: Precision, optimizer: str) -> StateBytesPerParameter:
    """Per-parameter model-state bytes (ZeRO paper, section 3.1).

    Mixed precision (bf16, fp16): 2 + 4 + 12 for AdamW, 2 + 4 + 8 for SGD with momentum
    (master copy and momentum). fp8 keeps bf16 weights plus a 1-byte fp8 copy. fp32: 4 + 4
    and two fp32 moments (AdamW) or one (SGD).
    """
    if precision == "fp32":
        return StateBytesPerParameter(4.0, 4.0, 8.0 if optimizer == "adamw" else 4.0)
    weights = 3.0 if precision == "fp8" else 2.0
    return StateBytesPerParameter(weights, 4.0, 12.0 if optimizer == "adamw" else 8.0)


def checkpoint_bytes(parameters: float, precision: Precision, optimizer: str) -> float:
    """Bytes one full checkpoint writes: the weights and the optimizer state (fp32 master
    copy and moments) of every parameter, without gradients (`state_bytes_per_parameter`;
    what the reference trainer's `step-*.pt` holds)."""
    state = state_bytes_per_parameter(precision, optimizer)
    return parameters * (state.weights + state.optimizer)


def frozen_weight_bytes_per_parameter(workload: Workload) -> float:
    """Bytes of one base weight: 4-bit NormalFloat under QLoRA (`finetune`), else the
    weights' own bytes."""
    if workload.tuning.method == "qlora":
        return NF4_BYTES_PER_PARAMETER
    return state_bytes_per_parameter(workload.precision, workload.optimizer).weights


def stage_adapter_parameter_count(workload: Workload, layout: Layout) -> float:
    """Trainable adapter parameters on one GPU of the most loaded pipeline stage: its
    layers' adapters, split by the tensor degree (0 when every weight trains)."""
    layers = split_of(workload.shape.layers, layout.pipeline).most
    return layers * lora_layer_parameter_count(workload.shape, workload.tuning) / layout.tensor


def local_tokens(layout: Layout, shape: ModelShape) -> float:
    """Tokens of one micro-batch on one GPU: its sequences' share under context
    parallelism."""
    return layout.micro_batch_size * shape.sequence_length / layout.context


def activation_element_bytes(precision: Precision) -> int:
    """Bytes per stored activation element: 4 in fp32, else 2 (fp8 GEMMs keep bf16 I/O)."""
    return 4 if precision == "fp32" else 2


def local_layer_parameter_count(shape: ModelShape, layout: Layout) -> float:
    """Weights of the mean layer on one GPU before ZeRO: the tensor ranks' share of
    attention, norms and dense or shared MLPs, and the routed experts' share of the expert
    x expert-tensor ranks (`layer_parameter_count` / tensor when dense)."""
    experts = expert_layer_parameter_count(shape)
    if not experts:
        return layer_parameter_count(shape) / layout.tensor
    rest = (layer_parameter_count(shape) - experts) / layout.tensor
    return rest + experts / (layout.expert * layout.expert_tensor)


def _stage_contents(shape: ModelShape, layout: Layout) -> tuple[float, float]:
    """Layers of the most loaded stage and its embedding or output matrix parameters
    (before tensor parallelism)."""
    if layout.pipeline == 1:
        return float(shape.layers), embedding_parameter_count(shape)
    split = split_of(shape.layers, layout.pipeline)
    # Compared before the tensor split, which divides the layers' other weights and the
    # matrix alike.
    per_layer = layer_parameter_count(shape)
    if expert_layer_parameter_count(shape):
        per_layer = local_layer_parameter_count(shape, layout) * layout.tensor
    matrix = float(shape.vocab_size * shape.hidden_size)
    middle = split.middle if layout.pipeline > 2 else 0.0
    edges = max(split.first, split.last)
    if middle * per_layer > edges * per_layer + matrix:
        return middle, 0.0
    return edges, matrix


def stage_parameter_count(shape: ModelShape, layout: Layout) -> float:
    """Parameters held by one GPU of the most loaded pipeline stage, before ZeRO sharding.

    Layers split over the stages as `planner.stages` does (evenly when the degree divides
    them); the input embedding sits on the first stage and the output matrix on the last
    (with tied embeddings and more than one stage, the last stage keeps its own copy, as
    Megatron-LM does); tensor parallelism splits both; expert and expert-tensor
    parallelism split the routed experts (`local_layer_parameter_count`).
    """
    layers, matrix = _stage_contents(shape, layout)
    experts = stage_expert_parameter_count(shape, layout)
    if not experts:
        return (layers * layer_parameter_count(shape) + matrix) / layout.tensor
    rest = layers * (layer_parameter_count(shape) - expert_layer_parameter_count(shape))
    return (rest + matrix) / layout.tensor + experts


def stage_expert_parameter_count(shape: ModelShape, layout: Layout) -> float:
    """The routed experts' part of `stage_parameter_count`: sharded by ZeRO over the
    expert-data ranks rather than all data ranks (0 for a dense model)."""
    experts = expert_layer_parameter_count(shape)
    if not experts:
        return 0.0
    layers, _ = _stage_contents(shape, layout)
    return layers * experts / (layout.expert * layout.expert_tensor)


def zero_sharded(total: float, experts: float, layout: Layout, sharded: bool) -> float:
    """One GPU's share of `total` (parameters, or their bytes) after ZeRO's split when
    `sharded`: the routed experts' part `experts` over the expert-data ranks, the rest over
    all data x context ranks."""
    if not sharded:
        return total
    dense = (total - experts) / layout.replicas
    if not experts:
        return dense
    return dense + experts / layout.expert_replicas


def _stage_embedding_parameter_count(shape: ModelShape, layout: Layout) -> float:
    """Embedding and output matrices on one GPU of the most loaded stage (as
    `stage_parameter_count` places them)."""
    if layout.pipeline == 1:
        return embedding_parameter_count(shape) / layout.tensor
    return float(shape.vocab_size * shape.hidden_size) / layout.tensor


def layer_activation_bytes_per_token(
    shape: ModelShape, layout: Layout, precision: Precision, attention: str
) -> float:
    """Activation bytes one layer stores per token on one GPU, no recomputation.

    Korthikanti et al. 2022, eq. (1)-(2): 34 s b h + 5 a s^2 b bytes per layer for a GPT
    with 4h MLP, of which 10 s b h lie outside the tensor-parallel region (split by t only
    with sequence parallelism), 24 s b h inside it and 5 a s^2 b in the score matrix. A
    model without dropout keeps no masks: 2 s b h fewer outside, and 3 a s^2 b fewer in
    the scores (no mask and no dropout output).
    """
    e = activation_element_bytes(precision)
    h = shape.hidden_size
    f = shape.ffn_hidden_size
    kv_ratio = shape.kv_heads / shape.attention_heads
    t = layout.tensor
    # Two norm inputs, attention and MLP inputs, and two dropout masks if it has dropout.
    outside = (4 * e) * h + (2 * _MASK_BYTES * h if shape.dropout else 0)
    attention_block = _attention_activation_bytes_per_token(shape, e, kv_ratio)
    mlp_block: float = e * f * (3 if shape.gated_mlp else 2)
    experts = shape.experts
    if experts is not None:
        # An MoE layer: the activations of the k experts a token visits and of the shared
        # ones, plus its k dispatched copies in and out (the router's logits are small).
        width = experts.per_token * experts.ffn_hidden_size + experts.shared_width
        moe_block = e * width * (3 if shape.gated_mlp else 2) + 2 * e * experts.per_token * h
        fraction = shape.moe_layer_fraction
        mlp_block = (1.0 - fraction) * mlp_block + fraction * moe_block
    inside = attention_block + mlp_block
    scores = 0.0
    if attention == "standard":
        scores = standard_attention_score_bytes_per_token(shape, e)
    outside_share = outside / t if layout.sequence_parallel else outside
    return outside_share + inside / t + scores / t


def standard_attention_score_bytes_per_token(shape: ModelShape, element_bytes: int) -> float:
    """What a materialised-score attention keeps per token and layer (Korthikanti et al.
    2022, section 4.1: 5 a s^2 b bytes): the softmax output, and with attention dropout
    its mask and output too."""
    per_score = (2 * element_bytes + _MASK_BYTES) if shape.dropout else element_bytes
    return float(shape.attention_heads * shape.sequence_length * per_score)


def _attention_activation_bytes_per_token(
    shape: ModelShape, element_bytes: int, kv_ratio: float
) -> float:
    """What attention stores per token (Korthikanti et al. 2022): the inputs of Q, K, V
    and of the output projection, 2 h + 2 h kv / heads elements (`attention_width` in
    place of h for a declared head width); with latent attention the latents and the
    rebuilt per-head queries, keys and values (DeepSeek-V2, section 2.1.2)."""
    latent = shape.latent_attention
    if latent is None:
        h = shape.hidden_size
        width = shape.attention_width
        if width == h:
            return element_bytes * h * (2 + 2 * kv_ratio)
        return element_bytes * (h + 2 * width * kv_ratio + width)
    heads = shape.attention_heads
    elements = (
        shape.hidden_size
        + latent.query_rank
        + latent.kv_rank
        + heads * (2 * latent.query_key_head_dim + 2 * latent.value_head_dim)
    )
    return float(element_bytes * elements)


def checkpointed_layer_bytes_per_token(
    shape: ModelShape, layout: Layout, precision: Precision, attention: str
) -> float:
    """Bytes one layer keeps per token between forward and backward under `layout`."""
    if layout.checkpointing == "full":
        e = activation_element_bytes(precision)
        stored = e * shape.hidden_size  # the layer input only
        return stored / layout.tensor if layout.sequence_parallel else stored
    full = layer_activation_bytes_per_token(shape, layout, precision, attention)
    if layout.checkpointing != "selective":
        return full
    if attention == "standard":
        e = activation_element_bytes(precision)
        full -= standard_attention_score_bytes_per_token(shape, e) / layout.tensor
    return full - module_recompute_bytes_per_token(shape, layout, precision)


def module_recompute_bytes_per_token(
    shape: ModelShape, layout: Layout, precision: Precision
) -> float:
    """What selective recomputation of modules frees per token and layer
    (`ModelShape.recomputes_modules`; Megatron-LM's output-discarding checkpoints of
    `layernorm`, `moe_act` and `mla_up_proj`): the two norms' outputs, the MoE experts'
    activation outputs, and latent attention's per-head queries, keys and values (rebuilt
    from the latents). 0 for a dense model."""
    if not shape.recomputes_modules:
        return 0.0
    e = activation_element_bytes(precision)
    h = shape.hidden_size
    t = layout.tensor
    norms = 2 * e * h / (t if layout.sequence_parallel else 1)
    activation = 0.0
    experts = shape.experts
    if experts is not None:
        width = experts.per_token * experts.ffn_hidden_size + experts.shared_width
        activation = e * width * shape.moe_layer_fraction / t
    up_projections = 0.0
    latent = shape.latent_attention
    if latent is not None:
        heads = shape.attention_heads
        per_head = 2 * latent.query_key_head_dim + latent.value_head_dim
        up_projections = e * heads * per_head / t
    return norms + activation + up_projections


def in_flight_layer_passes(shape: ModelShape, layout: Layout) -> float:
    """Layer activations alive at once on the most loaded stage (`StageSplit.most_in_flight`):
    the first stage with an even split, possibly the second with an uneven one; stage i
    (from 0) holds p - i micro-batches of its layers under 1F1B (Korthikanti et al. 2022,
    section 4.2.3), fewer when there are fewer micro-batches, and interleaving with v
    chunks adds about a factor 1 + (p - 1) / (p v) unless every pass of the step is held.
    """
    split = split_of(shape.layers, layout.pipeline)
    return split.most_in_flight(layout.accumulation_steps, layout.virtual_stages)


def estimate_memory(workload: Workload, layout: Layout, calibration: Calibration) -> MemoryEstimate:
    """Peak memory per GPU of `layout` on the most loaded stage."""
    shape = workload.shape
    state = state_bytes_per_parameter(workload.precision, workload.optimizer)
    params = stage_parameter_count(shape, layout)
    base_bytes = frozen_weight_bytes_per_parameter(workload)
    if workload.tuning.adapters:
        # A frozen base holds its weights only; the adapters hold the full training state.
        trained = stage_adapter_parameter_count(workload, layout)
        stored = params * base_bytes + trained * state.weights
        if workload.tuning.method == "qlora":
            # Only the layers' linear maps are 4-bit: the embedding and output matrices stay
            # in the compute type (bitsandbytes quantizes linear layers and skips lm_head).
            matrices = _stage_embedding_parameter_count(shape, layout)
            stored += matrices * (state.weights - base_bytes)
    else:
        trained = params
        stored = params * state.weights
    # Routed experts shard over their expert-data ranks (`zero_sharded`); adapters are
    # refused on MoE models (`resolve`), so there every expert trains.
    experts = stage_expert_parameter_count(shape, layout)
    trained_experts = 0.0 if workload.tuning.adapters else experts
    weights = zero_sharded(stored, experts * state.weights, layout, layout.zero_stage >= 3)
    gradients = zero_sharded(
        trained * state.gradients,
        trained_experts * state.gradients,
        layout,
        layout.zero_stage >= 2,
    )
    optimizer = zero_sharded(
        trained * state.optimizer,
        trained_experts * state.optimizer,
        layout,
        layout.zero_stage >= 1,
    )

    # Context parallelism: each rank holds 1/context of every sequence's tokens.
    tokens = local_tokens(layout, shape)
    per_layer = checkpointed_layer_bytes_per_token(
        shape, layout, workload.precision, workload.attention
    )
    activations = per_layer * tokens * in_flight_layer_passes(shape, layout)
    rebuilt = 0.0
    if layout.checkpointing != "none":
        # One layer's full activations are rebuilt during its backward pass.
        rebuilt = tokens * layer_activation_bytes_per_token(
            shape, layout, workload.precision, workload.attention
        )
        activations += rebuilt
    last_stage_passes = split_of(shape.layers, layout.pipeline).last_in_flight(
        layout.accumulation_steps, layout.virtual_stages
    )
    last_stage_activations = per_layer * tokens * last_stage_passes + rebuilt

    e = activation_element_bytes(workload.precision)
    # Logits in the compute type plus their fp32 softmax copy, for one micro-batch. They are
    # freed before the first recomputed layer's backward, so the two share one peak: only
    # what the logits need beyond the rebuilt layer counts.
    logits = max(0.0, tokens * shape.vocab_size / layout.tensor * (e + 4) - rebuilt)
    if layout.pipeline > 1:
        # The first stage holds the most micro-batches, the last the logits: the larger
        # of the two is the peak, compared as the total counts them (with fragmentation).
        fragmented = 1.0 + calibration.memory_fragmentation
        if last_stage_activations * fragmented + logits >= activations * fragmented:
            activations = last_stage_activations
        else:
            logits = 0.0

    gathered = 0.0
    if layout.zero_stage >= 3:
        # ZeRO-3 materialises the current and the prefetched layer in full.
        gathered = 2 * local_layer_parameter_count(shape, layout) * base_bytes
    if workload.tuning.method == "qlora":
        # The layer in hand, dequantized to the compute type for its matrix multiplies.
        gathered += layer_parameter_count(shape) / layout.tensor * state.weights
    overhead = (
        calibration.memory_overhead_bytes + calibration.memory_fragmentation * activations
    ) + gathered
    return MemoryEstimate(
        capacity_bytes=workload.gpu.memory_bytes,
        weights_bytes=round(weights),
        gradients_bytes=round(gradients),
        optimizer_bytes=round(optimizer),
        activations_bytes=round(activations),
        logits_bytes=round(logits),
        overhead_bytes=round(overhead),
    )
