"""Serving capacity (planner/serving.py, pure) and `trainplan serve`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainplan.cli.main import main
from trainplan.planner import Catalog
from trainplan.planner.layout import Workload
from trainplan.planner.serving import (
    NoServingLayoutError,
    ServingLoad,
    kv_cache_bytes_per_token,
    plan_serving,
    price_replica,
)

LOAD = ServingLoad(requests_per_second=10, prompt_tokens=1000, output_tokens=200)


def llama3_8b(catalog: Catalog, gpu: str = "H100-SXM5-80GB") -> tuple[Workload, float]:
    preset = catalog.model("llama3-8b")
    workload = Workload(
        shape=preset.shape, gpu=catalog.gpu(gpu), gpus_per_node=8, global_batch_size=1
    )
    return workload, preset.parameters


def test_grouped_query_attention_shrinks_the_cache(catalog: Catalog) -> None:
    shape = catalog.model("llama3-8b").shape  # 32 layers, 8 kv heads of 128
    assert kv_cache_bytes_per_token(shape, "bf16", 1) == 2 * 32 * 8 * 128 * 2  # 128 KiB
    assert kv_cache_bytes_per_token(shape, "bf16", 8) == 2 * 32 * 1 * 128 * 2
    # More ranks than kv heads replicate them: no further saving.
    assert kv_cache_bytes_per_token(shape, "bf16", 16) == kv_cache_bytes_per_token(shape, "bf16", 8)
    assert kv_cache_bytes_per_token(shape, "fp8", 1) == 2 * 32 * 8 * 128


def test_batching_raises_throughput_until_the_cache_is_full(catalog: Catalog) -> None:
    workload, parameters = llama3_8b(catalog)
    calibration = catalog.calibration
    one, many = (
        price_replica(workload, parameters, LOAD, calibration, tensor=1, batch=b) for b in (1, 64)
    )
    # Decoding reads all the weights for every step: at least their read at the HBM peak,
    # and 64 sequences cost less than twice one (memory-bound).
    hbm = workload.gpu.hbm_bandwidth_bytes_per_second
    assert one.decode_step_seconds > one.weights_bytes / hbm
    assert many.decode_step_seconds < 2 * one.decode_step_seconds
    assert many.output_tokens_per_second > 20 * one.output_tokens_per_second
    huge = price_replica(workload, parameters, LOAD, calibration, tensor=1, batch=4096)
    assert not huge.fits
    assert one.prefill_seconds < 0.5


def test_the_plan_meets_the_targets_with_the_fewest_gpus(catalog: Catalog) -> None:
    workload, parameters = llama3_8b(catalog)
    load = replace(LOAD, time_per_output_token_seconds=0.03, time_to_first_token_seconds=0.5)
    result = plan_serving(workload, parameters, load, catalog.calibration)
    replica = result.replica
    assert replica.fits
    assert replica.decode_step_seconds <= 0.03
    assert replica.prefill_seconds <= 0.5
    assert result.replicas * replica.requests_per_second >= load.requests_per_second
    assert result.gpus == result.replicas * replica.tensor
    looser = plan_serving(
        workload, parameters, replace(load, time_per_output_token_seconds=None), catalog.calibration
    )
    assert looser.gpus <= result.gpus


def test_an_impossible_target_says_so(catalog: Catalog) -> None:
    workload, parameters = llama3_8b(catalog)
    load = replace(LOAD, time_per_output_token_seconds=1e-6)
    with pytest.raises(NoServingLayoutError, match="within the latency targets"):
        plan_serving(workload, parameters, load, catalog.calibration)


def test_serve_command(tmp_path: Path) -> None:
    spec = tmp_path / "serve.yaml"
    spec.write_text(
        "model: {preset: llama3-70b}\n"
        "hardware: {gpuType: H100-SXM5-80GB}\n"
        "precision: fp8\n"
        "requests: {perSecond: 20, promptTokens: 2000, outputTokens: 500}\n"
        "latency: {timePerOutputTokenSeconds: 0.05}\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    result = runner.invoke(main, ["serve", str(spec), "-o", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["gpus"] == document["replicas"] * document["tensor"]
    assert document["timePerOutputTokenSeconds"] <= 0.05
    table = runner.invoke(main, ["serve", str(spec)])
    assert table.exit_code == 0
    assert "Time per output token" in table.output
    spec.write_text("model: {preset: llama3-70b}\nprecision: int3\n", encoding="utf-8")
    bad = runner.invoke(main, ["serve", str(spec)])
    assert bad.exit_code == 2
    assert "requests: Field required" in bad.output
    assert "precision" in bad.output
