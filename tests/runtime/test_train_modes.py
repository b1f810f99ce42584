"""The reference trainer's modes: each precision and recompute level as one process,
ZeRO-3 and tensor parallelism under 2-process torchrun, configuration errors (exit 3)
and the refusal to resume another layout's checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.train_harness import (
    DATASET_TOKENS,
    TINY_MODEL,
    flags,
    read_step_log,
    run_single,
    run_torchrun,
)
from trainplan.runtime.checkpoint import list_checkpoints
from trainplan.runtime.dataset import ensure_dataset
from trainplan.runtime.schema import CONFIG_ERROR_EXIT_CODE
from trainplan.runtime.train import main


def _describe(path: Path) -> dict[str, Any]:
    described: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return described


# --- One process: precisions and recompute levels ---------------------------------------

# Each precision and each recompute level once, the model variants spread over them
# (test_train_units checks what each recompute level recomputes).
SINGLE_MODES = [
    pytest.param("bf16", "none", flags(gated_mlp=True), id="bf16-none-swiglu"),
    pytest.param("fp16", "selective", flags(tied_embeddings=True), id="fp16-selective-tied"),
    pytest.param("fp32", "full", flags(kv_heads=2), id="fp32-full-gqa"),
]


@pytest.mark.parametrize(("precision", "recompute", "variant"), SINGLE_MODES)
def test_single_process_modes(
    tmp_path: Path, precision: str, recompute: str, variant: list[str]
) -> None:
    data = ensure_dataset(tmp_path / "data.bin", DATASET_TOKENS)
    step_log, describe_file = tmp_path / "steps.log", tmp_path / "describe.json"
    finished = run_single(
        TINY_MODEL
        + variant
        + flags(
            data=data,
            total_steps=4,
            micro_batch_size=2,
            gradient_accumulation_steps=2,
            precision=precision,
            activation_checkpointing=recompute,
            step_log=step_log,
            describe=describe_file,
        )
    )
    assert finished.returncode == 0, finished.stderr
    lines = read_step_log(step_log)
    assert [line.step for line in lines] == [1, 2, 3, 4]
    assert all(math.isfinite(line.loss) for line in lines)
    assert {(line.micro_batches, line.sequences) for line in lines} == {(2, 4)}
    described = _describe(describe_file)
    assert described["world_size"] == 1
    assert described["precision"] == precision
    assert described["activation_checkpointing"] == recompute
    assert described["autocast"] == (precision != "fp32")
    assert described["gradient_scaler"] == (precision == "fp16")
    assert described["data_parallel_strategy"] == "none"


# --- Two processes: ZeRO-3 and tensor parallelism ----------------------------------------


def test_zero3_shards_parameters_over_data_parallel(tmp_path: Path) -> None:
    describe_file = tmp_path / "describe.json"
    finished = run_torchrun(
        2,
        TINY_MODEL
        + flags(
            total_steps=3,
            micro_batch_size=1,
            zero_stage=3,
            precision="bf16",
            describe=describe_file,
        ),
        tmp_path / "torchrun.out",
    )
    assert finished.returncode == 0, finished.stdout
    described = _describe(describe_file)
    assert described["data_parallel_strategy"] == "fsdp2"
    assert described["layout"]["data_parallel"] == 2
    placements = described["parameter_placements"]
    assert placements
    for name, placement in placements.items():
        assert placement["type"] == "DTensor", name
        assert placement["mesh_dims"] == ["dp"], name
        assert placement["placements"] == ["Shard(dim=0)"], name
        rows = placement["global_shape"][0]
        assert placement["local_shape"][0] == (rows + 1) // 2, name
    assert "done: 3 steps" in finished.stdout


def test_tensor_parallel_matches_one_process(tmp_path: Path) -> None:
    """TP=2 with sequence parallelism (and ZeRO-1 over a data degree of 1) on gloo trains
    the same model as one process: the same losses (fp32; one data-parallel rank in both,
    so the same data)."""
    data = ensure_dataset(tmp_path / "data.bin", DATASET_TOKENS)
    common = TINY_MODEL + flags(
        gated_mlp=True,
        tied_embeddings=True,
        data=data,
        total_steps=4,
        micro_batch_size=2,
        gradient_accumulation_steps=2,
        precision="fp32",
    )
    single_log, parallel_log = tmp_path / "single.log", tmp_path / "tp.log"
    single = run_single(common + flags(step_log=single_log))
    assert single.returncode == 0, single.stderr
    describe_file = tmp_path / "describe.json"
    finished = run_torchrun(
        2,
        common
        + flags(
            tensor_parallel=2,
            sequence_parallel=True,
            zero_stage=1,
            step_log=parallel_log,
            describe=describe_file,
        ),
        tmp_path / "torchrun.out",
    )
    assert finished.returncode == 0, finished.stdout
    expected = [line.loss for line in read_step_log(single_log)]
    got = [line.loss for line in read_step_log(parallel_log)]
    assert len(got) == 4
    assert got == pytest.approx(expected, abs=2e-4)

    described = _describe(describe_file)
    assert described["layout"]["tensor_parallel"] == 2
    assert described["layout"]["sequence_parallel"] is True
    placements = described["parameter_placements"]
    column = placements["layers.0.attention.wq.weight"]
    assert column["mesh_dims"] == ["dp", "tp"]
    # tp splits a column-parallel weight's rows; FSDP (dp, size 1 here) shards the rows
    # again, which DTensor writes as a strided shard of dim 0.
    dp_placement, tp_placement = column["placements"]
    assert tp_placement == "Shard(dim=0)"
    assert "Shard(dim=0" in dp_placement
    assert column["local_shape"] == [32, 64]
    row = placements["layers.0.feed_forward.w2.weight"]
    assert row["placements"] == ["Shard(dim=0)", "Shard(dim=1)"]  # tp splits the inputs
    assert row["local_shape"] == [64, 128]


def test_zero_stages_accumulate_the_same_gradients(tmp_path: Path) -> None:
    """Two data-parallel ranks, two micro-batches a step (fp32): ZeRO-1 (one reduce-scatter
    a step) and ZeRO-2 (one a micro-batch), both keeping the gathered weights across the
    step's micro-batches, and ZeRO-3 (a reduce-scatter a micro-batch, weights gathered
    per layer) train the same model as DDP with `no_sync`: the same losses."""
    data = ensure_dataset(tmp_path / "data.bin", DATASET_TOKENS)
    common = TINY_MODEL + flags(
        data=data,
        total_steps=3,
        micro_batch_size=1,
        gradient_accumulation_steps=2,
        precision="fp32",
    )
    losses: dict[int, list[float]] = {}
    for stage in (0, 1, 2, 3):
        step_log = tmp_path / f"zero{stage}.log"
        finished = run_torchrun(
            2,
            common + flags(zero_stage=stage, step_log=step_log),
            tmp_path / f"zero{stage}.out",
        )
        assert finished.returncode == 0, finished.stdout
        lines = read_step_log(step_log)
        assert {(line.micro_batches, line.sequences) for line in lines} == {(2, 4)}
        losses[stage] = [line.loss for line in lines]
    assert len(losses[0]) == 3
    # The first step's loss is the initial model's; later ones follow the updates.
    assert losses[0][0] != losses[0][2]
    assert losses[1] == pytest.approx(losses[0], abs=2e-4)
    assert losses[2] == pytest.approx(losses[0], abs=2e-4)
    assert losses[3] == pytest.approx(losses[0], abs=2e-4)


# --- Configuration errors ------------------------------------------------------------------

CONFIG_ERRORS = [
    pytest.param(
        {"WORLD_SIZE": "2"},
        flags(data_parallel=1, tensor_parallel=1),
        "data 1 x tensor 1 x pipeline 1 = 1, but WORLD_SIZE is 2",
        id="layout-product",
    ),
    pytest.param(
        {},
        flags(micro_batch_size=2, gradient_accumulation_steps=2, global_batch_size=6),
        "micro 2 x data 1 x accumulation 2 = 4, but the global batch is 6",
        id="batch-split",
    ),
    pytest.param(
        {"WORLD_SIZE": "2", "TRAINPLAN_PIPELINE_PARALLEL": "2"},
        [],
        "use job.framework megatron, torchtitan or deepspeed",
        id="pipeline",
    ),
    pytest.param({"TRAINPLAN_PRECISION": "fp8"}, [], "no fp8 training", id="fp8"),
    pytest.param(
        {"WORLD_SIZE": "2"},
        flags(tensor_parallel=2, attention_heads=6, kv_heads=3, hidden_size=96),
        "kv heads 3 is not divisible by the tensor degree 2",
        id="heads-vs-tensor",
    ),
    pytest.param(
        {"TRAINPLAN_TOTAL_STEPS": "ten"},
        [],
        "TRAINPLAN_TOTAL_STEPS='ten': not an integer",
        id="parse",
    ),
    pytest.param({}, flags(data="/nonexistent/tokens.bin"), "does not exist", id="data"),
]


@pytest.mark.parametrize(("env", "args", "message"), CONFIG_ERRORS)
def test_configuration_errors_exit_3(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    args: list[str],
    message: str,
) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(args) == CONFIG_ERROR_EXIT_CODE
    stderr = capsys.readouterr().err
    assert message in stderr
    lines = stderr.splitlines()
    assert lines
    assert all(line.startswith("[trainplan] configuration error: ") for line in lines)


def test_configuration_error_is_the_process_exit_code() -> None:
    finished = run_single(flags(pipeline_parallel=2, precision="fp8"))
    assert finished.returncode == CONFIG_ERROR_EXIT_CODE
    problems = finished.stderr.splitlines()
    assert any("megatron, torchtitan or deepspeed" in line for line in problems)
    assert any("fp8" in line for line in problems)
    assert finished.stdout == ""


# --- Resume --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changed", "difference"),
    [
        pytest.param(
            flags(micro_batch_size=1, gradient_accumulation_steps=2),
            "micro_batch_size: checkpoint 2, now 1",
            id="batch-layout",
        ),
        pytest.param(flags(hidden_size=32), "hidden_size: checkpoint 64, now 32", id="shape"),
    ],
)
def test_resume_refuses_checkpoint_of_another_layout(
    tmp_path: Path, changed: list[str], difference: str
) -> None:
    checkpoints = tmp_path / "checkpoints"
    base = TINY_MODEL + flags(micro_batch_size=2, checkpoint_dir=checkpoints)
    first = run_single(base + flags(total_steps=2))
    assert first.returncode == 0, first.stderr
    assert (checkpoints / "step-00000002.pt").is_file()
    second = run_single(base + flags(total_steps=4) + changed)
    assert second.returncode == CONFIG_ERROR_EXIT_CODE, second.stderr
    assert "was written by a different layout or model" in second.stderr
    assert difference in second.stderr
    assert "step 3" not in second.stdout


def test_resume_continues_a_finished_run(tmp_path: Path) -> None:
    """A restart with more steps resumes from the last checkpoint, not from scratch."""
    checkpoints, step_log = tmp_path / "checkpoints", tmp_path / "steps.log"
    base = TINY_MODEL + flags(checkpoint_dir=checkpoints, step_log=step_log)
    assert run_single(base + flags(total_steps=2)).returncode == 0
    second = run_single(base + flags(total_steps=4))
    assert second.returncode == 0, second.stderr
    assert "resumed from checkpoint step 2" in second.stdout
    assert [line.step for line in read_step_log(step_log)] == [1, 2, 3, 4]


def test_damaged_newest_checkpoint_falls_back_and_none_readable_fails(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    base = TINY_MODEL + flags(checkpoint_dir=checkpoints)
    assert run_single(base + flags(total_steps=2)).returncode == 0
    (checkpoints / "step-00000003.pt").write_bytes(b"half a checkpoint")
    second = run_single(base + flags(total_steps=4))
    assert second.returncode == 0, second.stderr
    assert "resumed from checkpoint step 2" in second.stdout
    assert "step-00000003.pt (step 3) cannot be read" in second.stderr
    for _, path in list_checkpoints(checkpoints):
        path.write_bytes(b"garbage")
    third = run_single(base + flags(total_steps=6))
    assert third.returncode == 1
    assert "can be loaded; move them away to start over" in third.stderr
