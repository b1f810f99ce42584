"""benchmarks.reference_gpu's pure parts (log parsing, summaries, FLOPs, the trainer's
flags and environment) and benchmarks.reference_gpu_compare's pricing of a measurement."""

import dataclasses
import math
import time
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from benchmarks import reference_gpu
from benchmarks.reference_gpu import (
    GPU_SHAPES,
    LONG_SHAPES,
    MIN_STEADY_STEPS,
    TINY_SHAPES,
    ZERO_SHAPES,
    Shape,
    StepLine,
    StepLogLine,
    model_flops_per_token,
    out_of_memory,
    parameter_count,
    parse_step_line,
    parse_step_log,
    quantile,
    shape_result,
    steady_clock_and_power,
    steady_seconds,
    summarize,
    trainer_environment,
)
from benchmarks.reference_gpu_compare import (
    catalog_gpu,
    compare_record,
    summary,
    workload_and_layout,
)
from trainplan.planner.catalog import Catalog
from trainplan.planner.flops import model_flops_per_token as planner_flops_per_token
from trainplan.planner.shapes import parameter_count as planner_parameter_count
from trainplan.planner.steptime import step_time
from trainplan.runtime.config import load_config
from trainplan.runtime.train import StepLog

ALL_SHAPES = (*GPU_SHAPES, *LONG_SHAPES, *ZERO_SHAPES, *TINY_SHAPES)


def test_a_trainer_step_line_parses() -> None:
    line = "[trainplan] step 12/30 loss 10.8123 step 125.5 ms tokens/s 132765"
    assert parse_step_line(line) == StepLine(12, 30, 10.8123, 0.1255, 132765)
    assert parse_step_line(line + "\n") == StepLine(12, 30, 10.8123, 0.1255, 132765)
    nan = parse_step_line("[trainplan] step 3/5 loss nan step 9.0 ms tokens/s 14222")
    assert nan is not None
    assert math.isnan(nan.loss)


@pytest.mark.parametrize(
    "line",
    [
        "[trainplan] plan -: tp1 pp1 dp1 zero0 | micro 2 x data 1 x accumulation 1 = global 2",
        "[trainplan] done: 5 steps, 640 tokens",
        "[trainplan] step 12/30 loss 10.8 step 123.4 ms",  # cut short
        "step 12/30 loss 10.8 step 123.4 ms tokens/s 1",  # not the trainer's
        "",
    ],
)
def test_other_lines_are_not_steps(line: str) -> None:
    assert parse_step_line(line) is None


def test_the_step_log_the_trainer_writes_parses(tmp_path: Path) -> None:
    path = tmp_path / "steps"
    log = StepLog(str(path), True)
    log.write(1, 10.5, 1, 8)
    log.write(2, float("nan"), 1, 8)
    log.close()
    with path.open("a", encoding="utf-8") as file:
        file.write("3 10.1")  # a line cut short by a stopped trainer
    lines = parse_step_log(path.read_text(encoding="utf-8"))
    assert [(line.step, line.micro_batches, line.sequences) for line in lines] == [
        (1, 1, 8),
        (2, 1, 8),
    ]
    assert lines[0].loss == 10.5
    assert math.isnan(lines[1].loss)


def test_quantiles_are_numpys_default() -> None:
    values = [0.31, 0.29, 0.5, 0.3, 0.33, 0.28, 0.301]
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    assert quantile([2.0], 0.9) == 2.0
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)


def test_warm_up_steps_are_left_out_of_the_summary() -> None:
    steps = {1: 5.0, 2: 0.4, 3: 0.2, 4: 0.1, 5: 0.3}
    steady = steady_seconds(steps, warmup_steps=2)
    assert steady == [0.2, 0.1, 0.3]
    stats = summarize(steady)
    assert stats["count"] == 3
    assert stats["median"] == pytest.approx(0.2)
    assert stats["p10"] == pytest.approx(0.12)
    assert stats["p90"] == pytest.approx(0.28)
    assert stats["mean"] == pytest.approx(0.2)


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda shape: shape.name)
def test_parameters_and_flops_agree_with_the_planner(shape: Shape, catalog: Catalog) -> None:
    workload, _ = workload_and_layout(_record(shape), catalog.gpu("H200-SXM-141GB"))
    assert parameter_count(shape) == planner_parameter_count(workload.shape)
    # The planner counts matrix FLOPs only; 6 N also counts the norms' weights.
    norms = 2 * shape.hidden_size * shape.layers + shape.hidden_size
    assert model_flops_per_token(shape) == pytest.approx(
        planner_flops_per_token(workload.shape) + 6 * norms
    )


