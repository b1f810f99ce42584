"""The environment contract between the launcher and the training pods, and the exit codes.

Every training container gets the plan's layout, batch split, run length, checkpointing
and model shape as environment variables named here, in this order, all prefixed
`TRAINPLAN_`; then the user's `job.env` (a user entry replaces the one of the same name).
The in-pod runtime (the reference trainer, `trainplan.runtime`) reads the same names, so
they are a contract like the CRD's field names: add freely, rename none. The runtime may
not import the operator (DESIGN.md, layers), so this module imports nothing but `typing`:
the runtime can keep a copy checked against it by a test, or the names can move to the
runtime's own schema and be imported from there.

Values are strings, as environment variables are: integers in decimal, booleans as
`true` / `false`, names as written in the API (`bf16`, `selective`).

| variable | value |
|---|---|
| `TRAINPLAN_PLAN_NAME` | the TrainingPlan's `metadata.name` |
| `TRAINPLAN_TENSOR_PARALLEL` | `status.plan.layout.tensor` |
| `TRAINPLAN_PIPELINE_PARALLEL` | `layout.pipeline` |
| `TRAINPLAN_DATA_PARALLEL` | `layout.data` |
| `TRAINPLAN_CONTEXT_PARALLEL` | `layout.context`, ranks each sequence is split over |
| `TRAINPLAN_EXPERT_PARALLEL` | `layout.expert`, ranks each MoE layer's experts are split over |
| `TRAINPLAN_EXPERT_TENSOR_PARALLEL` | `layout.expertTensor`, ranks each expert is split over |
| `TRAINPLAN_VIRTUAL_PIPELINE_STAGES` | `layout.virtualPipelineStages`, chunks per pipeline rank |
| `TRAINPLAN_SEQUENCE_PARALLEL` | `layout.sequenceParallel`, `true` or `false` |
| `TRAINPLAN_ZERO_STAGE` | `layout.zeroStage`, 0..3 |
| `TRAINPLAN_MICRO_BATCH_SIZE` | `layout.microBatchSize`, sequences per GPU per forward pass |
| `TRAINPLAN_GRADIENT_ACCUMULATION_STEPS` | `layout.gradientAccumulationSteps` |
| `TRAINPLAN_GLOBAL_BATCH_SIZE` | `layout.globalBatchSize`, sequences per optimizer step |
| `TRAINPLAN_TOTAL_STEPS` | `plan.totalSteps`, optimizer steps of the whole run |
| `TRAINPLAN_PRECISION` | `spec.training.precision`: bf16, fp16, fp8 or fp32 |
| `TRAINPLAN_OPTIMIZER` | `spec.training.optimizer`: adamw or sgd |
| `TRAINPLAN_TRAINING_METHOD` | `spec.training.method`: pretrain, full, lora or qlora |
| `TRAINPLAN_LORA_RANK` | `spec.training.lora.rank` for lora and qlora (default 16), else `0` |
| `TRAINPLAN_LORA_TARGETS` | `training.lora.targets`: query-value, attention, all-linear; `none` |
| `TRAINPLAN_ACTIVATION_CHECKPOINTING` | `layout.activationCheckpointing`: none, selective or full |
| `TRAINPLAN_CHECKPOINT_DIR` | where checkpoints go (`/checkpoints`, the claim's mount point) |
| `TRAINPLAN_CHECKPOINT_INTERVAL_STEPS` | `plan.reliability.checkpointIntervalSteps` |
| `TRAINPLAN_METRICS_PORT` | `spec.job.metricsPort`, the port of the `/metrics` endpoint |
| `TRAINPLAN_MODEL_LAYERS` | transformer layers |
| `TRAINPLAN_MODEL_HIDDEN_SIZE` | model width |
| `TRAINPLAN_MODEL_ATTENTION_HEADS` | query heads |
| `TRAINPLAN_MODEL_KV_HEADS` | key/value heads (grouped-query attention) |
| `TRAINPLAN_MODEL_FFN_HIDDEN_SIZE` | MLP inner width |
| `TRAINPLAN_MODEL_GATED_MLP` | `true` for a SwiGLU-style MLP |
| `TRAINPLAN_MODEL_VOCAB_SIZE` | vocabulary size |
| `TRAINPLAN_MODEL_SEQUENCE_LENGTH` | tokens per sequence |
| `TRAINPLAN_MODEL_TIED_EMBEDDINGS` | `true` when the output layer shares the embedding |

The model shape is the resolved one: the preset's values with the spec's explicit fields
on top, exactly what the planner planned for.

`JOB_COMPLETION_INDEX` (the node rank, from the pod's
`batch.kubernetes.io/job-completion-index` annotation through the downward API) comes
first, so that torchrun's `--node-rank=$(JOB_COMPLETION_INDEX)` can expand it.

Exit codes. The pods run with `restartPolicy: Never` and a pod failure policy
(`trainplan.launcher.render`): a container that exits with one of `FAIL_JOB_EXIT_CODES`
fails the whole Job at once instead of being retried `reliability.maxRestarts` times,
because running the same configuration again cannot help:

- `USAGE_ERROR_EXIT_CODE` (2): a command-line usage error; argparse, click and torchrun
  itself exit 2 on arguments they cannot parse.
- `CONFIG_ERROR_EXIT_CODE` (3): the training program found its configuration unusable
  (e.g. a `TRAINPLAN_` variable that contradicts the model, a dataset that does not
  exist). The reference trainer exits 3 for these; other programs may adopt it.

Note that torchrun exits 1 whenever a worker fails, whatever the worker's own code, after
its own restarts (`--max-restarts`) are spent; a code reaches Kubernetes unchanged only
from torchrun itself or from a program that checks its configuration before torchrun
starts the workers. Everything else (exit 1, signals, OOM kills) is retried up to
`backoffLimit`, and disruptions (preemption, eviction, node drain) are ignored.
"""

