"""Floating-point operations of one training step (pure).

Counts multiply-adds as two operations. The decomposition follows Narayanan et al. 2021
(arXiv 2104.04473, section 5.1), extended to grouped-query attention (K and V projections
scale with kv_heads / heads) and gated MLPs (three matrices instead of two). Attention
scores and the attention-weighted values are counted over the whole sequence, as in that
paper, so model FLOPs and MFU agree with published figures. A mixture-of-experts layer
counts the work of the experts a token is routed to (top-k) and of the router, not of
every expert (Fedus et al. 2021, arXiv 2101.03961, section 2: FLOPs per token follow the
active parameters); latent attention counts its down- and up-projections (DeepSeek-V2,
arXiv 2405.04434, appendix C, without the inference-time absorption). Per-layer figures
are means over the layers (`shapes`).
"""

from __future__ import annotations

from trainplan.planner.finetune import PRETRAIN, FineTuning, lora_flops_per_token
from trainplan.planner.layout import Checkpointing
from trainplan.planner.shapes import (
    ModelShape,
    attention_projections,
    latent_up_projections,
    mlp_parameter_count,
)


def qkv_projection_flops_per_token(shape: ModelShape) -> float:
    """Forward Q, K and V projections of one layer: 2 h (h + 2 kv_heads head_dim), or
    every projection before the output one under latent attention."""
    return 2.0 * sum(d_in * d_out for d_in, d_out in attention_projections(shape)[:-1])


def attention_core_flops_per_token(shape: ModelShape) -> float:
    """Forward Q K^T and scores x V of one layer: 2 s heads (d_qk + d_v), which is
    2 x 2 s h for heads of width h / heads (Narayanan et al. 2021)."""
    latent = shape.latent_attention
    if latent is None:
        return 4.0 * shape.sequence_length * shape.attention_width
    widths = latent.query_key_head_dim + latent.value_head_dim
    return 2.0 * shape.sequence_length * shape.attention_heads * widths


def output_projection_flops_per_token(shape: ModelShape) -> float:
    """Forward attention output projection of one layer: 2 h^2 (2 x its input width x h)."""
    d_in, d_out = attention_projections(shape)[-1]
    return 2.0 * d_in * d_out


def mlp_flops_per_token(shape: ModelShape) -> float:
    """Forward MLP of the mean layer: 2 h f per matrix; 3 matrices when gated (SwiGLU),
    else 2. An MoE layer: its router (2 h x experts), its shared experts and its top-k
    routed experts."""
    h = shape.hidden_size
    dense = 2.0 * mlp_parameter_count(h, shape.ffn_hidden_size, shape.gated_mlp)
    experts = shape.experts
    if experts is None:
        return dense
    moe = 2.0 * (
        h * experts.routed
        + mlp_parameter_count(h, experts.shared_width, shape.gated_mlp)
        + experts.per_token * mlp_parameter_count(h, experts.ffn_hidden_size, shape.gated_mlp)
    )
    fraction = shape.moe_layer_fraction
    return (1.0 - fraction) * dense + fraction * moe


def layer_forward_flops_per_token(shape: ModelShape) -> float:
    """Forward FLOPs of one transformer layer per token."""
    return (
        qkv_projection_flops_per_token(shape)
        + attention_core_flops_per_token(shape)
        + output_projection_flops_per_token(shape)
        + mlp_flops_per_token(shape)
    )


def logits_forward_flops_per_token(shape: ModelShape) -> float:
    """Forward output (logits) layer: 2 h V."""
    return 2.0 * shape.hidden_size * shape.vocab_size


def model_flops_per_token(shape: ModelShape, tuning: FineTuning = PRETRAIN) -> float:
    """Training FLOPs per token without recomputation: 3 x forward (backward = 2 x forward).

    Equals 72 L h^2 (1 + s / 6h) + 6 h V for a GPT with 4h MLP and multi-head attention,
    Narayanan et al. 2021 eq. (3) without its recompute pass. With adapters on a frozen
    base (`finetune`), the frozen matrices' backward computes only the input gradient (1 x
    their forward instead of 2 x), the attention core's backward stays 2 x forward (it has
    no weights), and the adapters add 3 x their own forward.
    """
    forward = shape.layers * layer_forward_flops_per_token(shape)
    logits = logits_forward_flops_per_token(shape)
    if not tuning.adapters:
        return 3.0 * (forward + logits)
    core = shape.layers * attention_core_flops_per_token(shape)
    adapters = shape.layers * lora_flops_per_token(shape, tuning)
    return 2.0 * (forward - core) + 3.0 * core + 3.0 * adapters + 2.0 * logits


def recompute_flops_per_token(shape: ModelShape, checkpointing: Checkpointing) -> float:
    """Extra forward work of activation recomputation.

    full: the whole layer forward again (Chen et al. 2016); selective: the attention core
    (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2) and, with latent attention,
    its up-projections from the latents (`memory.module_recompute_bytes_per_token`); none:
    nothing.
    """
    if checkpointing == "full":
        return shape.layers * layer_forward_flops_per_token(shape)
    if checkpointing == "selective":
        up = 2.0 * sum(d_in * d_out for d_in, d_out in latent_up_projections(shape))
        return shape.layers * (attention_core_flops_per_token(shape) + up)
    return 0.0


def hardware_flops_per_token(
    shape: ModelShape, checkpointing: Checkpointing, tuning: FineTuning = PRETRAIN
) -> float:
    """FLOPs the GPUs execute per token: model FLOPs plus recomputation."""
    return model_flops_per_token(shape, tuning) + recompute_flops_per_token(shape, checkpointing)


def six_n_d_flops(parameters: float, tokens: float) -> float:
    """The rule of thumb C = 6 N D (Kaplan et al. 2020, arXiv 2001.08361, section 2.1)."""
    return 6.0 * parameters * tokens
