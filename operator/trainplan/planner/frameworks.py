"""What each training framework can run, as far as the layout search is concerned (pure).

- Megatron-LM shards only optimizer state (its distributed optimizer, ZeRO-1).
- DeepSpeed runs every ZeRO stage, but only stage 0 or 1 with pipeline parallelism and
  0-2 with tensor parallelism (AutoTP).
- torchtitan runs DDP (stage 0) and FSDP2: stage 3 with resharding, stages 1 and 2 as
  FSDP without resharding after forward (see `trainplan.launcher.frameworks`); with a
  pipeline, stage 1 at most: its pipelined FSDP stages keep whole weights and gradients
  for the step (ZeRO-1's memory).
- The reference trainer runs ZeRO 0-3 and no pipeline (`REFERENCE_TRAINER`); a program
  of the user's own under `reference` may pipeline with ZeRO 0-2. The trainer's tensor
  parallelism splits the vocabulary, the MLP width and the key/value heads evenly (no
  padding), so the tensor degree must divide each.
- Context parallelism (a sequence split over ranks, ring attention): Megatron-LM
  (`--context-parallel-size`) and torchtitan (`--parallelism.context_parallel_degree`);
  DeepSpeed's Ulysses sequence parallelism is another scheme, and the reference trainer
  has none.
- Uneven pipeline stages (a degree that does not divide the layers, `planner.stages`):
  Megatron-LM (first and last stage layer counts) and torchtitan (the modules of each
  model chunk) place them; DeepSpeed's pipeline is partitioned by the user's own
  `PipelineModule`, which trainplan does not set, so it gets even splits only. Both
  Megatron-LM and torchtitan (a module list per chunk) interleave an uneven split where
  `planner.stages.interleaved_placement` places it.
- Mixture-of-experts: Megatron-LM (`--num-experts`, `--expert-model-parallel-size`,
  `--expert-tensor-parallel-size`, with its distributed optimizer and pipelines) and
  torchtitan (`--parallelism.expert_parallel_degree` and
  `--parallelism.expert_tensor_parallel_degree`, its DeepSeek-V3 and Llama 4 models, with
  FSDP2 and pipelines) place expert parallelism. DeepSpeed-MoE sets its expert degree in
  the model code (`deepspeed.moe.layer.MoE(ep_size=...)`), so trainplan plans it with
  every expert on every rank only, and DeepSpeed runs MoE layers with ZeRO 0-2 (its engine
  refuses ZeRO-3 with MoE). The reference trainer has no experts. Megatron-LM overlaps the
  experts' all-to-all of one micro-batch with another's compute
  (`--overlap-moe-expert-parallel-comm --delay-wgrad-compute`, with no pipeline or an
  interleaved one); torchtitan does not.
- Pipeline point-to-point: Megatron-LM overlaps the sends and receives of the
  interleaved schedule's steady 1F1B phase with the chunks' compute (`overlap_p2p_comm`,
  on by default: `--no-overlap-p2p-communication` turns it off, and it is off without
  interleaving; core_v0.19.0 `training/arguments.py`), while its warm-up and flush keep
  blocking ones (`overlap_p2p_comm_warmup_flush` defaults to off). torchtitan's
  interleaved schedule (PyTorch's `ScheduleInterleaved1F1B`) posts receives early and
  waits only before the pass that consumes them, priced the same way; its warm-up
  transfers lie on the schedule's dependency chain whatever is posted early. Plain 1F1B
  (PyTorch's `Schedule1F1B` and Megatron-LM's) and DeepSpeed's pipeline engine block
  on every transfer.
- The data-parallel gradient reduction overlaps the backward pass under Megatron-LM (the
  launcher writes `--overlap-grad-reduce`), torchtitan (DDP and FSDP2) and the reference
  trainer (DDP, FSDP; with ZeRO-0 and tensor parallelism, where its DDP cannot take
  DTensor parameters, it all-reduces after the last backward pass). DeepSpeed overlaps
  it only in its ZeRO optimizer without a pipeline (the launcher writes `overlap_comm`,
  which DeepSpeed turns on by itself only for stage 3,
  `DeepSpeedZeroConfig.overlap_comm_valid`): without ZeRO its engine all-reduces after
  the backward pass, and its pipeline engine reduces after the flush (`ReduceGrads` after
  the last backward pass, `deepspeed/runtime/pipe/schedule.py` `TrainSchedule`).
- Selective recomputation: Megatron-LM's (and the reference trainer's) recomputes the
  attention core (Korthikanti et al. 2022); torchtitan's, with the per-op policy the
  launcher selects (`--activation_checkpoint.selective_ac_option op`, as torchtitan's own
  train configs do; v0.2.2 otherwise defaults to every second layer in full), saves the
  attention kernel's output and every other matrix multiply's output and recomputes the
  other matrix multiplies and every elementwise op (`torchtitan/distributed/
  activation_checkpoint.py`, `_apply_op_sac`).
- Kernels: Megatron-LM runs its layers on Megatron-Core's kernels (Transformer Engine's
  fused linear, norm and attention layers), every other framework on PyTorch's own. On
  Hopper NeMo's published step times (Megatron-Core) are 17-35% shorter than the
  constants that price MosaicML's PyTorch runs and the reference trainer's measured steps
  give, so each has its own matrix-multiply and fused-attention efficiency there
  (`ArchitectureEfficiency.megatron_gemm_efficiency`,
  `megatron_flash_attention_efficiency`); on Ampere one set fits both.
- Gradient accumulation: torchtitan's training step runs each micro-batch's forward and
  backward with gradient synchronisation on (v0.2.2 `train.py`, `train_step`), so its DDP
  all-reduces and its FSDP (ZeRO 1-2 as FSDP without resharding after forward) gathers
  the weights and reduce-scatters the gradients on every micro-batch; with a pipeline,
  PyTorch's stage synchronises on the last backward only
  (`torch.distributed.pipelining.stage`, `backward_maybe_with_nosync`). Megatron-LM and
  DeepSpeed hold the reduction until the last micro-batch, but for ZeRO-2's
  reduce-scatter, which runs after every micro-batch (`planner.steptime.data_comm_seconds`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainplan.planner.layout import (
    KernelStack,
    ReductionOverlap,
    SelectiveRecompute,
    Workload,
)
from trainplan.planner.shapes import ModelShape


@dataclass(frozen=True, slots=True)
class FrameworkLimits:
    """ZeRO stages a framework runs, and the highest one it combines with pipelining."""

    zero_stages: tuple[int, ...]
    max_zero_stage_with_pipeline: int
    tensor_splits_evenly: bool = False
    """Tensor parallelism needs vocab, MLP width and kv heads divisible by its degree."""
    uneven_pipeline: bool = True
    """Pipeline degrees that do not divide the layers are placed (first and last stages
    take the remainder), with interleaved chunks where `interleaved_placement` places
    them."""
    context_parallel: bool = True
    """Sequences can be split over context-parallel ranks (ring attention)."""
    experts: bool = True
    """Mixture-of-experts models run."""
    expert_parallel: bool = True
    """Experts can be split over expert-parallel ranks (and expert-tensor ranks)."""
    max_zero_stage_with_experts: int = 3
    """Highest ZeRO stage run with mixture-of-experts layers."""
    expert_comm_overlap: bool = False
    """One micro-batch's expert all-to-all overlaps another's compute (with no pipeline or
    an interleaved one)."""
    pipeline_p2p_overlap: bool = False
    """The interleaved schedule's steady-state sends and receives overlap compute:
    Megatron-LM's `overlap_p2p_comm` (on by default); PyTorch's interleaved schedules,
    which torchtitan runs, post each receive as early as the schedule allows and wait
    for it just before the pass that needs it (`_add_send_recv` and
    `_PipelineScheduleRuntime` in torch/distributed/pipelining/schedules.py), while
    its plain 1F1B blocks on every transfer (`Schedule1F1B`)."""
    reduction_overlap: ReductionOverlap = "always"
    """Where the data-parallel gradient reduction overlaps the backward pass."""
    selective_recompute: SelectiveRecompute = "attention"
    """What its selective activation recomputation redoes."""
    sync_every_micro_batch: bool = False
    """Without a pipeline, ZeRO 0-2 exchange weights and gradients on every micro-batch."""
    param_gather_overlap: bool = False
    """ZeRO 1-2 gather the updated weights under the next step's first forward pass."""
    pipelines: bool = True
    """It runs pipeline parallelism."""
    max_zero_stage_with_tensor: int = 3
    """Highest ZeRO stage run with tensor parallelism."""
    sequence_parallel: bool = True
    """Its tensor parallelism also splits the norms and the residual stream over the
    sequence (Korthikanti et al. 2022), so their activations are not replicated."""
    fp8: bool = True
    """It trains in fp8."""
    fp16: bool = True
    """It trains in fp16 (which needs loss scaling)."""
    kernels: KernelStack = "pytorch"
    """Whose kernels run its layers (`layout.KernelStack`)."""

    def allows(
        self, zero_stage: int, pipeline: int, experts: bool = False, tensor: int = 1
    ) -> bool:
        """Whether ZeRO `zero_stage` runs with `pipeline` stages, `tensor` ranks (and MoE
        layers)."""
        if zero_stage not in self.zero_stages:
            return False
        if experts and zero_stage > self.max_zero_stage_with_experts:
            return False
        if tensor > 1 and zero_stage > self.max_zero_stage_with_tensor:
            return False
        return pipeline == 1 or zero_stage <= self.max_zero_stage_with_pipeline

    def tensor_problem(self, tensor: int, shape: ModelShape) -> str | None:
        """Why this framework cannot split `shape` `tensor` ways, or None."""
        if not self.tensor_splits_evenly or tensor == 1:
            return None
        uneven = [
            f"{name} ({value})"
            for name, value in (
                ("vocabSize", shape.vocab_size),
                ("ffnHiddenSize", shape.ffn_hidden_size),
                ("kvHeads", shape.kv_heads),
            )
            if value % tensor
        ]
        return f"{tensor} does not divide {', '.join(uneven)}" if uneven else None


