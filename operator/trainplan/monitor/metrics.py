"""Training metrics as the monitor reads them: parsing the exposition text a training
pod serves, with prometheus-client's parser (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from trainplan.runtime.schema import (
    GPU_LABEL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_POWER_WATTS,
    GPU_UTILIZATION_RATIO,
    TRAIN_CHECKPOINT_STEP,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    TRAIN_LOSS,
    TRAIN_STEP,
    TRAIN_STEP_SECONDS,
    TRAIN_TOKENS,
    TRAIN_TOTAL_STEPS,
)


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """One GPU's series."""

    gpu: str
    utilization_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """A summary of many GPUs' series: how many report, their mean utilisation, the
    fullest GPU's memory and the power of all."""

    reporting_gpus: int
    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    power_watts: float | None


def summarize_gpus(gpus: Sequence[GpuMetrics]) -> GpuUsage | None:
    """The summary of every node's GPUs; None when no GPU reports."""
    if not gpus:
        return None
    utilizations = [g.utilization_ratio for g in gpus if g.utilization_ratio is not None]
    with_memory = [g for g in gpus if g.memory_used_bytes is not None]
    fullest = max(with_memory, key=lambda g: g.memory_used_bytes or 0.0, default=None)
    powers = [g.power_watts for g in gpus if g.power_watts is not None]
    return GpuUsage(
        reporting_gpus=len(gpus),
        utilization_ratio=(
            min(1.0, max(0.0, sum(utilizations) / len(utilizations))) if utilizations else None
        ),
        memory_used_bytes=None if fullest is None else fullest.memory_used_bytes,
        memory_total_bytes=None if fullest is None else fullest.memory_total_bytes,
        power_watts=sum(powers) if powers else None,
    )


def on_node(gpus: Sequence[GpuMetrics], node: str) -> tuple[GpuMetrics, ...]:
    """The GPUs of one node named `<node>/<gpu>`, so indices of several nodes stay apart."""
    return tuple(replace(gpu, gpu=f"{node}/{gpu.gpu}") for gpu in gpus)


@dataclass(frozen=True, slots=True)
class TrainingMetrics:
    """The training series of one pod (or of a Prometheus query), None where absent."""

    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    loss: float | None = None
    last_step_timestamp_seconds: float | None = None
    step_seconds_count: float | None = None
    step_seconds_sum: float | None = None
    checkpoint_step: int | None = None
    gpus: tuple[GpuMetrics, ...] = ()

    @property
    def has_training_series(self) -> bool:
        return self.step is not None


def _int(value: float | None) -> int | None:
    return None if value is None or math.isnan(value) else int(value)


def _known(value: float | None) -> float | None:
    """The reporter's placeholders (NaN before a loss, 0 before a total or checkpoint)
    mean "not known yet"."""
    return None if value is None or math.isnan(value) else value


def _positive(value: int | None) -> int | None:
    return value if value else None


GPU_FIELDS: Final = MappingProxyType(
    {
        GPU_UTILIZATION_RATIO.name: "utilization_ratio",
        GPU_MEMORY_USED_BYTES.name: "memory_used_bytes",
        GPU_MEMORY_TOTAL_BYTES.name: "memory_total_bytes",
        GPU_POWER_WATTS.name: "power_watts",
    }
)
"""Each GPU series and the `GpuMetrics` field it fills."""


def training_metrics(
    scalars: Mapping[str, float], gpus: Mapping[str, Mapping[str, float]]
) -> TrainingMetrics:
    """TrainingMetrics from the training series' values by name and each GPU's values by
    `GpuMetrics` field (from a pod's page or from Prometheus): placeholders are None."""
    histogram = TRAIN_STEP_SECONDS.name
    return TrainingMetrics(
        step=_int(scalars.get(TRAIN_STEP.name)),
        total_steps=_positive(_int(scalars.get(TRAIN_TOTAL_STEPS.name))),
        tokens=_int(scalars.get(TRAIN_TOKENS.name)),
        loss=_known(scalars.get(TRAIN_LOSS.name)),
        last_step_timestamp_seconds=scalars.get(TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name),
        step_seconds_count=scalars.get(f"{histogram}_count"),
        step_seconds_sum=scalars.get(f"{histogram}_sum"),
        checkpoint_step=_positive(_int(scalars.get(TRAIN_CHECKPOINT_STEP.name))),
        gpus=tuple(GpuMetrics(gpu=gpu, **values) for gpu, values in sorted(gpus.items())),
    )


def parse_metrics(text: str) -> TrainingMetrics:
    """The trainplan series in a Prometheus text exposition; others are ignored.
    Raises ValueError when the text is not the exposition format."""
    scalars: dict[str, float] = {}
    gpus: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in GPU_FIELDS:
                gpu = sample.labels.get(GPU_LABEL, "")
                gpus.setdefault(gpu, {})[GPU_FIELDS[sample.name]] = sample.value
            elif sample.name.startswith("trainplan_train_"):
                scalars[sample.name] = sample.value
    return training_metrics(scalars, gpus)