def test_flops_count_a_tied_embedding_once_and_an_untied_input_embedding_not() -> None:
    tied = TINY_SHAPES[0]
    untied = dataclasses.replace(tied, tied_embeddings=False)
    assert parameter_count(untied) - parameter_count(tied) == tied.vocab_size * tied.hidden_size
    assert model_flops_per_token(untied) == model_flops_per_token(tied)
    expected = 6 * parameter_count(tied) + 12 * tied.layers * tied.hidden_size * 64
    assert model_flops_per_token(tied) == expected


@pytest.mark.parametrize("shape", ALL_SHAPES, ids=lambda shape: shape.name)
def test_the_trainer_reads_the_shape_from_the_flags(shape: Shape) -> None:
    config = load_config(shape.trainer_flags(), environ={"TRAINPLAN_TOTAL_STEPS": "999"})
    assert {name: getattr(config.model, name) for name in shape.model()} == shape.model()
    layout = config.layout
    assert (layout.world_size, layout.tensor_parallel, layout.data_parallel) == (1, 1, 1)
    assert layout.zero_stage == shape.zero_stage
    assert layout.gradient_accumulation_steps == shape.accumulation_steps
    assert layout.micro_batch_size == shape.micro_batch_size
    assert layout.global_batch_size == shape.micro_batch_size * shape.accumulation_steps
    assert config.total_steps == shape.steps
    assert config.activation_checkpointing == shape.activation_checkpointing
    assert config.precision == shape.precision
    assert config.optimizer == shape.optimizer
    assert config.tokens_per_step == shape.tokens_per_step
    assert config.log_interval_steps == 1
    assert config.checkpoint_dir is None
    assert shape.warmup_steps + MIN_STEADY_STEPS <= shape.steps


def test_the_trainer_environment_drops_the_plan_and_torchrun() -> None:
    env = trainer_environment(
        {
            "PATH": "/bin",
            "PYTHONPATH": "/elsewhere",
            "TRAINPLAN_CHECKPOINT_DIR": "/ckpt",
            "TRAINPLAN_METRICS_PORT": "9400",
            "RANK": "3",
            "WORLD_SIZE": "8",
            "MASTER_ADDR": "10.0.0.1",
            "TORCHELASTIC_MAX_RESTARTS": "3",
            "CUDA_VISIBLE_DEVICES": "0",
        },
        "/repo/operator",
    )
    assert env == {
        "PATH": "/bin",
        "PYTHONPATH": "/repo/operator:/elsewhere",
        "CUDA_VISIBLE_DEVICES": "0",
        "PYTHONUNBUFFERED": "1",
    }


def _lines(seconds: list[float]) -> list[StepLine]:
    return [StepLine(i + 1, len(seconds), 10.0, s, 1) for i, s in enumerate(seconds)]


def test_a_shape_result_summarizes_the_steady_steps() -> None:
    shape = dataclasses.replace(GPU_SHAPES[1], steps=8, warmup_steps=3)
    describe = {"parameters": parameter_count(shape), "tokens_per_step": shape.tokens_per_step}
    result = shape_result(shape, _lines([3.0, 0.5, 0.4, 0.2, 0.2, 0.3, 0.2, 0.2]), [], describe)
    assert result["status"] == "ok"
    assert result["step_seconds"]["count"] == 5
    assert result["step_seconds"]["median"] == pytest.approx(0.2)
    flops = model_flops_per_token(shape) * shape.tokens_per_step
    assert result["model_tflops"] == pytest.approx(flops / 0.2 / 1e12)
    assert result["hardware_tflops"] == pytest.approx(result["model_tflops"])


def test_a_shape_result_refuses_too_few_steps_and_a_different_model() -> None:
    shape = dataclasses.replace(GPU_SHAPES[0], steps=8, warmup_steps=5)
    few = shape_result(shape, _lines([1.0] * 7), [], None)
    assert few["status"].startswith("failed: 2 steady steps")
    other = shape_result(shape, _lines([1.0] * 8), [], {"parameters": 1})
    assert "the trainer counts 1 parameters" in other["status"]


def test_a_step_log_of_other_micro_batches_is_no_measurement() -> None:
    shape = dataclasses.replace(ZERO_SHAPES[3], steps=8, warmup_steps=2)
    right = [StepLogLine(i + 1, 10.0, 4, 16) for i in range(8)]
    assert shape_result(shape, _lines([1.0] * 8), right, None)["status"] == "ok"
    fewer = [StepLogLine(i + 1, 10.0, 1, 4) for i in range(8)]
    status = shape_result(shape, _lines([1.0] * 8), fewer, None)["status"]
    assert "[4] sequences per step" in status
    assert "[1] micro-batches per step" in status


def test_a_full_recompute_shape_executes_more_than_its_model_flops() -> None:
    shape = GPU_SHAPES[-1]
    assert shape.activation_checkpointing == "full"
    result = shape_result(shape, _lines([1.0] * shape.steps), [], None)
    assert 1.2 < result["hardware_tflops"] / result["model_tflops"] < 1.34


