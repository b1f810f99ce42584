"""Framework adapters: how the plan's layout reaches the training program torchrun runs.

`job.framework` picks one; each turns the plan (layout, batch split, steps, checkpoint
interval), the resolved model shape and the precision into the program's own flags, and
rejects layouts the framework cannot run. The user's `job.command` replaces the default
program when it differs from the spec's default (the reference trainer); `job.args` are
appended after the generated flags (for argparse-style programs the last occurrence of a
flag wins, so they can override them).

- `reference`: `python -m trainplan.runtime.train`, no flags: it reads the `TRAINPLAN_`
  environment (`trainplan.launcher.env`).
- `megatron`: Megatron-LM's `pretrain_gpt.py` (default `python pretrain_gpt.py`, relative
  to the image's working directory, the Megatron-LM checkout) with its flags
  (arguments.py of Megatron-LM core_r0.x): tensor, pipeline and interleaved pipeline
  degrees (with the first and last stages' layer counts when the pipeline degree does not
  divide the layers: `planner.stages`), sequence parallelism, micro and global batch, the
  distributed optimizer for ZeRO-1, the data-parallel overlap the plan prices
  (`--overlap-grad-reduce`, and `--overlap-param-gather` with the distributed optimizer;
  both off by default in Megatron-LM), recompute, precision, steps, the model shape and
  checkpointing. Megatron-LM's
  distributed optimizer is ZeRO-1; a plan with ZeRO-2 or 3 is rejected.
- Context parallelism (`layout.context` > 1): Megatron-LM's `--context-parallel-size`,
  torchtitan's `--parallelism.context_parallel_degree`; refused for `reference` and
  `deepspeed`.
- Mixture-of-experts (`model.experts`): Megatron-LM's `--num-experts`,
  `--moe-router-topk`, `--moe-ffn-hidden-size`, `--moe-shared-expert-intermediate-size`,
  `--moe-layer-freq` (a 0/1 list per layer), `--expert-model-parallel-size`,
  `--expert-tensor-parallel-size`, the all-to-all dispatcher with grouped GEMMs, an
  expert capacity factor when set, and `--overlap-moe-expert-parallel-comm
  --delay-wgrad-compute` where the plan priced that overlap (experts split, no pipeline
  or an interleaved one); latent attention as `--multi-latent-attention` with its ranks
  and head widths, a declared head width as `--kv-channels`, selective recomputation as
  `--recompute-modules core_attn layernorm moe_act mla_up_proj` (flag names as in
  Megatron-LM core_v0.19.0). torchtitan's `--parallelism.expert_parallel_degree` and
  `--parallelism.expert_tensor_parallel_degree` (torchtitan v0.2.2, which runs expert
  tensor degree 1 or the tensor degree only; the model's experts come from its
  `--model.name`). DeepSpeed's expert degree is set in the user's model code, so its plan
  keeps every expert on every rank; the reference trainer has no experts.
- `torchtitan`: `python -m torchtitan.train` with `JobConfig` overrides as named in
  torchtitan v0.2.2 (torchtitan/config/job_config.py at that tag, February 2026; the
  model chunks of a pipeline as `module_fqns_per_model_part`): `--parallelism.*`,
  `--training.*`, `--activation_checkpoint.mode` (with `selective_ac_option op`, the
  per-op policy the plan prices, for selective), `--checkpoint.*`. The model itself is
  chosen by torchtitan's `--model.name` / `--model.flavor` or a `--job.config_file`, which
  the user passes in `job.args`. Earlier releases named some of these differently
  (v0.1.0: `checkpoint.enable_checkpoint`, `pipeline_parallel_split_points`, no expert
  degrees).
- `deepspeed`: DeepSpeed is a library called from the user's own script, so `job.command`
  must name that script; the launcher writes a `ds_config.json` (batch, ZeRO stage,
  precision, activation checkpointing, AutoTP degree) into a ConfigMap, mounts it, and
  appends `--deepspeed --deepspeed_config <path>` after `job.args`, the flags of
  `deepspeed.add_config_arguments`. Pipeline parallelism with ZeRO-2 or 3 is rejected
  (DeepSpeed forbids it), as is tensor parallelism (AutoTP) with ZeRO-3.

LoRA and QLoRA (`training.method`) run only under `deepspeed`, whose program is the user's
own script: it applies the adapters (e.g. with PEFT) from `TRAINPLAN_LORA_RANK` and
`TRAINPLAN_LORA_TARGETS`; the other frameworks' programs train every weight, so such a
plan is refused with the framework to use.

Pure: builds tuples and dicts; no I/O.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from trainplan.api import DEFAULT_COMMAND, Plan, TrainingPlanSpec
from trainplan.launcher.errors import LauncherError
from trainplan.planner.frameworks import FRAMEWORK_LIMITS
from trainplan.planner.shapes import ModelShape
from trainplan.planner.stages import chunk_layers, interleaved_placement, split_counts

MEGATRON_PROGRAM: Final = ("python", "pretrain_gpt.py")
"""Megatron-LM's GPT pre-training script, relative to the image's working directory."""

TORCHTITAN_PROGRAM: Final = ("python", "-m", "torchtitan.train")
"""torchtitan's training entry point."""

