"""The GPU series from the real NVML: runs where an NVIDIA GPU and driver are present."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest
from prometheus_client.parser import text_string_to_metric_families

from trainplan.runtime import TrainingReporter, schema
from trainplan.runtime.gpus import NvmlCollector

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml() -> Iterator[Any]:
    """pynvml, initialised; the test is skipped where NVML cannot start."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        pytest.skip(f"NVML unavailable ({error}): needs an NVIDIA GPU and driver")
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def test_collector_reads_every_device(nvml: Any) -> None:
    count = nvml.nvmlDeviceGetCount()
    assert count >= 1
    collector = NvmlCollector()
    try:
        assert collector.available
        assert collector.device_count == count
        families = {family.name: family for family in collector.collect()}
    finally:
        collector.close()
    assert set(families) == {spec.name for spec in schema.GPU_METRICS}
    for family in families.values():
        # power or utilisation may be unsupported on a MIG instance: at most one per device
        gpus = [sample.labels["gpu"] for sample in family.samples]
        assert len(gpus) == len(set(gpus))
        assert set(gpus) <= {str(index) for index in range(count)}
    for index in range(count):
        gpu = str(index)
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        values = {
            name: {s.labels["gpu"]: s.value for s in family.samples}.get(gpu)
            for name, family in families.items()
        }
        total = values["trainplan_gpu_memory_total_bytes"]
        used = values["trainplan_gpu_memory_used_bytes"]
        assert total is not None
        assert used is not None
        assert total == nvml.nvmlDeviceGetMemoryInfo(handle).total
        assert 2**30 <= total <= 2**40  # 1 GiB .. 1 TiB
        assert 0 <= used <= total
        utilization = values["trainplan_gpu_utilization_ratio"]
        assert utilization is None or 0.0 <= utilization <= 1.0
        watts = values["trainplan_gpu_power_watts"]
        assert watts is None or 1.0 <= watts <= 2000.0


def test_reporter_serves_the_gpus(nvml: Any) -> None:
    count = nvml.nvmlDeviceGetCount()
    with TrainingReporter(total_steps=1, port=0, address="127.0.0.1") as reporter:
        reporter.step(1, 1)
        assert reporter.url is not None
        with urllib.request.urlopen(reporter.url, timeout=10) as response:
            text = response.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    memory = families["trainplan_gpu_memory_total_bytes"]
    assert {s.labels["gpu"] for s in memory.samples} == {str(i) for i in range(count)}
    assert families["trainplan_train_step"].samples[0].value == 1
