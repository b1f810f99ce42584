"""From a TrainingPlan spec and the catalog to the planner's inputs (pure).

Resolves the model preset and explicit overrides into a `ModelShape`, the GPU type, the
step count, the failure model and the user's pins, and checks the pins against the
resolved shape (the API models can only check them against explicit fields).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainplan.api import DEFAULT_COMMAND, ModelSpec, TrainingPlanSpec
from trainplan.planner.catalog import (
    Catalog,
    ModelPreset,
    UnknownGPUError,
    UnknownModelError,
    UnsupportedPrecisionError,
)
from trainplan.planner.errors import PlanInputError
from trainplan.planner.finetune import FineTuning, lora_layer_parameter_count
from trainplan.planner.frameworks import (
    FRAMEWORK_LIMITS,
    REFERENCE_TRAINER,
    FrameworkLimits,
    with_framework,
)
from trainplan.planner.layout import Workload
from trainplan.planner.memory import checkpoint_bytes
from trainplan.planner.search import LayoutPins, RunSettings
from trainplan.planner.shapes import Experts, LatentAttention, ModelShape, parameter_count
from trainplan.planner.stages import interleaved_placement, split_counts


@dataclass(frozen=True, slots=True)
class ResolvedSpec:
    """Everything the search needs, resolved and checked."""

    workload: Workload
    parameters: float
    pins: LayoutPins
    run: RunSettings
    tokens_total: float


def resolve_shape(spec: TrainingPlanSpec, catalog: Catalog) -> tuple[ModelShape, float]:
    """The model shape (preset, then explicit fields on top) and its parameter count.

    Raises `PlanInputError` naming each field that is missing or inconsistent.
    """
    return resolve_model(spec.model, catalog)


def resolve_model(model: ModelSpec, catalog: Catalog | None) -> tuple[ModelShape, float]:
    """`resolve_shape` of a bare model section (training and serving share it); a section
    without a preset needs no catalog (None)."""
    base = None
    if model.preset is not None:
        if catalog is None:
            raise PlanInputError([("model.preset", "naming a preset needs the catalog")])
        try:
            base = catalog.model(model.preset)
        except UnknownModelError as error:
            raise PlanInputError([("model.preset", str(error))]) from None

    missing: list[tuple[str, str]] = []

    def pick(name: str, field: str, default: int | bool | None = None) -> int | bool:
        explicit = getattr(model, field)
        if explicit is not None:
            return explicit  # type: ignore[no-any-return]
        if base is not None:
            return getattr(base, field)  # type: ignore[no-any-return]
        if default is None:
            missing.append((f"model.{name}", "required when no preset is given"))
            return 1
        return default

    hidden = int(pick("hiddenSize", "hidden_size"))
    heads = int(pick("attentionHeads", "attention_heads"))
    kv_heads = int(pick("kvHeads", "kv_heads", heads))
    layers = int(pick("layers", "layers"))
    vocab = int(pick("vocabSize", "vocab_size"))
    sequence = int(pick("sequenceLength", "sequence_length"))
    if missing:
        raise PlanInputError(missing)
    problems: list[tuple[str, str]] = []
    head_dim = model.head_dim if model.head_dim is not None else getattr(base, "head_dim", None)
    if head_dim is None and hidden % heads:
        problems.append(("model.attentionHeads", f"{heads} does not divide hiddenSize ({hidden})"))
    if heads % kv_heads:
        problems.append(("model.kvHeads", f"{kv_heads} does not divide attentionHeads ({heads})"))
    ffn = int(pick("ffnHiddenSize", "ffn_hidden_size", 4 * hidden))
    experts = _resolve_experts(model, base, ffn, layers, problems)
    if problems:
        raise PlanInputError(problems)
    latent = base.latent_attention if base is not None else None
    if model.latent_attention is not None:
        latent = LatentAttention(**model.latent_attention.model_dump())
    shape = ModelShape(
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads,
        ffn_hidden_size=ffn,
        gated_mlp=bool(pick("gatedMLP", "gated_mlp", False)),
        vocab_size=vocab,
        sequence_length=sequence,
        tied_embeddings=bool(pick("tiedEmbeddings", "tied_embeddings", False)),
        declared_head_dim=head_dim,
        experts=experts,
        latent_attention=latent,
        dropout=bool(pick("dropout", "dropout", True)),
    )
    if model.parameters is not None:
        parameters = model.parameters
    elif base is not None and base.shape == shape:
        parameters = base.parameters
    else:
        parameters = parameter_count(shape)
    return shape, parameters


def _resolve_experts(
    model: ModelSpec,
    base: ModelPreset | None,
    ffn_hidden_size: int,
    layers: int,
    problems: list[tuple[str, str]],
) -> Experts | None:
    """The mixture of experts of the spec's model (the preset's, with the spec's fields on
    top), or None for a dense one; appends to `problems` what contradicts itself."""
    preset = base.experts if base is not None else None
    if model.experts is None and preset is None:
        return None
    routed = model.experts if model.experts is not None else preset.routed if preset else 1
    per_token = model.experts_per_token or (preset.per_token if preset else 1)
    width = model.expert_ffn_hidden_size or (preset.ffn_hidden_size if preset else ffn_hidden_size)
    shared = model.shared_experts
    if shared is None:
        shared = preset.shared if preset else 0
    shared_width = model.shared_expert_ffn_hidden_size
    if shared_width is None and preset is not None and model.shared_experts is None:
        shared_width = preset.shared_ffn_hidden_size
    interval = model.moe_layer_interval or (preset.layer_interval if preset else 1)
    first_dense = model.first_dense_layers
    if first_dense is None:
        first_dense = preset.first_dense_layers if preset else 0
    if per_token > routed:
        problems.append(("model.expertsPerToken", f"{per_token} exceeds experts ({routed})"))
        return None
    experts = Experts(
        routed=routed,
        per_token=per_token,
        ffn_hidden_size=width,
        shared=shared,
        shared_ffn_hidden_size=shared_width,
        layer_interval=interval,
        first_dense_layers=first_dense,
    )
    if experts.moe_layer_count(layers) == 0:
        problems.append(
            (
                "model.firstDenseLayers",
                f"no layer of {layers} is mixture-of-experts with firstDenseLayers"
                f" {first_dense} and moeLayerInterval {interval}",
            )
        )
        return None
    return experts


def framework_limits(spec: TrainingPlanSpec) -> FrameworkLimits:
    """What the job's program runs: the reference trainer's limits where the `reference`
    framework keeps its default `job.command`, else the framework's."""
    command = tuple(spec.job.command)
    if spec.job.framework == "reference" and command in ((), tuple(DEFAULT_COMMAND)):
        return REFERENCE_TRAINER
    return FRAMEWORK_LIMITS[spec.job.framework]


