"""`trainplan.runtime.parallel.gradient_sync` on a real FSDP2 module in a process group of
one (gloo, in-process): what each ZeRO stage keeps gathered between micro-batches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from trainplan.runtime.parallel import gradient_sync


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def _sharded_model(zero_stage: int) -> nn.Module:
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    for block in model:
        fully_shard(block, mesh=mesh, reshard_after_forward=zero_stage == 3)
    fully_shard(model, mesh=mesh, reshard_after_forward=zero_stage == 3)
    return model


def _gathered_after_micro_batch(model: nn.Module, zero_stage: int, last: bool) -> bool:
    """Run one micro-batch; whether every weight is left gathered (not a DTensor shard)."""
    with gradient_sync(zero_stage, model, last=last):
        model(torch.randn(2, 8)).sum().backward()
    return not any(isinstance(parameter, DTensor) for parameter in model.parameters())


@pytest.mark.usefixtures("process_group")
@pytest.mark.parametrize("zero_stage", [1, 2])
def test_zero_1_and_2_gather_weights_once_per_step(zero_stage: int) -> None:
    model = _sharded_model(zero_stage)
    # Gathered after an earlier micro-batch's backward, for the next; resharded after
    # the last.
    assert _gathered_after_micro_batch(model, zero_stage, last=False)
    assert not _gathered_after_micro_batch(model, zero_stage, last=True)


@pytest.mark.usefixtures("process_group")
def test_zero_3_reshards_after_every_micro_batch() -> None:
    model = _sharded_model(3)
    assert not _gathered_after_micro_batch(model, 3, last=False)
    assert not _gathered_after_micro_batch(model, 3, last=True)


@pytest.mark.usefixtures("process_group")
def test_zero_3_keeps_its_gradients_sharded_between_micro_batches() -> None:
    """After an earlier micro-batch, ZeRO-3's gradients are already reduce-scattered
    shards (what the planner's memory counts for it); without gradient sync FSDP2 would
    hold them whole until the last micro-batch."""
    model = _sharded_model(3)
    _gathered_after_micro_batch(model, 3, last=False)
    assert all(isinstance(parameter.grad, DTensor) for parameter in model.parameters())
    _gathered_after_micro_batch(model, 3, last=True)
    assert all(isinstance(parameter.grad, DTensor) for parameter in model.parameters())
