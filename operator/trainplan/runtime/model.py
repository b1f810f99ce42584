"""The reference trainer's model: a GPT-style decoder built from the plan's model shape.

Token embedding, `layers` pre-norm blocks (RMSNorm, causal self-attention with grouped-
query heads and rotary position embeddings, RMSNorm, SwiGLU or GELU MLP), a final RMSNorm
and the output head (tied to the embedding or not). Attention runs
`scaled_dot_product_attention(is_causal=True)`. Linear layers have no biases (LLaMA
style), so the parameter count matches the planner's.

Activation checkpointing (`recompute`): `full` recomputes each whole block in the backward
pass, `selective` only the attention core (softmax(QK^T)V, the part Korthikanti et al.
2022 recompute), `none` keeps every activation. Both use non-reentrant
`torch.utils.checkpoint.checkpoint`.

Tensor parallelism (`tensor_parallel_plan`) follows the Megatron-LM split expressed with
PyTorch's DTensor API: query, key, value and the MLP's input projections column-wise,
the attention output and MLP output row-wise, the embedding row-wise over the vocabulary
and the output head column-wise; with sequence parallelism the norms and the residual
stream are sharded over the sequence. The modules read their head count from the width
of their (possibly sharded) projections, so the same code runs with and without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, cast

import torch
import torch.nn.functional as F  # noqa: N812 (the conventional alias)
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainplan.runtime.config import ModelConfig, Recompute

INIT_STD: Final = 0.02
"""Standard deviation of the weight initialisation (GPT-2); residual output projections
are scaled down by sqrt(2 x layers)."""

ROPE_THETA: Final = 10000.0
"""Base of the rotary embedding frequencies."""


def rotary_tables(head_dim: int, sequence_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each (sequence, head_dim / 2), float32."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    inverse_frequencies = 1.0 / (ROPE_THETA**exponents)
    positions = torch.arange(sequence_length, dtype=torch.float32)
    angles = torch.outer(positions, inverse_frequencies)
    return torch.cos(angles), torch.sin(angles)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels of x (batch, sequence, heads, head_dim) by the angles."""
    sequence = x.shape[1]
    c = cos[:sequence].view(1, sequence, 1, -1)
    s = sin[:sequence].view(1, sequence, 1, -1)
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * c - odd * s, even * s + odd * c), dim=-1)
    return rotated.flatten(-2).type_as(x)


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax(QK^T / sqrt(d)) V over (batch, heads, sequence, head_dim) tensors;
    key/value heads are shared by groups of query heads."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads and rotary positions."""

    def __init__(self, config: ModelConfig, recompute: Recompute) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        kv_width = config.kv_heads * config.head_dim
        self.wq = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.wk = nn.Linear(config.hidden_size, kv_width, bias=False)
        self.wv = nn.Linear(config.hidden_size, kv_width, bias=False)
        self.wo = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.selective = recompute == "selective"

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, sequence = x.shape[0], x.shape[1]
        # -1 heads: under tensor parallelism each rank holds heads / tensor of them.
        q = self.wq(x).view(batch, sequence, -1, self.head_dim)
        k = self.wk(x).view(batch, sequence, -1, self.head_dim)
        v = self.wv(x).view(batch, sequence, -1, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.selective and torch.is_grad_enabled():
            out = cast(torch.Tensor, checkpoint(attention_core, q, k, v, use_reentrant=False))
        else:
            out = attention_core(q, k, v)
        return cast(torch.Tensor, self.wo(out.transpose(1, 2).reshape(batch, sequence, -1)))


class FeedForward(nn.Module):
    """SwiGLU (w2(silu(w1 x) * w3 x)) or GELU (w2(gelu(w1 x))) MLP."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=False)
        self.w3 = (
            nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=False)
            if config.gated_mlp
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            hidden = F.silu(self.w1(x)) * self.w3(x)
        else:
            hidden = F.gelu(self.w1(x), approximate="tanh")
        return cast(torch.Tensor, self.w2(hidden))


class Block(nn.Module):
    """A pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig, recompute: Recompute) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.hidden_size)
        self.attention = Attention(config, recompute)
        self.ffn_norm = nn.RMSNorm(config.hidden_size)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return cast(torch.Tensor, x + self.feed_forward(self.ffn_norm(x)))


class GPT(nn.Module):
    """The decoder: token ids (batch, sequence) in, logits (batch, sequence, vocab) out."""

    def __init__(self, config: ModelConfig, recompute: Recompute = "none") -> None:
        super().__init__()
        self.config = config
        self.recompute: Recompute = recompute
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, recompute) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.hidden_size)
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        cos, sin = rotary_tables(config.head_dim, config.sequence_length)
        # Not persistent: recomputed from the shape, never part of a checkpoint.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()
        if config.tied_embeddings:
            self.tie_weights()

    def tie_weights(self) -> None:
        """Make the output head share the embedding matrix (again, after parallelizing)."""
        self.output.weight = self.tok_embeddings.weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """Normal(0, 0.02) weights, residual projections scaled by 1/sqrt(2 x layers)."""
        residual_std = INIT_STD / math.sqrt(2 * self.config.layers)
        for name, parameter in self.named_parameters():
            if parameter.dim() < 2:
                nn.init.ones_(parameter)
            elif name.endswith(("wo.weight", "w2.weight")):
                nn.init.normal_(parameter, std=residual_std)
            else:
                nn.init.normal_(parameter, std=INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cos = cast(torch.Tensor, self.rope_cos)
        sin = cast(torch.Tensor, self.rope_sin)
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            if self.recompute == "full" and torch.is_grad_enabled():
                x = cast(torch.Tensor, checkpoint(layer, x, cos, sin, use_reentrant=False))
            else:
                x = layer(x, cos, sin)
        return cast(torch.Tensor, self.output(self.norm(x)))

    @property
    def blocks(self) -> list[Block]:
        """The transformer blocks, typed."""
        return [cast(Block, layer) for layer in self.layers]


def parameter_count(model: nn.Module) -> int:
    """Parameters of the model as a whole (shared ones once; global shapes for DTensors)."""
    return sum(parameter.numel() for parameter in model.parameters())


def tensor_parallel_plan(
    model: GPT, sequence_parallel: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `parallelize_module` plans (root, per block) of the Megatron-LM split.

    Returned as (root plan, block plan); apply the block plan to each block.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    residual = Shard(1) if sequence_parallel else Replicate()
    root: dict[str, Any] = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=residual),
        "output": ColwiseParallel(input_layouts=residual, output_layouts=Replicate()),
    }
    block: dict[str, Any] = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=residual),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=residual),
    }
    if model.config.gated_mlp:
        block["feed_forward.w3"] = ColwiseParallel()
    if sequence_parallel:
        root["norm"] = SequenceParallel()
        block.update(
            {
                "attention_norm": SequenceParallel(),
                "ffn_norm": SequenceParallel(),
                # Gather the sequence once per sub-layer (not once per projection); the
                # rotary tables pass through as they are.
                "attention": PrepareModuleInput(
                    input_layouts=(Shard(1), None, None),
                    desired_input_layouts=(Replicate(), None, None),
                ),
                "feed_forward": PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                ),
            }
        )
    return root, block


def loss_function(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy, computed in float32."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


LossFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
