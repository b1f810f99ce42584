"""How a pipeline splits a model's layers into stages (pure).

An even split gives every stage L / p layers. When p does not divide L, frameworks place
the remainder on the first and last stages, which also carry the input embedding and the
output layer and loss: Megatron-LM takes `--decoder-first-pipeline-num-layers` and
`--decoder-last-pipeline-num-layers` and splits the rest evenly over the middle stages
(its arguments.py and `get_num_layers_to_build`; the middle count must divide evenly);
torchtitan takes each model chunk's modules as `--parallelism.module_fqns_per_model_part`
(torchtitan v0.2.2 `config/job_config.py`). trainplan makes the same split for both: each
middle stage gets ceil(L / p) layers, and the first and last share the rest, the first
taking the odd one, so that no stage holds more than a middle one (the slowest stage sets
the step time).

Interleaving (v chunks per stage) needs each chunk of a stage to hold the same number of
layers. Megatron-LM core_v0.19.0 (`TransformerConfig.__post_init__`) places it on an
uneven split in two ways (`interleaved_placement`): with first and last stage counts that
v divides, as it divides the middle ones ("first-last"); or by counting the input
embedding and the loss as one layer each (`--account-for-embedding-in-pipeline-split`,
`--account-for-loss-in-pipeline-split`), which needs L + 2 layers split evenly, every
stage's share divisible by v ("embedding-loss"). The second is the layout of Llama 3 405B
(Llama Team 2024, arXiv 2407.21783, section 3.3.2: 126 layers on 16 stages, one layer
fewer on the first and the last, whose first and last chunks hold only the embedding and
the output layer and loss, in an interleaved schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

InterleavedPlacement = Literal["even", "first-last", "embedding-loss"]


@dataclass(frozen=True, slots=True)
class StageSplit:
    """Layers of the first stage, of each middle stage and of the last stage of a
    `pipeline`-stage split (one stage: all three are its layers). Fractional for the even
    split priced where no whole one exists (`split_of`)."""

    first: float
    middle: float
    last: float
    pipeline: int

    @property
    def most(self) -> float:
        """Layers of the fullest stage."""
        if self.pipeline == 1:
            return self.last
        middle = self.middle if self.pipeline > 2 else 0.0
        return max(self.first, middle, self.last)

    @property
    def most_before_last(self) -> float:
        """Layers of the fullest stage other than the last (0 with one stage)."""
        if self.pipeline == 1:
            return 0.0
        return max(self.first, self.middle if self.pipeline > 2 else 0.0)

    def most_in_flight(self, micro_batches: int, chunks: int = 1) -> float:
        """The most layer activations one stage keeps at once (`held_chunk_passes`): the
        first stage's with an even split, possibly the second's with an uneven one."""
        p = self.pipeline
        if p == 1:
            return self.last * min(1, micro_batches)
        held = [
            self.first * held_chunk_passes(0, p, micro_batches, chunks) / chunks,
            self.last_in_flight(micro_batches, chunks),
        ]
        if p > 2:
            held.append(self.middle * held_chunk_passes(1, p, micro_batches, chunks) / chunks)
        return max(held)

    def last_in_flight(self, micro_batches: int, chunks: int = 1) -> float:
        """Layer activations the last stage keeps at once (`held_chunk_passes`)."""
        if self.pipeline == 1:
            return self.last * min(1, micro_batches)
        passes = held_chunk_passes(self.pipeline - 1, self.pipeline, micro_batches, chunks)
        return self.last * passes / chunks


def held_chunk_passes(stage: int, pipeline: int, micro_batches: int, chunks: int) -> int:
    """Forward passes of one model chunk whose activations stage `stage` (from 0) of a
    `pipeline`-stage 1F1B schedule holds at its peak, over `micro_batches` micro-batches
    and `chunks` chunks per stage.

    Without interleaving, p - i: the warm-up's p - i - 1 forwards and the steady state's
    one (Narayanan et al. 2021, arXiv 2104.04473, section 2.2.1; Korthikanti et al. 2022,
    section 4.2.3; PyTorch's `Schedule1F1B` warms up min(m, p - i)). Interleaved,
    2 (p - i - 1) + (v - 1) p + 1: Megatron-LM's warm-up (core_v0.19.0
    `pipeline_parallel/schedules.py`, `get_pp_rank_microbatches`, with its default group
    of p micro-batches per chunk) and one more in flight, as in PyTorch's
    `ScheduleInterleaved1F1B` (`torch.distributed.pipelining.schedules._get_warmup_ops`,
    which torchtitan runs; tests/runtime/test_pipeline_schedule_upstream.py); on the first
    stage that is p v (1 + (p - 1) / (p v)) chunk passes, Korthikanti et al.'s factor.
    Never more than all m v passes: with few micro-batches the whole step is warm-up.
    """
    return min(
        micro_batches * chunks, warmup_chunk_passes(stage, pipeline, micro_batches, chunks) + 1
    )


def warmup_chunk_passes(stage: int, pipeline: int, micro_batches: int, chunks: int) -> int:
    """Forward passes of one model chunk that stage `stage` runs before its first backward
    pass (the 1F1B warm-up, `held_chunk_passes` above): p - i - 1, or interleaved
    2 (p - i - 1) + (v - 1) p; never more than all m v passes."""
    if chunks <= 1:
        warm_up = pipeline - stage - 1
    else:
        warm_up = 2 * (pipeline - stage - 1) + (chunks - 1) * pipeline
    return min(micro_batches * chunks, warm_up)


def split_counts(layers: int, pipeline: int) -> tuple[int, int, int] | None:
    """(first, middle, last) stage layers of the split described above; None when none
    exists (fewer than two layers would be left for the first and last stages, or more
    than a middle stage holds, e.g. 9 layers on 8 stages)."""
    if pipeline < 1 or layers < pipeline:
        return None
    if layers % pipeline == 0:
        even = layers // pipeline
        return even, even, even
    if pipeline == 2:
        return layers - layers // 2, 0, layers // 2
    middle = -(-layers // pipeline)
    rest = layers - (pipeline - 2) * middle
    if not 2 <= rest <= 2 * middle:
        return None
    return rest - rest // 2, middle, rest // 2


def stage_layers(layers: int, pipeline: int) -> tuple[int, ...] | None:
    """Layers of each of `pipeline` stages, first to last (`split_counts`)."""
    counts = split_counts(layers, pipeline)
    if counts is None:
        return None
    first, middle, last = counts
    if pipeline == 1:
        return (layers,)
    return (first, *(middle,) * (pipeline - 2), last)


def split_of(layers: int, pipeline: int) -> StageSplit:
    """The split of `split_counts`, or an even one of L / p layers (fractional) where it
    has none: the layout search never proposes such a degree, but a layout priced
    directly (a benchmark's pins) still gets a time."""
    counts = split_counts(layers, pipeline)
    if counts is None:
        even = layers / pipeline
        return StageSplit(even, even, even, pipeline)
    first, middle, last = counts
    return StageSplit(float(first), float(middle), float(last), pipeline)


def interleaved_placement(layers: int, pipeline: int, chunks: int) -> InterleavedPlacement | None:
    """How `chunks` interleaved chunks per stage place the `split_counts` split (module
    docstring), or None where no chunk count is placed evenly on it."""
    counts = split_counts(layers, pipeline)
    if counts is None or pipeline == 1 or chunks < 1:
        return None
    first, middle, last = counts
    if layers % pipeline == 0:
        return "even" if middle % chunks == 0 else None
    if first % chunks == 0 and last % chunks == 0 and (pipeline == 2 or middle % chunks == 0):
        return "first-last"
    if pipeline > 2 and first == last == middle - 1 and middle % chunks == 0:
        return "embedding-loss"
    return None


def chunk_layers(layers: int, pipeline: int, chunks: int) -> tuple[int, ...] | None:
    """Layers of each of the `pipeline` x `chunks` model chunks in model order (chunk k
    runs on pipeline rank k mod `pipeline`, the looped order of interleaved schedules), as
    `interleaved_placement` places them: each rank's share split evenly over its chunks,
    or, with the embedding and the loss counted as layers, (L + 2) / (p v) slots per
    chunk, the first chunk's first and the last chunk's last slot theirs (so a chunk may
    hold no layer). None where no placement exists."""
    placement = interleaved_placement(layers, pipeline, chunks)
    if placement is None:
        return None
    count = pipeline * chunks
    if placement == "embedding-loss":
        slots = (layers + 2) // count
        return (slots - 1, *(slots,) * (count - 2), slots - 1)
    per_rank = stage_layers(layers, pipeline)
    assert per_rank is not None  # a placement exists only on a split
    return tuple(per_rank[k % pipeline] // chunks for k in range(count))
