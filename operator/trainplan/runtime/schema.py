"""The metric names and environment variables shared by the pods, the operator and Grafana.

DESIGN.md's "Metric names" section, declared once: the training pods export the
`TRAINING_METRICS` (global rank 0) and `GPU_METRICS` (local rank 0 of every node);
`trainplan.monitor` parses them, the operator exports the `OPERATOR_METRICS`, and the
dashboard generator queries all of them. Add names freely; rename none.

`name` is the metric family name as Prometheus stores it, and what PromQL queries: a
histogram adds the `_bucket`, `_sum` and `_count` series to it. Of the operator's
metrics, `trainplan_plan_info` is an info metric (prometheus-client's `Info("trainplan_plan")`
exposes it), `trainplan_plan_phase` a stateset (`Enum("trainplan_plan_phase")`, label
`trainplan_plan_phase`) and `trainplan_plan_failures_total` a counter
(`Counter("trainplan_plan_failures")`).

The `ENV_` names are the launcher's side of the environment contract
(`trainplan.launcher.env`, copied: the runtime imports nothing of the operator; a test
keeps the two equal), plus the variables torchrun sets.

Pure: constants only, no I/O.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class MetricType(StrEnum):
    """Prometheus metric types, as written in the exposition format's `# TYPE` line."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    INFO = "info"
    STATESET = "stateset"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: its name, help text, type, labels and histogram buckets."""

    name: str
    help: str
    type: MetricType
    labels: tuple[str, ...] = ()
    buckets_seconds: tuple[float, ...] = ()


STEP_SECONDS_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    3600.0,
)
"""Upper bounds of the step-time histogram: 1 ms to 1 h, 1-2.5-5 per decade (+Inf added)."""

CHECKPOINT_SECONDS_BUCKETS: Final = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    3600.0,
)
"""Upper bounds of the checkpoint-time histogram: 10 ms to 1 h (+Inf added)."""

GPU_LABEL: Final = "gpu"
"""The label of the GPU series: the device's NVML index on its node ("0", "1", ...)."""

# --- Training series: global rank 0 -------------------------------------------------------

TRAIN_STEP: Final = MetricSpec(
    "trainplan_train_step",
    "Last completed optimizer step (1-based; survives a resume).",
    MetricType.GAUGE,
)
TRAIN_TOTAL_STEPS: Final = MetricSpec(
    "trainplan_train_total_steps",
    "Optimizer steps of the whole run (0 while unknown).",
    MetricType.GAUGE,
)
TRAIN_STEP_SECONDS: Final = MetricSpec(
    "trainplan_train_step_seconds",
    "Wall-clock seconds per optimizer step (the first step after a start or resume is left out).",
    MetricType.HISTOGRAM,
    buckets_seconds=STEP_SECONDS_BUCKETS,
)
TRAIN_TOKENS: Final = MetricSpec(
    "trainplan_train_tokens",
    "Tokens trained on so far, cumulative over the whole run (survives a resume).",
    MetricType.GAUGE,
)
TRAIN_LOSS: Final = MetricSpec(
    "trainplan_train_loss",
    "Latest training loss reported.",
    MetricType.GAUGE,
)
TRAIN_LAST_STEP_TIMESTAMP_SECONDS: Final = MetricSpec(
    "trainplan_train_last_step_timestamp_seconds",
    "Unix time of the last completed step (or of the resume, until the first step).",
    MetricType.GAUGE,
)
TRAIN_CHECKPOINT_STEP: Final = MetricSpec(
    "trainplan_train_checkpoint_step",
    "Step of the last checkpoint written.",
    MetricType.GAUGE,
)
TRAIN_CHECKPOINT_SECONDS: Final = MetricSpec(
    "trainplan_train_checkpoint_seconds",
    "Wall-clock seconds the training loop spent writing each checkpoint.",
    MetricType.HISTOGRAM,
    buckets_seconds=CHECKPOINT_SECONDS_BUCKETS,
)

# --- GPU series: local rank 0 of every node, label `gpu` -----------------------------------

