"""The plan: the planner's answer, printed by `trainplan plan -o json` and kept in `status.plan`.

Field names follow DESIGN.md "The plan"; bytes are integers, times are seconds.

Pure: pydantic only; no I/O.
"""

from typing import Literal, Self

from pydantic import Field, model_validator

from trainplan.api.base import ApiModel


class PlanLayout(ApiModel):
    """The parallel layout and the batch split of a plan."""

    tensor: int = Field(ge=1, description="Tensor-parallel degree.")
    pipeline: int = Field(ge=1, description="Pipeline-parallel degree.")
    data: int = Field(ge=1, description="Data-parallel degree.")
    zero_stage: int = Field(ge=0, le=3, description="ZeRO stage.")
    activation_checkpointing: Literal["none", "selective", "full"] = Field(
        description="Activation recompute level."
    )
    micro_batch_size: int = Field(ge=1, description="Sequences per forward pass per GPU.")
    gradient_accumulation_steps: int = Field(
        ge=1, description="Micro batches per optimizer step per data-parallel rank."
    )
    global_batch_size: int = Field(ge=1, description="Sequences per optimizer step.")
    virtual_pipeline_stages: int = Field(
        1, ge=1, description="Model chunks per pipeline rank (interleaved 1F1B)."
    )
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism.")
    context: int = Field(
        1, ge=1, description="Context-parallel degree: ranks each sequence is split over."
    )
    expert: int = Field(
        1, ge=1, description="Expert-parallel degree: ranks each layer's experts are split over."
    )
    expert_tensor: int = Field(
        1, ge=1, description="Expert-tensor-parallel degree: ranks each expert is split over."
    )

    @property
    def gpus(self) -> int:
        """GPUs the layout occupies: tensor x context x pipeline x data."""
        return self.tensor * self.context * self.pipeline * self.data

    @model_validator(mode="after")
    def _check_batch(self) -> Self:
        split = self.micro_batch_size * self.data * self.gradient_accumulation_steps
        if split != self.global_batch_size:
            raise ValueError(
                f"microBatchSize x data x gradientAccumulationSteps ({self.micro_batch_size} x "
                f"{self.data} x {self.gradient_accumulation_steps} = {split}) must equal "
                f"globalBatchSize ({self.global_batch_size})"
            )
        return self

    @property
    def summary(self) -> str:
        """The layout in short, e.g. 'TP8 PP2 DP128' ('v4' added when interleaved)."""
        words = [f"TP{self.tensor}"]
        if self.context > 1:
            words.append(f"CP{self.context}")
        words += [f"PP{self.pipeline}", f"DP{self.data}"]
        if self.expert > 1:
            words.append(f"EP{self.expert}")
        if self.virtual_pipeline_stages > 1:
            words.append(f"v{self.virtual_pipeline_stages}")
        return " ".join(words)


class MemoryBreakdown(ApiModel):
    """Memory per GPU on the most loaded rank, in bytes."""

    capacity_bytes: int = Field(ge=0, description="Usable memory of one GPU.")
    total_bytes: int = Field(ge=0, description="Everything below, summed.")
    weights_bytes: int = Field(ge=0, description="Model weights (and master copies).")
    gradients_bytes: int = Field(ge=0, description="Gradients.")
    optimizer_bytes: int = Field(ge=0, description="Optimizer states.")
    activations_bytes: int = Field(ge=0, description="Activations of the micro batches in flight.")
    logits_bytes: int = Field(ge=0, description="Logits and loss buffers.")
    overhead_bytes: int = Field(
        ge=0, description="Fixed overhead: CUDA context, NCCL buffers, fragmentation."
    )


class StepBreakdown(ApiModel):
    """Where the time of one optimizer step goes, in seconds (not overlapped parts only)."""

    compute_seconds: float = Field(ge=0, description="Forward, backward and recompute.")
    tensor_comm_seconds: float = Field(ge=0, description="Tensor-parallel collectives.")
    context_comm_seconds: float = Field(
        0.0, ge=0, description="Context parallelism's key/value ring exchange not overlapped."
    )
    expert_comm_seconds: float = Field(
        0.0, ge=0, description="The experts' all-to-all token dispatch and combine."
    )
    data_comm_seconds: float = Field(
        ge=0, description="Data-parallel gradient reduction (and ZeRO gathers) not overlapped."
    )
    pipeline_bubble_seconds: float = Field(ge=0, description="Pipeline fill and drain.")
    pipeline_comm_seconds: float = Field(
        ge=0, description="Point-to-point activation transfers between pipeline stages."
    )
    optimizer_seconds: float = Field(ge=0, description="The optimizer update.")


class PlanReliability(ApiModel):
    """The expected cost of failures and checkpoints over the whole run."""

    expected_interruptions: float = Field(ge=0, description="Interruptions expected in the run.")
    checkpoint_interval_steps: int = Field(ge=1, description="Steps between checkpoints.")
    restart_seconds: float = Field(ge=0, description="Seconds from an interruption to training.")
    checkpoint_seconds: float = Field(ge=0, description="Seconds to write one checkpoint.")
    checkpoint_bytes: float | None = Field(
        None,
        ge=0,
        le=1.0e15,
        description="Bytes one checkpoint writes (weights and optimizer state).",
    )
    mean_seconds_between_interruptions: float | None = Field(
        None, gt=0, description="Mean time between interruptions; absent when the rate is zero."
    )
    lost_work_seconds: float = Field(
        ge=0, description="Expected work redone after interruptions, over the run."
    )


