"""`TrainerConfig`: what the reference trainer runs, from the environment and its flags.

The launcher passes the plan to every training container as `TRAINPLAN_` environment
variables (`trainplan.runtime.schema`, a copy of `trainplan.launcher.env`); a command-line
flag overrides the variable of the same meaning (`job.args` reach the trainer after the
generated flags, so a user can override the plan). What the plan does not hold (the data,
the learning rate, the seed, test hooks) comes from flags only. Values not given anywhere
take the defaults below: a tiny model on synthetic data, so that
`python -m trainplan.runtime.train` runs on a laptop.

`load_config` checks everything that can be checked before `torch.distributed` starts
(the layout against `WORLD_SIZE`, the batch split, the shape against the tensor degree,
combinations the trainer cannot honour) and raises `ConfigError` with one line per
problem; the trainer prints them and exits with `CONFIG_ERROR_EXIT_CODE`. This module
imports neither torch nor numpy, so a bad configuration fails in milliseconds.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, cast

from trainplan.runtime import schema

Precision = Literal["bf16", "fp16", "fp32"]
Optimizer = Literal["adamw", "sgd"]
Recompute = Literal["none", "selective", "full"]

PRECISIONS: Final = ("bf16", "fp16", "fp8", "fp32")
"""Precisions the API allows; the reference trainer runs all but fp8."""
OPTIMIZERS: Final = ("adamw", "sgd")
METHODS: Final = ("pretrain", "full", "lora", "qlora")
"""Training methods the API allows; the reference trainer runs pretrain and full."""
RECOMPUTE_LEVELS: Final = ("none", "selective", "full")

SYNTHETIC: Final = "synthetic"
"""The `--data` value for random tokens from a seeded generator (no file)."""

PIPELINE_FRAMEWORKS: Final = "megatron, torchtitan or deepspeed"
"""The frameworks (`job.framework`) that run pipeline parallelism."""

ENV_WORLD_SIZE: Final = schema.ENV_WORLD_SIZE


class ConfigError(Exception):
    """The configuration is unusable; `problems` holds one human-readable line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The decoder's shape (the launcher's resolved `TRAINPLAN_MODEL_*`)."""

    layers: int = 2
    hidden_size: int = 64
    attention_heads: int = 4
    kv_heads: int = 4
    ffn_hidden_size: int = 256
    gated_mlp: bool = False
    vocab_size: int = 256
    sequence_length: int = 64
    tied_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.attention_heads


@dataclass(frozen=True, slots=True)
class LayoutConfig:
    """The parallel layout and the batch split of one optimizer step."""

    world_size: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    virtual_pipeline_stages: int = 1
    data_parallel: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    micro_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    global_batch_size: int = 1

    def describe(self) -> str:
        """A one-line summary for logs, e.g. `tp2 pp1 dp4 zero1 | 2 x 4 x 8 = 64`."""
        return (
            f"tp{self.tensor_parallel} pp{self.pipeline_parallel} dp{self.data_parallel} "
            f"zero{self.zero_stage}{' sp' if self.sequence_parallel else ''} | micro "
            f"{self.micro_batch_size} x data {self.data_parallel} x accumulation "
            f"{self.gradient_accumulation_steps} = global {self.global_batch_size}"
        )


@dataclass(frozen=True, slots=True)
class TrainerConfig:
    """Everything the reference trainer needs; built by `load_config`.

    `checkpoint_dir` None disables checkpoints; `checkpoint_interval_steps` 0 writes only
    the final one. `metrics_port` None starts no metrics server, 0 binds a free port.
    `data` is `SYNTHETIC` or the path of a tokenized file (`trainplan.runtime.data`).
    """

    layout: LayoutConfig
    model: ModelConfig
    total_steps: int = 20
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    activation_checkpointing: Recompute = "none"
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    seed: int = 1234
    data: str = SYNTHETIC
    checkpoint_dir: str | None = None
    checkpoint_interval_steps: int = 0
    keep_checkpoints: int = 2
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"
    linger_seconds: float = 0.0
    log_interval_steps: int = 10
    plan_name: str = ""
    step_log: str | None = None
    describe: str | None = None
    sleep_per_step_seconds: float = 0.0

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one optimizer step: global batch x sequence length."""
        return self.layout.global_batch_size * self.model.sequence_length

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy (nested dicts), for `--describe` and the checkpoints."""
        return asdict(self)


# --- Parsing -------------------------------------------------------------------------------

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{text!r} is not true or false")


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_float(text: str) -> float:
    return float(text.strip())


def _parse_str(text: str) -> str:
    return text.strip()


_EXPECTED: Final[dict[Callable[[str], Any], str]] = {
    _parse_bool: "not true or false",
    _parse_int: "not an integer",
    _parse_float: "not a number",
}


@dataclass(frozen=True, slots=True)
class _Option:
    """One setting: its dataclass field, environment variable (if any) and flag."""

    field: str
    flag: str
    parse: Callable[[str], Any]
    help: str
    env: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


_OPTIONS: Final = (
    # layout
    _Option("tensor_parallel", "--tensor-parallel", _parse_int,
            "tensor-parallel degree", schema.ENV_TENSOR_PARALLEL, "N"),
    _Option("pipeline_parallel", "--pipeline-parallel", _parse_int,
            "pipeline-parallel degree (only 1: see the message for others)",
            schema.ENV_PIPELINE_PARALLEL, "N"),
    _Option("virtual_pipeline_stages", "--virtual-pipeline-stages", _parse_int,
            "interleaved pipeline chunks per rank (only 1)",
            schema.ENV_VIRTUAL_PIPELINE_STAGES, "N"),
    _Option("data_parallel", "--data-parallel", _parse_int,
            "data-parallel degree (default: WORLD_SIZE / (tensor x pipeline))",
            schema.ENV_DATA_PARALLEL, "N"),
    _Option("context_parallel", "--context-parallel", _parse_int,
            "context-parallel degree (only 1: the trainer splits no sequence over ranks)",
            schema.ENV_CONTEXT_PARALLEL, "N"),
    _Option("expert_parallel", "--expert-parallel", _parse_int,
            "expert-parallel degree (only 1: the trainer's model has no experts)",
            schema.ENV_EXPERT_PARALLEL, "N"),
    _Option("expert_tensor_parallel", "--expert-tensor-parallel", _parse_int,
            "expert-tensor-parallel degree (only 1: the trainer's model has no experts)",
            schema.ENV_EXPERT_TENSOR_PARALLEL, "N"),
    _Option("sequence_parallel", "--sequence-parallel", _parse_bool,
            "sequence parallelism with tensor parallelism (true/false)",
            schema.ENV_SEQUENCE_PARALLEL, "BOOL"),
    _Option("zero_stage", "--zero-stage", _parse_int,
            "0: DDP; 1, 2: FSDP2 without resharding after forward; 3: FSDP2",
            schema.ENV_ZERO_STAGE, "0..3"),
    _Option("micro_batch_size", "--micro-batch-size", _parse_int,
            "sequences per rank per forward pass", schema.ENV_MICRO_BATCH_SIZE, "N"),
    _Option("gradient_accumulation_steps", "--gradient-accumulation-steps", _parse_int,
            "micro-batches per optimizer step (default: global / (micro x data))",
            schema.ENV_GRADIENT_ACCUMULATION_STEPS, "N"),
    _Option("global_batch_size", "--global-batch-size", _parse_int,
            "sequences per optimizer step (default: micro x data x accumulation)",
            schema.ENV_GLOBAL_BATCH_SIZE, "N"),
    # run
    _Option("total_steps", "--total-steps", _parse_int, "optimizer steps of the whole run",
            schema.ENV_TOTAL_STEPS, "N"),
    _Option("precision", "--precision", _parse_str, "mixed precision",
            schema.ENV_PRECISION, choices=PRECISIONS),
    _Option("optimizer", "--optimizer", _parse_str, "optimizer",
            schema.ENV_OPTIMIZER, choices=OPTIMIZERS),
    _Option("training_method", "--training-method", _parse_str,
            "what trains: pretrain or full (every weight); lora and qlora are refused",
            schema.ENV_TRAINING_METHOD, choices=METHODS),
    _Option("lora_rank", "--lora-rank", _parse_int,
            "adapter rank of a lora or qlora plan (read, not used: refused above)",
            schema.ENV_LORA_RANK, "N"),
    _Option("lora_targets", "--lora-targets", _parse_str,
            "adapted matrices of a lora or qlora plan (read, not used: refused above)",
            schema.ENV_LORA_TARGETS, choices=("query-value", "attention", "all-linear", "none")),
    _Option("activation_checkpointing", "--activation-checkpointing", _parse_str,
            "recompute level", schema.ENV_ACTIVATION_CHECKPOINTING,
            choices=RECOMPUTE_LEVELS),
    _Option("checkpoint_dir", "--checkpoint-dir", _parse_str,
            "directory of the checkpoints (unset: no checkpoints)",
            schema.ENV_CHECKPOINT_DIR, "DIR"),
    _Option("checkpoint_interval_steps", "--checkpoint-interval-steps", _parse_int,
            "steps between checkpoints (0: only the final one)",
            schema.ENV_CHECKPOINT_INTERVAL_STEPS, "N"),
    _Option("keep_checkpoints", "--keep-checkpoints", _parse_int,
            "how many of the newest checkpoints to keep (default 2)", metavar="N"),
    _Option("metrics_port", "--metrics-port", _parse_int,
            "port of the /metrics endpoint (0: a free one; unset: no endpoint)",
            schema.ENV_METRICS_PORT, "PORT"),
    _Option("metrics_address", "--metrics-address", _parse_str,
            "address the /metrics endpoint binds (default 0.0.0.0)", metavar="ADDRESS"),
    _Option("plan_name", "--plan-name", _parse_str, "the TrainingPlan's name, for logs",
            schema.ENV_PLAN_NAME, "NAME"),
    # model
    _Option("layers", "--layers", _parse_int, "transformer layers",
            schema.ENV_MODEL_LAYERS, "N"),
    _Option("hidden_size", "--hidden-size", _parse_int, "model width",
            schema.ENV_MODEL_HIDDEN_SIZE, "N"),
    _Option("attention_heads", "--attention-heads", _parse_int, "query heads",
            schema.ENV_MODEL_ATTENTION_HEADS, "N"),
    _Option("kv_heads", "--kv-heads", _parse_int,
            "key/value heads (default: attention heads)", schema.ENV_MODEL_KV_HEADS, "N"),
    _Option("ffn_hidden_size", "--ffn-hidden-size", _parse_int,
            "MLP inner width (default 4 x hidden)", schema.ENV_MODEL_FFN_HIDDEN_SIZE, "N"),
    _Option("gated_mlp", "--gated-mlp", _parse_bool, "SwiGLU MLP (true/false)",
            schema.ENV_MODEL_GATED_MLP, "BOOL"),
    _Option("vocab_size", "--vocab-size", _parse_int, "vocabulary size",
            schema.ENV_MODEL_VOCAB_SIZE, "N"),
    _Option("sequence_length", "--sequence-length", _parse_int, "tokens per sequence",
            schema.ENV_MODEL_SEQUENCE_LENGTH, "N"),
    _Option("tied_embeddings", "--tied-embeddings", _parse_bool,
            "output layer shares the embedding (true/false)",
            schema.ENV_MODEL_TIED_EMBEDDINGS, "BOOL"),
    # flags only
    _Option("data", "--data", _parse_str,
            f"'{SYNTHETIC}' or the path of a tokenized uint16 .bin file", metavar="PATH"),
    _Option("learning_rate", "--learning-rate", _parse_float, "learning rate", metavar="LR"),
    _Option("weight_decay", "--weight-decay", _parse_float, "weight decay", metavar="WD"),
    _Option("seed", "--seed", _parse_int, "seed of the model init and the data", metavar="N"),
    _Option("linger_seconds", "--linger-seconds", _parse_float,
            "keep serving metrics this long after the last step (default 0)", metavar="S"),
    _Option("log_interval_steps", "--log-interval-steps", _parse_int,
            "log a line every N steps on rank 0 (default 10)", metavar="N"),
    _Option("step_log", "--step-log", _parse_str,
            "rank 0 appends '<step> <loss> <micro-batches> <sequences>' per step",
            metavar="FILE"),
    _Option("describe", "--describe", _parse_str,
            "rank 0 writes the resolved layout and parameter placements as JSON",
            metavar="FILE"),
    _Option("sleep_per_step_seconds", "--sleep-per-step-seconds", _parse_float,
            "sleep after each step (tests only)", metavar="S"),
)  # fmt: skip


def environment_names() -> tuple[str, ...]:
    """The environment variables the trainer reads (the launcher's `TRAINPLAN_` names)."""
    return tuple(option.env for option in _OPTIONS if option.env is not None)


def build_parser() -> argparse.ArgumentParser:
    """The trainer's argparse parser; every flag defaults to None (not given)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainplan.runtime.train",
        description="trainplan's reference trainer. Every setting comes from its "
        "TRAINPLAN_ environment variable (set by the launcher) unless a flag overrides it.",
    )
    for option in _OPTIONS:
        text = option.help + (f" [{option.env}]" if option.env else "")
        parser.add_argument(
            option.flag,
            dest=option.field,
            default=None,
            metavar=option.metavar,
            choices=option.choices,
            help=text,
        )
    return parser


def load_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> TrainerConfig:
    """The configuration from `environ` (default `os.environ`) and `argv` (default
    `sys.argv[1:]`); ConfigError listing every problem found."""
    env = os.environ if environ is None else environ
    namespace = build_parser().parse_args(argv)
    problems: list[str] = []
    parsed: dict[str, Any] = {}
    for option in _OPTIONS:
        flag_value = cast(str | None, getattr(namespace, option.field))
        if flag_value is not None:
            text, origin = flag_value, option.flag
        elif option.env is not None and env.get(option.env, "").strip():
            text, origin = env[option.env], option.env
        else:
            continue
        try:
            parsed[option.field] = option.parse(text)
        except ValueError:
            problems.append(f"{origin}={text!r}: {_EXPECTED.get(option.parse, 'invalid')}")
            continue
        if option.choices is not None and parsed[option.field] not in option.choices:
            allowed = ", ".join(option.choices)
            problems.append(f"{origin}={text!r}: must be one of {allowed}")
            del parsed[option.field]

    world_text = env.get(ENV_WORLD_SIZE, "").strip() or "1"
    try:
        world_size = int(world_text)
    except ValueError:
        problems.append(f"{ENV_WORLD_SIZE}={world_text!r} is not an integer")
        world_size = 1
    if problems:
        raise ConfigError(problems)
    config = _resolve(parsed, world_size, problems)
    if problems:
        raise ConfigError(problems)
    return config


def _resolve(parsed: dict[str, Any], world_size: int, problems: list[str]) -> TrainerConfig:
    """Defaults filled in, derived values computed and the whole checked."""
    defaults_model = ModelConfig()
    hidden = int(parsed.get("hidden_size", defaults_model.hidden_size))
    heads = int(parsed.get("attention_heads", defaults_model.attention_heads))
    model = ModelConfig(
        layers=int(parsed.get("layers", defaults_model.layers)),
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=int(parsed.get("kv_heads", heads)),
        ffn_hidden_size=int(parsed.get("ffn_hidden_size", 4 * hidden)),
        gated_mlp=bool(parsed.get("gated_mlp", defaults_model.gated_mlp)),
        vocab_size=int(parsed.get("vocab_size", defaults_model.vocab_size)),
        sequence_length=int(parsed.get("sequence_length", defaults_model.sequence_length)),
        tied_embeddings=bool(parsed.get("tied_embeddings", defaults_model.tied_embeddings)),
    )
    tensor = int(parsed.get("tensor_parallel", 1))
    pipeline = int(parsed.get("pipeline_parallel", 1))
    model_parallel = max(tensor, 1) * max(pipeline, 1)
    data = int(parsed.get("data_parallel", max(world_size // model_parallel, 1)))
    micro = int(parsed.get("micro_batch_size", 1))
    accumulation = parsed.get("gradient_accumulation_steps")
    global_batch = parsed.get("global_batch_size")
    if accumulation is None:
        per_step = micro * data
        if global_batch is not None and per_step > 0 and global_batch % per_step == 0:
            accumulation = global_batch // per_step
        else:
            accumulation = 1
    if global_batch is None:
        global_batch = micro * data * accumulation
    layout = LayoutConfig(
        world_size=world_size,
        tensor_parallel=tensor,
        pipeline_parallel=pipeline,
        virtual_pipeline_stages=int(parsed.get("virtual_pipeline_stages", 1)),
        data_parallel=data,
        sequence_parallel=bool(parsed.get("sequence_parallel", False)),
        zero_stage=int(parsed.get("zero_stage", 0)),
        micro_batch_size=micro,
        gradient_accumulation_steps=int(accumulation),
        global_batch_size=int(global_batch),
    )
    scalars = {
        key: parsed[key]
        for key in (
            "total_steps",
            "optimizer",
            "activation_checkpointing",
            "learning_rate",
            "weight_decay",
            "seed",
            "data",
            "checkpoint_dir",
            "checkpoint_interval_steps",
            "keep_checkpoints",
            "metrics_port",
            "metrics_address",
            "linger_seconds",
            "log_interval_steps",
            "plan_name",
            "step_log",
            "describe",
            "sleep_per_step_seconds",
        )
        if key in parsed
    }
    context = parsed.get("context_parallel", 1)
    if context != 1:
        problems.append(
            f"context parallelism {context}: the reference trainer splits no sequence over"
            " ranks; use framework megatron or torchtitan, or context 1"
        )
    for key, what in (("expert_parallel", "expert"), ("expert_tensor_parallel", "expert-tensor")):
        degree = parsed.get(key, 1)
        if degree != 1:
            problems.append(
                f"{what} parallelism {degree}: the reference trainer's model has no experts;"
                " use framework megatron or torchtitan"
            )
    method = str(parsed.get("training_method", "pretrain"))
    if method in ("lora", "qlora"):
        problems.append(
            f"training method {method}: the reference trainer trains every weight (no"
            " adapters); use framework deepspeed with your own PEFT script, or method full"
        )
    precision = str(parsed.get("precision", "bf16"))
    if precision == "fp8":
        problems.append(
            "precision fp8: the reference trainer has no fp8 training (it needs Transformer "
            "Engine or torchao float8 on Hopper-class GPUs); use framework megatron or "
            "torchtitan for fp8, or precision bf16"
        )
        precision = "bf16"
    config = TrainerConfig(
        layout=layout,
        model=model,
        precision=cast(Precision, precision),
        **scalars,
    )
    problems.extend(check(config))
    return config


def check(config: TrainerConfig) -> list[str]:
    """Problems of a configuration that torch.distributed need not be up to find."""
    problems: list[str] = []
    layout, model = config.layout, config.model

    def positive(name: str, value: int) -> bool:
        if value < 1:
            problems.append(f"{name} must be at least 1, got {value}")
            return False
        return True

    layout_ok = all(
        [
            positive("tensor parallel degree", layout.tensor_parallel),
            positive("pipeline parallel degree", layout.pipeline_parallel),
            positive("virtual pipeline stages", layout.virtual_pipeline_stages),
            positive("data parallel degree", layout.data_parallel),
            positive("micro batch size", layout.micro_batch_size),
            positive("gradient accumulation steps", layout.gradient_accumulation_steps),
            positive("global batch size", layout.global_batch_size),
            positive("world size", layout.world_size),
        ]
    )
    shape_ok = all(
        [
            positive("model layers", model.layers),
            positive("hidden size", model.hidden_size),
            positive("attention heads", model.attention_heads),
            positive("kv heads", model.kv_heads),
            positive("ffn hidden size", model.ffn_hidden_size),
            positive("vocab size", model.vocab_size),
            positive("sequence length", model.sequence_length),
        ]
    )
    positive("total steps", config.total_steps)
    positive("keep checkpoints", config.keep_checkpoints)
    positive("log interval steps", config.log_interval_steps)
    if layout.pipeline_parallel > 1 or layout.virtual_pipeline_stages > 1:
        problems.append(
            f"pipeline parallelism (pipeline {layout.pipeline_parallel}, virtual stages "
            f"{layout.virtual_pipeline_stages}) is not implemented by the reference trainer; "
            f"use job.framework {PIPELINE_FRAMEWORKS}, or pin parallelism.pipeline to 1"
        )
    if layout_ok:
        product = layout.data_parallel * layout.tensor_parallel * layout.pipeline_parallel
        if product != layout.world_size:
            problems.append(
                f"layout does not match the world: data {layout.data_parallel} x tensor "
                f"{layout.tensor_parallel} x pipeline {layout.pipeline_parallel} = {product}, "
                f"but WORLD_SIZE is {layout.world_size}"
            )
        batch = layout.micro_batch_size * layout.data_parallel
        if batch * layout.gradient_accumulation_steps != layout.global_batch_size:
            problems.append(
                f"batch split does not add up: micro {layout.micro_batch_size} x data "
                f"{layout.data_parallel} x accumulation {layout.gradient_accumulation_steps} = "
                f"{batch * layout.gradient_accumulation_steps}, but the global batch is "
                f"{layout.global_batch_size}"
            )
    if not 0 <= layout.zero_stage <= 3:
        problems.append(f"ZeRO stage must be 0..3, got {layout.zero_stage}")
    if shape_ok:
        problems.extend(_shape_problems(config))
    if config.checkpoint_interval_steps < 0:
        problems.append(
            f"checkpoint interval must be 0 (final only) or more, got "
            f"{config.checkpoint_interval_steps}"
        )
    if config.metrics_port is not None and not 0 <= config.metrics_port <= 65535:
        problems.append(f"metrics port must be 0..65535, got {config.metrics_port}")
    if config.learning_rate <= 0:
        problems.append(f"learning rate must be positive, got {config.learning_rate}")
    if config.weight_decay < 0:
        problems.append(f"weight decay must not be negative, got {config.weight_decay}")
    if config.linger_seconds < 0 or config.sleep_per_step_seconds < 0:
        problems.append("linger and sleep seconds must not be negative")
    if config.data != SYNTHETIC and not os.path.isfile(config.data):
        problems.append(f"data file {config.data!r} does not exist (or use --data {SYNTHETIC})")
    return problems


def _shape_problems(config: TrainerConfig) -> list[str]:
    layout, model = config.layout, config.model
    problems: list[str] = []
    tensor = layout.tensor_parallel
    if model.hidden_size % model.attention_heads:
        problems.append(
            f"hidden size {model.hidden_size} is not divisible by the {model.attention_heads} "
            f"attention heads"
        )
    elif model.head_dim % 2:
        problems.append(f"head width {model.head_dim} must be even (rotary embeddings)")
    if model.attention_heads % model.kv_heads:
        problems.append(
            f"attention heads {model.attention_heads} are not divisible by the "
            f"{model.kv_heads} kv heads"
        )
    for name, value in (
        ("attention heads", model.attention_heads),
        ("kv heads", model.kv_heads),
        ("ffn hidden size", model.ffn_hidden_size),
        ("vocab size", model.vocab_size),
    ):
        if tensor > 1 and value % tensor:
            problems.append(f"{name} {value} is not divisible by the tensor degree {tensor}")
    if layout.sequence_parallel and tensor > 1 and model.sequence_length % tensor:
        problems.append(
            f"sequence parallelism needs the sequence length {model.sequence_length} "
            f"divisible by the tensor degree {tensor}"
        )
    if model.vocab_size > 65536 and config.data != SYNTHETIC:
        problems.append(
            f"vocab size {model.vocab_size} does not fit the uint16 tokens of a data file"
        )
    return problems