GPU_UTILIZATION_RATIO: Final = MetricSpec(
    "trainplan_gpu_utilization_ratio",
    "Fraction of the last sample period in which a kernel ran on the GPU (NVML), 0..1.",
    MetricType.GAUGE,
    labels=(GPU_LABEL,),
)
GPU_MEMORY_USED_BYTES: Final = MetricSpec(
    "trainplan_gpu_memory_used_bytes",
    "GPU memory in use, in bytes (NVML).",
    MetricType.GAUGE,
    labels=(GPU_LABEL,),
)
GPU_MEMORY_TOTAL_BYTES: Final = MetricSpec(
    "trainplan_gpu_memory_total_bytes",
    "GPU memory installed, in bytes (NVML).",
    MetricType.GAUGE,
    labels=(GPU_LABEL,),
)
GPU_POWER_WATTS: Final = MetricSpec(
    "trainplan_gpu_power_watts",
    "GPU board power draw, in watts (NVML).",
    MetricType.GAUGE,
    labels=(GPU_LABEL,),
)

TRAINING_METRICS: Final = (
    TRAIN_STEP,
    TRAIN_TOTAL_STEPS,
    TRAIN_STEP_SECONDS,
    TRAIN_TOKENS,
    TRAIN_LOSS,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    TRAIN_CHECKPOINT_STEP,
    TRAIN_CHECKPOINT_SECONDS,
)
"""The series of global rank 0."""

GPU_METRICS: Final = (
    GPU_UTILIZATION_RATIO,
    GPU_MEMORY_USED_BYTES,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_POWER_WATTS,
)
"""The series of local rank 0 of each node, one sample per GPU."""

POD_METRICS: Final = TRAINING_METRICS + GPU_METRICS
"""Everything a training pod may export."""

# --- From the operator: labels `namespace`, `plan` ------------------------------------------

_PLAN_LABELS: Final = ("namespace", "plan")

PLAN_INFO: Final = MetricSpec(
    "trainplan_plan_info",
    "The plan of a TrainingPlan: GPU type, layout and the ClusterCalibration that corrected"
    " it (empty for none) (value 1).",
    MetricType.INFO,
    labels=(*_PLAN_LABELS, "gpu_type", "layout", "calibration"),
)
PLAN_PHASE: Final = MetricSpec(
    "trainplan_plan_phase",
    "The phase of a TrainingPlan (1 for the current phase, 0 for the others).",
    MetricType.STATESET,
    labels=(*_PLAN_LABELS, "trainplan_plan_phase"),
)
PLAN_GPUS: Final = MetricSpec(
    "trainplan_plan_gpus",
    "GPUs of the plan.",
    MetricType.GAUGE,
    labels=_PLAN_LABELS,
)
PLAN_PROGRESS_RATIO: Final = MetricSpec(
    "trainplan_plan_progress_ratio",
    "Completed steps over total steps, 0..1.",
    MetricType.GAUGE,
    labels=_PLAN_LABELS,
)
PLAN_ETA_SECONDS: Final = MetricSpec(
    "trainplan_plan_eta_seconds",
    "Estimated seconds until the run completes.",
    MetricType.GAUGE,
    labels=_PLAN_LABELS,
)
PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS: Final = MetricSpec(
    "trainplan_plan_estimated_completion_timestamp_seconds",
    "Estimated Unix time of completion.",
    MetricType.GAUGE,
    labels=_PLAN_LABELS,
)
PLAN_STEP_SECONDS: Final = MetricSpec(
    "trainplan_plan_step_seconds",
    "Seconds per optimizer step, planned or measured (label source).",
    MetricType.GAUGE,
    labels=(*_PLAN_LABELS, "source"),
)
PLAN_MFU: Final = MetricSpec(
    "trainplan_plan_mfu",
    "Model FLOPs utilisation, planned or measured (label source), 0..1.",
    MetricType.GAUGE,
    labels=(*_PLAN_LABELS, "source"),
)
PLAN_FAILURES_TOTAL: Final = MetricSpec(
    "trainplan_plan_failures_total",
    "Failures of the training job, by reason.",
    MetricType.COUNTER,
    labels=(*_PLAN_LABELS, "reason"),
)
PLAN_GPU_HOURS: Final = MetricSpec(
    "trainplan_plan_gpu_hours",
    "GPU-hours used so far or projected for the whole run (label kind).",
    MetricType.GAUGE,
    labels=(*_PLAN_LABELS, "kind"),
)
PLAN_DEADLINE_TIMESTAMP_SECONDS: Final = MetricSpec(
    "trainplan_plan_deadline_timestamp_seconds",
    "Unix time by which the run must complete: its start plus objective.deadline (absent"
    " without a deadline or before the start).",
    MetricType.GAUGE,
    labels=_PLAN_LABELS,
)
PLAN_LOST_SECONDS: Final = MetricSpec(
    "trainplan_plan_lost_seconds",
    "Wall-clock seconds the interruptions so far cost (restarts and work redone).",
    MetricType.GAUGE,
    labels=_PLAN_LABELS,
)
BUDGET_GPU_HOURS: Final = MetricSpec(
    "trainplan_budget_gpu_hours",
    "GPU-hours of a GPUBudget: its limit, used, committed and remaining (label kind).",
    MetricType.GAUGE,
    labels=("namespace", "budget", "kind"),
)

