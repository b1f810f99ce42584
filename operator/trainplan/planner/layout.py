"""Execution layout and workload: the frozen inputs of every formula (pure).

Three inputs stay orthogonal, after Calculon (Isaev et al., SC'23): the model shape
(`shapes.ModelShape`), the hardware (`catalog.GPUSpec`) and the execution (`Layout`).
`Workload` binds a shape to a GPU type and the batch and precision the user asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainplan.planner.catalog import GPUSpec
from trainplan.planner.finetune import PRETRAIN, FineTuning
from trainplan.planner.shapes import ModelShape

Checkpointing = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "fp32"]
Optimizer = Literal["adamw", "sgd"]
AttentionKernel = Literal["flash", "standard"]
SelectiveRecompute = Literal["attention", "every-other-matmul"]
"""What selective recomputation redoes: the attention core (and the norms and activations
of `recompute_modules`; Megatron-LM, Korthikanti et al. 2022), or every other matrix
multiply and every elementwise op of the layer (torchtitan's per-op policy)."""
KernelStack = Literal["pytorch", "megatron-core"]
"""Whose kernels run the layers: PyTorch's own (eager or compiled: torchtitan, DeepSpeed,
llm-foundry, the reference trainer) or Megatron-Core's (Megatron-LM and NeMo, with
Transformer Engine's fused layers). They differ in matrix-multiply and fused-attention
efficiency on Hopper (`ArchitectureEfficiency.megatron_gemm_efficiency` and
`megatron_flash_attention_efficiency`)."""
ReductionOverlap = Literal["always", "sharded-without-pipeline", "except-unsharded-with-tensor"]
"""When the framework overlaps the data-parallel gradient reduction with the backward
pass: in every layout; only with ZeRO 1-3 and no pipeline (DeepSpeed); or except with
ZeRO-0 and tensor parallelism (the reference trainer, whose DDP cannot take tensor-parallel
parameters, so it all-reduces after the last backward pass)."""

CHECKPOINTING_LEVELS: tuple[Checkpointing, ...] = ("none", "selective", "full")
RECOMPUTE_WORDS: dict[Checkpointing, str] = {
    "none": "no-recompute",
    "selective": "selective-recompute",
    "full": "full-recompute",
}
"""Each activation-recomputation level in a layout's short form (never "ckpt", which
reads as a model checkpoint)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """How one optimizer step is spread over GPUs.

    `tensor` x `context` x `pipeline` x `data` GPUs; each data-parallel rank runs
    `accumulation_steps` micro-batches of `micro_batch_size` sequences, so the global
    batch is micro x data x accumulation sequences (Narayanan et al. 2021, section 2.2).
    Context parallelism splits each sequence over `context` ranks (ring attention: Liu et
    al. 2023, arXiv 2310.01889; Megatron-LM's context parallelism), which hold the same
    weights, as data-parallel ranks do. Expert parallelism splits each MoE layer's routed
    experts over `expert` ranks and each expert over `expert_tensor` ranks (Lepikhin et
    al. 2020, GShard, arXiv 2006.16668); the MoE layers are laid out over the same tensor
    x context x data ranks as the rest, so this uses no GPUs of its own (Megatron-Core's
    MoE parallel folding, Liu et al. 2025, arXiv 2504.14960: expert-tensor x expert x
    expert-data = tensor x context x data), and tokens reach their experts by all-to-all.
    """

    tensor: int
    pipeline: int
    data: int
    micro_batch_size: int
    accumulation_steps: int
    zero_stage: int = 0
    checkpointing: Checkpointing = "none"
    sequence_parallel: bool = False
    virtual_stages: int = 1
    context: int = 1
    expert: int = 1
    expert_tensor: int = 1

    @property
    def gpus(self) -> int:
        return self.tensor * self.context * self.pipeline * self.data

    @property
    def replicas(self) -> int:
        """Ranks holding the same weights: data x context. ZeRO shards over them and
        gradients reduce over them (Megatron-LM's data-and-context group)."""
        return self.data * self.context

    @property
    def expert_replicas(self) -> int:
        """Ranks holding the same expert shard: tensor x context x data / (expert x
        expert-tensor). The experts' ZeRO shards and gradient reduction span these
        (Megatron-Core's expert-data-parallel group)."""
        return max(1, self.tensor * self.replicas // (self.expert * self.expert_tensor))

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.data * self.accumulation_steps

    def describe(self) -> str:
        """Short human form, e.g. `TP8 PP4 DP64 mb1 ga4 ZeRO-1 selective-recompute`."""
        parts = [f"TP{self.tensor}"]
        if self.context > 1:
            parts.append(f"CP{self.context}")
        parts += [f"PP{self.pipeline}", f"DP{self.data}"]
        if self.expert > 1:
            parts.append(f"EP{self.expert}")
        if self.expert_tensor > 1:
            parts.append(f"ETP{self.expert_tensor}")
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        parts += [f"mb{self.micro_batch_size}", f"ga{self.accumulation_steps}"]
        parts.append(f"ZeRO-{self.zero_stage}")
        if self.sequence_parallel:
            parts.append("SP")
        parts.append(RECOMPUTE_WORDS[self.checkpointing])
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Workload:
    """What is trained and on what: everything but the layout."""

    shape: ModelShape
    gpu: GPUSpec
    gpus_per_node: int
    global_batch_size: int
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    attention: AttentionKernel = "flash"
    tuning: FineTuning = PRETRAIN
    """What trains: every weight, or low-rank adapters on a frozen base (`finetune`)."""
    expert_capacity_factor: float | None = None
    """Tokens an expert takes, as a multiple of an even share (Fedus et al. 2021, section
    2.2); None: dropless routing, priced at the calibration's load imbalance."""
    expert_comm_overlap: bool = False
    """The framework overlaps one micro-batch's all-to-all with another's compute where
    the pipeline schedule allows (Megatron-Core's `--overlap-moe-expert-parallel-comm`,
    with no pipeline or an interleaved one; DeepSeek-V3's DualPipe)."""
    pipeline_p2p_overlap: bool = False
    """The framework overlaps the interleaved pipeline's steady-state point-to-point
    transfers with compute (Megatron-LM's default `overlap_p2p_comm`); its warm-up and
    flush transfers stay blocking."""
    reduction_overlap: ReductionOverlap = "always"
    """Where the gradient reduction (ZeRO 0-2) can hide behind the backward pass
    (`planner.frameworks`); elsewhere it follows the backward pass, exposed."""
    selective_recompute: SelectiveRecompute = "attention"
    """What the framework's selective recomputation redoes (`planner.frameworks`)."""
    kernels: KernelStack = "pytorch"
    """Whose kernels run the layers (`KernelStack`, `planner.frameworks`)."""
    tensor_comm_overlap: bool = False
    """The sequence-parallel all-gathers and reduce-scatters run chunk by chunk under the
    matrix multiplies that consume or produce them (Megatron-Core's `--tp-comm-overlap`,
    Transformer Engine's userbuffers), as NeMo's H100 recipes run them; trainplan's
    launchers do not turn it on."""
    sync_every_micro_batch: bool = False
    """Without a pipeline, the framework gathers the weights and reduces the gradients
    of ZeRO 0-2 on every micro-batch instead of holding them until the last
    (`planner.frameworks`)."""
    param_gather_overlap: bool = False
    """ZeRO 1-2 gather the updated weights under the next step's first forward pass
    instead of after the optimizer step (Megatron-LM's `--overlap-param-gather` with its
    distributed optimizer)."""

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs that reach each other over NVLink (or the node's PCIe): the node, or the
        GPU's larger NVLink domain (`GPUSpec.nvlink_domain_gpus`)."""
        return max(self.gpus_per_node, self.gpu.nvlink_domain_gpus or 0)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.shape.sequence_length
