"""Traces of two public training runs, rebuilt from their chronicles for backtesting the
ETA: BLOOM-176B (BigScience, 384 A100s, March to July 2022) and OPT-175B (Meta, 992
A100s, November 2021 to January 2022).

Neither project published its per-scrape progress, so each trace is a simulation
(`benchmarks.eta_runs`) of what the chronicle tells: the measured step time, the
batch-size ramp-up, checkpoints and evaluations, every dated crash, hang, outage,
slowdown and rollback, at the iteration the chronicle gives. What the chronicle does
not tell (the exact hour of an event, its restart time, the failures it mentions only
as "every week or so") is filled with stated assumptions. Then the trace is pinned to
the chronicle's progress anchors (dated iterations; BLOOM's README example of
"current consumed tokens" at 53,846, committed 2022-05-16, is left out: it took ~49.6
days to 94,767, less than the 49.8 days those iterations take at 105.22 s without a
single evaluation, so the value predates its commit): between two anchors, whatever
time the rebuilt run is short of the real one is added as unexplained interruptions
of `FILLER_SECONDS` each, spread evenly, so that the rebuilt run reaches every anchor
iteration at its date. Every number below cites its source: a path and line of the
project's repository (`bigscience-workshop/bigscience` at 9e64edec,
`facebookresearch/metaseq` at f7ffa5fd), a paper, or "inferred" with how.

`python -m benchmarks.eta_chronicles` prints each trace's anchors, rebuilt against
real, and writes the traces as JSON Lines (the format `trainplan eta replay` reads).
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.arguments import benchmark_parser
from benchmarks.eta_runs import Rampup, Regime, Scheduled, SimulatedRun, simulate
from trainplan.eta import PlanFacts
from trainplan.planner.reliability import estimate_reliability

HOUR = 3600.0
FILLER_SECONDS = 2 * HOUR
"""Unexplained time between anchors is added as interruptions of this length."""
REBUILD_PASSES = 4
FLEET_RATE_PER_GPU_HOUR = 1.973e-05
"""The planner's default interruption rate (Llama 3, arXiv 2407.21783, section 3.3.4)."""
CATALOG_RESTART_SECONDS = 600.0
"""The planner's default restart time (planner/data/calibration.yaml)."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """The run reached `step` at `time` (the chronicle's progress report)."""

    step: int
    time: datetime
    source: str


@dataclass(frozen=True, slots=True)
class Chronicle:
    """A public run: its regime, dated events, progress anchors and plan."""

    name: str
    title: str
    regime: Regime
    anchors: tuple[Anchor, ...]
    planned_step_seconds: float
    plan_source: str


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """A chronicle's trace and how well it meets the anchors."""

    chronicle: Chronicle
    run: SimulatedRun
    facts: PlanFacts
    fillers: int
    anchor_errors_hours: tuple[tuple[int, float], ...]
    """(step, rebuilt minus real arrival, hours) at each anchor."""


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _spread(count: int, first: int, last: int, seed: int) -> list[int]:
    """`count` steps between `first` and `last`, at seeded random positions."""
    chooser = random.Random(seed)
    return sorted(chooser.randrange(first, last) for _ in range(count))


# BLOOM-176B: bigscience-workshop/bigscience, train/tr11-176B-ml/ (chron = chronicles.md,
# readme = README.md, slurm = tr11-176B-ml.slurm, preq = chronicles-prequel.md).
BLOOM_START = _utc("2022-03-11T19:42:00")  # "launched on March 11, 2022 11:42am PST" chron:17
BLOOM_PLANNED = 3.0 * 60  # minutes: planned restarts, restart time not told (inferred)
BLOOM_EVENTS = (
    Scheduled(
        7_572,
        down_seconds=BLOOM_PLANNED,
        rollback_steps=0,
        source="MBS 1 to 2 at GBS 784 (chron:23); the iteration inferred from the ramp-up",
    ),
    Scheduled(
        14_748,
        down_seconds=1 * HOUR,
        rollback_steps=248,
        source="GPU crash 03-21: 'lost 7.3h of work, it failed 2 iterations before "
        "checkpoint saving time' (chron:79-94); restart 1 h inferred",
    ),
    Scheduled(
        15_500,
        down_seconds=4 * HOUR,
        source="emergency maintenance 03-22, 'lost some hours again' (chron:102); 4 h "
        "and the iteration inferred",
    ),
    Scheduled(17_235, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:106-121"),
    Scheduled(20_448, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:134-141"),
    Scheduled(20_452, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:141-149"),
    Scheduled(21_680, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:155"),
    Scheduled(25_956, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:182-184"),
    Scheduled(26_343, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:190-192"),
    Scheduled(26_345, down_seconds=BLOOM_PLANNED, rollback_steps=0, source="chron:194-196"),
    Scheduled(
        42_783,
        slow_factor=111.1 / 105.2,
        slow_steps=2_217,
        source="slow GPU: 149 to 140 TFLOPs from 42783, still 111.00 s/it at 45000 (chron:250-303)",
    ),
    Scheduled(
        45_000,
        hang_seconds=15 * HOUR,
        down_seconds=3 * HOUR,
        rollback_steps=0,
        source="eval hang at 45000, 'lost about 18h of training' (chron:297-317); the "
        "split into a 15 h hang and 3 h of restarts inferred",
    ),
    Scheduled(
        51_000,
        hang_seconds=5 * HOUR,
        down_seconds=1 * HOUR,
        rollback_steps=0,
        source="eval hang at 51k, 'Lost 6h of work' (chron:465-472); split inferred",
    ),
    Scheduled(
        55_000,
        hang_seconds=9 * HOUR,
        down_seconds=2 * HOUR,
        rollback_steps=0,
        source="eval hang redux, 'lost ~11h' (chron:474-577); the iteration inferred",
    ),
)
BLOOM_WEEKLY = tuple(
    Scheduled(
        step,
        down_seconds=0.5 * HOUR,
        source="'Every week or so ... one of the gpus dies', at most 3 h lost "
        "(chron:223-231); 15 at seeded positions, 30 min restarts, inferred",
    )
    for step in _spread(15, 15_600, 94_700, seed=176)
)
BLOOM = Chronicle(
    name="bloom-176b",
    title="BLOOM-176B, 384 A100-80GB, 2022-03-11 to 2022-07-04 (48-node phase)",
    regime=Regime(
        name="bloom-176b",
        # 364,390,481,920 tokens at iteration 94,767, the last on 48 nodes (chron:645,
        # chron:690: 364,394,676,224 at 94,768), in full batches of 2048 x 2048 tokens.
        total_steps=86_878,
        step_seconds=105.22,  # iteration 12695: 105.22 s at 149.02 TFLOPs (chron:45)
        tokens_per_step=2048 * 2048,  # GBS 2048, sequence 2048 (slurm:70, slurm:75)
        gpus=384,  # 48 nodes x 8 A100-80GB (readme:178)
        step_log_sd=0.01,  # 104.70 to 106 s per iteration logged (chron:45, readme:663)
        # --rampup-batch-size 192 16 9_765_625 (slurm:111): reproduces the logged 20,155,564,032
        # tokens at iteration 12695 (chron:45) exactly.
        rampup=Rampup(start=192, increment=16, samples=9_765_625, full=2048),
        # t = 11.99 + 0.0455 x GBS seconds: the 48-node measurements of GBS 512 to 2048
        # (preq:861-870) scaled to 105.22 s at 2048.
        fixed_step_fraction=11.99 / 105.22,
        checkpoint_interval_steps=250,  # SAVE_INTERVAL at launch (62272cf:slurm:77)
        checkpoint_schedule=((14_748, 200), (15_500, 100)),  # 03-21 and 03-22 (chron:96, chron:102)
        checkpoint_seconds=40.0,  # 'about 1/2 iteration duration' (chron:36, chron:96)
        eval_interval_steps=1000,  # --eval-interval 1000 (slurm:135)
        eval_seconds=12 * 60.0,  # 'about 12 min' (chron:34)
        job_limit_seconds=100 * HOUR,  # 100 h SLURM limit, saves before exit (slurm:6, slurm:100)
        turnover_seconds=5
        * 60.0,  # 'about 2 min per cycle plus a few minutes to save' (readme:545-563)
        scheduled=BLOOM_EVENTS + BLOOM_WEEKLY,
        epoch=BLOOM_START,
    ),
    anchors=(
        Anchor(
            12_695,
            _utc("2022-03-18T23:00:00"),
            "log line of iteration 12695 (chron:45), before commit b77d1ae at 16:53 PDT",
        ),
        Anchor(
            31_214,
            _utc("2022-04-12T19:00:00"),
            "loss spike at 31214 on 04-12 (chron:198-213); hour inferred",
        ),
        Anchor(
            42_780,
            _utc("2022-04-28T19:00:00"),
            "throughput drop at 42780 on 04-28 (chron:250-271); hour inferred",
        ),
        Anchor(
            94_767,
            _utc("2022-07-05T04:00:00"),
            "last iteration on 48 nodes, 07-04 ~9pm PDT (chron:645, readme:15)",
        ),
    ),
    planned_step_seconds=107.12,
    plan_source="the team's own 48-node measurement at GBS 2048: 107.12 s (preq:861-870)",
)


# OPT-175B: facebookresearch/metaseq, projects/OPT/ (the chronicles' markdown notes and
# chart screenshots; the PDF logbook is not in the repository's stored snapshot).
OPT_START = _utc("2021-11-12T04:10:00")
"""Run 12.02 start, the first to keep progress: step 2,008 at 11/12 11:38 AM PT, 15.46 h
in (chronicles/images/run12.jpeg tooltip; inferred)."""
OPT_DAYS = (
    (2_300, 9.0, "12.03-12.05 to 12.06: ~9 h (run12.jpeg tooltips; inferred)"),
    (7_629, 5.2, "11-14 gap (run12_56_perc.jpeg, inferred from the chart)"),
    (13_459, 1.8, "12.07 to 12.08 resumes at 13,251 (run12.jpeg)"),
    (14_500, 1.2, "11-17 gap (run12_56_perc.jpeg)"),
    (16_500, 3.2, "11-18 gap (run12_56_perc.jpeg)"),
    (20_300, 30.6, "11-19 to 11-20, runs 12.11-12.12 (logbook screenshot, chart)"),
    (22_400, 0.5, "12.13-12.14 (logbook screenshot)"),
    (24_450, 12.1, "11-22 gap, run 12.15 (logbook screenshot, chart)"),
    (24_500, 16.5, "11-22 to 11-23 gap, run 12.16 (chart)"),
    (27_300, 14.9, "11-24: four failed attempts 12.17-12.20 (logbook screenshot, chart)"),
    (28_600, 2.8, "12.21 requeue (logbook screenshot)"),
    (30_500, 4.4, "11-26 gap (chart)"),
    (33_400, 30.2, "Thanksgiving weekend, 12.24-12.29 (56_percent_update.md:30, chart)"),
    (33_700, 0.5, "12.30-12.33 (logbook screenshot)"),
    (
        38_700,
        29.0,
        "12-02 to 12-03, gradient and activation norms (27_percent_update.md:25, chart)",
    ),
    (41_000, 4.4, "12.43 (56_percent_update.md:39)"),
    (46_500, 1.5, "5 hosts down together, buffer of 4 (56_percent_update.md:32)"),
    (61_000, 2.8, "12-11 gap (chart)"),
    (70_000, 1.5, "12-14 gap (chart)"),
    (
        95_000,
        20.0,
        "12-21 cluster deleted by the provider, back 'by EOD' (final_update.md:27); 20 h inferred",
    ),
)
OPT_ROLLBACKS = (
    (
        37_400,
        40.6,
        400,
        "loss-scale collapse, SGD trials 12.34-12.38, restart from 37k "
        "(27_percent_update.md:23, logbook screenshot, chart)",
    ),
    (43_300, 1.0, 700, "12.44: LR lowered 10% (56_percent_update.md:43)"),
    (46_600, 0.5, 100, "12.46: LR to 2/3 of GPT-3's (56_percent_update.md:27, :43)"),
    (52_000, 0.5, 200, "12.47: Megatron 2.4 to 2.6 (56_percent_update.md:53)"),
)
OPT_EVENTS = (
    *(
        Scheduled(step, down_seconds=hours * HOUR, source=source)
        for step, hours, source in OPT_DAYS
    ),
    *(
        Scheduled(step, down_seconds=hours * HOUR, rollback_steps=back, source=source)
        for step, hours, back, source in OPT_ROLLBACKS
    ),
    *(
        Scheduled(
            step,
            down_seconds=1 * HOUR,
            source="8 failures recovered automatically, 12-25 to 01-01 "
            "(final_update.md:29); positions and 1 h inferred",
        )
        for step in _spread(8, 107_000, 128_000, seed=175)
    ),
    Scheduled(
        0,
        slow_factor=27.7 / 20.8,
        slow_steps=41_000,
        source="27.5-27.9 s/update in November (run12.jpeg, run12_zoomed.jpeg); "
        "~1.0e5 words/s (20.6-21 s) from 45k (run12_upgrade_shift.jpeg); the change "
        "at 41k inferred",
    ),
)
OPT = Chronicle(
    name="opt-175b",
    title="OPT-175B, 992 A100-80GB, 2021-11-12 to 2022-01-06 (run 12.xx)",
    regime=Regime(
        name="opt-175b",
        total_steps=143_051,  # 300e9 tokens // 2,097,152 (opt_job_constants.py:29, :44)
        step_seconds=20.8,  # ~1.0e5 words/s (run12_upgrade_shift.jpeg; 56_percent_update.md:53)
        tokens_per_step=2_097_152,  # 2M tokens (opt_job_constants.py:44)
        gpus=992,  # 124 hosts x 8 (download_opt175b.md:6; paper section 2.4)
        step_log_sd=0.02,
        checkpoint_interval_steps=250,  # resumes at 13,251 and 37k (run12.jpeg; inferred)
        checkpoint_seconds=60.0,  # not told (inferred)
        scheduled=OPT_EVENTS,
        epoch=OPT_START,
    ),
    anchors=(
        Anchor(
            2_008, _utc("2021-11-12T19:38:00"), "run12.02 tooltip, 11/12 11:38 AM PT (run12.jpeg)"
        ),
        Anchor(
            7_629, _utc("2021-11-14T23:59:00"), "run12.06 tooltip, 11/14 3:59 PM PT (run12.jpeg)"
        ),
        Anchor(
            14_287,
            _utc("2021-11-17T13:00:00"),
            "run12.08 tooltip, 11/17 5:00 AM PT (run12_zoomed.jpeg); ~10% (10_percent_update.md:4)",
        ),
        Anchor(
            39_600,
            _utc("2021-12-03T20:00:00"),
            "27% post of 12-03, chart ending near 39.6k (27_percent_update.md:4); hour inferred",
        ),
        Anchor(
            80_100,
            _utc("2021-12-16T20:00:00"),
            "56% of 143,051 on 12-16 (56_percent_update.md:4); hour inferred",
        ),
        Anchor(
            143_051,
            _utc("2022-01-06T20:46:00"),
            "done at 300B tokens, 2022-01-06 12:46 pm PST (final_update.md:6)",
        ),
    ),
    planned_step_seconds=33 * 86400 / 143_051,
    plan_source="'roughly ~33 days of continuous training' (final_update.md:6): 19.9 s/update",
)

CHRONICLES = (BLOOM, OPT)


def plan_facts(chronicle: Chronicle) -> PlanFacts:
    """What a plan made before the run would say: the team's step time, the planner's
    default failure rate and restart time, the run's checkpointing."""
    regime = chronicle.regime
    interval = regime.checkpoint_interval(regime.total_steps)
    step = chronicle.planned_step_seconds
    reliability = estimate_reliability(
        compute_seconds=regime.total_steps * step,
        step_seconds=step,
        total_steps=regime.total_steps,
        gpus=regime.gpus,
        interruptions_per_gpu_hour=FLEET_RATE_PER_GPU_HOUR,
        checkpoint_seconds=regime.checkpoint_seconds,
        restart_seconds=CATALOG_RESTART_SECONDS,
        checkpoint_interval_steps=interval,
    )
    return PlanFacts(
        total_steps=regime.total_steps,
        planned_step_seconds=step,
        gpus=regime.gpus,
        checkpoint_interval_steps=interval,
        restart_seconds=CATALOG_RESTART_SECONDS,
        interruptions_per_gpu_hour=FLEET_RATE_PER_GPU_HOUR,
        planned_mfu=0.4,
        planned_duration_seconds=reliability.duration_seconds,
        tokens_per_step=float(regime.tokens_per_step),
        checkpoint_seconds=regime.checkpoint_seconds,
    )


def _fillers(chronicle: Chronicle, reached: Sequence[tuple[int, float]]) -> tuple[Scheduled, ...]:
    """Interruptions that bring each anchor segment to its real length."""
    start = chronicle.regime.epoch
    arrivals = dict(reached)
    fillers = []
    previous_step, previous_real, previous_rebuilt = 0, 0.0, 0.0
    for anchor in chronicle.anchors:
        real = (anchor.time - start).total_seconds()
        rebuilt = arrivals.get(anchor.step, math.inf)
        short = (real - previous_real) - (rebuilt - previous_rebuilt)
        count = int(short // FILLER_SECONDS) if math.isfinite(short) else 0
        for index in range(count):
            step = previous_step + (anchor.step - previous_step) * (index + 1) // (count + 1)
            fillers.append(
                Scheduled(
                    step,
                    down_seconds=FILLER_SECONDS,
                    rollback_steps=0,
                    source="unexplained time between anchors (inferred)",
                )
            )
        previous_step, previous_real, previous_rebuilt = anchor.step, real, rebuilt
    return tuple(fillers)


def rebuild(chronicle: Chronicle, seed: int = 0) -> Rebuilt:
    """The chronicle's trace, pinned to its anchors: simulate, fill each segment's
    shortfall, and again until the fillers settle (the job time limit and the scheduled
    events move with them)."""
    watch = tuple(anchor.step for anchor in chronicle.anchors)
    fillers: tuple[Scheduled, ...] = ()
    run = simulate(chronicle.regime, seed, watch)
    for _ in range(REBUILD_PASSES):
        more = _fillers(chronicle, run.reached)
        if not more:
            break
        fillers = tuple(sorted(fillers + more, key=lambda event: event.at_step))
        regime = replace(chronicle.regime, scheduled=chronicle.regime.scheduled + fillers)
        run = simulate(regime, seed, watch)
    arrivals = dict(run.reached)
    start = chronicle.regime.epoch
    errors = tuple(
        (
            anchor.step,
            (arrivals.get(anchor.step, math.inf) - (anchor.time - start).total_seconds()) / HOUR,
        )
        for anchor in chronicle.anchors
    )
    return Rebuilt(chronicle, run, plan_facts(chronicle), len(fillers), errors)


def write_trace(rebuilt: Rebuilt, path: Path) -> None:
    """The trace as JSON Lines, one scrape a line."""
    with path.open("w", encoding="utf-8") as out:
        for row in rebuilt.run.rows:
            item = {"time": row.time.isoformat(), "step": row.step, "failures": row.failures}
            if row.tokens is not None:
                item["tokens"] = row.tokens
            out.write(json.dumps(item) + "\n")


def main() -> int:
    parser = benchmark_parser("benchmarks.eta_chronicles", __doc__)
    parser.add_argument(
        "output",
        nargs="?",
        type=Path,
        help="directory to write each trace to as JSON Lines (<name>.jsonl)",
    )
    output: Path | None = parser.parse_args().output
    for chronicle in CHRONICLES:
        rebuilt = rebuild(chronicle)
        run = rebuilt.run
        print(f"\n## {chronicle.title}\n")
        print(
            f"rebuilt: {len(run.rows):,} scrapes, {run.interruptions} interruptions "
            f"({rebuilt.fillers} of them unexplained time), {run.end_seconds / 86400:.1f} days"
        )
        print("| anchor step | real date | rebuilt - real (h) | source |")
        print("|---:|---|---:|---|")
        for anchor, (_, error) in zip(chronicle.anchors, rebuilt.anchor_errors_hours, strict=True):
            when = f"{anchor.time:%Y-%m-%d %H:%M}"
            print(f"| {anchor.step:,} | {when} | {error:+.1f} | {anchor.source} |")
        if output is not None:
            output.mkdir(parents=True, exist_ok=True)
            write_trace(rebuilt, output / f"{chronicle.name}.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
