"""The reference trainer: `python -m trainplan.runtime.train`, run by torchrun in each pod.

It trains the GPT-style decoder of `trainplan.runtime.model` with the plan's layout, read
from the `TRAINPLAN_` environment (`trainplan.runtime.config`; flags override), and
reports progress through `TrainingReporter`. Without torchrun it runs as one process
(world size 1).

How the plan maps onto PyTorch (`trainplan.runtime.parallel`):

- tensor parallelism: DTensor's `parallelize_module` (Megatron-LM's column/row split) on
  the `tp` dimension of a 2-D device mesh `(dp, tp)`; sequence parallelism shards the
  norms and the residual stream over the sequence.
- ZeRO 0: DDP over `dp` with `no_sync()` on all but the last micro-batch; with tensor
  parallelism, where DDP cannot take DTensor parameters, the gradients' local shards are
  all-reduced over `dp` after the last micro-batch (DDP's communication, without overlap).
- ZeRO 1 and 2: FSDP2 `fully_shard(reshard_after_forward=False)` per block and the root,
  resharded only after the last micro-batch's backward (`set_reshard_after_backward`):
  weights gathered once per step, gradients and optimizer states sharded. PyTorch has
  no optimizer-state-only sharding for FSDP2, so stage 1 runs with stage 2's sharding;
  they differ in gradient accumulation: stage 1 reduce-scatters once per step
  (`set_requires_gradient_sync(False)` on all but the last micro-batch: unsharded
  gradients accumulate locally, as in ZeRO-1), stage 2 at every micro-batch (gradients
  stay sharded).
- ZeRO 3: FSDP2 `fully_shard` per block and the root with `reshard_after_forward=True`,
  gradients reduce-scattered at every micro-batch (they stay sharded; without gradient
  sync FSDP2 would accumulate them whole).
- precision: bf16 is autocast (FSDP2: `MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)` instead); fp16 is autocast with a gradient scaler (one that agrees
  on overflow across ranks when parameters are sharded); fp32 is plain. Weights and
  optimizer states stay fp32. fp8 and pipeline parallelism are refused (exit 3) naming
  the frameworks that have them.

Each optimizer step runs `gradient_accumulation_steps` micro-batches of
`micro_batch_size` sequences on each data-parallel rank, each loss scaled by 1 /
accumulation; the reported loss is the mean over micro-batches and data-parallel ranks.
Checkpoints (`trainplan.runtime.checkpoint`) are written every
`checkpoint_interval_steps` and at the end; a start resumes from the newest one.

Exit codes: 0 done; `CONFIG_ERROR_EXIT_CODE` (3) for an unusable configuration (one line
per problem on stderr, before any training step); 1 for a crash. Under torchrun the
agent exits 1 for any failed worker.
"""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from trainplan.runtime.config import ConfigError, TrainerConfig, load_config
from trainplan.runtime.schema import CONFIG_ERROR_EXIT_CODE, ENV_LOCAL_RANK, ENV_RANK

if TYPE_CHECKING:  # torch is imported once the configuration is known to be valid
    import torch
    from torch import nn

    from trainplan.runtime.checkpoint import Checkpointer
    from trainplan.runtime.data import Batches
    from trainplan.runtime.model import GPT
    from trainplan.runtime.parallel import Parallel
    from trainplan.runtime.reporter import TrainingReporter

CRASH_EXIT_CODE: Final = 1
"""Exit code of a run that failed for any reason but its configuration."""

LOG_PREFIX: Final = "[trainplan]"

CHECKPOINT_MECHANISM: Final = (
    "full state dict gathered to rank 0 (torch.distributed.checkpoint.state_dict), "
    "torch.save to a temporary file, os.replace"
)


def _env_rank(name: str) -> int:
    try:
        return int(os.environ.get(name, "0") or 0)
    except ValueError:
        return 0


def print_problems(problems: Sequence[str]) -> None:
    """One line per problem on stderr, once per node (local rank 0)."""
    if _env_rank(ENV_LOCAL_RANK) != 0:
        return
    for problem in problems:
        print(f"{LOG_PREFIX} configuration error: {problem}", file=sys.stderr, flush=True)


def log(message: str) -> None:
    """A line on stdout from global rank 0."""
    if _env_rank(ENV_RANK) == 0:
        print(f"{LOG_PREFIX} {message}", flush=True)


