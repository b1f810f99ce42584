"""Small factories shared by the planner's unit tests."""

from __future__ import annotations

from trainplan.planner.layout import Checkpointing, Layout


def make_layout(
    tensor: int = 1,
    pipeline: int = 1,
    data: int = 1,
    *,
    micro: int = 1,
    accumulation: int = 8,
    zero: int = 0,
    checkpointing: Checkpointing = "none",
    sp: bool = False,
    virtual: int = 1,
) -> Layout:
    """A layout with short keyword names; defaults to one GPU, 8 micro-batches of 1."""
    return Layout(
        tensor=tensor,
        pipeline=pipeline,
        data=data,
        micro_batch_size=micro,
        accumulation_steps=accumulation,
        zero_stage=zero,
        checkpointing=checkpointing,
        sequence_parallel=sp,
        virtual_stages=virtual,
    )
