"""The TrainingPlan spec: what the user asks for (model, data, batch, hardware, objective, pins).

Python attributes are snake_case; JSON and YAML names are the camelCase of the API contract.
Each model checks its own fields; `TrainingPlanSpec` checks the rules that span sections.
Consistency with a catalog preset's shape is the planner's job (it owns the catalog).

Pure: pydantic and the standard library only; no I/O.
"""

import re
from typing import Annotated, Final, Literal, Self

from pydantic import BeforeValidator, Field, StringConstraints, WithJsonSchema, model_validator

from trainplan.api.base import ApiModel
from trainplan.api.durations import Duration, parse_duration_seconds
from trainplan.api.kubetypes import Quantity, Toleration, number_to_text
from trainplan.api.podtemplate import PodTemplateOverride

DEFAULT_COMMAND: Final = ("python", "-m", "trainplan.runtime.train")
"""The reference trainer, run when `job.command` is left out."""
PYTHON_NAMES: Final = frozenset({"python", "python3"})
"""Interpreters whose command torchrun runs itself (`python -m m` becomes `-m m`)."""

SUPPORTED_MODELS: Final = (
    "the planner models decoder-only transformer language models, dense or mixture-of-experts"
    " (GPT-, Llama-, Mixtral- and DeepSeek-style: a preset, or layers, hiddenSize,"
    " attentionHeads, vocabSize and sequenceLength, with experts and expertsPerToken for"
    " MoE); vision and encoder-only models are not supported"
)
"""The sentence that errors about a model the planner cannot express end with."""

_SHAPE_FIELDS: Final = ("layers", "hiddenSize", "attentionHeads", "vocabSize", "sequenceLength")


