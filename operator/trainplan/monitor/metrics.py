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
    TRAIN_CHECKPOINT_SECONDS,
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
    """The training series of one pod (or of a Prometheus query), None where absent or
    out of bounds (`rejected` names those)."""

    step: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    loss: float | None = None
    last_step_timestamp_seconds: float | None = None
    step_seconds_count: float | None = None
    step_seconds_sum: float | None = None
    checkpoint_step: int | None = None
    checkpoint_seconds_count: float | None = None
    checkpoint_seconds_sum: float | None = None
    gpus: tuple[GpuMetrics, ...] = ()
    rejected: tuple[str, ...] = ()
    """The series whose value was out of bounds (NaN where a number is due, infinite,
    negative, beyond `COUNT_MAX`...), dropped."""

    @property
    def has_training_series(self) -> bool:
        return self.step is not None

    @property
    def mean_checkpoint_seconds(self) -> float | None:
        """Mean seconds per checkpoint written by this process (the histogram's sum over
        its count), None before the first."""
        if not self.checkpoint_seconds_count or self.checkpoint_seconds_sum is None:
            return None
        return self.checkpoint_seconds_sum / self.checkpoint_seconds_count


COUNT_MAX: Final = 2**53
"""Steps and tokens are integers below this (exact in a float, and in JSON)."""
TIMESTAMP_RANGE_SECONDS: Final = (946_684_800.0, 4_102_444_800.0)
"""A last-step time is within 2000-01-01 and 2100-01-01 (UTC, seconds since the epoch)."""
CHECKPOINT_SECONDS_SUM_MAX: Final = 1e9
"""Seconds all of a process's checkpoints took, at most (about 32 years)."""
LOSS_MAX: Final = 1e6
"""A finite loss of larger magnitude is not a training loss."""
GPU_BOUNDS: Final = MappingProxyType(
    {
        "utilization_ratio": 1.0,
        "memory_used_bytes": float(2**50),
        "memory_total_bytes": float(2**50),
        "power_watts": 1e5,
    }
)
"""Each GPU field's upper bound (all are non-negative): a ratio, 1 PiB, 100 kW."""


@dataclass
class _Checked:
    """Values read through bounds, remembering the series that failed them."""

    rejected: list[str]

    def count(
        self, name: str, value: float | None, *, placeholder_zero: bool = False
    ) -> int | None:
        """A non-negative integer count below COUNT_MAX (a fraction is no count); NaN (the
        reporter's placeholder) and, with `placeholder_zero`, 0 mean "not known yet"."""
        if value is None or math.isnan(value) or (placeholder_zero and value == 0):
            return None
        if not 0 <= value < COUNT_MAX or value != math.floor(value):
            self.rejected.append(name)
            return None
        return int(value)

    def within(
        self,
        name: str,
        value: float | None,
        low: float,
        high: float,
        *,
        placeholder_zero: bool = False,
    ) -> float | None:
        """A finite value within [low, high]; NaN (and, with `placeholder_zero`, 0) means
        "not known yet"."""
        if value is None or math.isnan(value) or (placeholder_zero and value == 0):
            return None
        if not low <= value <= high:
            self.rejected.append(name)
            return None
        return value


GPU_FIELDS: Final = MappingProxyType(
    {
        GPU_UTILIZATION_RATIO.name: "utilization_ratio",
        GPU_MEMORY_USED_BYTES.name: "memory_used_bytes",
        GPU_MEMORY_TOTAL_BYTES.name: "memory_total_bytes",
        GPU_POWER_WATTS.name: "power_watts",
    }
)
"""Each GPU series and the `GpuMetrics` field it fills."""
_GPU_SERIES: Final = MappingProxyType({field: name for name, field in GPU_FIELDS.items()})


def checkpoint_histogram_series() -> tuple[str, str]:
    """The names of the checkpoint-time histogram's count and sum series."""
    return f"{TRAIN_CHECKPOINT_SECONDS.name}_count", f"{TRAIN_CHECKPOINT_SECONDS.name}_sum"


def training_metrics(
    scalars: Mapping[str, float], gpus: Mapping[str, Mapping[str, float]]
) -> TrainingMetrics:
    """TrainingMetrics from the training series' values by name and each GPU's values by
    `GpuMetrics` field (from a pod's page or from Prometheus): placeholders are None, and
    so are values out of bounds (named in `rejected`)."""
    checked = _Checked([])
    histogram = TRAIN_STEP_SECONDS.name
    count_name, sum_name = f"{histogram}_count", f"{histogram}_sum"
    checkpoint_count, checkpoint_sum = checkpoint_histogram_series()
    gpu_metrics = tuple(
        GpuMetrics(
            gpu=gpu,
            **{
                field: checked.within(_GPU_SERIES[field], value, 0.0, GPU_BOUNDS[field])
                for field, value in values.items()
                if field in GPU_BOUNDS
            },
        )
        for gpu, values in sorted(gpus.items())
    )
    metrics = TrainingMetrics(
        step=checked.count(TRAIN_STEP.name, scalars.get(TRAIN_STEP.name)),
        total_steps=checked.count(
            TRAIN_TOTAL_STEPS.name, scalars.get(TRAIN_TOTAL_STEPS.name), placeholder_zero=True
        ),
        tokens=checked.count(TRAIN_TOKENS.name, scalars.get(TRAIN_TOKENS.name)),
        loss=checked.within(TRAIN_LOSS.name, scalars.get(TRAIN_LOSS.name), -LOSS_MAX, LOSS_MAX),
        last_step_timestamp_seconds=checked.within(
            TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name,
            scalars.get(TRAIN_LAST_STEP_TIMESTAMP_SECONDS.name),
            *TIMESTAMP_RANGE_SECONDS,
            placeholder_zero=True,
        ),
        step_seconds_count=checked.within(count_name, scalars.get(count_name), 0.0, COUNT_MAX),
        step_seconds_sum=checked.within(sum_name, scalars.get(sum_name), 0.0, 1e15),
        checkpoint_step=checked.count(
            TRAIN_CHECKPOINT_STEP.name,
            scalars.get(TRAIN_CHECKPOINT_STEP.name),
            placeholder_zero=True,
        ),
        checkpoint_seconds_count=checked.within(
            checkpoint_count, scalars.get(checkpoint_count), 0.0, COUNT_MAX
        ),
        checkpoint_seconds_sum=checked.within(
            checkpoint_sum, scalars.get(checkpoint_sum), 0.0, CHECKPOINT_SECONDS_SUM_MAX
        ),
        gpus=gpu_metrics,
    )
    return replace(metrics, rejected=tuple(sorted(set(checked.rejected))))


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