FRAMEWORK_LIMITS: dict[str, FrameworkLimits] = {
    "reference": FrameworkLimits(
        (0, 1, 2, 3),
        2,
        tensor_splits_evenly=True,
        context_parallel=False,
        experts=False,
        expert_parallel=False,
    ),
    "megatron": FrameworkLimits(
        (0, 1),
        1,
        expert_comm_overlap=True,
        pipeline_p2p_overlap=True,
        kernels="megatron-core",
        param_gather_overlap=True,
    ),
    # DeepSpeed's tensor parallelism for training (AutoTP) shards the linear layers and
    # combines with ZeRO stage 0, 1 or 2 (deepspeed.ai/tutorials/autotp-training; the
    # launcher refuses stage 3 with it); it splits nothing over the sequence, so the
    # norms' and residuals' activations stay whole on every tensor rank.
    "deepspeed": FrameworkLimits(
        (0, 1, 2, 3),
        1,
        max_zero_stage_with_tensor=2,
        sequence_parallel=False,
        reduction_overlap="sharded-without-pipeline",
        uneven_pipeline=False,
        context_parallel=False,
        expert_parallel=False,
        max_zero_stage_with_experts=2,
    ),
    # With a pipeline, torchtitan's FSDP keeps each stage's weights gathered and its
    # gradients whole until the last backward (v0.2.2 `apply_fsdp`: no resharding after
    # forward when pipelining; PyTorch's `PipelineStage.backward_maybe_with_nosync`: no
    # resharding after backward, no gradient sync before the last), which is ZeRO-1's
    # memory: ZeRO-2 with a pipeline would be planned with gradients it does not shard.
    "torchtitan": FrameworkLimits(
        (0, 1, 2, 3),
        1,
        fp16=False,  # no loss scaling (its launcher refuses fp16)
        pipeline_p2p_overlap=True,
        selective_recompute="every-other-matmul",
        sync_every_micro_batch=True,
    ),
}


