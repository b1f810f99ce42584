"""The shape of a decoder-only transformer and its parameter count (pure).

`ModelShape` is the model input of every planner formula, independent of the hardware and
of the parallel layout. A shape may have mixture-of-experts MLPs (`Experts`) and
multi-head latent attention (`LatentAttention`); the per-layer counts here are means over
the layers, so that a stage of n layers holds n times them (a model whose dense and MoE
layers alternate, or whose first layers are dense, is priced at its average layer).
Pure: standard library only; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Experts:
    """The mixture-of-experts MLPs of a model (Shazeer et al. 2017, arXiv 1701.06538;
    Fedus et al. 2021, Switch Transformer, arXiv 2101.03961).

    Each MoE layer replaces the dense MLP by `routed` expert MLPs of inner width
    `ffn_hidden_size`, of which a router (an h x routed matrix) sends each token to
    `per_token` (top-k); `shared` experts see every token (DeepSeekMoE, Dai et al. 2024,
    arXiv 2401.06066), together `shared_ffn_hidden_size` wide (default shared x the expert
    width). Layers `first_dense_layers`, ... stay dense (DeepSeek-V3's first three); after
    them every `layer_interval`-th layer is MoE (Llama 4 Maverick alternates: 2).
    """

    routed: int
    per_token: int
    ffn_hidden_size: int
    shared: int = 0
    shared_ffn_hidden_size: int | None = None
    layer_interval: int = 1
    first_dense_layers: int = 0

    def __post_init__(self) -> None:
        for name in ("routed", "per_token", "ffn_hidden_size", "layer_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"Experts.{name} must be at least 1, got {getattr(self, name)}")
        if self.per_token > self.routed:
            raise ValueError(
                f"Experts.per_token ({self.per_token}) must not exceed routed ({self.routed})"
            )
        if self.shared < 0 or self.first_dense_layers < 0:
            raise ValueError("Experts.shared and first_dense_layers must not be negative")

    @property
    def shared_width(self) -> int:
        """Inner width of the shared experts together (0 without any)."""
        if self.shared_ffn_hidden_size is not None:
            return self.shared_ffn_hidden_size if self.shared else 0
        return self.shared * self.ffn_hidden_size

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (from 0) is MoE: from `first_dense_layers` on, each layer
        whose index + 1 is a multiple of `layer_interval` (Megatron-LM's
        `--moe-layer-freq`, Hugging Face's `interleave_moe_layer_step`)."""
        return index >= self.first_dense_layers and (index + 1) % self.layer_interval == 0

    def moe_layer_count(self, layers: int) -> int:
        """MoE layers among `layers` (`is_moe_layer`), counted in closed form: the
        multiples of `layer_interval` in (first_dense_layers, layers]."""
        interval = self.layer_interval
        first = self.first_dense_layers
        return max(0, layers // interval - first // interval) if first < layers else 0


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, arXiv 2405.04434,
    section 2.1.2): keys and values are rebuilt per head from a `kv_rank`-wide latent (plus
    one shared `rope_head_dim`-wide rotary key); queries from a `query_rank`-wide latent
    (0: projected directly). Each head's query and key are `no_rope_head_dim` +
    `rope_head_dim` wide, its value `value_head_dim`."""

    kv_rank: int
    query_rank: int
    rope_head_dim: int
    no_rope_head_dim: int
    value_head_dim: int

    def __post_init__(self) -> None:
        for name in ("kv_rank", "rope_head_dim", "no_rope_head_dim", "value_head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"LatentAttention.{name} must be at least 1")
        if self.query_rank < 0:
            raise ValueError("LatentAttention.query_rank must not be negative")

    @property
    def query_key_head_dim(self) -> int:
        return self.no_rope_head_dim + self.rope_head_dim


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The dimensions of a decoder-only transformer (GPT / LLaMA family).

    `kv_heads` equals `attention_heads` for multi-head attention, 1 for multi-query and
    lies between for grouped-query attention. `ffn_hidden_size` is the MLP's inner width;
    `gated_mlp` means a SwiGLU-style MLP with three weight matrices instead of two.
    `vocab_size` counts the rows of the embedding matrix (padding included) and
    `sequence_length` the tokens of one training sequence. `declared_head_dim` is a head
    width other than hidden_size / attention_heads (Qwen3, Gemma); `experts` makes the MLPs
    mixtures of experts and `latent_attention` the attention latent (DeepSeek-V2/V3).
    `dropout` means the model trains with a dropout probability above 0, so that every
    dropout keeps a mask for the backward pass (Korthikanti et al. 2022's GPT); most recent
    models train without, and PyTorch's dropout at p = 0 returns its input and keeps
    nothing (ATen `native/Dropout.cpp`).
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
    declared_head_dim: int | None = None
    experts: Experts | None = None
    latent_attention: LatentAttention | None = None
    dropout: bool = True
    _projections: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    _layer_parameters: float = field(init=False, repr=False, compare=False)
    _expert_layer_parameters: float = field(init=False, repr=False, compare=False)

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
        if self.declared_head_dim is None and self.hidden_size % self.attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"attention_heads ({self.attention_heads})"
            )
        if self.declared_head_dim is not None and self.declared_head_dim < 1:
            raise ValueError("ModelShape.declared_head_dim must be at least 1")
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be divisible by "
                f"kv_heads ({self.kv_heads})"
            )
        # Per-layer counts, read on every layout the search prices: computed once.
        object.__setattr__(self, "_projections", _attention_projections(self))
        object.__setattr__(self, "_expert_layer_parameters", _expert_layer_parameters(self))
        routed = 0 if self.experts is None else self.experts.routed
        object.__setattr__(self, "_layer_parameters", _layer_parameters(self, routed))

    @property
    def head_dim(self) -> int:
        """Width of one attention head: declared, else hidden_size / attention_heads."""
        if self.declared_head_dim is not None:
            return self.declared_head_dim
        return self.hidden_size // self.attention_heads

    @property
    def attention_width(self) -> int:
        """Width of all query heads together (hidden_size unless the head width is
        declared): the query projection's output and the output projection's input."""
        return self.attention_heads * self.head_dim

    @property
    def recomputes_modules(self) -> bool:
        """Whether selective recomputation also covers the norms, the MoE activation and
        latent attention's up-projections (Megatron-LM's `--recompute-modules`): for
        mixture-of-experts and latent-attention models; a dense model's selective
        recomputation is the attention core alone."""
        return self.experts is not None or self.latent_attention is not None

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return 0 if self.experts is None else self.experts.moe_layer_count(self.layers)

    @property
    def moe_layer_fraction(self) -> float:
        """MoE layers over all layers: the weight of an MoE MLP in the mean layer."""
        return self.moe_layers / self.layers


def embedding_parameter_count(shape: ModelShape) -> float:
    """Input embedding (vocab x hidden), plus the output layer's matrix unless tied."""
    matrices = 1 if shape.tied_embeddings else 2
    return float(matrices * shape.vocab_size * shape.hidden_size)


