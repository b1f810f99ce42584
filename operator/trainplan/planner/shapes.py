"""The shape of a decoder-only transformer and its parameter count (pure).

`ModelShape` is the model input of every planner formula, independent of the hardware and
of the parallel layout. Pure: standard library only; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The dimensions of a decoder-only transformer (GPT / LLaMA family).

    `kv_heads` equals `attention_heads` for multi-head attention, 1 for multi-query and
    lies between for grouped-query attention. `ffn_hidden_size` is the MLP's inner width;
    `gated_mlp` means a SwiGLU-style MLP with three weight matrices instead of two.
    `vocab_size` counts the rows of the embedding matrix (padding included) and
    `sequence_length` the tokens of one training sequence.
    """

    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    ffn_hidden_size: int
    gated_mlp: bool
    vocab_size: int
    sequence_length: int
    tied_embeddings: bool

    def __post_init__(self) -> None:
        for name in (
            "layers",
            "hidden_size",
            "attention_heads",
            "kv_heads",
            "ffn_hidden_size",
            "vocab_size",
            "sequence_length",
        ):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"ModelShape.{name} must be at least 1, got {value}")
        if self.hidden_size % self.attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"attention_heads ({self.attention_heads})"
            )
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be divisible by "
                f"kv_heads ({self.kv_heads})"
            )

    @property
    def head_dim(self) -> int:
        """Width of one attention head: hidden_size / attention_heads."""
        return self.hidden_size // self.attention_heads


def embedding_parameter_count(shape: ModelShape) -> float:
    """Input embedding (vocab x hidden), plus the output layer's matrix unless tied."""
    matrices = 1 if shape.tied_embeddings else 2
    return float(matrices * shape.vocab_size * shape.hidden_size)


def layer_parameter_count(shape: ModelShape) -> float:
    """Weights of one transformer layer (no biases).

    Attention: the query and output projections (2 h^2) and the key and value projections
    (2 h x kv_heads x head_dim, which is 2 h^2 for multi-head attention). MLP: three
    h x ffn matrices when gated (SwiGLU), two otherwise. Norms: two per layer with h
    weights each (RMSNorm; a LayerNorm's bias would add h more per norm).
    """
    h = shape.hidden_size
    attention = 2 * h * h + 2 * h * shape.kv_heads * shape.head_dim
    mlp_matrices = 3 if shape.gated_mlp else 2
    mlp = mlp_matrices * h * shape.ffn_hidden_size
    norms = 2 * h
    return float(attention + mlp + norms)


def parameter_count(shape: ModelShape) -> float:
    """Parameters of the model: embeddings + layers x per-layer weights + the final norm.

    The standard decomposition of Narayanan et al. 2021 (arXiv 2104.04473, section 5.1:
    P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)) for a GPT with a 4h MLP), extended
    to grouped-query attention, gated MLPs and untied output layers:

    - embeddings: vocab x hidden, plus a second vocab x hidden output matrix unless tied;
    - per layer: Q and output projections 2 h^2, K and V projections
      2 h x kv_heads x head_dim, the MLP 3 (gated) or 2 matrices of h x ffn, and two norms
      of h weights;
    - one final norm of h weights.

    Deliberately left out, so the result is a shape property rather than a checkpoint
    property:

    - biases: models with biases (GPT-3, BLOOM, Pythia) have about 13 h per layer more,
      under 0.1% of the total;
    - learned position embeddings (s x h in GPT-3 and Megatron's GPT; BLOOM uses ALiBi and
      LLaMA RoPE, which have none): GPT-3's 2048 x 12288 is 0.01%.
    """
    return (
        embedding_parameter_count(shape)
        + shape.layers * layer_parameter_count(shape)
        + float(shape.hidden_size)
    )
