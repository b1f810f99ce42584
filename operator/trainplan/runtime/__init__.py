"""trainplan.runtime: the in-pod library of the training pods.

- `TrainingReporter` (`reporter`): serves `/metrics` from local rank 0 of each node, with
  the training series of global rank 0 and the node's GPU series (`gpus.NvmlCollector`,
  NVML read at scrape time);
- `schema`: the metric names (DESIGN.md, "Metric names"), the `TRAINPLAN_` environment
  variables and the exit codes, shared with the operator, the monitor and the dashboard;
- `integrations.huggingface`, `integrations.lightning`: callbacks that drive the reporter
  from the Hugging Face Trainer and PyTorch Lightning (import them explicitly);
- the reference trainer (`train`, run as `python -m trainplan.runtime.train`).

The runtime imports nothing else of trainplan (it runs in the training image, not the
operator). Importing this package loads prometheus-client only: not torch, transformers,
lightning or pynvml (NVML is loaded when a reporter starts).
"""

from trainplan.runtime.reporter import TrainingReporter
from trainplan.runtime.schema import (
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_METRICS,
    GPU_POWER_WATTS,
    GPU_UTILIZATION_RATIO,
    POD_METRICS,
    TRAIN_CHECKPOINT_SECONDS,
    TRAIN_CHECKPOINT_STEP,
    TRAIN_LAST_STEP_TIMESTAMP_SECONDS,
    TRAIN_LOSS,
    TRAIN_STEP,
    TRAIN_STEP_SECONDS,
    TRAIN_TOKENS,
    TRAIN_TOTAL_STEPS,
    TRAINING_METRICS,
    MetricSpec,
    MetricType,
)

__all__ = [
    "GPU_MEMORY_TOTAL_BYTES",
    "GPU_MEMORY_USED_BYTES",
    "GPU_METRICS",
    "GPU_POWER_WATTS",
    "GPU_UTILIZATION_RATIO",
    "POD_METRICS",
    "TRAINING_METRICS",
    "TRAIN_CHECKPOINT_SECONDS",
    "TRAIN_CHECKPOINT_STEP",
    "TRAIN_LAST_STEP_TIMESTAMP_SECONDS",
    "TRAIN_LOSS",
    "TRAIN_STEP",
    "TRAIN_STEP_SECONDS",
    "TRAIN_TOKENS",
    "TRAIN_TOTAL_STEPS",
    "MetricSpec",
    "MetricType",
    "TrainingReporter",
]