def attention_projections(shape: ModelShape) -> tuple[tuple[int, int], ...]:
    """(d_in, d_out) of each linear map of one layer's attention (`_attention_projections`)."""
    return shape._projections


def _attention_projections(shape: ModelShape) -> tuple[tuple[int, int], ...]:
    """(d_in, d_out) of each linear map of one layer's attention, in the order a forward
    pass runs them.

    Standard (grouped-query) attention: the fused query, key and value projection
    h x (heads + 2 kv_heads) head_dim, and the output projection heads head_dim x h.
    Latent attention (DeepSeek-V2, arXiv 2405.04434, section 2.1.2 and appendix C): the
    query down-projection h x r_q and up-projection r_q x heads (d_nope + d_rope) (or one
    h x heads (d_nope + d_rope) matrix without a query latent), the joint key-value
    down-projection h x (r_kv + d_rope), its up-projection r_kv x heads (d_nope + d_v),
    and the output projection heads d_v x h.
    """
    h = shape.hidden_size
    latent = shape.latent_attention
    if latent is None:
        kv_width = 2 * shape.kv_heads * shape.head_dim
        return ((h, shape.attention_width + kv_width), (shape.attention_width, h))
    heads = shape.attention_heads
    query_width = heads * latent.query_key_head_dim
    if latent.query_rank:
        query: tuple[tuple[int, int], ...] = (
            (h, latent.query_rank),
            (latent.query_rank, query_width),
        )
    else:
        query = ((h, query_width),)
    return (
        *query,
        (h, latent.kv_rank + latent.rope_head_dim),
        (latent.kv_rank, heads * (latent.no_rope_head_dim + latent.value_head_dim)),
        (heads * latent.value_head_dim, h),
    )