CALIBRATION_STEP_SECONDS_FACTOR: Final = MetricSpec(
    "trainplan_calibration_step_seconds_factor",
    "Measured over the catalog's planned step time, as a ClusterCalibration's finished runs"
    " support it: the factor its plans are corrected by.",
    MetricType.GAUGE,
    labels=("calibration", "gpu_type"),
)
CALIBRATION_RUNS: Final = MetricSpec(
    "trainplan_calibration_runs",
    "Finished runs a ClusterCalibration's corrections rest on.",
    MetricType.GAUGE,
    labels=("calibration", "gpu_type"),
)

OPERATOR_METRICS: Final = (
    PLAN_INFO,
    PLAN_PHASE,
    PLAN_GPUS,
    PLAN_PROGRESS_RATIO,
    PLAN_ETA_SECONDS,
    PLAN_ESTIMATED_COMPLETION_TIMESTAMP_SECONDS,
    PLAN_STEP_SECONDS,
    PLAN_MFU,
    PLAN_FAILURES_TOTAL,
    PLAN_GPU_HOURS,
    PLAN_DEADLINE_TIMESTAMP_SECONDS,
    PLAN_LOST_SECONDS,
    BUDGET_GPU_HOURS,
    CALIBRATION_STEP_SECONDS_FACTOR,
    CALIBRATION_RUNS,
)
"""The operator's series."""

ALL_METRICS: Final = POD_METRICS + OPERATOR_METRICS

# --- Environment ---------------------------------------------------------------------------

ENV_PREFIX: Final = "TRAINPLAN_"