DEFAULT_PROGRAMS: Final[Mapping[str, tuple[str, ...] | None]] = MappingProxyType(
    {
        "reference": tuple(DEFAULT_COMMAND),
        "megatron": MEGATRON_PROGRAM,
        "torchtitan": TORCHTITAN_PROGRAM,
        "deepspeed": None,
    }
)
"""The program each framework runs when `job.command` is left at its default; None: the
user must give one."""

DEEPSPEED_CONFIG_DIR: Final = "/etc/trainplan/deepspeed"
"""Where the DeepSpeed ConfigMap is mounted in the training container."""

DEEPSPEED_CONFIG_FILE: Final = "ds_config.json"
"""The key of the DeepSpeed ConfigMap, and the file name under `DEEPSPEED_CONFIG_DIR`."""

_TORCHTITAN_DTYPES: Final = MappingProxyType(
    {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}
)


@dataclass(frozen=True, slots=True)
class Launch:
    """What the training container runs under torchrun, and the files it needs.

    `program` is written as a user would run it without torchrun (`python -m module`,
    `python script.py`, or an executable); `arguments` follow it. `config_files` are
    (file name, content) pairs for a ConfigMap mounted at `DEEPSPEED_CONFIG_DIR`.
    """

    program: tuple[str, ...]
    arguments: tuple[str, ...]
    config_files: tuple[tuple[str, str], ...] = ()


def _program(spec: TrainingPlanSpec) -> tuple[str, ...]:
    framework = spec.job.framework
    command = tuple(spec.job.command)
    if command and command != tuple(DEFAULT_COMMAND):
        return command
    default = DEFAULT_PROGRAMS[framework]
    if default is None:
        raise LauncherError(
            [
                (
                    "job.command",
                    f"framework {framework} needs the training script that calls DeepSpeed "
                    f"(e.g. [python, train.py]); DeepSpeed is a library, not a program",
                )
            ]
        )
    return default


def _flag(name: str, value: int | str) -> tuple[str, str]:
    return (name, str(value))


def _unplaced(shape: ModelShape, pipeline: int, chunks: int) -> LauncherError:
    return LauncherError(
        [
            (
                "parallelism.virtualPipelineStages",
                f"{chunks} chunks per stage cannot split {shape.layers} layers on"
                f" {pipeline} stages evenly",
            )
        ]
    )


def _megatron_pipeline_split(shape: ModelShape, pipeline: int, chunks: int) -> list[str]:
    """Megatron-LM's flags for the stage split and its interleaved chunks, by their
    placement (`planner.stages.interleaved_placement`, from Megatron-LM core_v0.19.0's
    `TransformerConfig`): chunk sizes on an even split; the first and last stage layer
    counts on an uneven one, with the chunk count; or the embedding and the loss counted
    as layers, with the chunk count."""
    if pipeline == 1:
        return []
    placement = interleaved_placement(shape.layers, pipeline, chunks)
    if placement is None:
        raise _unplaced(shape, pipeline, chunks)
    if placement == "even":
        if chunks == 1:
            return []
        per_chunk = shape.layers // (pipeline * chunks)
        return list(_flag("--num-layers-per-virtual-pipeline-stage", per_chunk))
    interleaving = _flag("--num-virtual-stages-per-pipeline-rank", chunks) if chunks > 1 else ()
    if placement == "embedding-loss":
        return [
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
            *interleaving,
        ]
    first, _, last = split_counts(shape.layers, pipeline) or (0, 0, 0)
    return [
        *_flag("--decoder-first-pipeline-num-layers", first),
        *_flag("--decoder-last-pipeline-num-layers", last),
        *interleaving,
    ]