from typing import Final

PREFIX: Final = "TRAINPLAN_"

PLAN_NAME: Final = "TRAINPLAN_PLAN_NAME"
TENSOR_PARALLEL: Final = "TRAINPLAN_TENSOR_PARALLEL"
PIPELINE_PARALLEL: Final = "TRAINPLAN_PIPELINE_PARALLEL"
DATA_PARALLEL: Final = "TRAINPLAN_DATA_PARALLEL"
CONTEXT_PARALLEL: Final = "TRAINPLAN_CONTEXT_PARALLEL"
EXPERT_PARALLEL: Final = "TRAINPLAN_EXPERT_PARALLEL"
EXPERT_TENSOR_PARALLEL: Final = "TRAINPLAN_EXPERT_TENSOR_PARALLEL"
VIRTUAL_PIPELINE_STAGES: Final = "TRAINPLAN_VIRTUAL_PIPELINE_STAGES"
SEQUENCE_PARALLEL: Final = "TRAINPLAN_SEQUENCE_PARALLEL"
ZERO_STAGE: Final = "TRAINPLAN_ZERO_STAGE"
MICRO_BATCH_SIZE: Final = "TRAINPLAN_MICRO_BATCH_SIZE"
GRADIENT_ACCUMULATION_STEPS: Final = "TRAINPLAN_GRADIENT_ACCUMULATION_STEPS"
GLOBAL_BATCH_SIZE: Final = "TRAINPLAN_GLOBAL_BATCH_SIZE"
TOTAL_STEPS: Final = "TRAINPLAN_TOTAL_STEPS"
PRECISION: Final = "TRAINPLAN_PRECISION"
OPTIMIZER: Final = "TRAINPLAN_OPTIMIZER"
TRAINING_METHOD: Final = "TRAINPLAN_TRAINING_METHOD"
LORA_RANK: Final = "TRAINPLAN_LORA_RANK"
LORA_TARGETS: Final = "TRAINPLAN_LORA_TARGETS"
ACTIVATION_CHECKPOINTING: Final = "TRAINPLAN_ACTIVATION_CHECKPOINTING"
CHECKPOINT_DIR: Final = "TRAINPLAN_CHECKPOINT_DIR"
CHECKPOINT_INTERVAL_STEPS: Final = "TRAINPLAN_CHECKPOINT_INTERVAL_STEPS"
METRICS_PORT: Final = "TRAINPLAN_METRICS_PORT"
MODEL_LAYERS: Final = "TRAINPLAN_MODEL_LAYERS"
MODEL_HIDDEN_SIZE: Final = "TRAINPLAN_MODEL_HIDDEN_SIZE"
MODEL_ATTENTION_HEADS: Final = "TRAINPLAN_MODEL_ATTENTION_HEADS"
MODEL_KV_HEADS: Final = "TRAINPLAN_MODEL_KV_HEADS"
MODEL_FFN_HIDDEN_SIZE: Final = "TRAINPLAN_MODEL_FFN_HIDDEN_SIZE"
MODEL_GATED_MLP: Final = "TRAINPLAN_MODEL_GATED_MLP"
MODEL_VOCAB_SIZE: Final = "TRAINPLAN_MODEL_VOCAB_SIZE"
MODEL_SEQUENCE_LENGTH: Final = "TRAINPLAN_MODEL_SEQUENCE_LENGTH"
MODEL_TIED_EMBEDDINGS: Final = "TRAINPLAN_MODEL_TIED_EMBEDDINGS"