ENV_PLAN_NAME: Final = "TRAINPLAN_PLAN_NAME"
ENV_TENSOR_PARALLEL: Final = "TRAINPLAN_TENSOR_PARALLEL"
ENV_PIPELINE_PARALLEL: Final = "TRAINPLAN_PIPELINE_PARALLEL"
ENV_DATA_PARALLEL: Final = "TRAINPLAN_DATA_PARALLEL"
ENV_CONTEXT_PARALLEL: Final = "TRAINPLAN_CONTEXT_PARALLEL"
ENV_EXPERT_PARALLEL: Final = "TRAINPLAN_EXPERT_PARALLEL"
ENV_EXPERT_TENSOR_PARALLEL: Final = "TRAINPLAN_EXPERT_TENSOR_PARALLEL"
ENV_VIRTUAL_PIPELINE_STAGES: Final = "TRAINPLAN_VIRTUAL_PIPELINE_STAGES"
ENV_SEQUENCE_PARALLEL: Final = "TRAINPLAN_SEQUENCE_PARALLEL"
ENV_ZERO_STAGE: Final = "TRAINPLAN_ZERO_STAGE"
ENV_MICRO_BATCH_SIZE: Final = "TRAINPLAN_MICRO_BATCH_SIZE"
ENV_GRADIENT_ACCUMULATION_STEPS: Final = "TRAINPLAN_GRADIENT_ACCUMULATION_STEPS"
ENV_GLOBAL_BATCH_SIZE: Final = "TRAINPLAN_GLOBAL_BATCH_SIZE"
ENV_TOTAL_STEPS: Final = "TRAINPLAN_TOTAL_STEPS"
ENV_PRECISION: Final = "TRAINPLAN_PRECISION"
ENV_OPTIMIZER: Final = "TRAINPLAN_OPTIMIZER"
ENV_TRAINING_METHOD: Final = "TRAINPLAN_TRAINING_METHOD"
ENV_LORA_RANK: Final = "TRAINPLAN_LORA_RANK"
ENV_LORA_TARGETS: Final = "TRAINPLAN_LORA_TARGETS"
ENV_ACTIVATION_CHECKPOINTING: Final = "TRAINPLAN_ACTIVATION_CHECKPOINTING"
ENV_CHECKPOINT_DIR: Final = "TRAINPLAN_CHECKPOINT_DIR"
ENV_CHECKPOINT_INTERVAL_STEPS: Final = "TRAINPLAN_CHECKPOINT_INTERVAL_STEPS"
ENV_METRICS_PORT: Final = "TRAINPLAN_METRICS_PORT"
ENV_MODEL_LAYERS: Final = "TRAINPLAN_MODEL_LAYERS"
ENV_MODEL_HIDDEN_SIZE: Final = "TRAINPLAN_MODEL_HIDDEN_SIZE"
ENV_MODEL_ATTENTION_HEADS: Final = "TRAINPLAN_MODEL_ATTENTION_HEADS"
ENV_MODEL_KV_HEADS: Final = "TRAINPLAN_MODEL_KV_HEADS"
ENV_MODEL_FFN_HIDDEN_SIZE: Final = "TRAINPLAN_MODEL_FFN_HIDDEN_SIZE"
ENV_MODEL_GATED_MLP: Final = "TRAINPLAN_MODEL_GATED_MLP"
ENV_MODEL_VOCAB_SIZE: Final = "TRAINPLAN_MODEL_VOCAB_SIZE"
ENV_MODEL_SEQUENCE_LENGTH: Final = "TRAINPLAN_MODEL_SEQUENCE_LENGTH"
ENV_MODEL_TIED_EMBEDDINGS: Final = "TRAINPLAN_MODEL_TIED_EMBEDDINGS"

ENV_NAMES: Final = (
    ENV_PLAN_NAME,
    ENV_TENSOR_PARALLEL,
    ENV_PIPELINE_PARALLEL,
    ENV_DATA_PARALLEL,
    ENV_CONTEXT_PARALLEL,
    ENV_EXPERT_PARALLEL,
    ENV_EXPERT_TENSOR_PARALLEL,
    ENV_VIRTUAL_PIPELINE_STAGES,
    ENV_SEQUENCE_PARALLEL,
    ENV_ZERO_STAGE,
    ENV_MICRO_BATCH_SIZE,
    ENV_GRADIENT_ACCUMULATION_STEPS,
    ENV_GLOBAL_BATCH_SIZE,
    ENV_TOTAL_STEPS,
    ENV_PRECISION,
    ENV_OPTIMIZER,
    ENV_TRAINING_METHOD,
    ENV_LORA_RANK,
    ENV_LORA_TARGETS,
    ENV_ACTIVATION_CHECKPOINTING,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_INTERVAL_STEPS,
    ENV_METRICS_PORT,
    ENV_MODEL_LAYERS,
    ENV_MODEL_HIDDEN_SIZE,
    ENV_MODEL_ATTENTION_HEADS,
    ENV_MODEL_KV_HEADS,
    ENV_MODEL_FFN_HIDDEN_SIZE,
    ENV_MODEL_GATED_MLP,
    ENV_MODEL_VOCAB_SIZE,
    ENV_MODEL_SEQUENCE_LENGTH,
    ENV_MODEL_TIED_EMBEDDINGS,
)
"""Every `TRAINPLAN_` variable the launcher sets, in its order."""

ENV_JOB_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"
"""The node rank: the pod's index in its Indexed Job (set by the launcher)."""

# Set by torchrun for every worker.
ENV_RANK: Final = "RANK"
ENV_LOCAL_RANK: Final = "LOCAL_RANK"
ENV_WORLD_SIZE: Final = "WORLD_SIZE"
ENV_LOCAL_WORLD_SIZE: Final = "LOCAL_WORLD_SIZE"

CONFIG_ERROR_EXIT_CODE: Final = 3
"""Exit code of a training program whose configuration is unusable: the launcher's pod
failure policy fails the Job at once instead of retrying (`trainplan.launcher.env`)."""