def _torchtitan_model_parts(shape: ModelShape, pipeline: int, chunks: int) -> tuple[str, ...]:
    """torchtitan's model chunks, one `--parallelism.module_fqns_per_model_part` value
    each ("tok_embeddings,layers.0,...", ..., "...,norm,output"): the layers of each of the
    pipeline x chunks model chunks (`planner.stages.chunk_layers`), the embedding on the
    first and the final norm and output layer on the last. Explicit, because without them
    torchtitan counts the embedding and the output as one layer each
    (`pipeline_parallel_first_stage_less_layers` and `_last_stage_less_layers`, default 1)
    and picks 2 chunks per rank for an interleaved schedule, neither of which is the
    plan's split. A first or last chunk may hold no layer (the embedding or the output
    alone), as in Llama 3's 405B layout."""
    sizes = chunk_layers(shape.layers, pipeline, chunks)
    if sizes is None:
        raise _unplaced(shape, pipeline, chunks)
    starts = [0, *itertools.accumulate(sizes)]
    parts = [
        [f"layers.{i}" for i in range(start, stop)] for start, stop in itertools.pairwise(starts)
    ]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return tuple(",".join(part) for part in parts)


def megatron_arguments(
    plan: Plan,
    shape: ModelShape,
    precision: str,
    checkpoint_dir: str,
    expert_capacity_factor: float | None = None,
) -> tuple[str, ...]:
    """Megatron-LM `pretrain_gpt.py` flags for the plan; LauncherError for ZeRO-2/3."""
    layout = plan.layout
    if layout.zero_stage > 1:
        raise LauncherError(
            [
                (
                    "job.framework",
                    f"megatron cannot run the plan's ZeRO stage {layout.zero_stage}: "
                    f"Megatron-LM's distributed optimizer is ZeRO-1. Use framework deepspeed "
                    f"or torchtitan (they shard gradients and weights), or pin "
                    f"parallelism.zeroStage to 0 or 1",
                )
            ]
        )
    args: list[str] = [
        *_flag("--tensor-model-parallel-size", layout.tensor),
        *_flag("--pipeline-model-parallel-size", layout.pipeline),
        *(_flag("--context-parallel-size", layout.context) if layout.context > 1 else ()),
    ]
    args += _megatron_pipeline_split(shape, layout.pipeline, layout.virtual_pipeline_stages)
    if layout.sequence_parallel and layout.tensor > 1:
        args.append("--sequence-parallel")
    args += [
        *_flag("--micro-batch-size", layout.micro_batch_size),
        *_flag("--global-batch-size", layout.global_batch_size),
    ]
    if layout.zero_stage == 1:
        args.append("--use-distributed-optimizer")
    if layout.data * layout.context > 1:
        # The gradient reduction overlapped with the last micro-batch's backward pass, and
        # the distributed optimizer's weight gather with the next forward, as the plan
        # prices them (`planner.steptime.data_comm_seconds`); Megatron-LM leaves both off.
        args.append("--overlap-grad-reduce")
        if layout.zero_stage == 1:
            args.append("--overlap-param-gather")
    if layout.activation_checkpointing == "full":
        args += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    elif layout.activation_checkpointing == "selective":
        args += ["--recompute-granularity", "selective"]
        if shape.recomputes_modules:
            # As the planner prices it (`memory.module_recompute_bytes_per_token`).
            modules = ["core_attn", "layernorm"]
            modules += ["moe_act"] if shape.experts is not None else []
            modules += ["mla_up_proj"] if shape.latent_attention is not None else []
            args += ["--recompute-modules", *modules]
    if precision in ("bf16", "fp8"):
        args.append("--bf16")
    elif precision == "fp16":
        args.append("--fp16")
    if precision == "fp8":
        args += ["--fp8-format", "hybrid"]
    args += [
        *_flag("--train-iters", plan.total_steps),
        *_flag("--num-layers", shape.layers),
        *_flag("--hidden-size", shape.hidden_size),
        *_flag("--num-attention-heads", shape.attention_heads),
    ]
    if shape.kv_heads < shape.attention_heads:
        args += ["--group-query-attention", *_flag("--num-query-groups", shape.kv_heads)]
    args += _flag("--ffn-hidden-size", shape.ffn_hidden_size)
    if shape.gated_mlp:
        args.append("--swiglu")
    if not shape.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not shape.dropout:
        # Megatron-LM defaults to 0.1 of both (core_v0.19.0 TransformerConfig); the plan
        # counts no masks for a model without, as its own Llama 3 example runs
        # (examples/llama/train_llama3_8b_h100_fp8.sh).
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    args += _megatron_attention_arguments(shape)
    args += _megatron_expert_arguments(plan, shape, expert_capacity_factor)
    args += [
        *_flag("--seq-length", shape.sequence_length),
        *_flag("--max-position-embeddings", shape.sequence_length),
        *_flag("--save", checkpoint_dir),
        *_flag("--load", checkpoint_dir),
        *_flag("--save-interval", plan.reliability.checkpoint_interval_steps),
    ]
    return tuple(args)


