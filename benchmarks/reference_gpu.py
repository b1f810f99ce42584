"""Measured step time of the reference trainer on one GPU, for the planner to be judged by.

`PYTHONPATH=operator:. python3 -m benchmarks.reference_gpu --output DIR` runs
`python -m trainplan.runtime.train` (each run a subprocess in its own process group) on
the one GPU for GPT-style shapes from 125M to 1.3B parameters (sequence 2048, vocabulary
50,304, tied embeddings, bf16 autocast, AdamW, TP1 PP1 DP1 ZeRO-0, gradient accumulation
1; `--long` at 8,192 and 16,384 tokens, `--zero` with 4 micro-batches a step at ZeRO
stages 0-3), a bounded number of steps each, and writes `DIR/reference_gpu.json`: per shape the
shape and trainer flags, the median, 10th and 90th percentile step seconds after the
warm-up steps, tokens per step, achieved model TFLOP/s and the GPU memory NVML saw in use,
with the GPU's name, the torch version and the driver. `python -m
benchmarks.reference_gpu_compare DIR/reference_gpu.json` puts the planner's prediction
for each shape beside it.

Where the numbers come from:

- step seconds: the trainer's own timing of each optimizer step (`time.perf_counter()`
  around the step, which ends in a host-device synchronisation: the loss is read back),
  as its rank-0 log line `[trainplan] step N/T loss L step S ms tokens/s R` prints it with
  `--log-interval-steps 1`. The `--step-log FILE` lines (`<step> <loss> <micro-batches>
  <sequences>`) carry no time; they confirm the steps and the sequences each step trained
  on. The first `warmup_steps` steps (CUDA and cuBLAS start-up, allocator growth) are
  left out.
- model FLOPs per token: 6 N + 12 L h s (Narayanan et al. 2021; PaLM's MFU), N the
  parameters less an untied input embedding (a lookup, no FLOPs; tied, the matrix counts
  once, as the output layer), L layers, h the width, s the sequence (the attention term
  counts the whole score matrix, not its causal half, as the planner and the published
  MFU figures do). Full recomputation executes one more forward of the layers,
  2 N_layer + 4 L h s per token: reported as hardware FLOP/s beside the model FLOP/s.
- memory: the trainer reports no peak memory (neither `--describe` nor the step log
  holds one), so this process samples NVML's device memory in use every 50 ms while a
  shape runs: the peak includes the CUDA context and PyTorch's cached blocks, an upper
  bound of what the tensors needed.

Every wait is bounded: a shape has its own wall-clock limit and the whole run a budget
(`--budget-seconds`, default 210, counted from this process's start: no trainer runs
after it, so the run ends within 4 minutes); a trainer past its limit is stopped (SIGTERM, then
SIGKILL, to its process group) and keeps the steps it logged. SIGINT and SIGTERM stop
the running trainer the same way; the JSON is rewritten after every shape, so a stopped
run leaves what it measured. A shape that runs out of GPU memory is retried once with
half the micro-batch when the budget allows.

`--profile` runs each trainer under `benchmarks.trainer_profile` (torch.profiler, the
5 steps after the warm-up and one profiler warm-up step): the record then holds the
kernels' device time per step by kind, for `benchmarks.reference_gpu_compare --kinds`. The
profiled steps run slower than the others (the profiler's own work), so a profiled run
needs more steps than the median's. A run without `--profile` also samples NVML's SM clock
and power draw with the memory and records their medians over the steady steps (under the
profiler the GPU idles while it processes the recorded steps, so none are recorded).

`--tiny` runs two tiny shapes for 5 steps on whatever device there is (CPU included), to
test this module where there is no GPU. It imports the standard library, torch and
`trainplan.runtime` (whose trainer loads torch, numpy and prometheus-client); NVML
(nvidia-ml-py's `pynvml`) where present.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import itertools
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, Final

import trainplan.runtime
from trainplan.runtime.config import environment_names
from trainplan.runtime.train import LOG_PREFIX

_STARTED: Final = time.monotonic()
"""When this module was loaded: the budget counts from here."""

SCHEMA: Final = "trainplan.reference_gpu/1"
OUTPUT_NAME: Final = "reference_gpu.json"
DEFAULT_BUDGET_SECONDS: Final = 210.0
"""Seconds from this process's start after which no trainer runs any more: with the
device query and a last trainer's stop the whole run stays under 4 minutes."""
MIN_SHAPE_SECONDS: Final = 15.0
"""A shape is not started with less of the budget left than this."""
MIN_STEADY_STEPS: Final = 3
"""Fewer steady steps than this (after the warm-up) is no measurement."""
SAMPLE_SECONDS: Final = 0.05
"""How often NVML's memory in use is read while a trainer runs."""
PROFILED_STEPS: Final = 5
"""Steps `--profile` records after the warm-up steps and one profiler warm-up step."""
STOP_GRACE_SECONDS: Final = 5.0
"""How long a stopped trainer gets between SIGTERM and SIGKILL."""
TAIL_LINES: Final = 40
"""Lines of a failed trainer's output kept in the JSON."""
FLOPS_FORMULA: Final = (
    "model FLOPs/token = 6 N + 12 L h s (N: parameters less an untied input embedding; "
    "the attention term counts the whole s x s score matrix); hardware FLOPs/token adds "
    "2 N_layers + 4 L h s with full recompute; TFLOP/s = FLOPs/token x tokens/step / "
    "median step seconds / 1e12"
)