class StepLog:
    """Rank 0's `<step> <loss> <micro-batches> <sequences>` lines, one per completed
    optimizer step (`--step-log`, for tests): the micro-batches one rank ran and the
    sequences all data-parallel ranks trained on in that step."""

    def __init__(self, path: str | None, enabled: bool) -> None:
        self._file: IO[str] | None = None
        if path is not None and enabled:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def write(self, step: int, loss: float, micro_batches: int, sequences: int) -> None:
        """Append one line and flush it."""
        if self._file is not None:
            self._file.write(f"{step} {loss:.6f} {micro_batches} {sequences}\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file. Idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class _Run:
    """What the training loop carries."""

    config: TrainerConfig
    parallel: Parallel
    model: GPT
    module: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    reporter: TrainingReporter
    checkpointer: Checkpointer | None
    step_log: StepLog
    step: int = 0
    """Completed optimizer steps (also the index of the next step's data)."""
    last_saved_step: int = -1


def describe(
    config: TrainerConfig, parallel: Parallel, model: GPT, resumed_step: int | None
) -> dict[str, Any]:
    """The resolved setup (`--describe`): layout, strategy, precision, placements."""
    from trainplan.runtime.model import parameter_count
    from trainplan.runtime.parallel import placement, uses_autocast

    layout = config.layout
    return {
        "plan_name": config.plan_name,
        "world_size": parallel.world_size,
        "backend": parallel.backend,
        "device": parallel.device.type,
        "mesh": {"dims": ["dp", "tp"], "shape": [layout.data_parallel, layout.tensor_parallel]},
        "layout": {
            "tensor_parallel": layout.tensor_parallel,
            "pipeline_parallel": layout.pipeline_parallel,
            "data_parallel": layout.data_parallel,
            "sequence_parallel": layout.sequence_parallel and layout.tensor_parallel > 1,
            "zero_stage": layout.zero_stage,
            "micro_batch_size": layout.micro_batch_size,
            "gradient_accumulation_steps": layout.gradient_accumulation_steps,
            "global_batch_size": layout.global_batch_size,
        },
        "data_parallel_strategy": parallel.strategy,
        "precision": config.precision,
        "autocast": uses_autocast(config, parallel),
        "gradient_scaler": config.precision == "fp16",
        "activation_checkpointing": config.activation_checkpointing,
        "optimizer": config.optimizer,
        "sequence_length": config.model.sequence_length,
        "tokens_per_step": config.tokens_per_step,
        "total_steps": config.total_steps,
        "parameters": parameter_count(model),
        "resumed_step": resumed_step,
        "checkpoint_mechanism": CHECKPOINT_MECHANISM,
        "notes": parallel.notes,
        "parameter_placements": {
            name: placement(parameter) for name, parameter in model.named_parameters()
        },
    }


def _train_step(run: _Run, batches: Batches) -> tuple[float, int]:
    """One optimizer step; (loss, sequences): the loss averaged over micro-batches and
    data-parallel ranks, the sequences summed over data-parallel ranks."""
    import torch
    import torch.distributed as dist

    from trainplan.runtime.data import BatchPosition
    from trainplan.runtime.model import loss_function
    from trainplan.runtime.parallel import all_reduce_gradients, autocast_context, gradient_sync

    config, parallel = run.config, run.parallel
    accumulation = config.layout.gradient_accumulation_steps
    loss_sum = torch.zeros((), dtype=torch.float32, device=parallel.device)
    sequences = 0
    for micro in range(accumulation):
        inputs, targets = batches.get(BatchPosition(run.step, micro, parallel.data_rank))
        inputs = inputs.to(parallel.device, non_blocking=True)
        targets = targets.to(parallel.device, non_blocking=True)
        with gradient_sync(config.layout.zero_stage, run.module, last=micro == accumulation - 1):
            with autocast_context(config, parallel):
                logits = run.module(inputs)
            loss = loss_function(logits, targets) / accumulation
            scaled = run.scaler.scale(loss) if run.scaler is not None else loss
            torch.autograd.backward(scaled)
        loss_sum += loss.detach().float()
        sequences += int(inputs.shape[0])
    if parallel.strategy == "allreduce":
        all_reduce_gradients(parallel, run.module)
    if run.scaler is not None:
        run.scaler.step(run.optimizer)
        run.scaler.update()
    else:
        run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    totals = torch.stack([loss_sum, torch.full_like(loss_sum, float(sequences))]).double()
    dist.all_reduce(totals, group=parallel.data_group)  # gloo has no AVG: sum, then divide
    loss_total, sequence_total = totals.tolist()
    return loss_total / parallel.data_world_size, round(sequence_total)


def _save(run: _Run) -> None:
    if run.checkpointer is None or run.last_saved_step == run.step:
        return
    path, seconds = run.checkpointer.save(
        run.module,
        run.optimizer,
        run.scaler,
        step=run.step,
        tokens=run.step * run.config.tokens_per_step,
        config=run.config,
    )
    run.last_saved_step = run.step
    run.reporter.checkpoint(run.step, seconds)
    log(f"checkpoint step {run.step} -> {path} ({seconds:.2f} s)")


def _loop(run: _Run, batches: Batches) -> None:
    config = run.config
    interval = config.checkpoint_interval_steps
    while run.step < config.total_steps:
        started = time.perf_counter()
        loss, sequences = _train_step(run, batches)
        step_seconds = time.perf_counter() - started
        run.step += 1
        tokens = run.step * config.tokens_per_step
        run.reporter.step(run.step, tokens, loss=loss, step_seconds=step_seconds)
        run.step_log.write(run.step, loss, config.layout.gradient_accumulation_steps, sequences)
        if run.step == 1 or run.step % config.log_interval_steps == 0 or not math.isfinite(loss):
            log(
                f"step {run.step}/{config.total_steps} loss {loss:.4f} "
                f"step {step_seconds * 1000:.1f} ms "
                f"tokens/s {config.tokens_per_step / step_seconds:.0f}"
            )
        if config.sleep_per_step_seconds > 0:
            time.sleep(config.sleep_per_step_seconds)
        if interval > 0 and run.step % interval == 0:
            _save(run)


def _start(config: TrainerConfig, parallel: Parallel, step_log: StepLog) -> _Run:
    """Model, optimizer, gradient scaler, reporter and checkpointer of a fresh run."""
    from trainplan.runtime.checkpoint import Checkpointer
    from trainplan.runtime.parallel import build_model, make_optimizer, make_scaler
    from trainplan.runtime.reporter import TrainingReporter

    model, module = build_model(config, parallel)
    optimizer = make_optimizer(config, module)
    scaler = make_scaler(config, parallel)
    reporter = TrainingReporter.from_environment(
        total_steps=config.total_steps,
        port=config.metrics_port,
        address=config.metrics_address,
        gpu_collector=parallel.device.type == "cuda",
    )
    checkpointer = (
        Checkpointer(config.checkpoint_dir, config.keep_checkpoints)
        if config.checkpoint_dir
        else None
    )
    return _Run(
        config, parallel, model, module, optimizer, scaler, reporter, checkpointer, step_log
    )


def _resume(run: _Run) -> int | None:
    """Load the newest checkpoint, if any; the step it holds."""
    if run.checkpointer is None:
        return None
    run.checkpointer.prepare()
    resumed = run.checkpointer.load_latest(run.module, run.optimizer, run.scaler, run.config)
    if resumed is None:
        return None
    run.step = resumed.data_position
    run.last_saved_step = resumed.step
    run.reporter.resumed(resumed.step, resumed.tokens)
    log(f"resumed from checkpoint step {resumed.step} ({resumed.path})")
    return resumed.step


def train(config: TrainerConfig) -> int:
    """Run the whole training on this rank; 0 when done (exceptions propagate)."""
    import torch.distributed as dist

    from trainplan.runtime.data import Batches
    from trainplan.runtime.model import parameter_count
    from trainplan.runtime.parallel import init_distributed

    parallel = init_distributed(config)
    step_log = StepLog(config.step_log, parallel.rank == 0)
    run: _Run | None = None
    try:
        batches = Batches(
            config.data,
            micro_batch_size=config.layout.micro_batch_size,
            sequence_length=config.model.sequence_length,
            vocab_size=config.model.vocab_size,
            seed=config.seed,
        )
        run = _start(config, parallel, step_log)
        resumed_step = _resume(run)
        if parallel.rank == 0 and config.describe:
            text = json.dumps(describe(config, parallel, run.model, resumed_step), indent=2)
            Path(config.describe).parent.mkdir(parents=True, exist_ok=True)
            Path(config.describe).write_text(text + "\n", encoding="utf-8")
        log(
            f"plan {config.plan_name or '-'}: {config.layout.describe()} | "
            f"{parallel.strategy} on {parallel.backend}/{parallel.device.type} | "
            f"{config.precision} | recompute {config.activation_checkpointing} | "
            f"{config.optimizer} | {parameter_count(run.model)} parameters | "
            f"steps {run.step + 1}..{config.total_steps}"
        )
        for note in parallel.notes:
            log(f"note: {note}")
        if run.reporter.url:
            log(f"metrics at {run.reporter.url}")
        run.module.train()
        _loop(run, batches)
        _save(run)
        if config.linger_seconds > 0:
            log(f"finished; serving metrics for {config.linger_seconds:g} s more")
            time.sleep(config.linger_seconds)
        dist.barrier()
        log(f"done: {run.step} steps, {run.step * config.tokens_per_step} tokens")
        return 0
    finally:
        step_log.close()
        if run is not None:
            run.reporter.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        # FSDP2 keeps gloo's last asynchronous work (and its tensors) on the module; freed at
        # interpreter shutdown, it needs the GIL and aborts the process ("terminate called
        # without an active exception", SIGABRT after a finished run: pytorch/pytorch#179291
        # describes the finalization crash). Free it here, while the interpreter is whole.
        run = None
        gc.collect()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer; the process's exit code (0, 3 configuration, 1 crash)."""
    try:
        config = load_config(argv)
    except ConfigError as error:
        print_problems(error.problems)
        return CONFIG_ERROR_EXIT_CODE
    try:
        return train(config)
    except ConfigError as error:
        print_problems(error.problems)
        return CONFIG_ERROR_EXIT_CODE
    except Exception:
        traceback.print_exc()
        return CRASH_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
