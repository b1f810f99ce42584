"""CPU time of the planner's searches. Goals: a deadline search for a 1T-parameter model
on up to 8,192 A100s in under 1 s of CPU, and any valid spec planned or refused within
`WIDEST_GOAL_SECONDS` (the search stops at `MAX_LAYOUT_EVALUATIONS` layouts).

`python -m benchmarks.planner_speed` plans each case several times and reports the
median process CPU time (time.process_time, so other load on the machine does not count);
it exits 1 if a goal is missed.
"""

from __future__ import annotations

import contextlib
import platform
import statistics
import sys
import time
from typing import Any

from benchmarks.arguments import benchmark_parser
from trainplan.api import TrainingPlanSpec
from trainplan.planner import Catalog, PlanInputError, load_catalog, plan

OWN_PROGRAM: dict[str, Any] = {"command": ["python", "train.py"]}
"""`job` of a program of the user's own under the reference framework: ZeRO 0-3 with
pipelines, the widest search (the reference trainer itself runs no pipeline)."""
GOAL_SECONDS = 1.0
WIDEST_GOAL_SECONDS = 5.0
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
            "job": OWN_PROGRAM,
        }
    )


CASES = {
    "1T, deadline 90d, maxGPUs 8192 (goal < 1 s)": _spec(deadline="90d", maxGPUs=8192),
    "1T, deadline 40d, maxGPUs 8192": _spec(deadline="40d", maxGPUs=8192),
    "1T, fastest within maxGPUs 8192": _spec(maxGPUs=8192),
    "1T, pinned gpus 3072": _spec(gpus=3072),
}


WIDEST = {
    # Valid specs (every figure within the CRD's maxima) whose full search would price
    # 80,000-370,000 layouts (5-75 s): a batch with 1,152 divisors under a million GPUs.
    "70B, batch 14,414,400, maxGPUs 1,000,000": {
        "model": {"preset": "llama2-70b"},
        "data": {"tokens": 1e12},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"maxGPUs": 1_000_000},
        "job": OWN_PROGRAM,
    },
    "70B, batch 14,414,400, deadline 1h, maxGPUs 1,000,000": {
        "model": {"preset": "llama2-70b"},
        "data": {"tokens": 1e12},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"deadline": "1h", "maxGPUs": 1_000_000},
        "job": OWN_PROGRAM,
    },
    "100,000 layers x 16,384 wide, batch 14,414,400, maxGPUs 1,000,000": {
        "model": {
            "layers": 100_000,
            "hiddenSize": 16_384,
            "attentionHeads": 128,
            "vocabSize": 256_000,
            "sequenceLength": 8_192,
        },
        "data": {"tokens": 1e16},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"maxGPUs": 1_000_000},
        "job": OWN_PROGRAM,
    },
    "70B at 131,072 tokens (context parallelism searched), maxGPUs 1,000,000": {
        "model": {"preset": "llama3-70b", "sequenceLength": 131_072},
        "data": {"tokens": 1e12},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"maxGPUs": 1_000_000},
        "job": {"framework": "megatron"},
    },
    "Qwen3-30B-A3B, 128 experts (expert degrees searched), batch 14,414,400, maxGPUs 1,000,000": {
        "model": {"preset": "qwen3-30b-a3b", "sequenceLength": 4_096},
        "data": {"tokens": 1e12},
        "batch": {"globalBatchSize": 14_414_400},
        "objective": {"maxGPUs": 1_000_000},
        "job": {"framework": "megatron"},
    },
}
"""The widest searches found; each stops at the layout budget with a PlanInputError."""


def cpu_seconds(spec: TrainingPlanSpec, catalog: Catalog, repeats: int = REPEATS) -> float:
    """Median CPU seconds of `plan(spec)` (a plan, or a PlanInputError) over `repeats`."""
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        with contextlib.suppress(PlanInputError):
            plan(spec, catalog)
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def main() -> int:
    benchmark_parser("benchmarks.planner_speed", __doc__).parse_args()
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
    for name, document in WIDEST.items():
        seconds = cpu_seconds(TrainingPlanSpec.model_validate(document), catalog, repeats=3)
        print(f"| widest: {name} (goal < {WIDEST_GOAL_SECONDS:.0f} s) | {seconds:.3f} |")
        if seconds >= WIDEST_GOAL_SECONDS:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