NAMES: Final = (
    PLAN_NAME,
    TENSOR_PARALLEL,
    PIPELINE_PARALLEL,
    DATA_PARALLEL,
    CONTEXT_PARALLEL,
    EXPERT_PARALLEL,
    EXPERT_TENSOR_PARALLEL,
    VIRTUAL_PIPELINE_STAGES,
    SEQUENCE_PARALLEL,
    ZERO_STAGE,
    MICRO_BATCH_SIZE,
    GRADIENT_ACCUMULATION_STEPS,
    GLOBAL_BATCH_SIZE,
    TOTAL_STEPS,
    PRECISION,
    OPTIMIZER,
    TRAINING_METHOD,
    LORA_RANK,
    LORA_TARGETS,
    ACTIVATION_CHECKPOINTING,
    CHECKPOINT_DIR,
    CHECKPOINT_INTERVAL_STEPS,
    METRICS_PORT,
    MODEL_LAYERS,
    MODEL_HIDDEN_SIZE,
    MODEL_ATTENTION_HEADS,
    MODEL_KV_HEADS,
    MODEL_FFN_HIDDEN_SIZE,
    MODEL_GATED_MLP,
    MODEL_VOCAB_SIZE,
    MODEL_SEQUENCE_LENGTH,
    MODEL_TIED_EMBEDDINGS,
)
"""Every `TRAINPLAN_` variable, in the order the launcher sets them."""

TORCHRUN_FRESH_STORE: Final = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
"""Set in every training container: with torch 2.x's shared rendezvous store, workers that
torchrun restarts read the previous attempt's addresses and hang or fail to connect
(pytorch/pytorch#135712); a fresh store per attempt makes `--max-restarts` work."""

JOB_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"
"""The node rank: the pod's index in its Indexed Job (0 .. nodes - 1)."""

JOB_COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
"""The pod annotation the Job controller writes the index to (Kubernetes >= 1.24)."""

USAGE_ERROR_EXIT_CODE: Final = 2
"""A command-line usage error (argparse, click, torchrun): fails the Job at once."""

CONFIG_ERROR_EXIT_CODE: Final = 3
"""The training program's configuration is unusable; the reference trainer exits with
it. Fails the Job at once."""

FAIL_JOB_EXIT_CODES: Final = (USAGE_ERROR_EXIT_CODE, CONFIG_ERROR_EXIT_CODE)
"""Exit codes of the training container that fail the Job without retries, ascending."""