def latent_up_projections(shape: ModelShape) -> tuple[tuple[int, int], ...]:
    """(d_in, d_out) of latent attention's up-projections, from each latent to the heads
    (the query's, when it has a latent, and the keys' and values'); none without latent
    attention. What selective recomputation rebuilds (`memory.module_recompute_bytes_per_token`)."""
    latent = shape.latent_attention
    if latent is None:
        return ()
    heads = shape.attention_heads
    keys_values = (latent.kv_rank, heads * (latent.no_rope_head_dim + latent.value_head_dim))
    if not latent.query_rank:
        return (keys_values,)
    return ((latent.query_rank, heads * latent.query_key_head_dim), keys_values)


def attention_parameter_count(shape: ModelShape) -> float:
    """Weights of one layer's attention projections (`attention_projections`), with the
    latent attention's two latent norms."""
    weights = sum(d_in * d_out for d_in, d_out in attention_projections(shape))
    latent = shape.latent_attention
    norms = 0 if latent is None else latent.kv_rank + latent.query_rank
    return float(weights + norms)


def mlp_parameter_count(hidden_size: int, inner_width: int, gated: bool) -> float:
    """One MLP: three hidden x inner matrices when gated (SwiGLU), two otherwise."""
    return float((3 if gated else 2) * hidden_size * inner_width)


def expert_layer_parameter_count(shape: ModelShape) -> float:
    """Routed experts' weights of the mean layer: what expert parallelism splits."""
    return shape._expert_layer_parameters


def _expert_layer_parameters(shape: ModelShape) -> float:
    experts = shape.experts
    if experts is None:
        return 0.0
    per_moe_layer = experts.routed * mlp_parameter_count(
        shape.hidden_size, experts.ffn_hidden_size, shape.gated_mlp
    )
    return per_moe_layer * shape.moe_layer_fraction


def _mlp_layer_parameter_count(shape: ModelShape, routed_experts: int) -> float:
    """MLP weights of the mean layer with `routed_experts` experts per MoE layer counted:
    dense layers' MLPs; MoE layers' router (h x routed), shared experts and routed ones."""
    h = shape.hidden_size
    dense = mlp_parameter_count(h, shape.ffn_hidden_size, shape.gated_mlp)
    experts = shape.experts
    if experts is None:
        return dense
    moe = (
        h * experts.routed
        + mlp_parameter_count(h, experts.shared_width, shape.gated_mlp)
        + routed_experts * mlp_parameter_count(h, experts.ffn_hidden_size, shape.gated_mlp)
    )
    fraction = shape.moe_layer_fraction
    return (1.0 - fraction) * dense + fraction * moe


def layer_parameter_count(shape: ModelShape) -> float:
    """Weights of the mean transformer layer (no biases).

    Attention (`attention_parameter_count`): for multi-head attention the query and output
    projections (2 h^2) and the key and value projections (2 h x kv_heads x head_dim, which
    is 2 h^2 for multi-head attention). MLP: three h x ffn matrices when gated (SwiGLU),
    two otherwise; an MoE layer holds all its experts, its shared experts and its router.
    Norms: two per layer with h weights each (RMSNorm; a LayerNorm's bias would add h more
    per norm).
    """
    return shape._layer_parameters


def _layer_parameters(shape: ModelShape, routed_experts: int) -> float:
    """`layer_parameter_count` with `routed_experts` experts per MoE layer counted."""
    norms = 2 * shape.hidden_size
    mlp = _mlp_layer_parameter_count(shape, routed_experts)
    return attention_parameter_count(shape) + mlp + norms


def active_layer_parameter_count(shape: ModelShape) -> float:
    """Weights of the mean layer that one token passes through: an MoE layer's top-k
    routed experts instead of all of them (equal to `layer_parameter_count` when dense)."""
    if shape.experts is None:
        return layer_parameter_count(shape)
    return _layer_parameters(shape, shape.experts.per_token)


def active_parameter_count(shape: ModelShape) -> float:
    """Parameters one token passes through (`parameter_count` with each MoE layer's top-k
    experts only): what its FLOPs scale with (Fedus et al. 2021, section 2)."""
    return (
        embedding_parameter_count(shape)
        + shape.layers * active_layer_parameter_count(shape)
        + float(shape.hidden_size)
    )


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
