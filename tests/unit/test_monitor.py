"""The monitor's pure parts: metrics text -> TrainingMetrics, and failures from Pod and
Job status counted once."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from trainplan.monitor import (
    FailureLedger,
    GpuMetrics,
    observe_failures,
    on_node,
    parse_metrics,
    pod_failures,
    summarize_gpus,
)


def _exposition() -> str:
    registry = CollectorRegistry()
    Gauge("trainplan_train_step", "", registry=registry).set(120)
    Gauge("trainplan_train_total_steps", "", registry=registry).set(1000)
    Gauge("trainplan_train_tokens", "", registry=registry).set(123456)
    Gauge("trainplan_train_loss", "", registry=registry).set(2.5)
    Gauge("trainplan_train_last_step_timestamp_seconds", "", registry=registry).set(1.7e9)
    Gauge("trainplan_train_checkpoint_step", "", registry=registry).set(100)
    histogram = Histogram("trainplan_train_step_seconds", "", registry=registry)
    for seconds in (0.5, 0.7):
        histogram.observe(seconds)
    checkpoints = Histogram("trainplan_train_checkpoint_seconds", "", registry=registry)
    for seconds in (40.0, 50.0):
        checkpoints.observe(seconds)
    util = Gauge("trainplan_gpu_utilization_ratio", "", ["gpu"], registry=registry)
    util.labels("0").set(0.9)
    util.labels("1").set(0.8)
    power = Gauge("trainplan_gpu_power_watts", "", ["gpu"], registry=registry)
    power.labels("0").set(350)
    Gauge("unrelated_metric", "", registry=registry).set(1)
    return generate_latest(registry).decode()


def test_parse_reads_every_trainplan_series() -> None:
    metrics = parse_metrics(_exposition())
    assert metrics.has_training_series
    assert (metrics.step, metrics.total_steps, metrics.tokens) == (120, 1000, 123456)
    assert metrics.loss == 2.5
    assert metrics.last_step_timestamp_seconds == 1.7e9
    assert metrics.checkpoint_step == 100
    assert metrics.step_seconds_count == 2
    assert metrics.step_seconds_sum == pytest.approx(1.2)
    assert metrics.mean_checkpoint_seconds == pytest.approx(45.0)
    assert [(g.gpu, g.utilization_ratio, g.power_watts) for g in metrics.gpus] == [
        ("0", 0.9, 350.0),
        ("1", 0.8, None),
    ]


def test_no_checkpoint_yet_has_no_mean_and_a_negative_sum_is_dropped() -> None:
    page = "trainplan_train_step 5\ntrainplan_train_checkpoint_seconds_count 0\n"
    assert parse_metrics(page).mean_checkpoint_seconds is None
    page = (
        "trainplan_train_step 5\ntrainplan_train_checkpoint_seconds_count 2\n"
        "trainplan_train_checkpoint_seconds_sum -3\n"
    )
    metrics = parse_metrics(page)
    assert metrics.mean_checkpoint_seconds is None
    assert metrics.rejected == ("trainplan_train_checkpoint_seconds_sum",)


def test_a_node_without_training_series() -> None:
    metrics = parse_metrics("# HELP x y\n# TYPE x gauge\nx 1\n")
    assert not metrics.has_training_series
    assert metrics.gpus == ()


def test_gpus_of_every_node_are_summarized() -> None:
    node_0 = on_node(parse_metrics(_exposition()).gpus, "node-0")
    node_1 = on_node(
        (GpuMetrics("0", 0.4, 70e9, 80e9, 300.0), GpuMetrics("1", None, 20e9, 80e9, None)),
        "node-1",
    )
    assert [g.gpu for g in (*node_0, *node_1)] == ["node-0/0", "node-0/1", "node-1/0", "node-1/1"]
    usage = summarize_gpus((*node_0, *node_1))
    assert usage is not None
    assert usage.reporting_gpus == 4
    assert usage.utilization_ratio == pytest.approx((0.9 + 0.8 + 0.4) / 3)
    assert (usage.memory_used_bytes, usage.memory_total_bytes) == (70e9, 80e9)
    assert usage.power_watts == pytest.approx(650.0)
    assert summarize_gpus(()) is None


def test_garbage_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_metrics("this is { not metrics")


def _pod(
    uid: str,
    *,
    phase: str = "Running",
    restarts: int = 0,
    reason: str | None = None,
    last_reason: str = "Error",
    exit_code: int = 1,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "trainer",
                "restartCount": restarts,
                "lastState": {"terminated": {"reason": last_reason, "exitCode": exit_code}}
                if restarts
                else {},
                "state": {"terminated": {"reason": last_reason, "exitCode": exit_code}}
                if phase == "Failed"
                else {"running": {}},
            }
        ],
    }
    if reason:
        status["reason"] = reason
    if conditions:
        status["conditions"] = conditions
    return {"metadata": {"uid": uid, "name": uid}, "status": status}


def test_restarts_and_failed_pods_are_counted_once_however_often_seen() -> None:
    pods = [
        _pod("a", restarts=2, last_reason="OOMKilled", exit_code=137),
        _pod("b", phase="Failed", reason="Evicted"),
    ]
    ledger = observe_failures(FailureLedger(), pods, {"status": {"failed": 1}})
    assert ledger.count == 3
    again = observe_failures(ledger, pods, {"status": {"failed": 1}})
    assert again.count == 3
    assert again == ledger


def test_reasons() -> None:
    oom = pod_failures(_pod("a", restarts=1, last_reason="OOMKilled", exit_code=137))
    assert oom[0].reason == "OOMKilled (exit code 137)"
    evicted = pod_failures(_pod("b", phase="Failed", reason="Evicted"))
    assert evicted[0].reason == "Evicted"
    drained = pod_failures(
        _pod(
            "c",
            phase="Failed",
            conditions=[
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
            ],
        )
    )
    assert drained[0].reason == "Disruption: EvictionByEvictionAPI"
    crashed = pod_failures(_pod("d", phase="Failed", last_reason="Error", exit_code=1))
    assert crashed[0].reason == "Error (exit code 1)"


def test_failed_pods_deleted_before_they_were_seen_count_through_the_job() -> None:
    ledger = observe_failures(FailureLedger(), [], {"status": {"failed": 2}})
    assert ledger.count == 2
    later = observe_failures(
        ledger, [_pod("x", phase="Failed", reason="Error")], {"status": {"failed": 2}}
    )
    assert later.count == 2  # that pod is one of the two the Job counted
    more = observe_failures(later, [_pod("y", restarts=1)], {"status": {"failed": 2}})
    assert more.count == 3
    assert more.last is not None
    assert more.last.key[0] == "restart"


def test_placeholders_mean_unknown() -> None:
    text = (
        "# TYPE trainplan_train_step gauge\ntrainplan_train_step 0\n"
        "# TYPE trainplan_train_loss gauge\ntrainplan_train_loss NaN\n"
        "# TYPE trainplan_train_total_steps gauge\ntrainplan_train_total_steps 0\n"
        "# TYPE trainplan_train_checkpoint_step gauge\ntrainplan_train_checkpoint_step 0\n"
    )
    metrics = parse_metrics(text)
    assert metrics.step == 0
    assert (metrics.loss, metrics.total_steps, metrics.checkpoint_step) == (None, None, None)


_COUNTS = (
    "trainplan_train_step",
    "trainplan_train_tokens",
    "trainplan_train_total_steps",
    "trainplan_train_checkpoint_step",
    "trainplan_train_last_step_timestamp_seconds",
)


@pytest.mark.parametrize(
    ("series", "value"),
    [(series, value) for series in _COUNTS for value in ("+Inf", "-Inf", "-1e15", "1e300", "-3")]
    # A negative loss is a loss (a log-likelihood objective may report one).
    + [("trainplan_train_loss", value) for value in ("+Inf", "-Inf", "-1e15", "1e300")],
)
def test_values_out_of_bounds_are_dropped_and_named(series: str, value: str) -> None:
    page = f"trainplan_train_step 7\n{series} {value}\n"
    metrics = parse_metrics(page)
    assert metrics.rejected == (series,)
    fields = {
        "trainplan_train_step": metrics.step,
        "trainplan_train_tokens": metrics.tokens,
        "trainplan_train_total_steps": metrics.total_steps,
        "trainplan_train_checkpoint_step": metrics.checkpoint_step,
        "trainplan_train_last_step_timestamp_seconds": metrics.last_step_timestamp_seconds,
        "trainplan_train_loss": metrics.loss,
    }
    assert fields[series] is None


@pytest.mark.parametrize(
    ("series", "value"),
    [
        ("trainplan_gpu_utilization_ratio", "1.5"),
        ("trainplan_gpu_utilization_ratio", "NaN"),
        ("trainplan_gpu_power_watts", "-250"),
        ("trainplan_gpu_power_watts", "+Inf"),
        ("trainplan_gpu_memory_used_bytes", "1e300"),
    ],
)
def test_gpu_values_out_of_bounds_are_dropped(series: str, value: str) -> None:
    metrics = parse_metrics(f'trainplan_train_step 7\n{series}{{gpu="0"}} {value}\n')
    (gpu,) = metrics.gpus
    assert (gpu.utilization_ratio, gpu.power_watts, gpu.memory_used_bytes) == (None, None, None)
    assert metrics.rejected == (() if value == "NaN" else (series,))


def test_values_within_bounds_are_kept() -> None:
    metrics = parse_metrics(
        "trainplan_train_step 9007199254740991\ntrainplan_train_loss -3\n"
        'trainplan_gpu_power_watts{gpu="0"} 700\n'
    )
    assert (metrics.step, metrics.loss, metrics.rejected) == (2**53 - 1, -3.0, ())
    assert metrics.gpus[0].power_watts == 700.0


@pytest.mark.parametrize(
    "series",
    [
        "trainplan_train_step",
        "trainplan_train_tokens",
        "trainplan_train_total_steps",
        "trainplan_train_checkpoint_step",
    ],
)
def test_a_fractional_count_is_no_count(series: str) -> None:
    page = f"trainplan_train_step 7\n{series} 7.5\n"
    metrics = parse_metrics(page)
    assert metrics.rejected == (series,)
    assert parse_metrics(f"trainplan_train_step 7\n{series} 8.0\n").rejected == ()
