"""Efficiency constants of the performance model (pure).

Every constant has a unit in its name and a documented meaning; the values live in
`data/calibration.yaml`, fitted to published measurements by `benchmarks/fit_calibration.py`
(data and sources in `tests/data/`). Constants per GPU architecture fall back to `default`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True, slots=True)
class ArchitectureEfficiency:
    """Achieved fractions of a GPU architecture's datasheet peaks."""

    gemm_efficiency: float
    """Fraction of dense peak FLOP/s reached by a large matrix multiply."""
    hbm_efficiency: float
    """Fraction of HBM bandwidth reached by memory-bound kernels."""
    flash_attention_efficiency: float
    """Fraction of dense peak reached by a fused (flash) attention kernel."""
    kernel_overhead_seconds_per_layer: float
    """Fixed launch and synchronisation cost per transformer layer per micro-batch pass."""
    megatron_gemm_efficiency: float | None = None
    """`gemm_efficiency` under Megatron-Core's kernels (`layout.KernelStack`), where
    published measurements set it apart; None: the same as `gemm_efficiency`."""
    megatron_flash_attention_efficiency: float | None = None
    """`flash_attention_efficiency` under Megatron-Core's kernels (Transformer Engine's
    fused attention); None: the same as `flash_attention_efficiency`."""

    def gemm_efficiency_for(self, kernels: str) -> float:
        """The matrix-multiply efficiency of `kernels` (a `layout.KernelStack`)."""
        if kernels == "megatron-core" and self.megatron_gemm_efficiency is not None:
            return self.megatron_gemm_efficiency
        return self.gemm_efficiency

    def flash_attention_efficiency_for(self, kernels: str) -> float:
        """The fused-attention efficiency of `kernels` (a `layout.KernelStack`)."""
        if kernels == "megatron-core" and self.megatron_flash_attention_efficiency is not None:
            return self.megatron_flash_attention_efficiency
        return self.flash_attention_efficiency


@dataclass(frozen=True, slots=True)
class Calibration:
    """All fitted constants of the step-time, memory and reliability models."""

    architectures: tuple[tuple[str, ArchitectureEfficiency], ...]
    """Per-architecture constants as (name, constants) pairs; one is named `default`."""
    elementwise_bytes_per_hidden: float
    """Bytes moved per token per layer per hidden unit by norms, residuals, activations and
    dropout in the forward pass (backward moves twice as much)."""
    standard_attention_bytes_per_score: float
    """Bytes moved per attention-score element (scale, mask, softmax, dropout) in the
    forward pass of a non-fused attention (backward moves twice as much)."""
    nvlink_efficiency: float
    """Achieved fraction of NVLink (or PCIe) bandwidth in NCCL collectives."""
    network_efficiency: float
    """Achieved fraction of the per-GPU inter-node bandwidth in NCCL collectives."""
    collective_base_latency_seconds: float
    """Fixed cost of launching one NCCL collective (`planner.collectives`)."""
    nvlink_hop_latency_seconds: float
    """Latency of one ring step between two GPUs of a node over NVLink."""
    pcie_hop_latency_seconds: float
    """Latency of one ring step between two GPUs of a node over PCIe."""
    network_hop_latency_seconds: float
    """Latency of one ring step between two nodes."""
    gradient_bucket_min_parameters: float
    """Parameters per gradient bucket (one collective each) at small data parallelism."""
    gradient_bucket_parameters_per_data_rank: float
    """Bucket parameters per data-parallel rank beyond the minimum: frameworks grow the
    bucket with the group so that collectives stay bandwidth-bound."""
    data_parallel_overlap: float
    """Fraction of the gradient reduction hidden behind the backward pass (0..1)."""
    zero3_overlap: float
    """Fraction of ZeRO-3 parameter gathers and gradient scatters hidden behind compute."""
    pipeline_p2p_exposed: float
    """Fraction of pipeline point-to-point transfer time left on the critical path."""
    optimizer_bytes_per_parameter: float
    """HBM bytes read and written per local parameter by the optimizer step."""
    memory_overhead_bytes: int
    """Fixed memory per GPU: CUDA context, NCCL buffers, workspace."""
    memory_fragmentation: float
    """Fraction added to activation memory for allocator fragmentation."""
    interruptions_per_gpu_hour: float
    """Default failure rate: job interruptions per GPU-hour."""
    restart_seconds: float
    """Default time from an interruption to training again (reschedule, load checkpoint)."""
    moe_load_imbalance: float = 1.0
    """Tokens the busiest expert's rank processes over an even share, under dropless
    routing (an expert capacity factor sets it instead, `Workload.expert_capacity_factor`):
    the slowest rank sets every MoE layer's pace."""
    expert_comm_overlap: float = 1.0
    """Fraction of a layer's forward and backward compute that hides the experts'
    all-to-all where the schedule overlaps them (`Workload.expert_comm_overlap`)."""
    moe_range_spread_p10: float = 1.0
    """Multiplies the 10th-percentile ratios of a mixture-of-experts plan's ranges: the
    published MoE rows' 10th-percentile measured / planned step time
    (`benchmarks/moe.py`) over `step_seconds_ratio_p10`, at most 1."""
    moe_range_spread_p90: float = 1.0
    """The same for the 90th percentile, at least 1."""
    run_goodput: float = 1.0
    """Fraction of a whole run's failure-free wall-clock spent in steady training steps
    (0..1]: the rest is evaluation, warm-up and batch ramp-up, data stalls, stragglers and
    clusters below the catalog peak (`reliability.estimate_reliability`)."""
    step_seconds_ratio_p10: float = 1.0
    """10th percentile of measured / planned step time over published rows held out of
    the fit (`benchmarks/plan_ranges.py`): a plan's `stepSecondsRange.p10` is its step
    time times this."""
    step_seconds_ratio_p90: float = 1.0
    """90th percentile of the same ratio."""
    gpu_hours_ratio_p10: float = 1.0
    """10th percentile of published / planned GPU-hours over whole runs with their source
    held out (`benchmarks/plan_ranges.py`); scales `durationSecondsRange` and
    `gpuHoursRange` (the GPU count is the plan's)."""
    gpu_hours_ratio_p90: float = 1.0
    """90th percentile of the same ratio."""
    step_seconds_factor: float = 1.0
    """Multiplies every step time: a cluster's measured / planned ratio
    (`cluster_fit.apply_cluster_fit`), 1 for the published constants."""
    whole_run_factor: float = 1.0
    """Multiplies a whole run's failure-free time beyond its steps' correction: a
    cluster's measured whole-run ratio (`cluster_fit.apply_cluster_fit`), 1 for the
    published constants."""
    checkpoint_bytes_per_second: float | None = None
    """A cluster's measured checkpoint write rate (`cluster_fit.apply_cluster_fit`): a plan
    whose spec sets no `checkpointSeconds` writes its checkpoint bytes at this rate; None
    for the published constants (the spec's default then stands)."""

    def architecture(self, name: str) -> ArchitectureEfficiency:
        """The constants for `name`, or the `default` entry."""
        table = dict(self.architectures)
        return table.get(name, table["default"])