def _megatron_attention_arguments(shape: ModelShape) -> list[str]:
    """A declared head width, and latent attention's ranks and head widths."""
    args: list[str] = []
    latent = shape.latent_attention
    if latent is not None:
        args += [
            "--multi-latent-attention",
            *_flag("--kv-lora-rank", latent.kv_rank),
            *(_flag("--q-lora-rank", latent.query_rank) if latent.query_rank else ()),
            *_flag("--qk-head-dim", latent.no_rope_head_dim),
            *_flag("--qk-pos-emb-head-dim", latent.rope_head_dim),
            *_flag("--v-head-dim", latent.value_head_dim),
        ]
    elif shape.declared_head_dim is not None:
        args += _flag("--kv-channels", shape.declared_head_dim)
    return args


def moe_layer_pattern(shape: ModelShape) -> list[int]:
    """1 for each MoE layer, 0 for each dense one (`shapes.Experts.is_moe_layer`)."""
    experts = shape.experts
    if experts is None:
        return [0] * shape.layers
    return [int(experts.is_moe_layer(index)) for index in range(shape.layers)]


def _megatron_expert_arguments(
    plan: Plan, shape: ModelShape, capacity_factor: float | None
) -> list[str]:
    """The experts, their routing and their parallel degrees."""
    experts = shape.experts
    if experts is None:
        return []
    layout = plan.layout
    args = [
        *_flag("--num-experts", experts.routed),
        *_flag("--moe-router-topk", experts.per_token),
        *_flag("--moe-ffn-hidden-size", experts.ffn_hidden_size),
    ]
    if experts.shared_width:
        args += _flag("--moe-shared-expert-intermediate-size", experts.shared_width)
    if experts.layer_interval > 1 or experts.first_dense_layers:
        pattern = ",".join(str(bit) for bit in moe_layer_pattern(shape))
        args += _flag("--moe-layer-freq", f"[{pattern}]")
    args += [
        *_flag("--expert-model-parallel-size", layout.expert),
        *_flag("--expert-tensor-parallel-size", layout.expert_tensor),
        *_flag("--moe-token-dispatcher-type", "alltoall"),
        "--moe-grouped-gemm",
    ]
    if capacity_factor is not None:
        args += _flag("--moe-expert-capacity-factor", f"{capacity_factor:g}")
    if layout.expert > 1 and (layout.pipeline == 1 or layout.virtual_pipeline_stages > 1):
        args += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    return args


