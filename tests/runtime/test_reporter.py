"""TrainingReporter and NvmlCollector: what a scrape of the pod endpoint returns."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from trainplan.launcher import env as launcher_env
from trainplan.runtime import TrainingReporter, schema
from trainplan.runtime.gpus import NvmlCollector

NOW = 1_700_000_000.0

# DESIGN.md, "Metric names", written out literally: the contract these tests hold the code to.
DESIGN_POD_METRICS = {
    "trainplan_train_step",
    "trainplan_train_total_steps",
    "trainplan_train_step_seconds",
    "trainplan_train_tokens",
    "trainplan_train_loss",
    "trainplan_train_last_step_timestamp_seconds",
    "trainplan_train_checkpoint_step",
    "trainplan_train_checkpoint_seconds",
    "trainplan_gpu_utilization_ratio",
    "trainplan_gpu_memory_used_bytes",
    "trainplan_gpu_memory_total_bytes",
    "trainplan_gpu_power_watts",
}
DESIGN_HISTOGRAMS = {"trainplan_train_step_seconds", "trainplan_train_checkpoint_seconds"}
DESIGN_OPERATOR_METRICS = {
    "trainplan_plan_info",
    "trainplan_plan_phase",
    "trainplan_plan_gpus",
    "trainplan_plan_progress_ratio",
    "trainplan_plan_eta_seconds",
    "trainplan_plan_estimated_completion_timestamp_seconds",
    "trainplan_plan_step_seconds",
    "trainplan_plan_mfu",
    "trainplan_plan_failures_total",
    "trainplan_plan_gpu_hours",
    "trainplan_plan_deadline_timestamp_seconds",
    "trainplan_plan_lost_seconds",
    "trainplan_budget_gpu_hours",
}
ADDED_OPERATOR_METRICS = {
    "trainplan_calibration_step_seconds_factor",
    "trainplan_calibration_runs",
}
"""Added since DESIGN.md: a ClusterCalibration's factor and run count (docs/calibration.md)."""


class FakeMonotonic:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeDevice:
    utilization_percent: int
    memory_used_bytes: int
    memory_total_bytes: int
    power_milliwatts: int | None  # None: NVML says "not supported"


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """A stand-in for `pynvml` with the functions NvmlCollector uses."""

    def __init__(self, devices: list[FakeDevice], *, init_error: Exception | None = None):
        self.devices = devices
        self.init_error = init_error
        self.initialised = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> Any:
        return types.SimpleNamespace(gpu=handle.utilization_percent, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> Any:
        return types.SimpleNamespace(
            used=handle.memory_used_bytes,
            total=handle.memory_total_bytes,
            free=handle.memory_total_bytes - handle.memory_used_bytes,
        )

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        if handle.power_milliwatts is None:
            raise FakeNvmlError("Not Supported")
        return handle.power_milliwatts


def two_gpus() -> FakeNvml:
    return FakeNvml(
        [
            FakeDevice(37, 20 * 2**30, 80 * 2**30, 312_500),
            FakeDevice(100, 79 * 2**30, 80 * 2**30, 400_000),
        ]
    )


def scrape(url: str | None) -> dict[str, Metric]:
    assert url is not None
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict[str, Metric], name: str, **labels: str) -> float:
    """The one sample called `name` (a histogram's `_count`, `_sum`, `_bucket` too)."""
    family = families[name.removesuffix("_count").removesuffix("_sum").removesuffix("_bucket")]
    matches = [s.value for s in family.samples if s.name == name and s.labels == labels]
    assert len(matches) == 1, (name, labels, family.samples)
    return float(matches[0])


def gpu_values(families: dict[str, Metric], name: str) -> dict[str, float]:
    return {s.labels[schema.GPU_LABEL]: s.value for s in families[name].samples}


@pytest.fixture
def monotonic() -> FakeMonotonic:
    return FakeMonotonic()


@pytest.fixture
def make_reporter(monotonic: FakeMonotonic) -> Iterator[Callable[..., TrainingReporter]]:
    """TrainingReporter on 127.0.0.1, a free port, fake clocks, no NVML unless asked."""
    made: list[TrainingReporter] = []

    def make(**kwargs: Any) -> TrainingReporter:
        kwargs.setdefault("total_steps", 10)
        kwargs.setdefault("port", 0)
        kwargs.setdefault("address", "127.0.0.1")
        kwargs.setdefault("gpu_collector", False)
        kwargs.setdefault("clock", lambda: NOW)
        kwargs.setdefault("monotonic", monotonic)
        reporter = TrainingReporter(**kwargs)
        made.append(reporter)
        return reporter

    yield make
    for reporter in made:
        reporter.close()


