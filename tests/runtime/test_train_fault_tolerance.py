"""A worker of a 2-process torchrun run is killed mid-run: torchrun restarts the group,
the trainer resumes from its last checkpoint, re-runs exactly the steps after it and
finishes with the right final checkpoint."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import torch

from tests.runtime.train_harness import (
    DATASET_TOKENS,
    TINY_MODEL,
    flags,
    read_step_log,
    torchrun,
    wait_for,
    worker_pids,
)
from trainplan.runtime.checkpoint import checkpoint_name, list_checkpoints
from trainplan.runtime.dataset import ensure_dataset

TOTAL_STEPS = 20
INTERVAL_STEPS = 5
KILL_AFTER_STEP = 8


def test_killed_worker_resumes_from_last_checkpoint(tmp_path: Path) -> None:
    data = ensure_dataset(tmp_path / "data.bin", DATASET_TOKENS)
    step_log = tmp_path / "steps.log"
    checkpoints = tmp_path / "checkpoints"
    args = TINY_MODEL + flags(
        data=data,
        total_steps=TOTAL_STEPS,
        micro_batch_size=2,
        global_batch_size=8,
        zero_stage=3,
        precision="fp32",
        checkpoint_dir=checkpoints,
        checkpoint_interval_steps=INTERVAL_STEPS,
        sleep_per_step_seconds=0.25,
        step_log=step_log,
    )
    output = tmp_path / "torchrun.out"
    with torchrun(2, args, output, torchrun_args=["--max-restarts=1"]) as process:
        wait_for(
            lambda: len(read_step_log(step_log)) >= KILL_AFTER_STEP,
            120,
            f"step {KILL_AFTER_STEP}",
            process,
        )
        workers = worker_pids(process.pid)
        assert sorted(workers) == [0, 1], workers
        killed_at = len(read_step_log(step_log))
        os.kill(workers[1], signal.SIGKILL)
        process.wait(timeout=150)
    text = output.read_text(encoding="utf-8")
    assert process.returncode == 0, text

    resumes = [int(step) for step in re.findall(r"resumed from checkpoint step (\d+)", text)]
    assert len(resumes) == 1, text
    resumed = resumes[0]
    assert resumed % INTERVAL_STEPS == 0
    assert INTERVAL_STEPS <= resumed <= killed_at + 1  # a save may finish as the kill lands

    steps = [line.step for line in read_step_log(step_log)]
    restart = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])
    before, after = steps[:restart], steps[restart:]
    assert before == list(range(1, len(before) + 1))
    assert len(before) >= resumed  # the checkpointed steps had all run before the kill
    # After the restart: each step after the checkpoint exactly once, none at or before.
    assert after == list(range(resumed + 1, TOTAL_STEPS + 1))

    kept = list_checkpoints(checkpoints)
    assert [step for step, _ in kept] == [TOTAL_STEPS - INTERVAL_STEPS, TOTAL_STEPS]
    final = torch.load(checkpoints / checkpoint_name(TOTAL_STEPS), weights_only=True)
    assert final["step"] == TOTAL_STEPS
    assert final["data_position"] == TOTAL_STEPS
    assert final["tokens"] == TOTAL_STEPS * 8 * 64
    assert len(final["rng"]) == 2
    assert not [entry for entry in checkpoints.iterdir() if ".tmp-" in entry.name]