def test_a_trainer_on_another_device_is_no_measurement() -> None:
    shape = dataclasses.replace(GPU_SHAPES[0], steps=8, warmup_steps=2)
    result = shape_result(shape, _lines([1.0] * 8), [], {"device": "cpu"}, "cuda")
    assert result["status"] == "failed: the trainer ran on cpu, not cuda"
    assert shape_result(shape, _lines([1.0] * 8), [], {"device": "cuda"}, "cuda")["status"] == "ok"


def test_out_of_memory_is_tried_again_with_half_the_micro_batch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs: list[int] = []

    def fake_run_shape(shape: Shape, *args: object, **kwargs: object) -> dict[str, object]:
        runs.append(shape.micro_batch_size)
        if len(runs) == 1:
            return {"status": "failed: 0 steady steps", "out_of_memory": True}
        return {"status": "ok"}

    monkeypatch.setattr(reference_gpu, "run_shape", fake_run_shape)
    deadline = time.monotonic() + 600
    nvml = cast(reference_gpu.Nvml, None)
    record = reference_gpu._measure(GPU_SHAPES[0], tmp_path, deadline, nvml, "", device="cuda")
    assert runs == [16, 8]
    assert record == {"status": "ok", "retried_after_out_of_memory_at_micro_batch": 16}
    runs.clear()
    late = reference_gpu._measure(
        GPU_SHAPES[0], tmp_path, time.monotonic() + 5, nvml, "", device="cuda"
    )
    assert runs == [16]
    assert late["out_of_memory"] is True


def test_out_of_memory_is_recognised() -> None:
    assert out_of_memory(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"])
    assert not out_of_memory(["[trainplan] done: 30 steps"])


def _record(shape: Shape, median: float | None = None) -> dict[str, object]:
    record: dict[str, object] = {
        **shape.identity(),
        "status": "ok" if median is not None else "failed: exit 1",
    }
    if median is not None:
        record["step_seconds"] = {"median": median, "p10": median * 0.99, "p90": median * 1.02}
        record["nvml_peak_memory_used_bytes"] = 30 * 2**30
    return record


@pytest.mark.parametrize(
    ("device", "catalog_name"),
    [("NVIDIA H200", "H200-SXM-141GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB")],
)
def test_the_device_name_finds_its_catalog_gpu(
    catalog: Catalog, device: str, catalog_name: str
) -> None:
    assert catalog_gpu(catalog, {"device": {"name": device}}, None).name == catalog_name
    assert catalog_gpu(catalog, {"device": {"name": "cpu"}}, catalog_name).name == catalog_name


def test_a_measurement_is_compared_with_the_step_time_of_its_exact_layout(
    catalog: Catalog,
) -> None:
    gpu = catalog.gpu("H200-SXM-141GB")
    shape = GPU_SHAPES[-1]
    workload, layout = workload_and_layout(_record(shape), gpu)
    assert layout.describe() == "TP1 PP1 DP1 mb8 ga1 ZeRO-0 full-recompute"
    assert workload.tokens_per_step == shape.tokens_per_step
    assert layout.gpus == 1
    planned = step_time(workload, layout, catalog.calibration).step_seconds
    comparison = compare_record(_record(shape, planned * 1.25), gpu, catalog.calibration)
    assert comparison.planned_seconds == pytest.approx(planned)
    assert comparison.error == pytest.approx(1 / 1.25 - 1)
    assert comparison.planned_p10 == pytest.approx(
        planned * catalog.calibration.step_seconds_ratio_p10
    )
    assert comparison.inside_range is False
    assert comparison.planned_fits
    assert comparison.measured_memory_bytes == 30 * 2**30
    inside = compare_record(_record(shape, planned), gpu, catalog.calibration)
    assert inside.inside_range is True
    assert inside.error == pytest.approx(0.0)
    failed = compare_record(_record(shape), gpu, catalog.calibration)
    assert failed.error is None
    assert failed.planned_seconds == pytest.approx(planned)
    assert summary([comparison, inside, failed]).startswith("2 shapes: mean absolute error 10.0%")


def test_the_clock_and_power_are_those_of_the_steady_steps() -> None:
    arrivals = [10.0, 11.0, 12.0, 13.0, 14.0]  # step lines; the first 2 are the warm-up
    samples = [
        (9.0, 300, 80.0),  # start-up
        (11.5, 1500, 500.0),  # warm-up
        (12.0, 1900, 650.0),
        (12.5, 1950, 690.0),
        (14.0, 1920, 660.0),
        (15.0, 400, 90.0),  # after the last step
    ]
    assert steady_clock_and_power(samples, arrivals, warmup_steps=2) == {
        "nvml_sm_clock_median_mhz": 1920.0,
        "nvml_power_median_watts": 660.0,
    }
    assert steady_clock_and_power(samples, arrivals[:2], warmup_steps=2) == {}
    assert steady_clock_and_power([], arrivals, warmup_steps=2) == {}