# --- training series ------------------------------------------------------------------------


def test_steps_are_served(
    make_reporter: Callable[..., TrainingReporter], monotonic: FakeMonotonic
) -> None:
    reporter = make_reporter()
    assert reporter.url == f"http://127.0.0.1:{reporter.port}/metrics"
    reporter.step(1, 4096, loss=2.5)  # observes nothing: warm-up
    monotonic.advance(1.5)
    reporter.step(2, 8192, loss=2.25)
    monotonic.advance(2.0)
    reporter.step(3, 12288)  # no loss: the last one stays

    families = scrape(reporter.url)
    assert value(families, "trainplan_train_step") == 3
    assert value(families, "trainplan_train_total_steps") == 10
    assert value(families, "trainplan_train_tokens") == 12288
    assert value(families, "trainplan_train_loss") == 2.25
    assert value(families, "trainplan_train_last_step_timestamp_seconds") == NOW
    assert value(families, "trainplan_train_step_seconds_count") == 2
    assert value(families, "trainplan_train_step_seconds_sum") == pytest.approx(3.5)
    assert value(families, "trainplan_train_step_seconds_bucket", le="1.0") == 0
    assert value(families, "trainplan_train_step_seconds_bucket", le="2.5") == 2
    assert value(families, "trainplan_train_step_seconds_bucket", le="+Inf") == 2
    assert value(families, "trainplan_train_checkpoint_step") == 0
    assert value(families, "trainplan_train_checkpoint_seconds_count") == 0


def test_loss_is_nan_until_reported(make_reporter: Callable[..., TrainingReporter]) -> None:
    reporter = make_reporter()
    assert math.isnan(value(scrape(reporter.url), "trainplan_train_loss"))
    reporter.set_loss(3.0)
    assert value(scrape(reporter.url), "trainplan_train_loss") == 3.0
    reporter.set_total_steps(500)  # a framework learning its total late keeps the loss
    assert value(scrape(reporter.url), "trainplan_train_loss") == 3.0


def test_measured_step_seconds_are_observed_after_the_first_call(
    make_reporter: Callable[..., TrainingReporter], monotonic: FakeMonotonic
) -> None:
    reporter = make_reporter()
    reporter.step(1, 10, step_seconds=30.0)  # the first step (warm-up) is left out
    monotonic.advance(9.0)
    reporter.step(2, 20, step_seconds=0.25)  # the caller's measurement wins
    families = scrape(reporter.url)
    assert value(families, "trainplan_train_step_seconds_count") == 1
    assert value(families, "trainplan_train_step_seconds_sum") == 0.25


def test_calls_every_few_steps_observe_the_mean_step(
    make_reporter: Callable[..., TrainingReporter], monotonic: FakeMonotonic
) -> None:
    reporter = make_reporter()
    reporter.step(10, 100)
    monotonic.advance(5.0)
    reporter.step(20, 200)  # 10 steps in 5 s
    monotonic.advance(1.0)
    reporter.step(20, 200)  # the step did not advance: nothing to observe
    families = scrape(reporter.url)
    assert value(families, "trainplan_train_step_seconds_count") == 1
    assert value(families, "trainplan_train_step_seconds_sum") == 0.5


def test_checkpoints(
    make_reporter: Callable[..., TrainingReporter], monotonic: FakeMonotonic
) -> None:
    reporter = make_reporter()
    reporter.step(1, 10)
    monotonic.advance(1.0)
    reporter.step(2, 20)
    monotonic.advance(20.0)  # writing the checkpoint
    reporter.checkpoint(2, 20.0)
    monotonic.advance(1.0)
    reporter.step(3, 30)  # 1 s: the checkpoint is not part of the step
    monotonic.advance(12.5)
    reporter.checkpoint(3, 12.5)

    families = scrape(reporter.url)
    assert value(families, "trainplan_train_checkpoint_step") == 3
    assert value(families, "trainplan_train_checkpoint_seconds_count") == 2
    assert value(families, "trainplan_train_checkpoint_seconds_sum") == 32.5
    assert value(families, "trainplan_train_step_seconds_count") == 2
    assert value(families, "trainplan_train_step_seconds_sum") == 2.0


