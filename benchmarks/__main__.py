"""`python -m benchmarks`: every benchmark this machine can run, one after the other, each
in its own process (its full table printed as it goes), then a summary: each one's exit
status (0: its goals met; the accuracy tables have no exit goal) and its duration. Exits 1
when any benchmark missed a goal. `make bench` runs it."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.arguments import benchmark_parser

BENCHMARKS = (
    ("planner speed", "benchmarks.planner_speed"),
    ("planner accuracy", "benchmarks.accuracy"),
    ("the planner beside llm-analysis (same rows and layouts)", "benchmarks.peers"),
    ("whole runs from many sources", "benchmarks.whole_runs"),
    ("fine-tuning (published full, LoRA and QLoRA runs)", "benchmarks.finetuning"),
    ("fp8 against bf16 (published pairs)", "benchmarks.fp8"),
    ("serving capacity (TensorRT-LLM's published measurements)", "benchmarks.serving"),
    ("the plans' 10-90% ranges (held-out errors)", "benchmarks.plan_ranges"),
    (
        "cluster calibration (a simulated cluster unlike the catalog)",
        "benchmarks.cluster_calibration",
    ),
    (
        "cluster calibration through the operator (kmock, simulated clock)",
        "benchmarks.cluster_calibration_operator",
    ),
    ("reporter overhead", "benchmarks.reporter_overhead"),
    ("ETA accuracy under injected failures", "benchmarks.eta_accuracy"),
    (
        "ETA accuracy at real scale (public runs, published failure rates)",
        "benchmarks.eta_real_scale",
    ),
    ("operator at scale (1,000 plans)", "benchmarks.operator_scale"),
    ("command-line start-up (whole processes)", "benchmarks.cli_startup"),
)
NOT_HERE = (
    (
        "measured vs planned step time on a GPU",
        "needs a GPU: python -m benchmarks.reference_gpu there, then"
        " benchmarks.reference_gpu_compare here (BENCHMARKS.md: one H200)",
    ),
)


def main() -> int:
    benchmark_parser("benchmarks", __doc__).parse_args()
    rows = []
    for title, module in BENCHMARKS:
        print(f"\n## {title} (python -m {module})\n", flush=True)
        started = time.monotonic()
        status = subprocess.run([sys.executable, "-m", module], check=False).returncode
        rows.append((title, status, time.monotonic() - started))
    print("\n## Summary\n")
    print("| benchmark | goals | seconds |")
    print("|---|---|---:|")
    for title, status, seconds in rows:
        print(f"| {title} | {'met' if status == 0 else 'MISSED'} | {seconds:.0f} |")
    for title, why in NOT_HERE:
        print(f"| {title} | not run: {why} | |")
    return 0 if all(status == 0 for _, status, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