def _program_problems(spec: TrainingPlanSpec) -> list[tuple[str, str]]:
    """Pins and settings the job's program cannot run (`framework_limits`)."""
    limits = framework_limits(spec)
    problems: list[tuple[str, str]] = []
    pipeline = spec.parallelism.pipeline
    if not limits.pipelines and pipeline is not None and pipeline > 1:
        problems.append(
            (
                "parallelism.pipeline",
                "the reference trainer (job.framework reference with the default"
                " job.command) runs no pipeline parallelism; use job.framework megatron,"
                " torchtitan or deepspeed, or a job.command of your own that reads"
                " TRAINPLAN_PIPELINE_PARALLEL",
            )
        )
    if not limits.sequence_parallel and spec.parallelism.sequence_parallel:
        problems.append(
            (
                "parallelism.sequenceParallel",
                f"job.framework {spec.job.framework} splits no norm or residual over the"
                " sequence (its tensor parallelism shards the linear layers only); use"
                " megatron or torchtitan, or leave sequenceParallel unset",
            )
        )
    if not limits.fp16 and spec.training.precision == "fp16":
        problems.append(
            (
                "training.precision",
                f"job.framework {spec.job.framework} has no fp16 training (no loss"
                " scaling); use bf16, fp8 or fp32, or another framework",
            )
        )
    if not limits.fp8 and spec.training.precision == "fp8":
        problems.append(
            (
                "training.precision",
                "the reference trainer (job.framework reference with the default"
                " job.command) has no fp8 training; use job.framework megatron or"
                " torchtitan, or precision bf16",
            )
        )
    return problems