_TORCHRUN_VARIABLES: Final = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
_STEP_LINE: Final = re.compile(
    rf"^{re.escape(LOG_PREFIX)} step (\d+)/(\d+) loss (\S+) step ([0-9.]+) ms tokens/s (\d+)\s*$"
)
_OUT_OF_MEMORY: Final = ("OutOfMemoryError", "CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


# --- Shapes -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shape:
    """One measured configuration: a GPT-style model, its micro-batch and recompute level,
    how many steps to run and how long they may take."""

    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    ffn_hidden_size: int
    gated_mlp: bool
    vocab_size: int
    sequence_length: int
    tied_embeddings: bool
    micro_batch_size: int
    activation_checkpointing: str = "none"
    zero_stage: int = 0
    accumulation_steps: int = 1
    precision: str = "bf16"
    optimizer: str = "adamw"
    steps: int = 30
    warmup_steps: int = 5
    timeout_seconds: float = 60.0

    def model(self) -> dict[str, Any]:
        """The model shape, as the trainer's and the planner's fields name it."""
        return {
            "layers": self.layers,
            "hidden_size": self.hidden_size,
            "attention_heads": self.attention_heads,
            "kv_heads": self.kv_heads,
            "ffn_hidden_size": self.ffn_hidden_size,
            "gated_mlp": self.gated_mlp,
            "vocab_size": self.vocab_size,
            "sequence_length": self.sequence_length,
            "tied_embeddings": self.tied_embeddings,
        }

    def layout(self) -> dict[str, int]:
        """One GPU: TP1 PP1 DP1, the shape's ZeRO stage and accumulation."""
        return {
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "data_parallel": 1,
            "zero_stage": self.zero_stage,
            "micro_batch_size": self.micro_batch_size,
            "gradient_accumulation_steps": self.accumulation_steps,
            "global_batch_size": self.micro_batch_size * self.accumulation_steps,
        }

    def identity(self) -> dict[str, Any]:
        """What a measurement record says the shape was, as `reference_gpu_compare` reads
        it back: name, model, layout, precision, optimizer and recompute level."""
        return {
            "name": self.name,
            "model": self.model(),
            "layout": self.layout(),
            "precision": self.precision,
            "optimizer": self.optimizer,
            "activation_checkpointing": self.activation_checkpointing,
        }

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch_size * self.accumulation_steps * self.sequence_length

    def trainer_flags(self) -> list[str]:
        """The trainer's flags for this shape (step log and describe file not included)."""

        def text(value: bool) -> str:
            return "true" if value else "false"

        return [
            "--layers", str(self.layers),
            "--hidden-size", str(self.hidden_size),
            "--attention-heads", str(self.attention_heads),
            "--kv-heads", str(self.kv_heads),
            "--ffn-hidden-size", str(self.ffn_hidden_size),
            "--gated-mlp", text(self.gated_mlp),
            "--vocab-size", str(self.vocab_size),
            "--sequence-length", str(self.sequence_length),
            "--tied-embeddings", text(self.tied_embeddings),
            "--tensor-parallel", "1",
            "--pipeline-parallel", "1",
            "--data-parallel", "1",
            "--zero-stage", str(self.zero_stage),
            "--micro-batch-size", str(self.micro_batch_size),
            "--gradient-accumulation-steps", str(self.accumulation_steps),
            "--global-batch-size", str(self.micro_batch_size * self.accumulation_steps),
            "--precision", self.precision,
            "--optimizer", self.optimizer,
            "--activation-checkpointing", self.activation_checkpointing,
            "--total-steps", str(self.steps),
            "--data", "synthetic",
            "--log-interval-steps", "1",
        ]  # fmt: skip


def _gpt(name: str, layers: int, hidden: int, heads: int, micro: int, **rest: Any) -> Shape:
    """The layers and width of one of the GPT-3 paper's small models (Brown et al. 2020,
    Table 2.1; its 1.3B's 24 heads of 128 do not make 2048, so 16 here): 4h GELU MLP,
    multi-head attention, vocabulary 50,304 (GPT-2's 50,257 padded to a multiple of 128),
    sequence 2048, tied embeddings."""
    return Shape(
        name=name,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=heads,
        ffn_hidden_size=4 * hidden,
        gated_mlp=False,
        vocab_size=50304,
        sequence_length=2048,
        tied_embeddings=True,
        micro_batch_size=micro,
        **rest,
    )


GPU_SHAPES: Final = (
    # The micro-batches fit an 80 GB H100 as well as an H200, so both run the same
    # configurations: the eager trainer saves about 60 bytes per token per layer per
    # hidden unit for its backward (counted with saved-tensor hooks under CPU autocast),
    # the logits take about 12 bytes per vocabulary entry per token at their peak, and
    # weights, gradients, AdamW states and bf16 weight copies 18 bytes a parameter:
    # 40, 40, 37, 53 and 39 GB by that count (the planner says 25-41 GiB).
    _gpt("gpt-125m", 12, 768, 12, 16, timeout_seconds=50.0),
    _gpt("gpt-350m", 24, 1024, 16, 8, timeout_seconds=50.0),
    _gpt("gpt-760m", 24, 1536, 16, 4, timeout_seconds=50.0),
    _gpt("gpt-1.3b", 24, 2048, 16, 4, timeout_seconds=60.0),
    _gpt(
        "gpt-1.3b-full-recompute",
        24,
        2048,
        16,
        8,
        activation_checkpointing="full",
        steps=25,
        timeout_seconds=70.0,
    ),
)

LONG_SHAPES: Final = (
    # The 1.3B model at 8,192 and 16,384 tokens a sequence (`--long`): attention, which
    # grows with the square of the length, takes a third and a half of the step; sized
    # for one H200 (141 GB): activations about 3 MB a token without recompute.
    replace(
        _gpt("gpt-1.3b-seq8192", 24, 2048, 16, 1, steps=20, timeout_seconds=60.0),
        sequence_length=8192,
    ),
    replace(
        _gpt("gpt-1.3b-seq16384", 24, 2048, 16, 1, steps=15, timeout_seconds=70.0),
        sequence_length=16384,
    ),
)

ZERO_SHAPES: Final = tuple(
    # The 1.3B model with 4 micro-batches a step at each ZeRO stage (`--zero`): on one
    # GPU no stage shards anything, so the planner prices them alike; what differs is
    # how the trainer runs them (DDP for 0; FSDP2 for 1-3, which casts the weights to
    # bf16 once per gather instead of autocast at every matrix multiply, and
    # reduce-scatters every micro-batch at stages 2 and 3).
    _gpt(
        f"gpt-1.3b-ga4-zero{stage}",
        24,
        2048,
        16,
        4,
        zero_stage=stage,
        accumulation_steps=4,
        steps=16,
        warmup_steps=4,
        timeout_seconds=75.0,
    )
    for stage in range(4)
)

TINY_SHAPES: Final = (
    Shape(
        name="tiny-gelu-tied",
        layers=2,
        hidden_size=64,
        attention_heads=4,
        kv_heads=4,
        ffn_hidden_size=256,
        gated_mlp=False,
        vocab_size=256,
        sequence_length=64,
        tied_embeddings=True,
        micro_batch_size=2,
        steps=5,
        warmup_steps=2,
        timeout_seconds=90.0,
    ),
    Shape(
        name="tiny-swiglu-gqa-full-recompute",
        layers=2,
        hidden_size=128,
        attention_heads=4,
        kv_heads=2,
        ffn_hidden_size=352,
        gated_mlp=True,
        vocab_size=512,
        sequence_length=128,
        tied_embeddings=False,
        micro_batch_size=2,
        activation_checkpointing="full",
        steps=5,
        warmup_steps=2,
        timeout_seconds=90.0,
    ),
)


# --- Pure parts ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepLine:
    """One `[trainplan] step ...` log line of the trainer."""

    step: int
    total_steps: int
    loss: float
    seconds: float
    tokens_per_second: int


def parse_step_line(line: str) -> StepLine | None:
    """The step, loss and seconds of a trainer log line; None for any other line."""
    match = _STEP_LINE.match(line.strip())
    if match is None:
        return None
    step, total, loss, milliseconds, rate = match.groups()
    try:
        loss_value = float(loss)
    except ValueError:
        loss_value = math.nan
    return StepLine(int(step), int(total), loss_value, float(milliseconds) / 1000.0, int(rate))


@dataclass(frozen=True, slots=True)
class StepLogLine:
    """One line of the trainer's `--step-log`: `<step> <loss> <micro-batches> <sequences>`."""

    step: int
    loss: float
    micro_batches: int
    sequences: int


def parse_step_log(text: str) -> list[StepLogLine]:
    """Every well-formed line of a step log (a line cut short by a stopped trainer is left
    out)."""
    lines = []
    for raw in text.splitlines():
        fields = raw.split()
        if len(fields) != 4:
            continue
        try:
            lines.append(
                StepLogLine(int(fields[0]), float(fields[1]), int(fields[2]), int(fields[3]))
            )
        except ValueError:
            continue
    return lines


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile interpolating between order statistics (Hyndman and Fan 1996,
    definition 7, numpy's default)."""
    if not values:
        raise ValueError("no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside 0..1")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def steady_seconds(steps: Mapping[int, float], warmup_steps: int) -> list[float]:
    """Seconds of the steps after the first `warmup_steps`, in step order."""
    return [seconds for step, seconds in sorted(steps.items()) if step > warmup_steps]


def summarize(seconds: Sequence[float]) -> dict[str, float | int]:
    """Median, 10th and 90th percentile, mean, min and max of step seconds."""
    return {
        "count": len(seconds),
        "median": quantile(seconds, 0.5),
        "p10": quantile(seconds, 0.1),
        "p90": quantile(seconds, 0.9),
        "mean": sum(seconds) / len(seconds),
        "min": min(seconds),
        "max": max(seconds),
    }


def layer_matrix_parameters(shape: Shape) -> int:
    """Weights of one layer's matrices: q and output (h^2 each), k and v (h x kv width),
    the MLP (2 or 3 h x f)."""
    h = shape.hidden_size
    kv_width = shape.kv_heads * (h // shape.attention_heads)
    mlp = (3 if shape.gated_mlp else 2) * h * shape.ffn_hidden_size
    return 2 * h * h + 2 * h * kv_width + mlp


def parameter_count(shape: Shape) -> int:
    """Parameters of the trainer's model: layers (matrices and two RMSNorm weights each),
    the final norm, the embedding and, untied, the output matrix."""
    h = shape.hidden_size
    layer = layer_matrix_parameters(shape) + 2 * h
    embeddings = (1 if shape.tied_embeddings else 2) * shape.vocab_size * h
    return shape.layers * layer + h + embeddings


def model_flops_per_token(shape: Shape) -> float:
    """6 N + 12 L h s; N without an untied input embedding (see the module docstring)."""
    n = parameter_count(shape)
    if not shape.tied_embeddings:
        n -= shape.vocab_size * shape.hidden_size
    return 6.0 * n + 12.0 * shape.layers * shape.hidden_size * shape.sequence_length


def hardware_flops_per_token(shape: Shape) -> float:
    """Model FLOPs plus, with full recompute, one more forward of every layer."""
    extra = 0.0
    if shape.activation_checkpointing == "full":
        extra = shape.layers * (
            2.0 * layer_matrix_parameters(shape) + 4.0 * shape.hidden_size * shape.sequence_length
        )
    return model_flops_per_token(shape) + extra


def trainer_environment(environ: Mapping[str, str], operator_dir: str) -> dict[str, str]:
    """The trainer's environment: this one without the `TRAINPLAN_` settings and
    torchrun's variables (so the flags alone decide and the trainer runs as one process
    on its own in-memory store), with `operator_dir` first on PYTHONPATH."""
    dropped = set(environment_names()) | set(_TORCHRUN_VARIABLES)
    env = {
        name: value
        for name, value in environ.items()
        if name not in dropped and not name.startswith(("TRAINPLAN_", "TORCHELASTIC_"))
    }
    path = [operator_dir, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def steady_clock_and_power(
    samples: Sequence[tuple[float, int, float]], arrivals: Sequence[float], warmup_steps: int
) -> dict[str, float]:
    """The median SM clock (MHz) and power (W) of the NVML `samples` (time, MHz, W) taken
    while the steady steps ran: from the line of the first step after the warm-up to the
    last step's line (`arrivals`, monotonic seconds). Empty without such samples."""
    if len(arrivals) <= warmup_steps:
        return {}
    first, last = arrivals[warmup_steps], arrivals[-1]
    steady = [(mhz, watts) for when, mhz, watts in samples if first <= when <= last]
    if not steady:
        return {}
    return {
        "nvml_sm_clock_median_mhz": quantile([mhz for mhz, _ in steady], 0.5),
        "nvml_power_median_watts": quantile([watts for _, watts in steady], 0.5),
    }


def out_of_memory(lines: Sequence[str]) -> bool:
    """Whether a trainer's output says that it ran out of GPU memory."""
    return any(marker in line for line in lines for marker in _OUT_OF_MEMORY)


def shape_result(
    shape: Shape,
    step_lines: Sequence[StepLine],
    step_log: Sequence[StepLogLine],
    describe: Mapping[str, Any] | None,
    device: str | None = None,
) -> dict[str, Any]:
    """The measurement of one shape from what its trainer wrote: step seconds (steady
    summary and every step), tokens, FLOP/s; `status` "ok" or why not (among the reasons:
    a trainer that ran on another device type than `device`, when given)."""
    seconds_by_step = {line.step: line.seconds for line in step_lines}
    steady = steady_seconds(seconds_by_step, shape.warmup_steps)
    sequences = {line.sequences for line in step_log}
    tokens_per_step = shape.tokens_per_step
    result: dict[str, Any] = {
        "steps_logged": len(seconds_by_step),
        "step_log_lines": len(step_log),
        "step_seconds_all": [seconds_by_step[step] for step in sorted(seconds_by_step)],
        "tokens_per_step": tokens_per_step,
        "parameters": parameter_count(shape),
        "model_flops_per_token": model_flops_per_token(shape),
        "hardware_flops_per_token": hardware_flops_per_token(shape),
    }
    problems = []
    if describe is not None:
        result["trainer"] = {
            key: describe.get(key)
            for key in (
                "parameters",
                "device",
                "backend",
                "data_parallel_strategy",
                "autocast",
                "precision",
                "activation_checkpointing",
                "optimizer",
                "tokens_per_step",
                "layout",
            )
        }
        if describe.get("parameters") not in (None, result["parameters"]):
            problems.append(
                f"the trainer counts {describe.get('parameters')} parameters, "
                f"the formula {result['parameters']}"
            )
        if device is not None and describe.get("device") != device:
            problems.append(f"the trainer ran on {describe.get('device')}, not {device}")
        if describe.get("tokens_per_step") not in (None, tokens_per_step):
            problems.append(f"the trainer trains {describe.get('tokens_per_step')} tokens/step")
    if sequences and sequences != {shape.micro_batch_size * shape.accumulation_steps}:
        problems.append(f"the step log has {sorted(sequences)} sequences per step")
    micro_batches = {line.micro_batches for line in step_log}
    if micro_batches and micro_batches != {shape.accumulation_steps}:
        problems.append(f"the step log has {sorted(micro_batches)} micro-batches per step")
    if len(steady) < MIN_STEADY_STEPS:
        problems.append(
            f"{len(steady)} steady steps after {shape.warmup_steps} warm-up steps "
            f"(need {MIN_STEADY_STEPS})"
        )
    if problems:
        result["status"] = "failed: " + "; ".join(problems)
        return result
    summary = summarize(steady)
    median = float(summary["median"])
    result["status"] = "ok"
    result["step_seconds"] = summary
    result["tokens_per_second"] = tokens_per_step / median
    result["model_tflops"] = model_flops_per_token(shape) * tokens_per_step / median / 1e12
    result["hardware_tflops"] = hardware_flops_per_token(shape) * tokens_per_step / median / 1e12
    return result


# --- Devices ------------------------------------------------------------------------------


class Nvml:
    """NVML's view of one device (nvidia-ml-py's `pynvml`), or nothing where it is absent."""

    def __init__(self) -> None:
        self.api: Any = None
        self.handle: Any = None
        try:
            api = importlib.import_module("pynvml")
            api.nvmlInit()
            self.handle = api.nvmlDeviceGetHandleByIndex(_nvml_index(os.environ))
            self.api = api
        except Exception as error:  # ImportError, NVMLError, no driver, no device
            print(f"NVML unavailable ({error}): no driver version, no memory samples")

    def memory_used(self) -> int | None:
        """Bytes in use on the device now; None without NVML."""
        if self.api is None:
            return None
        try:
            return int(self.api.nvmlDeviceGetMemoryInfo(self.handle).used)
        except Exception:
            return None

    def clock_and_power(self) -> tuple[int, float] | None:
        """The SM clock now (MHz) and the board's power draw (W); None without NVML."""
        if self.api is None:
            return None
        try:
            clock = int(self.api.nvmlDeviceGetClockInfo(self.handle, self.api.NVML_CLOCK_SM))
            watts = self.api.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except Exception:
            return None
        return clock, float(watts)

    def describe(self) -> dict[str, Any]:
        """Driver, CUDA driver version, the device's name, memory, power limit and clocks."""
        if self.api is None:
            return {"nvml": False}
        api, handle = self.api, self.handle
        queries: dict[str, Callable[[], Any]] = {
            "driver_version": lambda: _text(api.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": lambda: int(api.nvmlSystemGetCudaDriverVersion()),
            "nvml_name": lambda: _text(api.nvmlDeviceGetName(handle)),
            "memory_total_bytes": lambda: int(api.nvmlDeviceGetMemoryInfo(handle).total),
            "power_limit_watts": lambda: api.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
            "max_sm_clock_mhz": lambda: int(
                api.nvmlDeviceGetMaxClockInfo(handle, api.NVML_CLOCK_SM)
            ),
            "max_memory_clock_mhz": lambda: int(
                api.nvmlDeviceGetMaxClockInfo(handle, api.NVML_CLOCK_MEM)
            ),
        }
        info: dict[str, Any] = {"nvml": True}
        for key, query in queries.items():
            try:
                info[key] = query()
            except Exception:
                info[key] = None
        return info

    def close(self) -> None:
        if self.api is not None:
            with contextlib.suppress(Exception):
                self.api.nvmlShutdown()
            self.api = None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _nvml_index(environ: Mapping[str, str]) -> int:
    """NVML index of the trainer's cuda:0: the first of CUDA_VISIBLE_DEVICES when that is
    a number, else 0."""
    first = environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (creates no CUDA context)."""
    import torch

    return bool(torch.cuda.is_available())


def torch_device() -> dict[str, Any]:
    """torch's version and, with CUDA, the device's name and properties. Called after the
    trainers have run: it creates a CUDA context in this process."""
    import torch

    info: dict[str, Any] = {
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info.update(
            name=torch.cuda.get_device_name(0),
            device_count=torch.cuda.device_count(),
            capability=f"{properties.major}.{properties.minor}",
            total_memory_bytes=int(properties.total_memory),
            multiprocessors=int(properties.multi_processor_count),
            cudnn_version=torch.backends.cudnn.version(),  # type: ignore[no-untyped-call]
        )
    else:
        info.update(name="cpu", device_count=0)
    return info


# --- Running the trainer ------------------------------------------------------------------


class StopRequestedError(Exception):
    """SIGINT or SIGTERM reached this process."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise StopRequestedError(signum)


def stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the process group of `process`, SIGKILL after STOP_GRACE_SECONDS.
    SIGINT and SIGTERM to this process wait until it is done (then they stop the run)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        _stop_group(process)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _stop_group(process: subprocess.Popen[str]) -> None:
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, STOP_GRACE_SECONDS)):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    # Whatever else of the group survived its leader (none expected) goes too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


@dataclass
class _Output:
    """The trainer's output lines, read by a thread; each with its arrival time."""

    lines: list[tuple[float, str]]
    lock: threading.Lock

    def snapshot(self) -> list[tuple[float, str]]:
        with self.lock:
            return list(self.lines)


def _read_lines(stream: Any, output: _Output, echo: bool) -> None:
    with contextlib.suppress(ValueError, OSError):  # the pipe closed under the loop
        for line in stream:
            text = line.rstrip("\n")
            with output.lock:
                output.lines.append((time.monotonic(), text))
            if echo and parse_step_line(text) is None:
                print(f"    | {text}", flush=True)


@contextlib.contextmanager
def _trainer(argv: Sequence[str], env: Mapping[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env=dict(env),
        start_new_session=True,  # its own process group, stopped as a whole
    )
    try:
        yield process
    finally:
        stop_group(process)
        if process.stdout is not None:
            process.stdout.close()


def run_shape(
    shape: Shape,
    workdir: Path,
    timeout_seconds: float,
    nvml: Nvml,
    operator_dir: str,
    *,
    device: str | None = None,
    profile: bool = False,
) -> dict[str, Any]:
    """Run the trainer on `shape` for at most `timeout_seconds`; its measurement (a
    failure unless the trainer ran on `device`, when given). With `profile`, the trainer
    runs under `benchmarks.trainer_profile` and the record holds its kernels by kind."""
    step_log_path = workdir / f"{shape.name}.steps"
    describe_path = workdir / f"{shape.name}.describe.json"
    profile_path = workdir / f"{shape.name}.profile.json"
    for path in (step_log_path, describe_path, profile_path):
        path.unlink(missing_ok=True)
    flags = shape.trainer_flags()
    trainer_flags = [*flags, "--step-log", str(step_log_path), "--describe", str(describe_path)]
    env = trainer_environment(os.environ, operator_dir)
    if profile:
        argv = [
            sys.executable,
            "-m",
            "benchmarks.trainer_profile",
            "--output",
            str(profile_path),
            "--skip",
            str(shape.warmup_steps),
            "--active",
            str(PROFILED_STEPS),
            "--",
            *trainer_flags,
        ]
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], root])
    else:
        argv = [sys.executable, "-m", "trainplan.runtime.train", *trainer_flags]
    output = _Output([], threading.Lock())
    memory_before = nvml.memory_used()
    peak_memory = memory_before
    clock_samples: list[tuple[float, int, float]] = []
    started = time.monotonic()
    stopped_at_limit = False
    returncode: int | None = None
    with _trainer(argv, env) as process:
        reader = threading.Thread(
            target=_read_lines, args=(process.stdout, output, True), daemon=True
        )
        reader.start()
        while process.poll() is None:
            if time.monotonic() - started > timeout_seconds:
                stopped_at_limit = True
                break
            used = nvml.memory_used()
            if used is not None:
                peak_memory = used if peak_memory is None else max(peak_memory, used)
            sample = nvml.clock_and_power()
            if sample is not None:
                clock_samples.append((time.monotonic(), *sample))
            time.sleep(SAMPLE_SECONDS)
        if stopped_at_limit:
            stop_group(process)
        returncode = process.poll()
        reader.join(timeout=STOP_GRACE_SECONDS)
    wall_seconds = time.monotonic() - started
    lines = output.snapshot()
    texts = [text for _, text in lines]
    step_lines = [parsed for parsed in map(parse_step_line, texts) if parsed is not None]
    step_log = (
        parse_step_log(step_log_path.read_text(encoding="utf-8")) if step_log_path.exists() else []
    )
    describe: dict[str, Any] | None = None
    with contextlib.suppress(OSError, ValueError):
        describe = json.loads(describe_path.read_text(encoding="utf-8"))
    result = shape_result(shape, step_lines, step_log, describe, device)
    arrivals = [when for when, text in lines if parse_step_line(text) is not None]
    first_step_at = arrivals[0] - started if arrivals else None
    record: dict[str, Any] = {
        **shape.identity(),
        "attention": "scaled_dot_product_attention(is_causal=True)",
        "steps": shape.steps,
        "warmup_steps": shape.warmup_steps,
        "trainer_flags": flags,
        "timeout_seconds": round(timeout_seconds, 1),
        "returncode": returncode,
        "stopped_at_time_limit": stopped_at_limit,
        "wall_seconds": round(wall_seconds, 2),
        "seconds_to_first_step": None if first_step_at is None else round(first_step_at, 2),
        **result,
        "nvml_memory_used_before_bytes": memory_before,
        "nvml_peak_memory_used_bytes": peak_memory,
    }
    if not profile:
        # Under the profiler the GPU idles for seconds while it processes the recorded
        # steps (medians of about 130 W), so no clock or power is recorded.
        record.update(steady_clock_and_power(clock_samples, arrivals, shape.warmup_steps))
    if profile:
        with contextlib.suppress(OSError, ValueError):
            record["kernel_profile"] = json.loads(profile_path.read_text(encoding="utf-8"))
    if len(arrivals) > shape.warmup_steps + 1:
        # gaps[i] is the time from step i + 1's line to step i + 2's.
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        steady_gaps = gaps[max(shape.warmup_steps - 1, 0) :]
        record["log_interval_median_seconds"] = quantile(steady_gaps, 0.5)
    if returncode not in (0, None) and not stopped_at_limit and record["status"] == "ok":
        record["status"] = f"failed: exit {returncode} after its steps"
    if record["status"] != "ok" or returncode not in (0, None):
        record["output_tail"] = texts[-TAIL_LINES:]
        record["out_of_memory"] = out_of_memory(texts)
    return record


# --- The whole run ------------------------------------------------------------------------


def _write(path: Path, document: Mapping[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _summary_line(record: Mapping[str, Any]) -> str:
    if record.get("status") != "ok":
        return f"  {record['name']}: {record.get('status')}"
    seconds = record["step_seconds"]
    peak = record.get("nvml_peak_memory_used_bytes")
    memory = f", NVML peak {peak / 2**30:.1f} GiB" if peak else ""
    return (
        f"  {record['name']}: median {seconds['median']:.4f} s "
        f"(p10 {seconds['p10']:.4f}, p90 {seconds['p90']:.4f}, {seconds['count']} steps), "
        f"{record['tokens_per_step']} tokens/step, {record['model_tflops']:.1f} model TFLOP/s"
        f"{memory}"
    )


def _measure(
    shape: Shape,
    workdir: Path,
    deadline: float,
    nvml: Nvml,
    operator_dir: str,
    *,
    device: str | None,
    profile: bool = False,
) -> dict[str, Any]:
    """One shape, once more with half the micro-batch if it ran out of memory and there
    is time before `deadline` (monotonic seconds)."""
    limit = min(shape.timeout_seconds, deadline - time.monotonic())
    record = run_shape(shape, workdir, limit, nvml, operator_dir, device=device, profile=profile)
    left = deadline - time.monotonic()
    if (
        record.get("out_of_memory")
        and shape.micro_batch_size > 1
        and left >= min(shape.timeout_seconds, 2 * MIN_SHAPE_SECONDS)
    ):
        smaller = replace(shape, micro_batch_size=shape.micro_batch_size // 2)
        print(f"  out of memory: again with micro-batch {smaller.micro_batch_size}", flush=True)
        limit = min(shape.timeout_seconds, left)
        record = run_shape(
            smaller, workdir, limit, nvml, operator_dir, device=device, profile=profile
        )
        record["retried_after_out_of_memory_at_micro_batch"] = shape.micro_batch_size
    return record


def run(
    shapes: Sequence[Shape],
    output: Path,
    budget_seconds: float,
    tiny: bool,
    started: float | None = None,
    *,
    profile: bool = False,
) -> tuple[dict[str, Any], int]:
    """Measure `shapes` until `budget_seconds` after `started` (monotonic; default now),
    rewriting `output` after each; the document and the exit code (0 all measured, 1
    some not, 128 + the signal when stopped by SIGINT or SIGTERM). Outside `tiny` every
    trainer must have run on CUDA."""
    started = time.monotonic() if started is None else started
    deadline = started + budget_seconds
    operator_dir = str(Path(trainplan.runtime.__file__).resolve().parents[2])
    nvml = Nvml()
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "complete": False,
        "tiny": tiny,
        "budget_seconds": budget_seconds,
        "flops_formula": FLOPS_FORMULA,
        "profiled": profile,
        "step_seconds_source": (
            "the trainer's per-step timing (perf_counter around each optimizer step, which "
            "ends in a device synchronisation), from its log lines with --log-interval-steps 1"
        ),
        "memory_source": (
            "NVML device memory in use, sampled every 50 ms (CUDA context and cache included)"
        ),
        "host": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
        },
        "device": {"nvml": nvml.describe()},
        "shapes": [],
    }
    exit_code = 0
    try:
        with tempfile.TemporaryDirectory(prefix="reference-gpu-") as scratch:
            for shape in shapes:
                left = deadline - time.monotonic()
                if left < MIN_SHAPE_SECONDS:
                    print(f"  {shape.name}: skipped, {max(left, 0):.0f} s of the budget left")
                    document["shapes"].append(
                        {
                            "name": shape.name,
                            "status": f"skipped: {max(left, 0):.0f} s of budget left",
                        }
                    )
                    exit_code = 1
                    continue
                print(
                    f"{shape.name}: {shape.layers} layers x {shape.hidden_size}, micro-batch "
                    f"{shape.micro_batch_size} x {shape.sequence_length} x "
                    f"{shape.accumulation_steps}, ZeRO {shape.zero_stage}, recompute "
                    f"{shape.activation_checkpointing}, {shape.steps} steps "
                    f"(limit {min(shape.timeout_seconds, left):.0f} s)",
                    flush=True,
                )
                try:
                    record = _measure(
                        shape,
                        Path(scratch),
                        deadline,
                        nvml,
                        operator_dir,
                        device=None if tiny else "cuda",
                        profile=profile,
                    )
                except StopRequestedError:
                    document["shapes"].append({"name": shape.name, "status": "interrupted"})
                    raise
                print(_summary_line(record), flush=True)
                if record["status"] != "ok":
                    exit_code = 1
                document["shapes"].append(record)
                _write(output, document)
    except StopRequestedError as interrupted:
        document["interrupted"] = str(interrupted)
        exit_code = 128 + interrupted.signum
    finally:
        nvml.close()
    document["device"].update(torch_device())
    document["wall_seconds"] = round(time.monotonic() - started, 1)
    document["complete"] = exit_code in {0, 1}
    _write(output, document)
    return document, exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reference_gpu",
        description="Step time of the reference trainer on one GPU (JSON for "
        "benchmarks.reference_gpu_compare).",
    )
    parser.add_argument("--output", required=True, type=Path, help="directory of the JSON")
    parser.add_argument(
        "--tiny", action="store_true", help="two tiny shapes, 5 steps (runs on CPU)"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="the 1.3B model at 8,192 and 16,384 tokens a sequence instead (one H200)",
    )
    parser.add_argument(
        "--zero",
        action="store_true",
        help="the 1.3B model with 4 micro-batches a step at ZeRO stages 0-3 instead",
    )
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=DEFAULT_BUDGET_SECONDS,
        help=f"wall-clock budget of all shapes (default {DEFAULT_BUDGET_SECONDS:g})",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"run each trainer under torch.profiler ({PROFILED_STEPS} steps after the "
        "warm-up): its kernel time by kind in the JSON (benchmarks.trainer_profile)",
    )
    parser.add_argument(
        "--only", action="append", default=None, metavar="NAME", help="run only this shape"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="steps of every shape instead of its own (the warm-up steps stay)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shapes: tuple[Shape, ...] = (
        TINY_SHAPES
        if args.tiny
        else LONG_SHAPES
        if args.long
        else ZERO_SHAPES
        if args.zero
        else GPU_SHAPES
    )
    if args.only:
        names = {shape.name for shape in shapes}
        unknown = sorted(set(args.only) - names)
        if unknown:
            print(f"unknown shapes {unknown}; known: {sorted(names)}", file=sys.stderr)
            return 2
        shapes = tuple(shape for shape in shapes if shape.name in args.only)
    if args.steps is not None:
        if any(args.steps < shape.warmup_steps + MIN_STEADY_STEPS for shape in shapes):
            print(f"--steps must leave {MIN_STEADY_STEPS} steps after the warm-up", file=sys.stderr)
            return 2
        shapes = tuple(replace(shape, steps=args.steps) for shape in shapes)
    if args.profile:
        short = [s.name for s in shapes if s.steps < s.warmup_steps + 1 + PROFILED_STEPS]
        if short:
            print(f"--profile needs more steps than {short} run", file=sys.stderr)
            return 2
    if not args.tiny and not cuda_available():
        print("no CUDA device: run on a GPU, or pass --tiny", file=sys.stderr)
        return 2
    args.output.mkdir(parents=True, exist_ok=True)
    output = args.output / OUTPUT_NAME
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_interrupted)
    print(
        f"{len(shapes)} shapes, budget {args.budget_seconds:g} s; results in {output}",
        flush=True,
    )
    document, exit_code = run(
        shapes, output, args.budget_seconds, args.tiny, _STARTED, profile=args.profile
    )
    device = document["device"]
    print(
        f"device {device.get('name')} ({device.get('nvml', {}).get('driver_version')}), "
        f"torch {device.get('torch_version')}, {document['wall_seconds']} s in all"
    )
    for record in document["shapes"]:
        print(_summary_line(record))
    print(f"wrote {output}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
