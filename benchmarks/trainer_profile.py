"""Where the reference trainer's step time goes: its kernels by kind, from torch.profiler.

`python -m benchmarks.trainer_profile --output FILE [--skip N] [--active K] -- FLAGS`
runs `trainplan.runtime.train` with FLAGS in this process under `torch.profiler`, skips
the first N optimizer steps (start-up, allocator growth), profiles the next one as the
profiler's warm-up and records the K after it. FILE (JSON) then holds, per step, the
kernel seconds of each kind (`KINDS`: matrix multiplies, fused attention, softmax and
cross-entropy, layer norms, embedding, copies and casts, the optimizer's multi-tensor
kernels, collectives, other elementwise work), the kernels' total, and the longest kernels.
`benchmarks.reference_gpu --profile` runs it as its trainer, one shape at a time.

On a CUDA device the seconds are the kernels' device time (CUPTI); without one they are
the operators' own CPU time, so the module can be tested on CPU. The kinds are read from
kernel and operator names (cuBLAS/CUTLASS `gemm`/`nvjet`/`xmma`, FlashAttention and
cuDNN `fmha`/`flash`, ATen's `softmax`/`nll_loss`, ...): a kernel that no rule names is
"other elementwise". `kinds_of` and `summarize` are pure; `main` runs the trainer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from unittest import mock

SCHEMA: Final = "trainplan.trainer_profile/1"
TOP_KERNELS: Final = 15
"""How many of the longest kernels (by time per step) the JSON lists."""
NAME_CHARACTERS: Final = 160
"""A kernel's name is cut to this length in the JSON (templated names run to kilobytes)."""

KINDS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    # First match wins: collectives before everything, attention before softmax (a fused
    # attention kernel's name may hold "softmax"), norms before reductions.
    ("collectives", ("nccl",)),
    ("attention", ("flash", "fmha", "sdpa", "scaled_dot_product", "attention")),
    (
        "matrix multiplies",
        ("gemm", "cutlass", "nvjet", "xmma", "cublas", "aten::mm", "aten::addmm", "aten::bmm"),
    ),
    ("softmax and cross-entropy", ("softmax", "nll_loss", "cross_entropy")),
    ("layer norms", ("layer_norm", "layernorm", "rms_norm", "rmsnorm")),
    ("embedding", ("embedding", "index_put", "indexing_backward", "radix", "sort")),
    ("optimizer (multi-tensor)", ("multi_tensor", "foreach", "adam", "fused_")),
    ("copies and casts", ("copy", "cast", "convert", "memcpy", "memset")),
)
OTHER: Final = "other elementwise"


@dataclass(frozen=True, slots=True)
class KernelTime:
    """One kernel (or CPU operator) over the recorded steps."""

    name: str
    seconds: float
    calls: int


def kind_of(name: str) -> str:
    """The kind a kernel or operator name belongs to (`KINDS`, else `OTHER`). ATen's
    `gpu_kernel_impl_nocast` (an elementwise kernel that does not cast) is no cast."""
    lowered = name.lower().replace("nocast", "")
    for kind, markers in KINDS:
        if any(marker in lowered for marker in markers):
            return kind
    return OTHER


def summarize(kernels: Iterable[KernelTime], steps: int) -> dict[str, Any]:
    """Seconds per step of each kind, their total, and the longest kernels."""
    if steps < 1:
        raise ValueError("at least one recorded step is needed")
    kernels = [kernel for kernel in kernels if kernel.seconds > 0.0]
    kinds: dict[str, dict[str, float]] = {
        kind: {"seconds_per_step": 0.0, "calls_per_step": 0.0}
        for kind in [*(k for k, _ in KINDS), OTHER]
    }
    for kernel in kernels:
        entry = kinds[kind_of(kernel.name)]
        entry["seconds_per_step"] += kernel.seconds / steps
        entry["calls_per_step"] += kernel.calls / steps
    total = sum(kernel.seconds for kernel in kernels) / steps
    longest = sorted(kernels, key=lambda kernel: kernel.seconds, reverse=True)[:TOP_KERNELS]
    return {
        "steps": steps,
        "kernel_seconds_per_step": total,
        "kinds": {kind: entry for kind, entry in kinds.items() if entry["calls_per_step"] > 0},
        "longest": [
            {
                "name": kernel.name[:NAME_CHARACTERS],
                "kind": kind_of(kernel.name),
                "seconds_per_step": kernel.seconds / steps,
                "calls_per_step": kernel.calls / steps,
            }
            for kernel in longest
        ],
    }


def _kernel_times(profile: Any, on_device: bool) -> list[KernelTime]:
    """Kernels' device time (on a GPU) or operators' own CPU time, from the profile."""
    from torch._C._autograd import DeviceType

    times: list[KernelTime] = []
    for event in profile.key_averages():
        if _annotation(event):
            continue
        if on_device:
            if event.device_type != DeviceType.CUDA:
                continue
            seconds = event.self_device_time_total / 1e6
        else:
            seconds = event.self_cpu_time_total / 1e6
        times.append(KernelTime(str(event.key), float(seconds), int(event.count)))
    return times


def _annotation(event: Any) -> bool:
    """A range the profiler or a library marks (`ProfilerStep#7`, `Optimizer.step#AdamW.step`),
    which spans kernels counted on their own."""
    name = str(event.key)
    return bool(getattr(event, "is_user_annotation", False)) or name.startswith(
        ("ProfilerStep", "Optimizer.")
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.trainer_profile",
        description="Run the reference trainer under torch.profiler; kernel time by kind.",
    )
    parser.add_argument("--output", required=True, type=Path, help="the JSON to write")
    parser.add_argument("--skip", type=int, default=5, help="steps before the profiled ones")
    parser.add_argument("--active", type=int, default=5, help="steps recorded")
    parser.add_argument("flags", nargs=argparse.REMAINDER, help="-- then the trainer's flags")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    flags = list(args.flags)
    if flags[:1] == ["--"]:
        flags = flags[1:]
    if args.skip < 0 or args.active < 1:
        print("--skip must be at least 0 and --active at least 1", file=sys.stderr)
        return 2

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from trainplan.runtime import train

    on_device = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_device else [])]
    recorded: dict[str, Any] = {}

    def ready(finished: Any) -> None:
        summary = summarize(_kernel_times(finished, on_device), args.active)
        recorded.update(summary)

    original = train._train_step

    with profile(
        activities=activities,
        schedule=schedule(wait=args.skip, warmup=1, active=args.active, repeat=1),
        on_trace_ready=ready,
    ) as profiler:

        def stepped(run: Any, batches: Any) -> tuple[float, int]:
            result = original(run, batches)
            profiler.step()
            return result

        with mock.patch.object(train, "_train_step", stepped):
            code = train.main(flags)
    document = {
        "schema": SCHEMA,
        "source": "kernel device time (CUPTI)" if on_device else "operators' own CPU time",
        "skipped_steps": args.skip,
        "warmup_steps": 1,
        "complete": bool(recorded),
        **recorded,
    }
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if not recorded:
        print("too few steps ran to record the profile", file=sys.stderr)
        return code or 1
    return code


if __name__ == "__main__":
    raise SystemExit(main())