def with_framework(workload: Workload, limits: FrameworkLimits) -> Workload:
    """`workload` as `limits`' framework runs it: its kernels, overlaps and schedules."""
    return replace(
        workload,
        expert_comm_overlap=limits.expert_comm_overlap,
        pipeline_p2p_overlap=limits.pipeline_p2p_overlap,
        reduction_overlap=limits.reduction_overlap,
        selective_recompute=limits.selective_recompute,
        sync_every_micro_batch=limits.sync_every_micro_batch,
        kernels=limits.kernels,
        param_gather_overlap=limits.param_gather_overlap,
    )


REFERENCE_TRAINER = replace(
    FRAMEWORK_LIMITS["reference"],
    reduction_overlap="except-unsharded-with-tensor",
    pipelines=False,
    fp8=False,
)
"""The `reference` framework's default program, the reference trainer
(`trainplan.runtime.train`): no pipeline parallelism and no fp8, which it refuses with
exit 3 (`trainplan.runtime.config`); with ZeRO-0 and tensor parallelism, where DDP cannot
take its DTensor parameters, it all-reduces the gradients after the last backward pass
(`trainplan.runtime.parallel.all_reduce_gradients`), exposed. A `job.command` of the
user's own, reading the `TRAINPLAN_` environment, gets `FRAMEWORK_LIMITS["reference"]`."""
ANY_FRAMEWORK = FrameworkLimits((0, 1, 2, 3), 2)
