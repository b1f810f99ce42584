"""What each training framework can run, as far as the layout search is concerned (pure).

- Megatron-LM shards only optimizer state (its distributed optimizer, ZeRO-1).
- DeepSpeed runs every ZeRO stage, but only stage 0 or 1 with pipeline parallelism.
- torchtitan runs DDP (stage 0) and FSDP2: stage 3 with resharding, stages 1 and 2 as
  FSDP without resharding after forward (see `trainplan.launcher.frameworks`); stage 3
  is not combined with pipelining here.
- The reference trainer runs ZeRO 0-3, stage 3 without pipelining; its tensor
  parallelism splits the vocabulary, the MLP width and the key/value heads evenly (no
  padding), so the tensor degree must divide each.
- Context parallelism (a sequence split over ranks, ring attention): Megatron-LM
  (`--context-parallel-size`) and torchtitan (`--parallelism.context_parallel_degree`);
  DeepSpeed's Ulysses sequence parallelism is another scheme, and the reference trainer
  has none.
- Uneven pipeline stages (a degree that does not divide the layers, `planner.stages`):
  Megatron-LM (first and last stage layer counts) and torchtitan (split points) place
  them; DeepSpeed's pipeline is partitioned by the user's own `PipelineModule`, which
  trainplan does not set, so it gets even splits only.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    take the remainder)."""
    context_parallel: bool = True
    """Sequences can be split over context-parallel ranks (ring attention)."""

    def allows(self, zero_stage: int, pipeline: int) -> bool:
        if zero_stage not in self.zero_stages:
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
        (0, 1, 2, 3), 2, tensor_splits_evenly=True, context_parallel=False
    ),
    "megatron": FrameworkLimits((0, 1), 1),
    "deepspeed": FrameworkLimits((0, 1, 2, 3), 1, uneven_pipeline=False, context_parallel=False),
    "torchtitan": FrameworkLimits((0, 1, 2, 3), 2),
}
ANY_FRAMEWORK = FrameworkLimits((0, 1, 2, 3), 2)
