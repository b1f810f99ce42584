"""The reference trainer under a real 2-process torchrun (gloo, CPU) on the generated
dataset: it learns, reports the right progress on its metrics endpoint, and runs the
plan's batch split."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.train_harness import (
    DATASET_TOKENS,
    SEQUENCE_LENGTH,
    TINY_MODEL,
    flags,
    free_port,
    read_step_log,
    scrape,
    torchrun,
    wait_for,
)
from trainplan.runtime.dataset import ensure_dataset

TOTAL_STEPS = 30
MICRO_BATCH = 2
DATA_PARALLEL = 2
ACCUMULATION = 2
GLOBAL_BATCH = MICRO_BATCH * DATA_PARALLEL * ACCUMULATION


def test_two_process_run_learns_and_reports(tmp_path: Path) -> None:
    data = ensure_dataset(tmp_path / "data.bin", DATASET_TOKENS)
    step_log = tmp_path / "steps.log"
    describe_file = tmp_path / "describe.json"
    port = free_port()
    # The plan arrives as the launcher's environment; flags add what the plan lacks.
    env = {
        "TRAINPLAN_TENSOR_PARALLEL": "1",
        "TRAINPLAN_PIPELINE_PARALLEL": "1",
        "TRAINPLAN_DATA_PARALLEL": str(DATA_PARALLEL),
        "TRAINPLAN_ZERO_STAGE": "0",
        "TRAINPLAN_MICRO_BATCH_SIZE": str(MICRO_BATCH),
        "TRAINPLAN_GRADIENT_ACCUMULATION_STEPS": str(ACCUMULATION),
        "TRAINPLAN_GLOBAL_BATCH_SIZE": str(GLOBAL_BATCH),
        "TRAINPLAN_TOTAL_STEPS": str(TOTAL_STEPS),
        "TRAINPLAN_PRECISION": "fp32",
        "TRAINPLAN_OPTIMIZER": "adamw",
        "TRAINPLAN_ACTIVATION_CHECKPOINTING": "none",
        "TRAINPLAN_METRICS_PORT": str(port),
    }
    args = TINY_MODEL + flags(
        data=data,
        metrics_address="127.0.0.1",
        linger_seconds=5,
        step_log=step_log,
        describe=describe_file,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    with torchrun(2, args, tmp_path / "torchrun.out", env=env) as process:
        wait_for(
            lambda: len(read_step_log(step_log)) >= TOTAL_STEPS,
            120,
            f"{TOTAL_STEPS} steps in the step log",
            process,
        )
        metrics = scrape(url)  # lingering: the last step is in, the server still up
        process.wait(timeout=60)
    output = (tmp_path / "torchrun.out").read_text(encoding="utf-8")
    assert process.returncode == 0, output

    lines = read_step_log(step_log)
    assert [line.step for line in lines] == list(range(1, TOTAL_STEPS + 1))
    first = sum(line.loss for line in lines[:5]) / 5
    last = sum(line.loss for line in lines[-5:]) / 5
    assert last < first - 1.0, (first, last)
    # Every step ran the plan's accumulation on each rank and the global batch in all.
    assert {line.micro_batches for line in lines} == {ACCUMULATION}
    assert {line.sequences for line in lines} == {GLOBAL_BATCH}

    tokens = TOTAL_STEPS * GLOBAL_BATCH * SEQUENCE_LENGTH
    assert metrics["trainplan_train_step"]["trainplan_train_step"] == TOTAL_STEPS
    assert metrics["trainplan_train_total_steps"]["trainplan_train_total_steps"] == TOTAL_STEPS
    assert metrics["trainplan_train_tokens"]["trainplan_train_tokens"] == tokens
    # The reporter leaves the first step after a start out of the step-time histogram.
    histogram = metrics["trainplan_train_step_seconds"]
    assert histogram["trainplan_train_step_seconds_count"] == TOTAL_STEPS - 1
    assert histogram["trainplan_train_step_seconds_sum"] > 0
    loss = metrics["trainplan_train_loss"]["trainplan_train_loss"]
    assert abs(loss - lines[-1].loss) < 1e-4

    described = json.loads(describe_file.read_text(encoding="utf-8"))
    layout = described["layout"]
    assert (
        layout["micro_batch_size"] * layout["data_parallel"] * layout["gradient_accumulation_steps"]
        == layout["global_batch_size"]
        == GLOBAL_BATCH
    )
    assert (layout["data_parallel"], layout["gradient_accumulation_steps"]) == (2, 2)
    assert described["world_size"] == 2
    assert described["data_parallel_strategy"] == "ddp"
    assert described["tokens_per_step"] == GLOBAL_BATCH * SEQUENCE_LENGTH
    assert f"metrics at {url}" in output