_NAME_MAX_LENGTH: Final = 253
"""Longest Kubernetes object name (a DNS subdomain), and the cap on catalog names."""
_LABEL_VALUE_MAX_LENGTH: Final = 63
"""Longest Kubernetes label value (Kueue's queue name is one)."""
CALIBRATION_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A ClusterCalibration's name as `hardware.calibration` takes it: lowercase letters,
digits, '-' and '.', a letter or digit at each end (at most 253 characters)."""


def is_calibration_name(value: str) -> bool:
    """Whether `value` is a name `hardware.calibration` accepts (`CALIBRATION_NAME_PATTERN`,
    at most 253 characters)."""
    return len(value) <= _NAME_MAX_LENGTH and bool(re.fullmatch(CALIBRATION_NAME_PATTERN, value))


_WIDTH_MAX = 1 << 24
"""Widths, heads, vocabularies and sequence lengths: at most 2^24 (16.7M), far beyond any
trained model, small enough that every product of them stays exact."""
_BATCH_MAX = 1 << 24
"""Sequences per step: at most 2^24 (a 16.7M-sequence batch; published runs use < 2^14)."""
_GPUS_MAX = 1_000_000
_NETWORK_GBPS_MAX: Final = 100_000.0
"""Cap on a node's network, in Gb/s (100 Tb/s: an order of magnitude above today's nodes)."""
"""GPU counts and parallel degrees: at most a million."""
_WEEK_SECONDS = 7 * 86_400.0


MOE_FIELDS: Final = (
    "expertsPerToken",
    "expertFfnHiddenSize",
    "sharedExperts",
    "sharedExpertFfnHiddenSize",
    "moeLayerInterval",
    "firstDenseLayers",
)
_EXPERTS_MAX: Final = 1 << 16
"""Routed experts per layer: at most 65,536 (published models have up to 384)."""


class LatentAttentionSpec(ApiModel):
    """Multi-head latent attention (DeepSeek-V2/V3): keys and values rebuilt per head from
    a shared latent."""

    kv_rank: int = Field(ge=1, le=_WIDTH_MAX, description="Key-value latent width (kv_lora_rank).")
    query_rank: int = Field(
        0, ge=0, le=_WIDTH_MAX, description="Query latent width (q_lora_rank); 0: none."
    )
    rope_head_dim: int = Field(
        ge=1, le=_WIDTH_MAX, description="Rotary part of each query and key head."
    )
    no_rope_head_dim: int = Field(
        ge=1, le=_WIDTH_MAX, description="Non-rotary part of each query and key head."
    )
    value_head_dim: int = Field(ge=1, le=_WIDTH_MAX, description="Width of each value head.")


class ModelSpec(ApiModel):
    """The model: a catalog preset, an explicit shape, or a preset with explicit overrides."""

    preset: str | None = Field(
        None,
        min_length=1,
        max_length=_NAME_MAX_LENGTH,
        description="Catalog model name, e.g. llama2-7b.",
    )
    parameters: float | None = Field(
        None,
        gt=0,
        le=1e14,
        description="Parameter count (at most 1e14); derived from the shape when omitted.",
    )
    layers: int | None = Field(None, ge=1, le=100_000, description="Transformer layers.")
    hidden_size: int | None = Field(
        None, ge=1, le=_WIDTH_MAX, description="Model (embedding) width."
    )
    attention_heads: int | None = Field(
        None, ge=1, le=_WIDTH_MAX, description="Query attention heads."
    )
    kv_heads: int | None = Field(
        None,
        ge=1,
        le=_WIDTH_MAX,
        description="Key/value heads (grouped-query attention); default attentionHeads.",
    )
    ffn_hidden_size: int | None = Field(
        None, ge=1, le=_WIDTH_MAX, description="MLP inner width; default 4 x hiddenSize."
    )
    vocab_size: int | None = Field(None, ge=1, le=_WIDTH_MAX, description="Vocabulary size.")
    sequence_length: int | None = Field(
        None, ge=1, le=_WIDTH_MAX, description="Tokens per sequence."
    )
    gated_mlp: bool | None = Field(
        None, alias="gatedMLP", description="SwiGLU-style gated MLP (three matrices)."
    )
    tied_embeddings: bool | None = Field(
        None, description="Input embedding and output layer share their weights."
    )
    dropout: bool | None = Field(
        None,
        description=(
            "Trains with dropout (a hidden or attention dropout probability above 0), whose"
            " masks add to the activation memory; default the preset's, true without one"
            " (Megatron-LM's default of 0.1)."
        ),
    )
    head_dim: int | None = Field(
        None,
        ge=1,
        le=_WIDTH_MAX,
        description="Width of one attention head; default hiddenSize / attentionHeads.",
    )
    experts: int | None = Field(
        None,
        ge=1,
        le=_EXPERTS_MAX,
        description="Routed experts per mixture-of-experts layer; absent: a dense model.",
    )
    experts_per_token: int | None = Field(
        None, ge=1, le=_EXPERTS_MAX, description="Experts each token is routed to (top-k)."
    )
    expert_ffn_hidden_size: int | None = Field(
        None, ge=1, le=_WIDTH_MAX, description="Inner width of one expert; default ffnHiddenSize."
    )
    shared_experts: int | None = Field(
        None, ge=0, le=_EXPERTS_MAX, description="Experts every token passes through; default 0."
    )
    shared_expert_ffn_hidden_size: int | None = Field(
        None,
        ge=1,
        le=_WIDTH_MAX,
        description="Inner width of the shared experts together; default sharedExperts x"
        " expertFfnHiddenSize.",
    )
    moe_layer_interval: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Every n-th layer is mixture-of-experts (after firstDenseLayers); default 1.",
    )
    first_dense_layers: int | None = Field(
        None, ge=0, le=100_000, description="Leading layers that stay dense; default 0."
    )
    latent_attention: LatentAttentionSpec | None = Field(
        None, description="Multi-head latent attention (DeepSeek-V2/V3) instead of GQA."
    )

    @model_validator(mode="after")
    def _check_experts(self) -> Self:
        given = {
            "expertsPerToken": self.experts_per_token,
            "expertFfnHiddenSize": self.expert_ffn_hidden_size,
            "sharedExperts": self.shared_experts,
            "sharedExpertFfnHiddenSize": self.shared_expert_ffn_hidden_size,
            "moeLayerInterval": self.moe_layer_interval,
            "firstDenseLayers": self.first_dense_layers,
        }
        if self.preset is None and self.experts is None:
            stray = [name for name in MOE_FIELDS if given[name] is not None]
            if stray:
                raise ValueError(f"{', '.join(stray)} need experts (a mixture-of-experts model)")
        if self.preset is None and self.experts is not None and self.experts_per_token is None:
            raise ValueError("experts needs expertsPerToken (the top-k routing)")
        top_k = self.experts_per_token
        if top_k is not None and self.experts is not None and top_k > self.experts:
            raise ValueError(f"expertsPerToken ({top_k}) must not exceed experts ({self.experts})")
        return self

    @model_validator(mode="after")
    def _check_shape(self) -> Self:
        if self.preset is None:
            given = {
                "layers": self.layers,
                "hiddenSize": self.hidden_size,
                "attentionHeads": self.attention_heads,
                "vocabSize": self.vocab_size,
                "sequenceLength": self.sequence_length,
            }
            missing = [name for name in _SHAPE_FIELDS if given[name] is None]
            if missing:
                raise ValueError(
                    "give either preset or all of "
                    + ", ".join(_SHAPE_FIELDS)
                    + "; missing: "
                    + ", ".join(missing)
                )
        heads = self.attention_heads
        if (
            heads is not None
            and self.head_dim is None
            and self.hidden_size is not None
            and self.hidden_size % heads
        ):
            raise ValueError(
                f"hiddenSize ({self.hidden_size}) must be divisible by attentionHeads ({heads})"
            )
        kv_heads = self.kv_heads
        if heads is not None and kv_heads is not None:
            if kv_heads > heads:
                raise ValueError(f"kvHeads ({kv_heads}) must not exceed attentionHeads ({heads})")
            if heads % kv_heads:
                raise ValueError(
                    f"attentionHeads ({heads}) must be divisible by kvHeads ({kv_heads})"
                )
        return self


class DataSpec(ApiModel):
    """How much data one epoch holds, and how many epochs to train."""

    tokens: float | None = Field(
        None, gt=0, le=1e16, description="Tokens per epoch (at most 1e16)."
    )
    samples: int | None = Field(
        None, ge=1, le=10**13, description="Sequences per epoch (at most 1e13)."
    )
    epochs: float = Field(
        1.0, gt=0, le=10_000, description="Passes over the data; may be fractional."
    )

    @model_validator(mode="after")
    def _check_amount(self) -> Self:
        if (self.tokens is None) == (self.samples is None):
            raise ValueError("give exactly one of tokens or samples")
        return self


class BatchSpec(ApiModel):
    """The optimizer batch, and optionally the micro batch."""

    global_batch_size: int = Field(
        ge=1, le=_BATCH_MAX, description="Sequences per optimizer step (at most 2^24)."
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        le=_BATCH_MAX,
        description="Sequences per forward pass per GPU; chosen when omitted.",
    )

    @model_validator(mode="after")
    def _check_micro(self) -> Self:
        micro, total = self.micro_batch_size, self.global_batch_size
        if micro is not None:
            if micro > total:
                raise ValueError(
                    f"microBatchSize ({micro}) must not exceed globalBatchSize ({total})"
                )
            if total % micro:
                raise ValueError(
                    f"globalBatchSize ({total}) must be divisible by microBatchSize ({micro})"
                )
        return self


class HardwareSpec(ApiModel):
    """The GPU type (a catalog name) and the GPUs in one node."""

    gpu_type: str = Field(
        "A100-SXM4-80GB",
        min_length=1,
        max_length=_NAME_MAX_LENGTH,
        description="Catalog GPU name.",
    )
    gpus_per_node: int = Field(8, ge=1, le=16, description="GPUs per node.")
    calibration: str | None = Field(
        None,
        max_length=_NAME_MAX_LENGTH,
        pattern=CALIBRATION_NAME_PATTERN,
        description=(
            "The ClusterCalibration whose finished runs correct the plan, or none to plan"
            " from the published constants alone."
        ),
    )
    network_gbps_per_node: float | None = Field(
        None,
        gt=0,
        le=_NETWORK_GBPS_MAX,
        alias="networkGbpsPerNode",
        description=(
            "The node's inter-node bandwidth for training traffic, in gigabits per second,"
            " all its ports together (e.g. 3200 for 8 x 400 Gb/s, 400 for 4 x 100 Gb/s);"
            " default: the catalog GPU's reference network x gpusPerNode."
        ),
    )


class ObjectiveSpec(ApiModel):
    """What to optimise: a pinned GPU count, a deadline, or the fastest plan under a cap."""

    gpus: int | None = Field(
        None,
        ge=1,
        le=_GPUS_MAX,
        description="Pin the GPU count: the fastest layout on exactly this many.",
    )
    deadline: Duration | None = Field(
        None, description="The fewest GPUs whose plan finishes in time, e.g. 14d or P1DT12H."
    )
    max_gpus: int | None = Field(
        None,
        ge=1,
        le=_GPUS_MAX,
        alias="maxGPUs",
        description="Cap on the GPU count; alone: the fastest plan within this many GPUs.",
    )
    confidence: float | None = Field(
        None,
        ge=0.5,
        le=0.95,
        description=(
            "With a deadline: the chance the plan should finish in time, 0.5 (default:"
            " the estimate itself) to 0.95; 0.9 plans on the 90th percentile of its"
            " duration range. A GPUBudget charges the plan its GPU-hours quantile at this"
            " confidence, or at the budget's chargeConfidence if higher."
        ),
    )

    @model_validator(mode="after")
    def _check_objective(self) -> Self:
        if self.gpus is not None and self.deadline is not None:
            raise ValueError(
                "give gpus or deadline, not both; to cap a deadline search use maxGPUs"
            )
        if self.gpus is not None and self.max_gpus is not None and self.gpus > self.max_gpus:
            raise ValueError(f"gpus ({self.gpus}) must not exceed maxGPUs ({self.max_gpus})")
        return self

    @property
    def confidence_level(self) -> float:
        """`confidence`, 0.5 when not given."""
        return 0.5 if self.confidence is None else self.confidence

    @property
    def deadline_seconds(self) -> float | None:
        """The deadline in seconds, or None without one."""
        return None if self.deadline is None else parse_duration_seconds(self.deadline)


class ParallelismSpec(ApiModel):
    """Optional pins of the parallel layout; anything left out is searched."""

    tensor: int | None = Field(None, ge=1, le=_GPUS_MAX, description="Tensor-parallel degree.")
    pipeline: int | None = Field(None, ge=1, le=_GPUS_MAX, description="Pipeline-parallel degree.")
    data: int | None = Field(None, ge=1, le=_GPUS_MAX, description="Data-parallel degree.")
    context: int | None = Field(
        None,
        ge=1,
        le=1024,
        description=(
            "Context-parallel degree: ranks each sequence is split over (ring attention;"
            " megatron and torchtitan). Searched for sequences of 32,768 tokens or more."
        ),
    )
    expert: int | None = Field(
        None,
        ge=1,
        le=_EXPERTS_MAX,
        description=(
            "Expert-parallel degree: ranks each layer's routed experts are split over, within"
            " the tensor x context x data ranks (mixture-of-experts models)."
        ),
    )
    expert_tensor: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Expert-tensor-parallel degree: ranks each expert is split over; default 1.",
    )
    virtual_pipeline_stages: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Model chunks per pipeline rank (interleaved 1F1B); 1 = not interleaved.",
    )
    sequence_parallel: bool | None = Field(
        None, description="Megatron sequence parallelism alongside tensor parallelism."
    )
    zero_stage: int | None = Field(
        None, ge=0, le=3, description="ZeRO stage 0..3 (optimizer, gradient, weight sharding)."
    )
    activation_checkpointing: Literal["none", "selective", "full"] | None = Field(
        None, description="Activation recompute: none, selective (attention core) or full."
    )

    @model_validator(mode="after")
    def _check_interleaving(self) -> Self:
        stages = self.virtual_pipeline_stages
        if stages is not None and stages > 1 and self.pipeline is not None and self.pipeline <= 1:
            raise ValueError(
                f"virtualPipelineStages ({stages}) > 1 needs pipeline > 1 (got {self.pipeline})"
            )
        return self


class LoraSpec(ApiModel):
    """Low-rank adapters of a LoRA or QLoRA fine-tune (Hu et al. 2021)."""

    rank: int = Field(16, ge=1, le=4096, description="Adapter rank r.")
    targets: Literal["query-value", "attention", "all-linear"] = Field(
        "all-linear",
        description=(
            "Adapted matrices: query-value (the query and value projections), attention"
            " (query, key, value and output projections) or all-linear (those and the MLP's)."
        ),
    )


class TrainingSpec(ApiModel):
    """Numerics and kernels of the training step."""

    method: Literal["pretrain", "full", "lora", "qlora"] = Field(
        "pretrain",
        description=(
            "What trains: pretrain or full (every weight), lora (low-rank adapters on a"
            " frozen base) or qlora (adapters on a 4-bit base)."
        ),
    )
    lora: LoraSpec | None = Field(
        None, description="Adapter rank and targets (method lora or qlora; rank 16, all-linear)."
    )

    precision: Literal["bf16", "fp16", "fp8", "fp32"] = Field(
        "bf16", description="Compute precision: bf16, fp16, fp8 or fp32."
    )
    optimizer: Literal["adamw", "sgd"] = Field("adamw", description="Optimizer: adamw or sgd.")
    attention: Literal["flash", "standard"] = Field(
        "flash",
        description=(
            "Attention kernel: flash (fused, IO-aware, never materialises the score matrix) "
            "or standard (materialised scores and softmax, as in Megatron-LM before 2022)."
        ),
    )
    expert_capacity_factor: float | None = Field(
        None,
        ge=0.1,
        le=1024,
        description=(
            "Tokens an expert takes, as a multiple of an even share (tokens beyond it are"
            " dropped); absent: dropless routing (mixture-of-experts models)."
        ),
    )

    @model_validator(mode="after")
    def _check_adapters(self) -> Self:
        if self.lora is not None and self.method not in ("lora", "qlora"):
            raise ValueError(f"lora is set but method is {self.method}; use lora or qlora")
        if self.method == "qlora" and self.precision not in ("bf16", "fp16"):
            raise ValueError(
                f"qlora computes in bf16 or fp16 on its 4-bit base, not {self.precision}"
            )
        return self


class ReliabilitySpec(ApiModel):
    """Checkpointing, restarts and the failure model."""

    checkpoint_interval_steps: int | None = Field(
        None,
        ge=1,
        le=10**13,
        description="Steps between checkpoints; recommended (Young/Daly) when omitted.",
    )
    checkpoint_seconds: float | None = Field(
        None,
        ge=0,
        le=_WEEK_SECONDS,
        description=(
            "Seconds to write one checkpoint (up to a week). Unset: the model's checkpoint"
            " bytes at the write rate its ClusterCalibration measured, else 60."
        ),
    )
    max_restarts: int = Field(
        10, ge=0, le=1_000_000, description="Restarts allowed before the plan fails."
    )
    interruptions_per_gpu_hour: float | None = Field(
        None,
        ge=0,
        le=1.0,
        alias="interruptionsPerGPUHour",
        description="Failure rate per GPU-hour (at most 1); overrides the catalog's rate.",
    )
    restart_seconds: float | None = Field(
        None,
        ge=0,
        le=_WEEK_SECONDS,
        description="Seconds from an interruption to training again; catalog default.",
    )


class EnvVar(ApiModel):
    """One environment variable of the training container."""

    name: str = Field(min_length=1, description="Variable name.")
    value: str | None = Field(None, description="Variable value.")


_ID_MAX: Final = 2_147_483_647
"""Largest user or group id (2^31 - 1): Kubernetes' int64 ids, as runtimes accept them."""
DEFAULT_SHM_SIZE: Final = "16Gi"
"""The default size limit of the training pods' /dev/shm (a memory-backed emptyDir)."""
_QUANTITY_PATTERN: Final = r"^[0-9]{1,19}(\.[0-9]{1,9})?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
"""A non-negative Kubernetes quantity of bytes, e.g. 16Gi or 500M (at most 31 characters)."""
ByteQuantity = Annotated[
    str,
    BeforeValidator(number_to_text),
    StringConstraints(pattern=_QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": _QUANTITY_PATTERN,
        },
        mode="validation",
    ),
]
"""A quantity of bytes: "16Gi", "500M", or a bare number of bytes."""
_DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (RFC 1123 subdomain): no slash, no dot segment."""


class PodSecurityContextSpec(ApiModel):
    """The training pods' user and groups. The pods always run with seccomp
    RuntimeDefault, no privilege escalation and no capabilities (Pod Security
    `restricted`); these fields choose who they run as."""

    run_as_user: int | None = Field(
        None,
        ge=0,
        le=_ID_MAX,
        description="User id the containers run as; default the image's user.",
    )
    run_as_group: int | None = Field(
        None,
        ge=0,
        le=_ID_MAX,
        description="Primary group id of the containers; default the image's.",
    )
    fs_group: int | None = Field(
        None,
        ge=0,
        le=_ID_MAX,
        description="Group that owns mounted volumes (e.g. the checkpoint claim).",
    )
    run_as_non_root: bool = Field(
        True,
        description=(
            "Refuse to start a container whose user is root (default); false lets an image"
            " that runs as root start, outside Pod Security restricted."
        ),
    )

    @model_validator(mode="after")
    def _check_root(self) -> Self:
        if self.run_as_non_root and self.run_as_user == 0:
            raise ValueError("runAsUser 0 is root: set a non-zero user or runAsNonRoot false")
        return self


_LABEL_VALUE_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
"""A Kubernetes label value that is not empty."""
_LABEL_KEY_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
"""A node label key (an optional DNS prefix and a name), such as a topology level."""
_DOMAIN_PREFIXED_PATH_PATTERN: Final = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$"
)
"""A domain-prefixed path such as `kueue.x-k8s.io/multikueue`: what JobSet's webhook
accepts as `spec.managedBy` (Kubernetes' IsDomainPrefixedPath, at most 63 characters;
kubernetes-sigs/jobset v0.12.0, `pkg/webhooks/jobset_webhook.go`), HTTP path characters
narrowed to those of a label."""


class KueueTopology(ApiModel):
    """Kueue topology-aware scheduling: the node label of the topology level (a block, a
    rack, a host) that all the job's pods must share (`required`), or should share when
    they can (`preferred`). Kueue reads it from the pod template's
    `kueue.x-k8s.io/podset-required-topology` / `podset-preferred-topology` annotation."""

    required: str | None = Field(
        None,
        min_length=1,
        max_length=316,
        pattern=_LABEL_KEY_PATTERN,
        description="Topology level label every pod must share, e.g. cloud.example/block.",
    )
    preferred: str | None = Field(
        None,
        min_length=1,
        max_length=316,
        pattern=_LABEL_KEY_PATTERN,
        description="Topology level label the pods should share when they can.",
    )

    @model_validator(mode="after")
    def _one_level(self) -> Self:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("give exactly one of required or preferred")
        return self


class JobSpec(ApiModel):
    """How the training job is launched."""

    image: str | None = Field(
        None, min_length=1, max_length=1024, description="Training container image."
    )
    command: tuple[str, ...] = Field(
        DEFAULT_COMMAND,
        max_length=256,
        description=(
            "Command run by torchrun; default the reference trainer. It cannot start with"
            " an option (a word starting with '-'), nor can the module of `python -m`:"
            " torchrun would read it as its own flag and override the plan's."
        ),
    )
    args: tuple[str, ...] = Field(
        (), max_length=256, description="Arguments appended to the command."
    )
    env: tuple[EnvVar, ...] = Field((), max_length=128, description="Extra environment variables.")
    resources: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Resource requests per pod besides GPUs, e.g. cpu: '32', memory: 256Gi.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the training pods require."
    )
    tolerations: tuple[Toleration, ...] = Field(
        (), max_length=64, description="Tolerations of the training pods."
    )
    checkpoint_volume_claim: str | None = Field(
        None,
        min_length=1,
        max_length=_NAME_MAX_LENGTH,
        description="PersistentVolumeClaim mounted for checkpoints.",
    )
    launcher: Literal["Job", "JobSet"] = Field(
        "Job", description="Job (Indexed Job + headless Service) or JobSet."
    )
    framework: Literal["reference", "megatron", "torchtitan", "deepspeed"] = Field(
        "reference", description="How the layout is passed on to the trainer."
    )
    queue_name: str | None = Field(
        None,
        min_length=1,
        max_length=_LABEL_VALUE_MAX_LENGTH,
        description="Kueue LocalQueue name (kueue.x-k8s.io/queue-name).",
    )
    priority_class: str | None = Field(
        None,
        min_length=1,
        max_length=_LABEL_VALUE_MAX_LENGTH,
        pattern=_LABEL_VALUE_PATTERN,
        description=(
            "Kueue WorkloadPriorityClass of the job (the kueue.x-k8s.io/priority-class"
            " label); needs queueName."
        ),
    )
    topology: KueueTopology | None = Field(
        None,
        description="Kueue topology-aware scheduling of the pods (needs queueName).",
    )
    managed_by: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=_DOMAIN_PREFIXED_PATH_PATTERN,
        description=(
            "The JobSet's spec.managedBy, e.g. kueue.x-k8s.io/multikueue for MultiKueue to"
            " run it on a worker cluster; needs queueName and launcher JobSet."
        ),
    )
    suspend: bool = Field(False, description="Create the job suspended.")
    metrics_port: int = Field(
        9400, ge=1, le=65535, description="Port of the training metrics endpoint."
    )
    security_context: PodSecurityContextSpec = Field(
        default_factory=PodSecurityContextSpec,
        description="User and groups of the training pods (always Pod Security restricted).",
    )
    shm_size: ByteQuantity = Field(
        DEFAULT_SHM_SIZE,
        description=(
            "Size limit of /dev/shm, a memory-backed emptyDir that counts as the pods'"
            " memory; default 16Gi."
        ),
    )
    pod_template: PodTemplateOverride | None = Field(
        None,
        description=(
            "A partial pod template merged onto the training pods (labels, annotations,"
            " service account, pull secrets, volumes, affinity, security contexts, host"
            " network, and the trainer container's env, mounts and resources); the fields"
            " trainplan sets for the plan are refused. See docs/pod-template.md."
        ),
    )

    @model_validator(mode="after")
    def _check_kueue(self) -> Self:
        if self.queue_name is None:
            given = [
                name
                for name, value in (
                    ("priorityClass", self.priority_class),
                    ("topology", self.topology),
                    ("managedBy", self.managed_by),
                )
                if value is not None
            ]
            if given:
                verb = "needs" if len(given) == 1 else "need"
                raise ValueError(f"job.{' and job.'.join(given)} {verb} job.queueName (Kueue)")
        if self.managed_by is not None and self.launcher != "JobSet":
            raise ValueError(
                "job.managedBy needs job.launcher JobSet: MultiKueue copies only the job to"
                " the worker cluster, where a JobSet makes its own headless Service and a"
                " Job's Service would be missing"
            )
        if self.managed_by is not None and self.framework == "deepspeed":
            raise ValueError(
                "job.managedBy cannot run framework deepspeed: its ConfigMap would stay on"
                " this cluster, not reach the worker cluster"
            )
        return self

    @model_validator(mode="after")
    def _check_command(self) -> Self:
        command = self.command
        if command and command[0].startswith("-"):
            raise ValueError(
                "job.command cannot start with an option (a word starting with '-'):"
                " torchrun would take it as its own flag; give the program first"
            )
        is_module = len(command) >= 3 and command[0] in PYTHON_NAMES and command[1] == "-m"
        if is_module and command[2].startswith("-"):
            raise ValueError(
                "job.command: the module of python -m cannot be an option (a word starting"
                " with '-'): torchrun would take it as its own flag"
            )
        return self


class TrainingPlanSpec(ApiModel):
    """The whole TrainingPlan spec."""

    model: ModelSpec = Field(description="The model: a catalog preset or an explicit shape.")
    data: DataSpec = Field(description="Tokens or samples per epoch, and epochs.")
    batch: BatchSpec = Field(description="Global batch, and optionally the micro batch.")
    hardware: HardwareSpec = Field(
        default_factory=HardwareSpec, description="GPU type and GPUs per node."
    )
    objective: ObjectiveSpec = Field(
        default_factory=ObjectiveSpec,
        description="At most one of gpus or deadline; maxGPUs caps either.",
    )
    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec,
        description="Optional pins of the layout; anything left out is searched.",
    )
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="Precision, optimizer, attention kernel."
    )
    reliability: ReliabilitySpec = Field(
        default_factory=ReliabilitySpec,
        description="Checkpoint interval and cost, restarts, failure rate.",
    )
    job: JobSpec = Field(default_factory=JobSpec, description="How the training job runs.")
    budget_ref: str | None = Field(
        None,
        min_length=1,
        max_length=_NAME_MAX_LENGTH,
        pattern=_DNS_SUBDOMAIN_PATTERN,
        description="A GPUBudget in the same namespace (its name).",
    )

    @model_validator(mode="after")
    def _check_cross_fields(self) -> Self:
        problems = self._cross_field_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _cross_field_problems(self) -> list[str]:
        """Every rule between sections that this spec breaks, one message each."""
        problems: list[str] = []
        par, gpus = self.parallelism, self.objective.gpus
        tensor, pipeline, data = par.tensor, par.pipeline, par.data
        context = par.context or 1
        if (
            tensor is not None
            and pipeline is not None
            and data is not None
            and gpus is not None
            and tensor * context * pipeline * data != gpus
        ):
            degrees = f"{tensor} x {pipeline} x {data}"
            names = "parallelism.tensor x parallelism.pipeline x parallelism.data"
            if context > 1:
                degrees += f" x {context}"
                names += " x parallelism.context"
            problems.append(
                f"{names} ({degrees} = {tensor * context * pipeline * data}) "
                f"must equal objective.gpus ({gpus})"
            )
        length = self.model.sequence_length
        if context > 1 and length is not None and length % context:
            problems.append(
                f"model.sequenceLength ({length}) must be divisible by parallelism.context"
                f" ({context})"
            )
        per_node = self.hardware.gpus_per_node
        if gpus is not None and gpus > per_node and gpus % per_node:
            problems.append(
                f"objective.gpus ({gpus}) must be a multiple of hardware.gpusPerNode "
                f"({per_node}) to fill whole nodes"
            )
        total, micro = self.batch.global_batch_size, self.batch.micro_batch_size
        if data is not None:
            if total % data:
                problems.append(
                    f"batch.globalBatchSize ({total}) must be divisible by "
                    f"parallelism.data ({data})"
                )
            elif micro is not None and total % (micro * data):
                problems.append(
                    f"batch.globalBatchSize ({total}) must be divisible by batch.microBatchSize x "
                    f"parallelism.data ({micro} x {data} = {micro * data})"
                )
        model = self.model
        heads, kv_heads = model.attention_heads, model.kv_heads
        if tensor is not None and heads is not None and heads % tensor:
            problems.append(
                f"model.attentionHeads ({heads}) must be divisible by parallelism.tensor ({tensor})"
            )
        if tensor is not None and kv_heads is not None and kv_heads % tensor and tensor % kv_heads:
            problems.append(
                f"model.kvHeads ({kv_heads}) and parallelism.tensor ({tensor}) must divide one "
                f"another (key/value heads are split or replicated across tensor ranks)"
            )
        layers = model.layers
        # Stages may be uneven and interleaved where the framework places them (the
        # planner checks: trainplan.planner.stages.interleaved_placement).
        if pipeline is not None and layers is not None and layers < pipeline:
            problems.append(
                f"model.layers ({layers}) must be at least parallelism.pipeline"
                f" ({pipeline}): every stage holds a layer"
            )
        if par.zero_stage == 3 and pipeline is not None and pipeline > 1:
            problems.append(
                f"parallelism.zeroStage 3 with parallelism.pipeline > 1 (got {pipeline}) is not "
                f"supported by the frameworks trainplan launches; use zeroStage <= 2"
            )
        return problems
