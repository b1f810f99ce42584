"""What each training framework can run, as far as the layout search is concerned (pure).

- Megatron-LM shards only optimizer state (its distributed optimizer, ZeRO-1).
- DeepSpeed runs every ZeRO stage, but only stage 0 or 1 with pipeline parallelism.
- torchtitan runs DDP (stage 0) and FSDP2: stage 3 with resharding, stages 1 and 2 as
  FSDP without resharding after forward (see `trainplan.launcher.frameworks`); stage 3
  is not combined with pipelining here.
- The reference trainer runs ZeRO 0-3, stage 3 without pipelining.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FrameworkLimits:
    """ZeRO stages a framework runs, and the highest one it combines with pipelining."""

    zero_stages: tuple[int, ...]
    max_zero_stage_with_pipeline: int

    def allows(self, zero_stage: int, pipeline: int) -> bool:
        if zero_stage not in self.zero_stages:
            return False
        return pipeline == 1 or zero_stage <= self.max_zero_stage_with_pipeline


FRAMEWORK_LIMITS: dict[str, FrameworkLimits] = {
    "reference": FrameworkLimits((0, 1, 2, 3), 2),
    "megatron": FrameworkLimits((0, 1), 1),
    "deepspeed": FrameworkLimits((0, 1, 2, 3), 1),
    "torchtitan": FrameworkLimits((0, 1, 2, 3), 2),
}
ANY_FRAMEWORK = FrameworkLimits((0, 1, 2, 3), 2)
