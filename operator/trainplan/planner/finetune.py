"""What a fine-tuning method trains and stores (pure).

- `pretrain` and `full`: every weight is trained (full fine-tuning is pre-training's
  arithmetic on a smaller dataset).
- `lora` (Hu et al. 2021, arXiv 2106.09685, section 4): each targeted linear map W
  (d_in x d_out) is frozen and gains a trainable low-rank update B A with A (d_in x r) and
  B (r x d_out), r (d_in + d_out) parameters. Frozen weights keep no gradients and no
  optimizer state; their backward pass computes only the input gradient, one matrix
  multiply instead of two; embeddings and the output layer stay frozen.
- `qlora` (Dettmers et al. 2023, arXiv 2305.14314, section 3): LoRA on a base stored as
  4-bit NormalFloat with double quantization, 4 + 0.127 bits a weight (block size 64
  with 8-bit constants, themselves quantized in blocks of 256 with fp32 constants), read
  and dequantized to the compute type on every forward and backward pass.

Targets: `query-value` adapts the query and value projections (the LoRA paper's choice,
section 7.1, and litgpt's default); `attention` the query, key, value and output
projections; `all-linear` those and the MLP's matrices (QLoRA's finding: adapters on every
linear layer are needed to match full fine-tuning, section 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from trainplan.planner.shapes import ModelShape

Method = Literal["pretrain", "full", "lora", "qlora"]
LoraTargets = Literal["query-value", "attention", "all-linear"]

NF4_BYTES_PER_PARAMETER: Final = (4 + 0.127) / 8
"""A QLoRA base weight: 4-bit NormalFloat plus 0.127 bits of double-quantized constants
(Dettmers et al. 2023, section 3, "Double Quantization")."""


@dataclass(frozen=True, slots=True)
class FineTuning:
    """The training method and, for adapters, their rank and targets."""

    method: Method = "pretrain"
    lora_rank: int = 16
    lora_targets: LoraTargets = "all-linear"

    def __post_init__(self) -> None:
        if self.lora_rank < 1:
            raise ValueError(f"lora_rank must be at least 1, got {self.lora_rank}")

    @property
    def adapters(self) -> bool:
        """Whether the base is frozen and only low-rank adapters train."""
        return self.method in ("lora", "qlora")

    def describe(self) -> str:
        """Short human form: `LoRA r16 all-linear`, or the method's name."""
        if not self.adapters:
            return "full fine-tuning" if self.method == "full" else "pre-training"
        name = "QLoRA" if self.method == "qlora" else "LoRA"
        return f"{name} r{self.lora_rank} {self.lora_targets}"


PRETRAIN: Final = FineTuning()


def adapted_matrices(shape: ModelShape, targets: LoraTargets) -> tuple[tuple[int, int], ...]:
    """(d_in, d_out) of each linear map of one layer that gets an adapter."""
    h = shape.hidden_size
    heads = shape.attention_width  # h unless the head width is declared
    kv = shape.kv_heads * shape.head_dim
    f = shape.ffn_hidden_size
    if targets == "query-value":
        return ((h, heads), (h, kv))
    attention = ((h, heads), (h, kv), (h, kv), (heads, h))
    if targets == "attention":
        return attention
    up = ((h, f), (h, f)) if shape.gated_mlp else ((h, f),)
    return attention + up + ((f, h),)


def lora_layer_parameter_count(shape: ModelShape, tuning: FineTuning) -> float:
    """Trainable adapter parameters of one layer: r (d_in + d_out) per adapted matrix."""
    if not tuning.adapters:
        return 0.0
    matrices = adapted_matrices(shape, tuning.lora_targets)
    return float(tuning.lora_rank * sum(d_in + d_out for d_in, d_out in matrices))


def lora_flops_per_token(shape: ModelShape, tuning: FineTuning) -> float:
    """Forward FLOPs of one layer's adapters per token: 2 r (d_in + d_out) each."""
    return 2.0 * lora_layer_parameter_count(shape, tuning)
