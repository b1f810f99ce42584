"""Start-up of the command line, as whole processes. Goal: `trainplan --help` and the 1T
deadline `trainplan plan` (deploy/examples/megatron-1t.yaml: the fewest A100s, at most
8,192, that train Megatron-LM 1T in 90 days) each within `GOAL_RATIO` x the wall time of
`python -c "import pydantic, yaml, rich"` (the libraries every command needs) on the same
machine.

`python -m benchmarks.cli_startup [--repeats N]` runs the three commands side by side,
round-robin (each round runs each command once, in turn, so that load on the machine
falls on all three alike), and reports for each the median wall time, its spread (fastest
and slowest run), the median CPU time of the process (user + system, from
RUSAGE_CHILDREN) and the ratio of its median wall time to the baseline's. It exits 1 if a
goal is missed.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.arguments import benchmark_parser

GOAL_RATIO = 1.5
REPEATS = 15
EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "megatron-1t.yaml"


def _trainplan() -> list[str]:
    """The installed console script beside this interpreter, else its equivalent."""
    script = Path(sys.executable).parent / "trainplan"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from trainplan.cli.main import main; main()"]


BASELINE = "python -c 'import pydantic, yaml, rich'"
COMMANDS: dict[str, list[str]] = {
    BASELINE: [sys.executable, "-c", "import pydantic, yaml, rich"],
    "trainplan --help": [*_trainplan(), "--help"],
    "trainplan plan megatron-1t.yaml (1T, deadline 90d)": [*_trainplan(), "plan", str(EXAMPLE)],
}


def run_once(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of `command`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser("benchmarks.cli_startup", __doc__)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # one unmeasured run each: files in the page cache
        run_once(command)
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            samples[name].append(run_once(command))
    load = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python"
        f" {platform.python_version()}, {platform.system()} {platform.release()};"
        f" load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.repeats} runs each"
    )
    baseline = statistics.median(wall for wall, _ in samples[BASELINE])
    print("| process | median wall s | fastest - slowest s | median CPU s | x baseline |")
    print("|---|---:|---:|---:|---:|")
    status = 0
    for name, runs in samples.items():
        walls = [wall for wall, _ in runs]
        median = statistics.median(walls)
        ratio = median / baseline
        goal = "" if name == BASELINE else f" (goal < {GOAL_RATIO})"
        print(
            f"| {name} | {median:.3f} | {min(walls):.3f} - {max(walls):.3f} |"
            f" {statistics.median(cpu for _, cpu in runs):.3f} | {ratio:.2f}{goal} |"
        )
        if name != BASELINE and ratio >= GOAL_RATIO:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