def torchtitan_arguments(
    plan: Plan, shape: ModelShape, precision: str, checkpoint_dir: str
) -> tuple[str, ...]:
    """torchtitan (v0.2.2 `JobConfig`) overrides for the plan; LauncherError for fp16.

    ZeRO maps onto FSDP2: stage 3 is `data_parallel_shard_degree` = data with the default
    resharding; stages 1 and 2, which torchtitan does not have, become FSDP without
    resharding after forward (`fsdp_reshard_after_forward never`: weights gathered once
    per micro-batch and kept for its backward, gradients and optimizer states sharded, no
    more memory than ZeRO-2; the plan prices the exchange on every micro-batch,
    `planner.frameworks`); stage 0
    is DDP (`data_parallel_replicate_degree` = data) when data parallelism is the only
    one, since torchtitan's DDP does not combine with tensor or pipeline parallelism, and
    FSDP without resharding otherwise. torchtitan always pairs tensor parallelism with
    sequence parallelism. With pipeline parallelism the local batch is a whole step's
    share of one data-parallel rank, split into micro batches of `microBatchSize`;
    without, it is one micro batch and torchtitan accumulates gradients up to the global
    batch.
    """
    layout = plan.layout
    dtype = _TORCHTITAN_DTYPES.get(precision)
    if dtype is None:
        raise LauncherError(
            [
                (
                    "training.precision",
                    f"torchtitan has no {precision} training (no loss scaling); "
                    f"use bf16, fp8 or fp32, or another framework",
                )
            ]
        )
    args: list[str] = [
        *_flag("--parallelism.tensor_parallel_degree", layout.tensor),
        *(
            _flag("--parallelism.context_parallel_degree", layout.context)
            if layout.context > 1
            else ()
        ),
        *_flag("--parallelism.pipeline_parallel_degree", layout.pipeline),
    ]
    if shape.experts is not None:
        args += [
            *_flag("--parallelism.expert_parallel_degree", layout.expert),
            *_flag("--parallelism.expert_tensor_parallel_degree", layout.expert_tensor),
        ]
    if layout.pipeline > 1:
        schedule = "Interleaved1F1B" if layout.virtual_pipeline_stages > 1 else "1F1B"
        args += _flag("--parallelism.pipeline_parallel_schedule", schedule)
        args += [
            "--parallelism.module_fqns_per_model_part",
            *_torchtitan_model_parts(shape, layout.pipeline, layout.virtual_pipeline_stages),
        ]
        args += _flag("--parallelism.pipeline_parallel_microbatch_size", layout.micro_batch_size)
    only_data_parallel = layout.tensor == 1 and layout.pipeline == 1
    if layout.zero_stage == 0 and only_data_parallel:
        shard, replicate = 1, layout.data
    else:
        shard, replicate = layout.data, 1
    args += [
        *_flag("--parallelism.data_parallel_shard_degree", shard),
        *_flag("--parallelism.data_parallel_replicate_degree", replicate),
    ]
    if layout.zero_stage < 3 and shard > 1:
        args += _flag("--parallelism.fsdp_reshard_after_forward", "never")
    local_batch = layout.micro_batch_size
    if layout.pipeline > 1:
        local_batch *= layout.gradient_accumulation_steps
    args += [
        *_flag("--training.local_batch_size", local_batch),
        *_flag("--training.global_batch_size", layout.global_batch_size),
        *_flag("--training.seq_len", shape.sequence_length),
        *_flag("--training.steps", plan.total_steps),
        *_flag("--training.mixed_precision_param", dtype),
    ]
    if precision == "fp8":
        args += _flag("--model.converters", "float8")
    args += _flag("--activation_checkpoint.mode", layout.activation_checkpointing)
    if layout.activation_checkpointing == "selective":
        # The per-op policy the plan prices (`planner.steptime.per_op_recomputed_matrices`), as
        # torchtitan's own train configs choose; v0.2.2's default "2" would recompute
        # every second layer in full.
        args += _flag("--activation_checkpoint.selective_ac_option", "op")
    args += [
        "--checkpoint.enable",
        *_flag("--checkpoint.folder", checkpoint_dir),
        *_flag("--checkpoint.interval", plan.reliability.checkpoint_interval_steps),
    ]
    return tuple(args)