class _ArchitectureDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gemm_efficiency: float = Field(gt=0, le=1)
    hbm_efficiency: float = Field(gt=0, le=1)
    flash_attention_efficiency: float = Field(gt=0, le=1)
    kernel_overhead_seconds_per_layer: float = Field(ge=0)
    megatron_gemm_efficiency: float | None = Field(default=None, gt=0, le=1)
    megatron_flash_attention_efficiency: float | None = Field(default=None, gt=0, le=1)


class _CalibrationDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    architectures: dict[str, _ArchitectureDocument]
    elementwise_bytes_per_hidden: float = Field(ge=0)
    standard_attention_bytes_per_score: float = Field(ge=0)
    nvlink_efficiency: float = Field(gt=0, le=1)
    network_efficiency: float = Field(gt=0, le=1)
    collective_base_latency_seconds: float = Field(ge=0)
    nvlink_hop_latency_seconds: float = Field(ge=0)
    pcie_hop_latency_seconds: float = Field(ge=0)
    network_hop_latency_seconds: float = Field(ge=0)
    gradient_bucket_min_parameters: float = Field(gt=0)
    gradient_bucket_parameters_per_data_rank: float = Field(ge=0)
    data_parallel_overlap: float = Field(ge=0, le=1)
    zero3_overlap: float = Field(ge=0, le=1)
    pipeline_p2p_exposed: float = Field(ge=0, le=1)
    optimizer_bytes_per_parameter: float = Field(ge=0)
    memory_overhead_bytes: int = Field(ge=0)
    memory_fragmentation: float = Field(ge=0, le=1)
    interruptions_per_gpu_hour: float = Field(ge=0)
    restart_seconds: float = Field(ge=0)
    moe_load_imbalance: float = Field(default=1.0, ge=1, le=64)
    expert_comm_overlap: float = Field(default=1.0, ge=0, le=1)
    moe_range_spread_p10: float = Field(default=1.0, gt=0, le=1)
    moe_range_spread_p90: float = Field(default=1.0, ge=1)
    run_goodput: float = Field(default=1.0, gt=0, le=1)
    step_seconds_ratio_p10: float = Field(default=1.0, gt=0, le=1)
    step_seconds_ratio_p90: float = Field(default=1.0, ge=1)
    gpu_hours_ratio_p10: float = Field(default=1.0, gt=0, le=1)
    gpu_hours_ratio_p90: float = Field(default=1.0, ge=1)
    step_seconds_factor: float = Field(default=1.0, gt=0)


def calibration_from_mapping(document: Mapping[str, Any]) -> Calibration:
    """Validate a parsed calibration document (see `data/calibration.yaml`)."""
    parsed = _CalibrationDocument.model_validate(document)
    if "default" not in parsed.architectures:
        raise ValueError("calibration: architectures needs a 'default' entry")
    architectures = tuple(
        (name, ArchitectureEfficiency(**entry.model_dump()))
        for name, entry in parsed.architectures.items()
    )
    values = parsed.model_dump(exclude={"architectures"})
    return Calibration(architectures=architectures, **values)


def calibration_to_mapping(calibration: Calibration) -> dict[str, Any]:
    """The inverse of `calibration_from_mapping`, for writing fitted values."""
    document: dict[str, Any] = {
        "architectures": {
            name: {
                f.name: getattr(entry, f.name)
                for f in fields(entry)
                if getattr(entry, f.name) is not None
            }
            for name, entry in calibration.architectures
        }
    }
    for f in fields(calibration):
        # A cluster's corrections (whole-run factor, checkpoint rate) are no catalog data.
        if f.name != "architectures" and f.name in _CalibrationDocument.model_fields:
            document[f.name] = getattr(calibration, f.name)
    return document