def test_reset_timer_leaves_evaluation_out(
    make_reporter: Callable[..., TrainingReporter], monotonic: FakeMonotonic
) -> None:
    reporter = make_reporter()
    reporter.step(1, 10)
    monotonic.advance(60.0)  # evaluation
    reporter.reset_timer()
    monotonic.advance(2.0)
    reporter.step(2, 20)
    assert value(scrape(reporter.url), "trainplan_train_step_seconds_sum") == 2.0


def test_resumed_sets_progress_without_observing(
    make_reporter: Callable[..., TrainingReporter], monotonic: FakeMonotonic
) -> None:
    reporter = make_reporter(total_steps=1000)
    reporter.step(1, 10)
    monotonic.advance(1.0)
    reporter.step(2, 20)
    reporter.resumed(500, 5000)
    families = scrape(reporter.url)
    assert value(families, "trainplan_train_step") == 500
    assert value(families, "trainplan_train_tokens") == 5000
    assert value(families, "trainplan_train_last_step_timestamp_seconds") == NOW
    assert value(families, "trainplan_train_step_seconds_count") == 1

    monotonic.advance(300.0)  # loading, warm-up
    reporter.step(501, 5010)  # the first step after a resume observes nothing
    monotonic.advance(1.0)
    reporter.step(502, 5020)
    families = scrape(reporter.url)
    assert value(families, "trainplan_train_step_seconds_count") == 2
    assert value(families, "trainplan_train_step_seconds_sum") == 2.0


def test_non_zero_global_rank_exports_no_training_series(
    make_reporter: Callable[..., TrainingReporter],
) -> None:
    reporter = make_reporter(global_rank=8, local_rank=0)
    assert not reporter.exports_training
    reporter.step(1, 10, loss=1.0)
    reporter.checkpoint(1, 1.0)
    reporter.resumed(1, 10)
    reporter.set_loss(1.0)
    reporter.set_total_steps(5)
    reporter.reset_timer()
    assert not [name for name in scrape(reporter.url) if name.startswith("trainplan_train_")]


def test_non_zero_local_rank_serves_nothing(
    make_reporter: Callable[..., TrainingReporter],
) -> None:
    reporter = make_reporter(global_rank=3, local_rank=3, gpu_collector=True)
    assert reporter.url is None
    assert reporter.port is None
    assert list(reporter.registry.collect()) == []  # not even the GPUs: local rank 0 has them
    reporter.step(1, 10)


def test_no_port_no_server(make_reporter: Callable[..., TrainingReporter]) -> None:
    reporter = make_reporter(port=None)
    assert reporter.url is None
    reporter.step(1, 10)
    assert reporter.registry.get_sample_value("trainplan_train_step") == 1


def test_close_stops_the_server(make_reporter: Callable[..., TrainingReporter]) -> None:
    reporter = make_reporter()
    url = reporter.url
    scrape(url)
    reporter.close()
    reporter.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        scrape(url)


def test_wildcard_address_url(make_reporter: Callable[..., TrainingReporter]) -> None:
    reporter = make_reporter(address="0.0.0.0")
    assert reporter.url == f"http://127.0.0.1:{reporter.port}/metrics"
    assert value(scrape(reporter.url), "trainplan_train_total_steps") == 10


def test_concurrent_steps(make_reporter: Callable[..., TrainingReporter]) -> None:
    reporter = make_reporter(monotonic=time.perf_counter)
    threads, calls = 4, 1000
    barrier = threading.Barrier(threads)

    def work(thread: int) -> None:
        barrier.wait()
        for call in range(calls):
            reporter.step(thread * calls + call + 1, 1, step_seconds=0.001)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    families = scrape(reporter.url)
    # Exactly one call, the very first, finds no previous step.
    assert value(families, "trainplan_train_step_seconds_count") == threads * calls - 1
    assert value(families, "trainplan_train_step_seconds_sum") == pytest.approx(
        (threads * calls - 1) * 0.001
    )
    assert value(families, "trainplan_train_step_seconds_bucket", le="0.001") == (
        threads * calls - 1
    )


# --- environment ------------------------------------------------------------------------------


