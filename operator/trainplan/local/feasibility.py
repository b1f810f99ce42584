"""Can a local plan run on this machine? The planner's memory estimate for the local
processes against the machine's available memory, the CPU time the plan's FLOPs imply,
and the disk its checkpoints take (pure: the machine's sizes are arguments).

The planner estimates memory per GPU of its catalog GPU type; a local process holds the
same weights, gradients, optimizer state, activations and logits in host memory, but not
the GPU's fixed overhead (CUDA context, NCCL buffers), which is replaced by the CPU
process's own runtime (torch, gloo, the trainer). When it saves, rank 0 also gathers the
whole model and optimizer state in host memory (`trainplan.runtime.checkpoint`), and
torchrun's agent is one more Python process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from trainplan.api import Plan
from trainplan.planner.layout import Precision
from trainplan.planner.memory import state_bytes_per_parameter
from trainplan.planner.shapes import ModelShape, parameter_count

GIB: Final = 1 << 30

PROCESS_RUNTIME_BYTES: Final = 1 << 30
"""Host memory of one training process before its model: Python, torch, gloo and the
reference trainer: about 0.4 GiB resident measured for a worker of the tiny example on
torch 2.13 (CPU), with room for allocator slack."""

AGENT_BYTES: Final = 512 << 20
"""torchrun's elastic agent: about 0.2 GiB resident measured, with room."""

CPU_FLOPS_PER_SECOND_PER_PROCESS: Final = 10e9
"""An assumption, stated: one local process (one thread, fp32 GEMMs of small models)
computes about 10 GFLOP/s of model FLOPs. Only shown, and used to refuse the absurd."""

ABSURD_CPU_SECONDS: Final = 30 * 86_400.0
"""A local run estimated to take longer than 30 days is refused (`--force` runs it)."""

KEPT_CHECKPOINTS: Final = 2
"""Checkpoints the reference trainer keeps (`--keep-checkpoints`, default 2); while it
writes a new one, one more is on disk."""


@dataclass(frozen=True, slots=True)
class LocalMemoryEstimate:
    """Host memory a local run needs, in bytes."""

    processes: int
    per_process_bytes: int
    """The planner's per-GPU estimate without the GPU's fixed overhead, plus
    `PROCESS_RUNTIME_BYTES`."""
    checkpoint_gather_bytes: int
    """The full model and optimizer state rank 0 gathers while saving."""
    agent_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.processes * self.per_process_bytes
            + self.checkpoint_gather_bytes
            + (self.agent_bytes)
        )


def model_state_bytes(shape: ModelShape, precision: Precision, optimizer: str) -> int:
    """The whole (unsharded) model weights and optimizer state: what one checkpoint of
    the reference trainer holds, and what rank 0 gathers to write it."""
    state = state_bytes_per_parameter(precision, optimizer)
    return math.ceil(parameter_count(shape) * (state.weights + state.optimizer))


def local_memory(
    plan: Plan,
    shape: ModelShape,
    *,
    precision: Precision,
    optimizer: str,
    gpu_overhead_bytes: int,
) -> LocalMemoryEstimate:
    """The memory of `plan` run as `plan.gpus` local processes; `gpu_overhead_bytes` is
    the catalog's fixed per-GPU overhead, included in the plan's estimate and absent on a
    CPU."""
    per_gpu = max(0, plan.memory.total_bytes - gpu_overhead_bytes)
    return LocalMemoryEstimate(
        processes=plan.gpus,
        per_process_bytes=per_gpu + PROCESS_RUNTIME_BYTES,
        checkpoint_gather_bytes=model_state_bytes(shape, precision, optimizer),
        agent_bytes=AGENT_BYTES,
    )


def cpu_seconds(plan: Plan, cpu_cores: int) -> float:
    """Rough wall-clock seconds of the plan's model FLOPs on this machine: the processes
    share `cpu_cores` cores at `CPU_FLOPS_PER_SECOND_PER_PROCESS` each."""
    running = max(1, min(plan.gpus, cpu_cores))
    return plan.flops_per_step * plan.total_steps / (CPU_FLOPS_PER_SECOND_PER_PROCESS * running)


def checkpoint_disk_bytes(checkpoint_bytes: int, extra_bytes: int = 0) -> int:
    """Disk a run's checkpoint directory needs: `KEPT_CHECKPOINTS` plus the one being
    written, and `extra_bytes` (the generated dataset)."""
    return (KEPT_CHECKPOINTS + 1) * checkpoint_bytes + extra_bytes


def gib(value: float) -> str:
    """Bytes in GiB for people: '1.5 GiB'."""
    return f"{value / GIB:.1f} GiB"


def duration(seconds: float) -> str:
    """Seconds for people: '45 s', '12 min', '3.2 h', '41 days'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.0f} days"


@dataclass(frozen=True, slots=True)
class LocalFeasibility:
    """The local check's numbers and verdict."""

    memory: LocalMemoryEstimate
    available_memory_bytes: int
    cpu_seconds: float
    cpu_cores: int

    @property
    def memory_fits(self) -> bool:
        return self.memory.total_bytes <= self.available_memory_bytes

    @property
    def cpu_time_absurd(self) -> bool:
        return self.cpu_seconds > ABSURD_CPU_SECONDS

    @property
    def fits(self) -> bool:
        return self.memory_fits and not self.cpu_time_absurd

    def summary(self) -> str:
        """One line of the numbers, shown before every local run."""
        memory = self.memory
        return (
            f"needs about {gib(memory.total_bytes)} of memory ({memory.processes} x "
            f"{gib(memory.per_process_bytes)} per process, {gib(memory.checkpoint_gather_bytes)}"
            f" to save a checkpoint, {gib(memory.agent_bytes)} for torchrun) of "
            f"{gib(self.available_memory_bytes)} available; about {duration(self.cpu_seconds)}"
            f" of compute on {self.cpu_cores} CPU cores (assuming "
            f"{CPU_FLOPS_PER_SECOND_PER_PROCESS / 1e9:g} GFLOP/s per process)"
        )

    def problems(self) -> tuple[str, ...]:
        """Why the run cannot run here, one sentence each; empty when it fits."""
        found: list[str] = []
        if not self.memory_fits:
            found.append(
                f"does not fit this machine's memory: about {gib(self.memory.total_bytes)} "
                f"needed for {self.memory.processes} processes, "
                f"{gib(self.available_memory_bytes)} available (MemAvailable)"
            )
        if self.cpu_time_absurd:
            found.append(
                f"would take about {duration(self.cpu_seconds)} on {self.cpu_cores} CPU cores"
                f" (more than {duration(ABSURD_CPU_SECONDS)})"
            )
        return tuple(found)


def assess_local(
    plan: Plan,
    shape: ModelShape,
    *,
    precision: Precision,
    optimizer: str,
    gpu_overhead_bytes: int,
    available_memory_bytes: int,
    cpu_cores: int,
) -> LocalFeasibility:
    """The local feasibility of `plan` on a machine with `available_memory_bytes` of
    memory and `cpu_cores` cores."""
    return LocalFeasibility(
        memory=local_memory(
            plan,
            shape,
            precision=precision,
            optimizer=optimizer,
            gpu_overhead_bytes=gpu_overhead_bytes,
        ),
        available_memory_bytes=available_memory_bytes,
        cpu_seconds=cpu_seconds(plan, cpu_cores),
        cpu_cores=cpu_cores,
    )