def _check_layout_gpus(layout: PlanLayout, gpus: int) -> None:
    if layout.gpus != gpus:
        raise ValueError(
            f"layout tensor x pipeline x data ({layout.tensor} x {layout.pipeline} x "
            f"{layout.data} = {layout.gpus}) must equal gpus ({gpus})"
        )


class Alternative(ApiModel):
    """A runner-up plan, and why it lost."""

    gpus: int = Field(ge=1, description="GPUs.")
    nodes: int = Field(ge=1, description="Nodes.")
    layout: PlanLayout = Field(description="The layout.")
    step_seconds: float = Field(ge=0, description="Seconds per optimizer step.")
    duration_seconds: float = Field(ge=0, description="Expected wall-clock seconds.")
    gpu_hours: float = Field(ge=0, description="GPUs x duration in hours.")
    mfu: float = Field(ge=0, description="Model FLOPs utilisation.")
    memory_total_bytes: int = Field(ge=0, description="Memory per GPU.")
    note: str = Field(description="Why it lost to the chosen plan.")

    @model_validator(mode="after")
    def _check_gpus(self) -> Self:
        _check_layout_gpus(self.layout, self.gpus)
        return self


class PercentileRange(ApiModel):
    """A 10th-90th percentile range of a planned figure."""

    p10: float = Field(ge=0, description="10th percentile.")
    p90: float = Field(ge=0, description="90th percentile.")


class PlanCalibration(ApiModel):
    """The ClusterCalibration whose records corrected a plan."""

    name: str = Field(min_length=1, max_length=253, description="Its metadata.name.")
    generation: int = Field(ge=0, description="Its metadata.generation when planned.")
    runs: int = Field(ge=0, description="Finished runs the corrections rest on.")
    step_seconds_factor: float = Field(
        gt=0, description="Measured / planned step time applied to the plan."
    )
    interruptions_per_gpu_hour: float = Field(
        ge=0,
        alias="interruptionsPerGPUHour",
        description="The cluster's fitted interruption rate the plan used.",
    )
    whole_run_factor: float = Field(
        1.0,
        gt=0,
        description=(
            "Measured / planned duration beyond the step-time correction, applied to the plan."
        ),
    )


class Plan(ApiModel):
    """The chosen plan."""

    gpu_type: str = Field(min_length=1, description="Catalog GPU name.")
    gpus: int = Field(ge=1, description="GPUs: tensor x pipeline x data.")
    nodes: int = Field(ge=1, description="Nodes.")
    gpus_per_node: int = Field(ge=1, description="GPUs per node.")
    layout: PlanLayout = Field(description="The parallel layout and batch split.")
    memory: MemoryBreakdown = Field(description="Memory per GPU.")
    parameters: int | None = Field(
        None, ge=0, description="Model parameters (weights), counted from the shape."
    )
    trainable_parameters: int | None = Field(
        None,
        ge=0,
        description="Parameters that train: the LoRA adapters of a lora or qlora fine-tune.",
    )
    active_parameters: int | None = Field(
        None,
        ge=0,
        description="Parameters one token passes through (mixture-of-experts models).",
    )
    flops_per_step: float = Field(ge=0, description="Model FLOPs per optimizer step.")
    step_seconds: float = Field(ge=0, description="Seconds per optimizer step.")
    step_breakdown: StepBreakdown = Field(description="Where the step time goes.")
    tokens_per_step: int = Field(ge=1, description="Tokens per optimizer step.")
    total_steps: int = Field(ge=1, description="Optimizer steps in the run.")
    compute_seconds: float = Field(ge=0, description="totalSteps x stepSeconds.")
    overhead_seconds: float = Field(
        ge=0, description="Expected checkpoints, interruptions and restarts."
    )
    duration_seconds: float = Field(ge=0, description="computeSeconds + overheadSeconds.")
    gpu_hours: float = Field(ge=0, description="gpus x durationSeconds / 3600.")
    step_seconds_range: PercentileRange | None = Field(
        None,
        description=(
            "10-90% range of the step time, from the planner's errors on published rows"
            " held out of its fit."
        ),
    )
    duration_seconds_range: PercentileRange | None = Field(
        None, description="10-90% range of the duration, from held-out whole runs."
    )
    gpu_hours_range: PercentileRange | None = Field(
        None, description="10-90% range of the GPU-hours."
    )
    mfu: float = Field(ge=0, description="Model FLOPs (no recompute) over the dense peak.")
    tokens_per_second_per_gpu: float = Field(
        ge=0, alias="tokensPerSecondPerGPU", description="Training throughput per GPU."
    )
    reliability: PlanReliability = Field(description="Failures and checkpoints.")
    rule_of_thumb_gpus: int = Field(
        ge=0,
        alias="ruleOfThumbGPUs",
        description="GPUs by the 13.3 x tokens(B) x params(B) / hours rule, as a cross-check.",
    )
    alternatives: tuple[Alternative, ...] = Field((), description="Runner-up plans.")
    explanation: tuple[str, ...] = Field((), description="Why this plan, line by line.")
    calibration: PlanCalibration | None = Field(
        None, description="The ClusterCalibration that corrected the plan, if any."
    )

    @model_validator(mode="after")
    def _check_gpus(self) -> Self:
        _check_layout_gpus(self.layout, self.gpus)
        return self
