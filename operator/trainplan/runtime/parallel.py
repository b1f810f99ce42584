"""The reference trainer's distributed setup: process group, device mesh, model wrapping,
mixed precision and gradient synchronisation.

- Process group from torchrun's environment (`env://`), backend nccl on CUDA, else gloo;
  without torchrun (`RANK` unset) a one-process group on an in-memory store, so the same
  code (and the same checkpoints) run at world size 1.
- A 2-D device mesh `("dp", "tp")` of shape (data, tensor).
- Tensor parallelism: `parallelize_module` with `model.tensor_parallel_plan` on `tp`.
- Data parallelism by ZeRO stage (`wrap_data_parallel`): 0 is DDP (or, with tensor
  parallelism, whose DTensor parameters DDP cannot take, an all-reduce of the gradients'
  local shards over `dp` after the last micro-batch); 1, 2 and 3 are FSDP2 `fully_shard`
  per block and the root over `dp`, with `reshard_after_forward` False for 1 and 2 and
  True for 3.
- Precision: bf16 autocast, or FSDP2's `MixedPrecisionPolicy(bf16, reduce fp32)` when
  FSDP2 shards; fp16 autocast with a gradient scaler that agrees on overflow across ranks;
  fp32 plain. Parameters and optimizer states stay fp32.

Imported only once the configuration is valid (it loads torch).
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.parallel import DistributedDataParallel

from trainplan.runtime.config import ConfigError, TrainerConfig
from trainplan.runtime.model import GPT, tensor_parallel_plan
from trainplan.runtime.schema import ENV_LOCAL_RANK, ENV_RANK

SHARE_STORE_SWITCH: Final = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
"""The variable that makes torchrun give each restart a fresh store (set it to 1)."""

STRATEGIES: Final = ("none", "ddp", "allreduce", "fsdp2")
"""How gradients are combined over `dp`: not at all (one data rank), DDP, an explicit
all-reduce (ZeRO 0 with tensor parallelism) or FSDP2's reduce-scatter."""


@dataclass
class Parallel:
    """The distributed setup of this process."""

    device: torch.device
    backend: str
    mesh: DeviceMesh
    rank: int
    world_size: int
    data_rank: int
    data_group: dist.ProcessGroup
    strategy: str = "none"
    sharded: bool = False
    """Whether parameters are DTensors (FSDP2 or tensor parallelism)."""
    notes: list[str] = field(default_factory=list)

    @property
    def data_world_size(self) -> int:
        """Ranks of the data-parallel group."""
        return dist.get_world_size(self.data_group)


def init_distributed(config: TrainerConfig) -> Parallel:
    """Start the process group and build the `(dp, tp)` mesh."""
    local_rank = int(os.environ.get(ENV_LOCAL_RANK, "0") or 0)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if ENV_RANK in os.environ:  # torchrun, or any launcher that sets the env:// variables
        if backend == "nccl":
            dist.init_process_group(backend, device_id=device)
        else:
            dist.init_process_group(backend)
    else:
        store = dist.HashStore()  # type: ignore[attr-defined]  # not re-exported in the stubs
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
    layout = config.layout
    world_size = dist.get_world_size()
    if world_size != layout.world_size:  # the layout was checked against WORLD_SIZE
        raise ConfigError(
            [f"the process group has {world_size} ranks, the layout {layout.world_size}"]
        )
    mesh = init_device_mesh(
        device.type,
        (layout.data_parallel, layout.tensor_parallel),
        mesh_dim_names=("dp", "tp"),
    )
    data_mesh = mesh["dp"]
    parallel = Parallel(
        device=device,
        backend=backend,
        mesh=mesh,
        rank=dist.get_rank(),
        world_size=world_size,
        data_rank=data_mesh.get_local_rank(),
        data_group=data_mesh.get_group(),
    )
    if _restarts_share_store(os.environ):
        parallel.notes.append(
            f"torchrun shares its rendezvous store with the workers and may restart them: "
            f"restarted gloo/NCCL groups can read the previous attempt's addresses and "
            f"hang (pytorch/pytorch#135712); set {SHARE_STORE_SWITCH}=1 for torchrun"
        )
    return parallel


def _restarts_share_store(environ: Mapping[str, str]) -> bool:
    """Whether torchrun may restart these workers on its shared store."""
    shared = environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    try:
        restarts = int(environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    except ValueError:
        restarts = 0
    return shared and restarts > 0


def build_model(config: TrainerConfig, parallel: Parallel) -> tuple[GPT, nn.Module]:
    """The model, parallelized; (the bare GPT, the module to train: DDP or the GPT).

    Every rank builds the full model from the same seed before it is split, so replicas
    and shards start from the weights a single process would have.
    """
    layout = config.layout
    torch.manual_seed(config.seed)
    model = GPT(config.model, config.activation_checkpointing)
    model.to(parallel.device)
    if layout.tensor_parallel > 1:
        tp_mesh = parallel.mesh["tp"]
        root_plan, block_plan = tensor_parallel_plan(model, layout.sequence_parallel)
        parallelize_module(model, tp_mesh, root_plan)
        for block in model.blocks:
            parallelize_module(block, tp_mesh, block_plan)
        if config.model.tied_embeddings:
            model.tie_weights()  # both halves are Shard(0) of the same [vocab, hidden] matrix
        parallel.sharded = True
    elif layout.sequence_parallel:
        parallel.notes.append("sequence parallelism has no effect without tensor parallelism")
    return model, wrap_data_parallel(config, parallel, model)


def wrap_data_parallel(config: TrainerConfig, parallel: Parallel, model: GPT) -> nn.Module:
    """Apply the ZeRO stage's data parallelism; sets `parallel.strategy`."""
    layout = config.layout
    if layout.zero_stage > 0:
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if config.precision == "bf16"
            else MixedPrecisionPolicy()
        )
        dp_mesh = parallel.mesh["dp"]
        reshard = layout.zero_stage == 3
        for block in model.blocks:
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=policy)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=policy)
        if layout.zero_stage < 3:
            parallel.notes.append(
                f"ZeRO-{layout.zero_stage} runs as FSDP2 without resharding after forward "
                f"(gradients and optimizer states sharded)"
            )
        parallel.strategy = "fsdp2"
        parallel.sharded = True
        return model
    if layout.data_parallel == 1:
        parallel.strategy = "none"
        return model
    if layout.tensor_parallel > 1:
        parallel.strategy = "allreduce"
        return model
    parallel.strategy = "ddp"
    device_ids = [parallel.device] if parallel.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def uses_autocast(config: TrainerConfig, parallel: Parallel) -> bool:
    """Whether forward passes run under `torch.autocast` (FSDP2 casts bf16 itself)."""
    if config.precision == "fp32":
        return False
    return not (config.precision == "bf16" and parallel.strategy == "fsdp2")