def check_pins(shape: ModelShape, spec: TrainingPlanSpec) -> list[tuple[str, str]]:
    """Pins that contradict the resolved model shape, as (path, message) pairs."""
    problems: list[tuple[str, str]] = []
    par = spec.parallelism
    if par.tensor is not None:
        if shape.attention_heads % par.tensor:
            problems.append(
                (
                    "parallelism.tensor",
                    f"{par.tensor} does not divide attentionHeads ({shape.attention_heads})",
                )
            )
        elif shape.kv_heads % par.tensor and par.tensor % shape.kv_heads:
            problems.append(
                (
                    "parallelism.tensor",
                    f"{par.tensor} and kvHeads ({shape.kv_heads}) must divide one another",
                )
            )
    if par.context is not None and shape.sequence_length % par.context:
        problems.append(
            (
                "parallelism.context",
                f"{par.context} does not divide sequenceLength ({shape.sequence_length})",
            )
        )
    framework = spec.job.framework
    limits = framework_limits(spec)
    if par.context is not None and par.context > 1 and not limits.context_parallel:
        problems.append(
            (
                "parallelism.context",
                f"job.framework {framework} splits no sequence over ranks; use megatron or"
                " torchtitan",
            )
        )
    if par.tensor is not None and all(path != "parallelism.tensor" for path, _ in problems):
        uneven = limits.tensor_problem(par.tensor, shape)
        if uneven is not None:
            problems.append(
                (
                    "parallelism.tensor",
                    f"job.framework {framework} splits layers evenly across tensor ranks: "
                    f"{uneven}; megatron, torchtitan and deepspeed pad instead",
                )
            )
    moe = shape.experts is not None
    pipeline, tensor = par.pipeline or 1, par.tensor or 1
    if par.zero_stage is not None and not limits.allows(par.zero_stage, pipeline, moe, tensor):
        stages = ", ".join(
            str(z) for z in limits.zero_stages if limits.allows(z, pipeline, moe, tensor)
        )
        able = sorted(
            name
            for name, other in FRAMEWORK_LIMITS.items()
            if other.allows(par.zero_stage, pipeline, moe, tensor)
        )
        problems.append(
            (
                "parallelism.zeroStage",
                f"job.framework {framework} runs ZeRO stage {stages} with this pipeline"
                f"{' and tensor' if tensor > 1 else ''} degree{' and experts' if moe else ''},"
                f" not {par.zero_stage}; frameworks that can: {', '.join(able) or 'none'}",
            )
        )
    if par.pipeline is not None:
        problems += _pipeline_problems(shape, par.pipeline, par.virtual_pipeline_stages, spec)
    problems += _expert_problems(shape, spec)
    problems += _program_problems(spec)
    return problems


