"""The public runs rebuilt from their chronicles meet the chronicles' own progress
anchors, and a short version of the real-scale ETA benchmark runs to the end."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.eta_chronicles import BLOOM, CHRONICLES, OPT, rebuild
from benchmarks.eta_real_scale import FINE_SEEDS, SEEDS, cases, main, run_names, thirds
from trainplan.eta.backtest import real_end, replay

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("chronicle", CHRONICLES, ids=lambda c: c.name)
def test_a_rebuilt_run_reaches_every_anchor_within_hours(chronicle) -> None:  # type: ignore[no-untyped-def]
    rebuilt = rebuild(chronicle)
    for step, hours in rebuilt.anchor_errors_hours:
        assert math.isfinite(hours), step
        assert abs(hours) < 6.0, (step, hours)
    # The trace ends where the run did: its last anchor is its total work.
    end = real_end(rebuilt.facts, rebuilt.run.rows)
    assert end is not None
    last = chronicle.anchors[-1]
    assert abs(end - last.time.timestamp()) < 6 * 3600


def test_bloom_reproduces_its_logged_token_counts() -> None:
    # chronicles.md:45: 20,155,564,032 tokens at iteration 12,695 (the batch-size ramp-up);
    # chronicles.md:690: 364,394,676,224 at 94,768.
    rows = rebuild(BLOOM).run.rows
    tokens = {row.step: row.tokens for row in rows if row.step in (12_695, 94_767)}
    assert tokens[12_695] == 20_155_564_032
    assert tokens[94_767] == 364_394_676_224 - 4_194_304


def test_opt_counts_its_chronicled_restarts() -> None:
    rebuilt = rebuild(OPT)
    # ~90 restarts (final_update.md:24) are told as dated gaps, rollbacks and automatic
    # recoveries, plus the unexplained time between anchors.
    assert 70 <= rebuilt.run.interruptions <= 140


def test_opt_is_priced_at_its_speed_after_the_upgrade() -> None:
    # OPT-175B ran at 27.7 s an update in November and at ~20.8 s from about 41k steps
    # (run12.jpeg, run12_upgrade_shift.jpeg), 21.04 s with its checkpoints. A week and
    # more after the change the rest of the run is priced at the new speed (the engine
    # before the level-shift fix: 25.2, 24.3 and 23.3 s at these steps).
    rebuilt = rebuild(OPT)
    replayed = replay(rebuilt.facts, rebuilt.run.rows, interval_seconds=3600.0)
    for step in (60_000, 71_000, 90_000):
        revision = next(r for r in replayed.revisions if r.estimate.step >= step)
        assert revision.estimate.step_seconds == pytest.approx(20.8 + 60 / 250, rel=0.04)


def test_the_real_scale_benchmark_runs_quickly_to_the_end() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.eta_real_scale", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| bloom-176b | 300 s |" in result.stdout
    assert "| steps-120s | 30 s |" in result.stdout


def test_coverage_is_also_shown_over_each_third_of_the_seeds() -> None:
    # In seed order, disjoint; the last third takes what does not divide.
    assert thirds([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]) == pytest.approx((0.85, 0.65, 0.4))
    assert thirds([0.9, 0.8]) == ()


def test_by_default_every_seed_is_replayed_at_both_intervals() -> None:
    default = cases(False)
    assert {case.name for case in default} == set(run_names())
    for interval in (30.0, 300.0):
        seeds = {
            c.seed for c in default if c.name == "steps-120s" and c.interval_seconds == interval
        }
        assert seeds == set(range(SEEDS))
    assert FINE_SEEDS == SEEDS


def test_a_subset_of_runs_can_be_replayed_with_fewer_seeds_at_30_s() -> None:
    found = cases(False, ["steps-120s", "bloom-176b"], 24)
    regime = [case for case in found if case.name == "steps-120s"]
    assert {case.seed for case in regime if case.interval_seconds == 30.0} == set(range(24))
    assert {case.seed for case in regime if case.interval_seconds == 300.0} == set(range(SEEDS))
    # A rebuilt public run is one run: both intervals whatever the seed count.
    assert [(c.name, c.interval_seconds) for c in found if c.real] == [
        ("bloom-176b", 30.0),
        ("bloom-176b", 300.0),
    ]


@pytest.mark.parametrize(
    "arguments",
    [
        ["--runs", "no-such-run"],
        ["--runs", ","],
        ["--fine-seeds", "0"],
        ["--fine-seeds", str(SEEDS + 1)],
    ],
)
def test_the_benchmark_refuses_an_unknown_run_or_seed_count(arguments: list[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(arguments)
    assert refused.value.code == 2