def test_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("TRAINPLAN_METRICS_PORT", "0")
    monkeypatch.setenv("TRAINPLAN_TOTAL_STEPS", "4200")
    with TrainingReporter.from_environment(address="127.0.0.1", gpu_collector=False) as reporter:
        assert reporter.exports_training
        assert value(scrape(reporter.url), "trainplan_train_total_steps") == 4200
    monkeypatch.setenv("TRAINPLAN_METRICS_PORT", "1")  # privileged: would fail if used
    with TrainingReporter.from_environment(
        total_steps=7, port=0, address="127.0.0.1", gpu_collector=False
    ) as other:  # arguments win over the environment
        assert value(scrape(other.url), "trainplan_train_total_steps") == 7

    monkeypatch.setenv("RANK", "9")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with TrainingReporter.from_environment(gpu_collector=False) as worker:
        assert (worker.global_rank, worker.local_rank) == (9, 1)
        assert worker.url is None
        assert not worker.exports_training


def test_from_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "TRAINPLAN_METRICS_PORT", "TRAINPLAN_TOTAL_STEPS"):
        monkeypatch.delenv(name, raising=False)
    with TrainingReporter.from_environment(gpu_collector=False) as reporter:
        assert reporter.exports_training
        assert reporter.url is None
        assert reporter.registry.get_sample_value("trainplan_train_total_steps") == 0


def test_from_environment_rejects_a_bad_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINPLAN_METRICS_PORT", "metrics")
    with pytest.raises(ValueError, match="TRAINPLAN_METRICS_PORT"):
        TrainingReporter.from_environment(gpu_collector=False)


def test_environment_names_match_the_launcher() -> None:
    assert schema.ENV_NAMES == launcher_env.NAMES
    for name in launcher_env.NAMES:
        attribute = name.removeprefix(launcher_env.PREFIX)
        assert getattr(schema, f"ENV_{attribute}") == getattr(launcher_env, attribute) == name
    assert schema.ENV_PREFIX == launcher_env.PREFIX
    assert schema.ENV_JOB_COMPLETION_INDEX == launcher_env.JOB_COMPLETION_INDEX
    assert schema.CONFIG_ERROR_EXIT_CODE == launcher_env.CONFIG_ERROR_EXIT_CODE


# --- GPUs ---------------------------------------------------------------------------------------


def _nvml_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "trainplan.runtime" and r.levelno == logging.WARNING and "NVML" in r.message
    ]


@pytest.mark.parametrize(
    "pynvml_module",
    [
        pytest.param(None, id="module-missing"),
        pytest.param(FakeNvml([], init_error=FakeNvmlError("Library Not Found")), id="no-library"),
    ],
)
def test_without_nvml_no_gpu_series_and_one_warning(
    make_reporter: Callable[..., TrainingReporter],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    pynvml_module: FakeNvml | None,
) -> None:
    # sys.modules["pynvml"] = None makes `import pynvml` raise ImportError.
    monkeypatch.setitem(sys.modules, "pynvml", pynvml_module)
    caplog.set_level(logging.WARNING, logger="trainplan.runtime")

    reporter = make_reporter(gpu_collector=True)
    reporter.step(1, 10)
    for _ in range(3):
        families = scrape(reporter.url)
        assert "trainplan_train_step" in families
        assert not [name for name in families if name.startswith("trainplan_gpu_")]
    assert len(_nvml_warnings(caplog)) == 1

    make_reporter(gpu_collector=True)  # another reporter: at most one more line
    assert len(_nvml_warnings(caplog)) == 2


def test_fake_nvml_gpu_series(make_reporter: Callable[..., TrainingReporter]) -> None:
    nvml = two_gpus()
    registry = CollectorRegistry()
    collector = NvmlCollector(nvml)
    registry.register(collector)
    reporter = make_reporter(registry=registry)

    families = scrape(reporter.url)
    assert gpu_values(families, "trainplan_gpu_utilization_ratio") == {"0": 0.37, "1": 1.0}
    assert gpu_values(families, "trainplan_gpu_memory_used_bytes") == {
        "0": 20 * 2**30,
        "1": 79 * 2**30,
    }
    assert gpu_values(families, "trainplan_gpu_memory_total_bytes") == {
        "0": 80 * 2**30,
        "1": 80 * 2**30,
    }
    assert gpu_values(families, "trainplan_gpu_power_watts") == {"0": 312.5, "1": 400.0}
    for name in ("trainplan_gpu_utilization_ratio", "trainplan_gpu_power_watts"):
        assert families[name].type == "gauge"
        assert all(set(s.labels) == {"gpu"} for s in families[name].samples)

    collector.close()
    assert nvml.initialised == 0
    assert not [name for name in scrape(reporter.url) if name.startswith("trainplan_gpu_")]


