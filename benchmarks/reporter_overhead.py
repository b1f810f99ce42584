"""Per-call cost of `TrainingReporter.step()`, the goal being well under 20 us a call.

`python -m benchmarks.reporter_overhead` times CALLS calls of `step()` REPEATS times for
each case and reports the median wall-clock time per call (loop included, so an upper
bound); it exits 1 if any case misses the goal.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

from benchmarks.arguments import benchmark_parser
from trainplan.runtime import TrainingReporter

GOAL_SECONDS = 20e-6
CALLS = 200_000
REPEATS = 5


def seconds_per_call(step: Callable[..., None], *, measured: bool) -> float:
    """Median over REPEATS of the wall-clock seconds per `step()` call."""
    samples = []
    for repeat in range(REPEATS):
        first = repeat * CALLS + 1
        start = time.perf_counter()
        if measured:
            for index in range(first, first + CALLS):
                step(index, index * 4096, 2.0, 0.5)
        else:
            for index in range(first, first + CALLS):
                step(index, index * 4096)
        samples.append((time.perf_counter() - start) / CALLS)
    return statistics.median(samples)


def cpu_model() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def main() -> int:
    benchmark_parser("benchmarks.reporter_overhead", __doc__).parse_args()
    print(
        f"machine: {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print(f"{CALLS:,} calls, median of {REPEATS}")
    print("| case | per call |")
    print("|---|---:|")
    cases = [
        ("global rank 0, serving on a free port, step(step, tokens)", 0, 0, False),
        ("global rank 0, serving, step(step, tokens, loss, step_seconds)", 0, 0, True),
        ("global rank 1, local rank 1 (no-op)", 1, 1, False),
    ]
    status = 0
    for name, global_rank, local_rank, measured in cases:
        with TrainingReporter(
            total_steps=REPEATS * CALLS,
            port=0,
            address="127.0.0.1",
            global_rank=global_rank,
            local_rank=local_rank,
            gpu_collector=False,  # read at scrape time only: no cost in step()
        ) as reporter:
            seconds = seconds_per_call(reporter.step, measured=measured)
        print(f"| {name} | {seconds * 1e6:.2f} us |")
        if seconds >= GOAL_SECONDS:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
