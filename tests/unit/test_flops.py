"""Training FLOPs per token against the closed forms of Narayanan et al. 2021."""

import pytest

from trainplan.planner.flops import (
    attention_core_flops_per_token,
    hardware_flops_per_token,
    layer_forward_flops_per_token,
    mlp_flops_per_token,
    model_flops_per_token,
    qkv_projection_flops_per_token,
    recompute_flops_per_token,
)
from trainplan.planner.shapes import ModelShape


def gpt(
    layers: int,
    hidden: int,
    heads: int,
    vocab: int,
    seq: int,
    *,
    kv_heads: int | None = None,
    ffn: int | None = None,
    gated: bool = False,
) -> ModelShape:
    """A GPT shape; multi-head attention and a 4h MLP unless told otherwise."""
    return ModelShape(
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=heads if kv_heads is None else kv_heads,
        ffn_hidden_size=4 * hidden if ffn is None else ffn,
        gated_mlp=gated,
        vocab_size=vocab,
        sequence_length=seq,
        tied_embeddings=True,
    )


GPT_SHAPES = [
    gpt(24, 2304, 24, 51200, 2048),  # Megatron-LM 1.7B (Narayanan et al. 2021, Table 1)
    gpt(96, 12288, 96, 51200, 2048),  # GPT-3 175B
    gpt(16, 2048, 8, 50304, 2048),  # Pythia-1B
    gpt(4, 128, 4, 1000, 4096),  # s > h: the attention term dominates
]


def narayanan_model_flops(shape: ModelShape) -> float:
    """72 L h^2 (1 + s / 6h) + 6 h V: Narayanan et al. 2021 eq. (3) without recompute."""
    layers, h, s, v = shape.layers, shape.hidden_size, shape.sequence_length, shape.vocab_size
    return 72 * layers * h**2 * (1 + s / (6 * h)) + 6 * h * v


@pytest.mark.parametrize("shape", GPT_SHAPES)
def test_model_flops_match_narayanan_eq3_without_recompute(shape: ModelShape) -> None:
    assert model_flops_per_token(shape) == pytest.approx(narayanan_model_flops(shape), rel=1e-12)


@pytest.mark.parametrize("shape", GPT_SHAPES)
def test_full_recompute_adds_one_layer_forward_per_layer(shape: ModelShape) -> None:
    # Narayanan et al. 2021 eq. (3): 96 B s L h^2 (1 + s/6h + V/16Lh) per step, i.e.
    # 96 L h^2 (1 + s/6h) + 6 h V per token with the recompute pass.
    layers, h, s, v = shape.layers, shape.hidden_size, shape.sequence_length, shape.vocab_size
    expected = 96 * layers * h**2 * (1 + s / (6 * h)) + 6 * h * v
    assert hardware_flops_per_token(shape, "full") == pytest.approx(expected, rel=1e-12)
    assert recompute_flops_per_token(shape, "full") == pytest.approx(
        layers * layer_forward_flops_per_token(shape), rel=1e-12
    )


@pytest.mark.parametrize("shape", GPT_SHAPES)
def test_selective_recompute_adds_only_the_attention_core(shape: ModelShape) -> None:
    # Korthikanti et al. 2022, section 4.2: only Q K^T and scores x V (2 x 2 s h) are redone.
    extra = shape.layers * 4 * shape.sequence_length * shape.hidden_size
    assert recompute_flops_per_token(shape, "selective") == pytest.approx(extra, rel=1e-12)
    assert hardware_flops_per_token(shape, "selective") == pytest.approx(
        model_flops_per_token(shape) + extra, rel=1e-12
    )


@pytest.mark.parametrize("shape", GPT_SHAPES)
def test_no_recompute_means_hardware_equals_model_flops(shape: ModelShape) -> None:
    assert recompute_flops_per_token(shape, "none") == 0.0
    assert hardware_flops_per_token(shape, "none") == model_flops_per_token(shape)


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8, 16])
def test_grouped_query_attention_shrinks_only_the_kv_projections(kv_heads: int) -> None:
    mha = gpt(32, 4096, 32, 32000, 4096)
    gqa = gpt(32, 4096, 32, 32000, 4096, kv_heads=kv_heads)
    h, head_dim = mha.hidden_size, mha.head_dim
    # Q projection 2 h^2 plus K and V projections 2 x 2 h (kv x head_dim) per token forward.
    assert qkv_projection_flops_per_token(gqa) == pytest.approx(
        2 * h * (h + 2 * kv_heads * head_dim), rel=1e-12
    )
    # Training is 3 x forward, so the saving is 3 L x 2 h (2 h - 2 kv head_dim).
    saving = 3 * mha.layers * 2 * h * (2 * h - 2 * kv_heads * head_dim)
    assert model_flops_per_token(mha) - model_flops_per_token(gqa) == pytest.approx(
        saving, rel=1e-12
    )


def test_grouped_query_attention_with_all_heads_is_multi_head() -> None:
    shape = gpt(8, 1024, 16, 32000, 2048)
    assert model_flops_per_token(shape) == model_flops_per_token(
        gpt(8, 1024, 16, 32000, 2048, kv_heads=16)
    )


@pytest.mark.parametrize(("hidden", "ffn"), [(4096, 11008), (8192, 28672), (2048, 5632)])
def test_gated_mlp_has_three_matrices(hidden: int, ffn: int) -> None:
    gated = gpt(32, hidden, 32, 32000, 4096, kv_heads=8, ffn=ffn, gated=True)
    plain = gpt(32, hidden, 32, 32000, 4096, kv_heads=8, ffn=ffn, gated=False)
    # SwiGLU: gate, up and down projections, 2 h f FLOPs each per token forward.
    assert mlp_flops_per_token(gated) == pytest.approx(6 * hidden * ffn, rel=1e-12)
    assert mlp_flops_per_token(plain) == pytest.approx(4 * hidden * ffn, rel=1e-12)
    # Training counts the extra matrix three times (forward, two backward GEMMs) per layer.
    assert model_flops_per_token(gated) - model_flops_per_token(plain) == pytest.approx(
        3 * 32 * 2 * hidden * ffn, rel=1e-12
    )


def test_layer_forward_is_24_h2_plus_4_s_h_for_gpt() -> None:
    # Narayanan et al. 2021, section 5.1: 24 B s h^2 + 4 B s^2 h per layer forward.
    shape = gpt(24, 2304, 24, 51200, 2048)
    h, s = shape.hidden_size, shape.sequence_length
    assert layer_forward_flops_per_token(shape) == pytest.approx(24 * h * h + 4 * s * h)
    assert attention_core_flops_per_token(shape) == pytest.approx(4 * s * h)


def test_megatron_1_7b_row_gives_published_mfu() -> None:
    """Megatron-LM 1.7B on 32 A100s, global batch 512, 3.53 s per step: MFU about 33.5%."""
    shape = gpt(24, 2304, 24, 51200, 2048)
    gpus, peak, step_seconds, batch = 32, 312e12, 3.53, 512
    tokens_per_step = batch * shape.sequence_length
    mfu = model_flops_per_token(shape) * tokens_per_step / (gpus * peak * step_seconds)
    assert mfu == pytest.approx(0.335, abs=0.003)