def deepspeed_config(plan: Plan, precision: str, layers: int) -> dict[str, Any]:
    """The `ds_config.json` for the plan of a model of `layers` layers; LauncherError for
    layouts DeepSpeed rejects or trainplan cannot place."""
    layout = plan.layout
    problems: list[tuple[str, str]] = []
    if layers % layout.pipeline:
        problems.append(
            (
                "parallelism.pipeline",
                f"deepspeed splits a pipeline evenly only (the script's PipelineModule"
                f" partitions the model): {layout.pipeline} stages do not divide {layers}"
                f" layers; megatron and torchtitan place uneven stages",
            )
        )
    if layout.pipeline > 1 and layout.zero_stage > 1:
        problems.append(
            (
                "parallelism.zeroStage",
                f"deepspeed cannot combine pipeline parallelism ({layout.pipeline} stages) "
                f"with ZeRO stage {layout.zero_stage}: its pipeline engine allows ZeRO 0 or "
                f"1; pin parallelism.zeroStage to 0 or 1 or parallelism.pipeline to 1",
            )
        )
    if layout.tensor > 1 and layout.zero_stage > 2:
        problems.append(
            (
                "parallelism.zeroStage",
                f"deepspeed's tensor parallelism (AutoTP, tensor {layout.tensor}) works with "
                f"ZeRO stages 0 to 2, not 3; pin parallelism.zeroStage to 2 or less or "
                f"parallelism.tensor to 1",
            )
        )
    if problems:
        raise LauncherError(problems)
    config: dict[str, Any] = {
        "train_batch_size": layout.global_batch_size,
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.gradient_accumulation_steps,
        "zero_optimization": {"stage": layout.zero_stage},
    }
    if layout.zero_stage >= 1:
        # The gradient reduction overlapped with the backward pass, as the plan prices it
        # (DeepSpeed turns it on by itself only for stage 3).
        config["zero_optimization"]["overlap_comm"] = True
    if precision in ("bf16", "fp8"):
        config["bf16"] = {"enabled": True}
    elif precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0}
    if layout.activation_checkpointing != "none":
        config["activation_checkpointing"] = {
            "partition_activations": layout.tensor > 1,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
    if layout.tensor > 1:
        config["tensor_parallel"] = {"autotp_size": layout.tensor}
    return config


def _check_experts(framework: str, plan: Plan, shape: ModelShape) -> None:
    """LauncherError when the framework cannot run the plan's experts as laid out."""
    layout = plan.layout
    limits = FRAMEWORK_LIMITS[framework]
    problems: list[tuple[str, str]] = []
    if shape.experts is not None and not limits.experts:
        problems.append(
            (
                "job.framework",
                f"{framework} runs no mixture-of-experts model; use megatron or torchtitan",
            )
        )
    elif max(layout.expert, layout.expert_tensor) > 1 and not limits.expert_parallel:
        problems.append(
            (
                "parallelism.expert",
                f"{framework} places no expert parallelism (its expert degree lives in the"
                " model code); use megatron or torchtitan, or pin parallelism.expert to 1",
            )
        )
    if framework == "torchtitan" and layout.expert_tensor not in (1, layout.tensor):
        problems.append(
            (
                "parallelism.expertTensor",
                f"torchtitan splits experts over 1 or the tensor degree ({layout.tensor}) ranks,"
                f" not {layout.expert_tensor}",
            )
        )
    if problems:
        raise LauncherError(problems)


def deepspeed_arguments(config_path: str) -> tuple[str, ...]:
    """The flags of `deepspeed.add_config_arguments` that name the config file."""
    return ("--deepspeed", "--deepspeed_config", config_path)


def launch_for(
    spec: TrainingPlanSpec, plan: Plan, shape: ModelShape, checkpoint_dir: str
) -> Launch:
    """The program, arguments and config files of the spec's framework for this plan."""
    framework = spec.job.framework
    precision = spec.training.precision
    if plan.layout.context > 1 and not FRAMEWORK_LIMITS[framework].context_parallel:
        raise LauncherError(
            [
                (
                    "parallelism.context",
                    f"{framework} splits no sequence over ranks; use job.framework megatron or"
                    " torchtitan",
                )
            ]
        )
    if spec.training.method in ("lora", "qlora") and framework != "deepspeed":
        raise LauncherError(
            [
                (
                    "training.method",
                    f"{framework} trains every weight and adds no {spec.training.method}"
                    " adapters; use job.framework deepspeed with your own PEFT script"
                    " (job.command, reading TRAINPLAN_LORA_RANK and TRAINPLAN_LORA_TARGETS),"
                    " or method full",
                )
            ]
        )
    _check_experts(framework, plan, shape)
    program = _program(spec)
    user_args = tuple(spec.job.args)
    if framework == "megatron":
        generated = megatron_arguments(
            plan, shape, precision, checkpoint_dir, spec.training.expert_capacity_factor
        )
        return Launch(program, generated + user_args)
    if framework == "torchtitan":
        generated = torchtitan_arguments(plan, shape, precision, checkpoint_dir)
        return Launch(program, generated + user_args)
    if framework == "deepspeed":
        config = deepspeed_config(plan, precision, shape.layers)
        text = json.dumps(config, indent=2) + "\n"
        path = f"{DEEPSPEED_CONFIG_DIR}/{DEEPSPEED_CONFIG_FILE}"
        return Launch(
            program, user_args + deepspeed_arguments(path), ((DEEPSPEED_CONFIG_FILE, text),)
        )
    return Launch(program, user_args)