def test_fake_nvml_read_at_scrape_time(make_reporter: Callable[..., TrainingReporter]) -> None:
    nvml = two_gpus()
    registry = CollectorRegistry()
    registry.register(NvmlCollector(nvml))
    reporter = make_reporter(registry=registry)
    nvml.devices[0].utilization_percent = 5
    assert gpu_values(scrape(reporter.url), "trainplan_gpu_utilization_ratio")["0"] == 0.05
    nvml.devices[0].utilization_percent = 90
    assert gpu_values(scrape(reporter.url), "trainplan_gpu_utilization_ratio")["0"] == 0.9


def test_unsupported_query_leaves_one_sample_out(caplog: pytest.LogCaptureFixture) -> None:
    nvml = two_gpus()
    nvml.devices[1].power_milliwatts = None
    collector = NvmlCollector(nvml)
    caplog.set_level(logging.DEBUG, logger="trainplan.runtime")
    for _ in range(3):
        families = {family.name: family for family in collector.collect()}
        assert {s.labels["gpu"] for s in families["trainplan_gpu_power_watts"].samples} == {"0"}
        assert len(families["trainplan_gpu_memory_total_bytes"].samples) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # then debug lines: a scrape every few seconds must not flood
    collector.close()


def test_reporter_closes_its_collector(
    make_reporter: Callable[..., TrainingReporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = two_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    reporter = make_reporter(gpu_collector=True)
    assert nvml.initialised == 1
    assert len(gpu_values(scrape(reporter.url), "trainplan_gpu_power_watts")) == 2
    reporter.close()
    assert nvml.initialised == 0


# --- the contract -----------------------------------------------------------------------------


def test_served_names_are_designs(make_reporter: Callable[..., TrainingReporter]) -> None:
    registry = CollectorRegistry()
    registry.register(NvmlCollector(two_gpus()))
    reporter = make_reporter(registry=registry)
    reporter.step(1, 1)
    reporter.checkpoint(1, 1.0)

    families = scrape(reporter.url)
    # prometheus-client's text format adds a `<histogram>_created` gauge per histogram.
    created = {f"{name}_created" for name in DESIGN_HISTOGRAMS}
    assert set(families) - created == DESIGN_POD_METRICS
    assert {spec.name for spec in schema.POD_METRICS} == DESIGN_POD_METRICS
    assert {spec.name for spec in schema.OPERATOR_METRICS} == (
        DESIGN_OPERATOR_METRICS | ADDED_OPERATOR_METRICS
    )
    for spec in schema.POD_METRICS:
        assert families[spec.name].type == spec.type.value
        assert families[spec.name].documentation == spec.help
        for sample in families[spec.name].samples:
            assert set(sample.labels) - {"le"} == set(spec.labels)
    assert {s.name for s in schema.POD_METRICS if s.type == "histogram"} == DESIGN_HISTOGRAMS
    assert {s.name for s in schema.GPU_METRICS} == {
        n for n in DESIGN_POD_METRICS if n.startswith("trainplan_gpu_")
    }


def test_metric_names_are_unique_and_valid() -> None:
    names = [spec.name for spec in schema.ALL_METRICS]
    assert len(names) == len(set(names))
    for spec in schema.POD_METRICS:
        # a gauge or histogram named ..._total would read as a counter
        assert not spec.name.endswith("_total")
    for spec in (schema.TRAIN_STEP_SECONDS, schema.TRAIN_CHECKPOINT_SECONDS):
        bounds = spec.buckets_seconds
        assert list(bounds) == sorted(bounds)
    assert schema.STEP_SECONDS_BUCKETS[0] == 0.001
    assert schema.STEP_SECONDS_BUCKETS[-1] == 3600.0


def test_import_loads_no_framework() -> None:
    code = (
        "import sys, trainplan.runtime, trainplan.runtime.reporter, trainplan.runtime.gpus;"
        "import trainplan.runtime.schema, trainplan.runtime.integrations;"
        "heavy = ['torch', 'transformers', 'lightning', 'pynvml'];"
        "print(sorted(m for m in heavy if m in sys.modules));"
        "print(sorted(m for m in sys.modules if m.startswith('trainplan.')"
        " and not m.startswith('trainplan.runtime')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split("\n")[:2] == ["[]", "[]"]


def test_port_in_use_raises_and_releases_nvml(
    make_reporter: Callable[..., TrainingReporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = make_reporter()
    nvml = two_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with pytest.raises(OSError, match="in use"):
        make_reporter(port=first.port, gpu_collector=True)
    assert nvml.initialised == 0
