"""CPU time of the planner's searches, the speed goal being a deadline search for a
1T-parameter model on up to 8,192 A100s in under 1 s of CPU.

`python -m benchmarks.planner_speed` plans each case several times and reports the
median process CPU time (time.process_time, so other load on the machine does not count);
it exits 1 if the 1T deadline case misses its goal.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from typing import Any

from trainplan.api import TrainingPlanSpec
from trainplan.planner import Catalog, load_catalog, plan

GOAL_SECONDS = 1.0
REPEATS = 5


def _spec(**objective: Any) -> TrainingPlanSpec:
    return TrainingPlanSpec.model_validate(
        {
            "model": {"preset": "megatron-1t"},
            "data": {"tokens": 450e9},
            "batch": {"globalBatchSize": 3072},
            "hardware": {"gpuType": "A100-SXM4-80GB"},
            "objective": objective,
            "reliability": {"checkpointSeconds": 600},
        }
    )


CASES = {
    "1T, deadline 90d, maxGPUs 8192 (goal < 1 s)": _spec(deadline="90d", maxGPUs=8192),
    "1T, deadline 40d, maxGPUs 8192": _spec(deadline="40d", maxGPUs=8192),
    "1T, fastest within maxGPUs 8192": _spec(maxGPUs=8192),
    "1T, pinned gpus 3072": _spec(gpus=3072),
}


def cpu_seconds(spec: TrainingPlanSpec, catalog: Catalog) -> float:
    """Median CPU seconds of `plan(spec)` over REPEATS runs."""
    samples = []
    for _ in range(REPEATS):
        start = time.process_time()
        plan(spec, catalog)
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def main() -> int:
    catalog = load_catalog()
    print(
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'},"
        f" Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print("| search | median CPU seconds |")
    print("|---|---:|")
    status = 0
    for index, (name, spec) in enumerate(CASES.items()):
        seconds = cpu_seconds(spec, catalog)
        print(f"| {name} | {seconds:.3f} |")
        if index == 0 and seconds >= GOAL_SECONDS:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