def autocast_context(
    config: TrainerConfig, parallel: Parallel
) -> contextlib.AbstractContextManager[Any]:
    """The context of one forward pass."""
    if not uses_autocast(config, parallel):
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if config.precision == "bf16" else torch.float16
    return torch.autocast(parallel.device.type, dtype=dtype)


class LocalShardGradScaler(ShardedGradScaler):
    """`ShardedGradScaler` (found-inf all-reduced over all ranks) that unscales the local
    tensors of DTensor gradients, so that plain and DTensor gradients (tensor parallelism
    leaves the norms' weights plain) can share one optimizer."""

    def _unscale_grads_(
        self,
        optimizer: torch.optim.Optimizer,
        inv_scale: torch.Tensor,
        found_inf: torch.Tensor,
        allow_fp16: bool = True,
    ) -> dict[torch.device, torch.Tensor]:
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
        found_per_device: dict[torch.device, torch.Tensor] = {}
        with torch.no_grad():
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    gradient = parameter.grad
                    if gradient is None:
                        continue
                    if not allow_fp16 and gradient.dtype == torch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    local = gradient.to_local() if isinstance(gradient, DTensor) else gradient
                    groups[(local.device, local.dtype)].append(local)
            for (device, _), tensors in groups.items():
                if device not in found_per_device:
                    found_per_device[device] = found_inf.to(device)
                torch._amp_foreach_non_finite_check_and_unscale_(
                    tensors, found_per_device[device], inv_scale.to(device)
                )
        if not found_per_device:
            found_per_device[found_inf.device] = found_inf
        return found_per_device


def make_scaler(config: TrainerConfig, parallel: Parallel) -> torch.amp.GradScaler | None:
    """The fp16 gradient scaler (None for bf16 and fp32)."""
    if config.precision != "fp16":
        return None
    if parallel.sharded:
        return LocalShardGradScaler(device=parallel.device.type)
    return torch.amp.GradScaler(parallel.device.type)


def make_optimizer(config: TrainerConfig, model: nn.Module) -> torch.optim.Optimizer:
    """AdamW (betas 0.9, 0.95) or SGD (momentum 0.9) over the model's parameters."""
    parameters = list(model.parameters())
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            parameters, lr=config.learning_rate, momentum=0.9, weight_decay=config.weight_decay
        )
    return torch.optim.AdamW(
        parameters, lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=config.weight_decay
    )


def gradient_sync(
    zero_stage: int, module: nn.Module, last: bool
) -> contextlib.AbstractContextManager[Any]:
    """The context of a micro-batch's forward and backward: gradient reduction only on
    the last micro-batch of the step, except for ZeRO 2 and 3 (every micro-batch, so
    that gradients stay sharded: FSDP2 without gradient sync accumulates them whole).
    ZeRO 1 and 2 keep the gathered weights until the last micro-batch's backward
    (FSDP2's `set_reshard_after_backward`), so they gather them once per step, as ZeRO's
    replicated weights and the planner assume."""
    if isinstance(module, DistributedDataParallel) and not last:
        return module.no_sync()
    if isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(last or zero_stage >= 2)
        if zero_stage < 3:
            module.set_reshard_after_backward(last)
    return contextlib.nullcontext()


def all_reduce_gradients(parallel: Parallel, model: nn.Module) -> None:
    """Average the gradients' local tensors over `dp` (ZeRO 0 with tensor parallelism)."""
    size = parallel.data_world_size
    with torch.no_grad():
        for parameter in model.parameters():
            gradient = parameter.grad
            if gradient is None:
                continue
            local = gradient.to_local() if isinstance(gradient, DTensor) else gradient
            dist.all_reduce(local, group=parallel.data_group)
            local.div_(size)


def placement(parameter: torch.Tensor) -> dict[str, Any]:
    """How a parameter is laid out: DTensor placements over the named mesh dims."""
    if isinstance(parameter, DTensor):
        return {
            "type": "DTensor",
            "placements": [repr(item) for item in parameter.placements],
            "mesh_dims": list(parameter.device_mesh.mesh_dim_names or ()),
            "mesh_shape": list(parameter.device_mesh.shape),
            "global_shape": list(parameter.shape),
            "local_shape": list(parameter.to_local().shape),
        }
    return {
        "type": "Tensor",
        "placements": [],
        "mesh_dims": [],
        "mesh_shape": [],
        "global_shape": list(parameter.shape),
        "local_shape": list(parameter.shape),
    }