def _expert_problems(shape: ModelShape, spec: TrainingPlanSpec) -> list[tuple[str, str]]:
    """Expert-parallel pins and methods that the model or the framework cannot run."""
    par = spec.parallelism
    framework = spec.job.framework
    limits = framework_limits(spec)
    experts = shape.experts
    problems: list[tuple[str, str]] = []
    pinned = [
        (path, value)
        for path, value in (
            ("parallelism.expert", par.expert),
            ("parallelism.expertTensor", par.expert_tensor),
        )
        if value is not None and value > 1
    ]
    if experts is None:
        problems += [(path, "the model has no experts (a dense model)") for path, _ in pinned]
        if spec.training.expert_capacity_factor is not None:
            problems.append(
                ("training.expertCapacityFactor", "the model has no experts (a dense model)")
            )
        return problems
    if par.expert is not None and experts.routed % par.expert:
        problems.append(
            ("parallelism.expert", f"{par.expert} does not divide experts ({experts.routed})")
        )
    if not limits.experts:
        able = sorted(name for name, other in FRAMEWORK_LIMITS.items() if other.experts)
        problems.append(
            (
                "job.framework",
                f"{framework} runs no mixture-of-experts model; frameworks that can:"
                f" {', '.join(able)}",
            )
        )
    elif pinned and not limits.expert_parallel:
        able = sorted(name for name, other in FRAMEWORK_LIMITS.items() if other.expert_parallel)
        problems += [
            (
                path,
                f"job.framework {framework} places no expert parallelism; use {' or '.join(able)}",
            )
            for path, _ in pinned
        ]
    etp = par.expert_tensor
    if framework == "torchtitan" and etp is not None and etp not in (1, par.tensor or etp):
        problems.append(
            (
                "parallelism.expertTensor",
                f"torchtitan splits experts over 1 or parallelism.tensor ranks, not {etp}",
            )
        )
    if spec.training.method in ("lora", "qlora"):
        problems.append(
            (
                "training.method",
                f"{spec.training.method} on a mixture-of-experts model is not modelled;"
                " plan full fine-tuning (method full)",
            )
        )
    return problems


def _pipeline_problems(
    shape: ModelShape, pipeline: int, chunks: int | None, spec: TrainingPlanSpec
) -> list[tuple[str, str]]:
    """Why `pipeline` stages (with `chunks` interleaved chunks each) cannot hold the
    layers: an uneven split (`planner.stages`) needs a framework that places it, and
    interleaved chunks a split they divide evenly (`interleaved_placement`)."""
    layers = shape.layers
    framework = spec.job.framework
    limits = framework_limits(spec)
    if layers % pipeline:
        if split_counts(layers, pipeline) is None:
            return [
                (
                    "parallelism.pipeline",
                    f"{pipeline} stages cannot split {layers} layers: each stage needs at"
                    " least one layer and the first and last stages no more than the others",
                )
            ]
        if not limits.uneven_pipeline:
            return [
                (
                    "parallelism.pipeline",
                    f"{pipeline} does not divide layers ({layers}), and job.framework"
                    f" {framework} splits a pipeline evenly only (its PipelineModule"
                    " partitions the model); megatron and torchtitan place uneven stages",
                )
            ]
    if chunks is None or chunks == 1:
        return []
    if interleaved_placement(layers, pipeline, chunks) is None:
        first, middle, last = split_counts(layers, pipeline) or (0, 0, 0)
        stages = (
            f"{layers // pipeline} layers on each stage"
            if layers % pipeline == 0
            else f"{first} layers on the first stage, {middle} on each middle one and"
            f" {last} on the last"
        )
        return [
            (
                "parallelism.virtualPipelineStages",
                f"{chunks} chunks per stage cannot split {stages} evenly: each stage's"
                f" layers (or, on an uneven split, its layers counting the embedding and"
                f" the loss as one each) must divide by {chunks}",
            )
        ]
    return []


def total_steps(spec: TrainingPlanSpec, shape: ModelShape) -> tuple[int, float]:
    """Optimizer steps of the run and the tokens they cover.

    steps = ceil(epochs x samples / global batch), samples = tokens / sequence length
    (Narayanan et al. 2021, section 5.1).
    """
    data = spec.data
    if data.samples is not None:
        samples = float(data.samples)
    else:
        assert data.tokens is not None  # the API requires one of the two
        samples = data.tokens / shape.sequence_length
    sequences = data.epochs * samples
    steps = max(1, math.ceil(sequences / spec.batch.global_batch_size))
    return steps, sequences * shape.sequence_length


