"""The planner's count of in-flight pipeline passes against PyTorch's own interleaved
schedule (torch.distributed.pipelining, the `Interleaved1F1B` torchtitan runs), in the
pinned torch: the warm-up forwards each rank runs before its first backward, plus the one
the steady state adds, is what `stages.held_chunk_passes` says it holds."""

from __future__ import annotations

import pytest
from torch.distributed.pipelining import schedules

from trainplan.planner.stages import held_chunk_passes


@pytest.mark.parametrize("pipeline", [2, 4, 8, 16])
@pytest.mark.parametrize("chunks", [2, 3, 4, 8])
@pytest.mark.parametrize("rounds", [1, 2, 4])
def test_interleaved_warm_up_is_torchs(pipeline: int, chunks: int, rounds: int) -> None:
    micro_batches = rounds * pipeline
    for stage in range(pipeline):
        warm_up = schedules._get_warmup_ops(
            stage, chunks, pipeline, pipeline, micro_batches, multiply_factor=2
        )
        expected = min(warm_up + 1, micro_batches * chunks)
        assert held_chunk_passes(stage, pipeline, micro_batches, chunks) == expected