def resolve(spec: TrainingPlanSpec, catalog: Catalog) -> ResolvedSpec:
    """Resolve and check `spec`; raises `PlanInputError` listing every problem."""
    problems: list[tuple[str, str]] = []
    shape: ModelShape | None = None
    parameters = 0.0
    try:
        shape, parameters = resolve_shape(spec, catalog)
    except PlanInputError as error:
        problems += error.problems
    if shape is not None:
        problems += check_pins(shape, spec)
    gpu = None
    try:
        gpu = catalog.gpu(spec.hardware.gpu_type)
        gpu.peak_flops_for(spec.training.precision)
    except UnknownGPUError as error:
        problems.append(("hardware.gpuType", str(error)))
    except UnsupportedPrecisionError as error:
        problems.append(("training.precision", str(error)))
    objective = spec.objective
    if objective.gpus is None and objective.deadline is None and objective.max_gpus is None:
        problems.append(("objective", "give gpus, deadline or maxGPUs"))
    if problems or gpu is None or shape is None:
        raise PlanInputError(problems)
    network_gbps = spec.hardware.network_gbps_per_node
    if network_gbps is not None:
        gpu = gpu.with_node_network(network_gbps, spec.hardware.gpus_per_node)

    workload = Workload(
        shape=shape,
        gpu=gpu,
        gpus_per_node=spec.hardware.gpus_per_node,
        global_batch_size=spec.batch.global_batch_size,
        precision=spec.training.precision,
        optimizer=spec.training.optimizer,
        attention=spec.training.attention,
        tuning=fine_tuning(spec),
        expert_capacity_factor=spec.training.expert_capacity_factor,
    )
    framework = framework_limits(spec)
    workload = with_framework(workload, framework)
    par = spec.parallelism
    pins = LayoutPins(
        tensor=par.tensor,
        pipeline=par.pipeline,
        data=par.data,
        context=par.context,
        expert=par.expert,
        expert_tensor=par.expert_tensor,
        virtual_stages=par.virtual_pipeline_stages,
        micro_batch_size=spec.batch.micro_batch_size,
        zero_stage=par.zero_stage,
        checkpointing=par.activation_checkpointing,
        sequence_parallel=par.sequence_parallel,
        framework=framework,
    )
    steps, tokens = total_steps(spec, shape)
    reliability = spec.reliability
    calibration = catalog.calibration
    written_bytes = checkpoint_bytes(
        trainable_parameters(shape, parameters, workload.tuning),
        spec.training.precision,
        spec.training.optimizer,
    )
    run = RunSettings(
        total_steps=steps,
        interruptions_per_gpu_hour=reliability.interruptions_per_gpu_hour
        if reliability.interruptions_per_gpu_hour is not None
        else calibration.interruptions_per_gpu_hour,
        checkpoint_seconds=checkpoint_seconds(
            reliability.checkpoint_seconds, written_bytes, calibration.checkpoint_bytes_per_second
        ),
        restart_seconds=reliability.restart_seconds
        if reliability.restart_seconds is not None
        else calibration.restart_seconds,
        checkpoint_interval_steps=reliability.checkpoint_interval_steps,
        checkpoint_bytes=written_bytes,
    )
    return ResolvedSpec(
        workload=workload, parameters=parameters, pins=pins, run=run, tokens_total=tokens
    )


DEFAULT_CHECKPOINT_SECONDS = 60.0
"""Seconds to write a checkpoint when neither the spec nor a cluster's records say."""


def checkpoint_seconds(
    spec_seconds: float | None, written_bytes: float, bytes_per_second: float | None
) -> float:
    """The spec's checkpoint seconds, else the checkpoint's bytes at a cluster's measured
    write rate, else `DEFAULT_CHECKPOINT_SECONDS`."""
    if spec_seconds is not None:
        return spec_seconds
    if bytes_per_second is not None and bytes_per_second > 0:
        return written_bytes / bytes_per_second
    return DEFAULT_CHECKPOINT_SECONDS


def fine_tuning(spec: TrainingPlanSpec) -> FineTuning:
    """The spec's training method and, for adapters, their rank and targets."""
    training = spec.training
    if training.lora is None:
        return FineTuning(method=training.method)
    return FineTuning(
        method=training.method, lora_rank=training.lora.rank, lora_targets=training.lora.targets
    )


def trainable_parameters(shape: ModelShape, parameters: float, tuning: FineTuning) -> float:
    """What trains: every parameter, or the adapters of every layer (`finetune`)."""
    if not tuning.adapters:
        return parameters
    return shape.layers * lora_layer_parameter_count(shape, tuning)
