"""Layout search: generate candidate layouts, evaluate each, select by objective (pure).

Three separate steps, as in Calculon's search (Isaev et al., SC'23): `generate_layouts`
enumerates what is legal for a GPU count (tensor degree dividing the heads, pipeline
degree dividing the layers or splitting them unevenly where the framework can, expert
degree dividing the experts and the tensor x context x data ranks, micro-batch dividing
the per-rank batch, ZeRO stage, recomputation level),
`Evaluator.evaluate` prices one layout, and the `select_*` functions pick by objective.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Final

from trainplan.planner.calibration import Calibration
from trainplan.planner.errors import PlanInputError
from trainplan.planner.flops import model_flops_per_token
from trainplan.planner.frameworks import ANY_FRAMEWORK, FrameworkLimits
from trainplan.planner.layout import CHECKPOINTING_LEVELS, Checkpointing, Layout, Workload
from trainplan.planner.memory import MemoryEstimate, estimate_memory
from trainplan.planner.reliability import ReliabilityEstimate, estimate_reliability
from trainplan.planner.stages import interleaved_placement, split_counts
from trainplan.planner.steptime import FLASH_CAUSAL_FRACTION, StepTime, step_time

_MAX_VIRTUAL_STAGES = 8
_UNEVEN_PIPELINE_DEGREES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
"""Pipeline degrees tried beyond the divisors of the layers: 2^k and 3 x 2^k, the factors
GPU clusters are built of (nodes of 8, pods of 3 x 2^k nodes; BLOOM ran 70 layers on 12
stages, Llama 3 405B 126 on 16). Any other degree that splits the layers can be pinned."""
_MAX_MICRO_BATCH = 64

MAX_LAYOUT_EVALUATIONS = 20_000
"""Most layouts one plan may price: its planning time bound. The examples price at most
about 3,600 and a 1T-parameter deadline search about 1,400; one layout costs about
0.1-0.2 ms of CPU, so this bounds a plan to a few seconds (BENCHMARKS.md)."""


@dataclass(frozen=True, slots=True)
class LayoutPins:
    """Degrees the user fixed; `None` means searched."""

    tensor: int | None = None
    pipeline: int | None = None
    data: int | None = None
    context: int | None = None
    expert: int | None = None
    expert_tensor: int | None = None
    virtual_stages: int | None = None
    micro_batch_size: int | None = None
    zero_stage: int | None = None
    checkpointing: Checkpointing | None = None
    sequence_parallel: bool | None = None
    framework: FrameworkLimits = ANY_FRAMEWORK
    """What the job's framework can run (ZeRO stages, with and without pipelining)."""


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Whole-run inputs of the evaluation besides the workload."""

    total_steps: int
    interruptions_per_gpu_hour: float
    checkpoint_seconds: float
    restart_seconds: float
    checkpoint_interval_steps: int | None = None
    checkpoint_bytes: float | None = None
    """Bytes one checkpoint writes (`memory.checkpoint_bytes`), for the plan's record."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One priced layout. `step` and `reliability` are None when it does not fit."""

    layout: Layout
    memory: MemoryEstimate
    step: StepTime | None
    reliability: ReliabilityEstimate | None
    model_flops_per_step: float
    peak_flops_per_gpu: float

    @property
    def feasible(self) -> bool:
        return (
            self.memory.fits
            and self.step is not None
            and self.reliability is not None
            and self.reliability.feasible
        )

    @property
    def step_seconds(self) -> float:
        return math.inf if self.step is None else self.step.step_seconds

    @property
    def duration_seconds(self) -> float:
        return math.inf if self.reliability is None else self.reliability.duration_seconds

    @property
    def gpu_hours(self) -> float:
        return self.layout.gpus * self.duration_seconds / 3600.0

    @property
    def mfu(self) -> float:
        """Model FLOPs (no recompute) over the dense peak of all GPUs during a step."""
        if self.step is None:
            return 0.0
        return self.model_flops_per_step / (
            self.layout.gpus * self.peak_flops_per_gpu * self.step.step_seconds
        )


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return sorted({*small, *(n // i for i in small)})


def tensor_degrees(workload: Workload, pins: LayoutPins) -> list[int]:
    """Tensor degrees: a pin, or divisors of the GPUs that NVLink joins (the node, or a
    larger NVLink domain) that split the heads (and whatever else the framework splits
    evenly)."""
    if pins.tensor is not None:
        return [pins.tensor]
    shape = workload.shape
    return [
        t
        for t in divisors(workload.nvlink_domain_gpus)
        if shape.attention_heads % t == 0
        and (shape.kv_heads % t == 0 or t % shape.kv_heads == 0)
        and pins.framework.tensor_problem(t, shape) is None
    ]


LONG_SEQUENCE: Final = 32_768
"""Sequences at least this long are also searched with context parallelism."""
_MIN_CONTEXT_CHUNK = 4_096
"""The shortest share of a sequence a context rank is searched with."""
_MAX_CONTEXT = 32


def context_degrees(workload: Workload, pins: LayoutPins) -> list[int]:
    """Context-parallel degrees: a pin; or, for sequences of `LONG_SEQUENCE` tokens or
    more where the framework splits sequences, the powers of two up to 32 that leave each
    rank at least 4,096 tokens of a sequence; else 1."""
    if pins.context is not None:
        return [pins.context]
    length = workload.shape.sequence_length
    if length < LONG_SEQUENCE or not pins.framework.context_parallel:
        return [1]
    degrees = [1]
    while (
        degrees[-1] * 2 <= _MAX_CONTEXT
        and length % (degrees[-1] * 2) == 0
        and length // (degrees[-1] * 2) >= _MIN_CONTEXT_CHUNK
    ):
        degrees.append(degrees[-1] * 2)
    return degrees


_MAX_EXPERT = 64
"""The largest expert-parallel degree searched (DeepSeek-V3 trained with 64, its report's
section 3.2); a larger one can be pinned."""


def expert_degrees(workload: Workload, pins: LayoutPins) -> list[int]:
    """Expert-parallel degrees: a pin; or, for a mixture-of-experts model whose framework
    places expert parallelism, the powers of two up to 64 that divide the experts; else 1.
    A layout also needs the degree x the expert-tensor degree to divide its tensor x
    context x data ranks (`generate_layouts`)."""
    experts = workload.shape.experts
    if experts is None:
        return [1]
    if pins.expert is not None:
        return [pins.expert]
    if not pins.framework.expert_parallel:
        return [1]
    degrees = [1]
    while degrees[-1] * 2 <= min(_MAX_EXPERT, experts.routed) and not (
        experts.routed % (degrees[-1] * 2)
    ):
        degrees.append(degrees[-1] * 2)
    return degrees


def pipeline_degrees(workload: Workload, pins: LayoutPins) -> list[int]:
    """Pipeline degrees: a pin; 1 where the program runs no pipeline; or divisors of the
    layer count and, where the framework places uneven stages, the degrees of
    `_UNEVEN_PIPELINE_DEGREES` that split the layers (`split_counts`)."""
    if pins.pipeline is not None:
        return [pins.pipeline]
    if not pins.framework.pipelines:
        return [1]
    layers = workload.shape.layers
    degrees = set(divisors(layers))
    if pins.framework.uneven_pipeline:
        degrees.update(
            p
            for p in _UNEVEN_PIPELINE_DEGREES
            if p <= layers // 2 and split_counts(layers, p) is not None
        )
    return sorted(degrees)


def pipeline_splits(workload: Workload, pipeline: int, pins: LayoutPins) -> bool:
    """The framework can split the layers into `pipeline` stages."""
    layers = workload.shape.layers
    if layers % pipeline == 0:
        return True
    return pins.framework.uneven_pipeline and split_counts(layers, pipeline) is not None


def data_degrees(workload: Workload, pins: LayoutPins) -> list[int]:
    """Data-parallel degrees: a pin, or divisors of the global batch."""
    if pins.data is not None:
        return [pins.data]
    return divisors(workload.global_batch_size)


def is_whole_nodes(gpus: int, gpus_per_node: int) -> bool:
    """A job uses part of one node or whole nodes."""
    return gpus <= gpus_per_node or gpus % gpus_per_node == 0


def candidate_gpu_counts(workload: Workload, pins: LayoutPins, max_gpus: int) -> list[int]:
    """Every GPU count up to `max_gpus` that some legal (tensor, context, pipeline, data)
    reaches."""
    counts = {
        t * c * p * d
        for t in tensor_degrees(workload, pins)
        for c in context_degrees(workload, pins)
        for p in pipeline_degrees(workload, pins)
        for d in data_degrees(workload, pins)
        if t * c * p * d <= max_gpus
    }
    return sorted(c for c in counts if is_whole_nodes(c, workload.gpus_per_node))


def generate_layouts(workload: Workload, gpus: int, pins: LayoutPins) -> Iterator[Layout]:
    """Every legal layout on exactly `gpus` GPUs that respects `pins`.

    Micro-batches come in ascending size, so that a caller may stop at the first that
    does not fit (memory never falls as the micro-batch grows).
    """
    shape = workload.shape
    batch = workload.global_batch_size
    for t, c in (
        (t, c) for t in tensor_degrees(workload, pins) for c in context_degrees(workload, pins)
    ):
        if gpus % (t * c):
            continue
        for p in pipeline_degrees(workload, pins):
            if (gpus // (t * c)) % p or not pipeline_splits(workload, p, pins):
                continue
            d = gpus // (t * c * p)
            if (pins.data is not None and d != pins.data) or batch % d:
                continue
            per_rank = batch // d
            etp = pins.expert_tensor or 1
            experts = [ep for ep in expert_degrees(workload, pins) if (t * c * d) % (ep * etp) == 0]
            moe = shape.experts is not None
            for ep, zero in (
                (ep, zero) for ep in experts for zero in _zero_stages(p, d * c, pins, moe, t)
            ):
                for checkpointing in _checkpointing_levels(workload, pins):
                    for sp in _sequence_parallel(t, pins):
                        for v in _virtual_stages(shape.layers, p, pins):
                            for b in _micro_batches(per_rank, pins):
                                m = per_rank // b
                                if v > 1 and m % p:
                                    continue
                                yield Layout(
                                    tensor=t,
                                    pipeline=p,
                                    data=d,
                                    micro_batch_size=b,
                                    accumulation_steps=m,
                                    zero_stage=zero,
                                    checkpointing=checkpointing,
                                    sequence_parallel=sp,
                                    virtual_stages=v,
                                    context=c,
                                    expert=ep,
                                    expert_tensor=etp if moe else 1,
                                )


def _zero_stages(p: int, d: int, pins: LayoutPins, moe: bool = False, t: int = 1) -> list[int]:
    """ZeRO stages the framework runs with this pipeline degree, tensor degree (and MoE
    layers); only 0 without data parallelism (nothing to shard), unless pinned."""
    if pins.zero_stage is not None:
        candidates = [pins.zero_stage]
    elif d == 1:
        candidates = [0]
    else:
        candidates = [0, 1, 2, 3]
    return [z for z in candidates if pins.framework.allows(z, p, moe, t)]


def _checkpointing_levels(workload: Workload, pins: LayoutPins) -> list[Checkpointing]:
    if pins.checkpointing is not None:
        return [pins.checkpointing]
    if workload.attention == "flash" and not workload.shape.recomputes_modules:
        # A fused kernel stores no scores, so selective recompute saves nothing (on an MoE
        # or latent-attention model it also rebuilds modules: `memory`).
        return ["none", "full"]
    return list(CHECKPOINTING_LEVELS)


def _sequence_parallel(t: int, pins: LayoutPins) -> list[bool]:
    if t == 1 or not pins.framework.sequence_parallel:
        return [False]
    if pins.sequence_parallel is not None:
        return [pins.sequence_parallel]
    return [True]  # same traffic as plain tensor parallelism, less memory and work


def _virtual_stages(layers: int, p: int, pins: LayoutPins) -> list[int]:
    """Interleaved chunks per stage: one, or those the split places evenly
    (`interleaved_placement`; an uneven split reaches here only where the framework
    places it, `pipeline_splits`)."""
    if p == 1:
        return [1]
    candidates = (
        [pins.virtual_stages]
        if pins.virtual_stages is not None
        else range(1, _MAX_VIRTUAL_STAGES + 1)
    )
    return [v for v in candidates if v == 1 or interleaved_placement(layers, p, v) is not None]


def _micro_batches(per_rank: int, pins: LayoutPins) -> list[int]:
    if pins.micro_batch_size is not None:
        return [pins.micro_batch_size] if per_rank % pins.micro_batch_size == 0 else []
    return [b for b in divisors(per_rank) if b <= _MAX_MICRO_BATCH]


@dataclass
class Evaluator:
    """Prices layouts of one workload; keeps a memo of step times for this search only."""

    workload: Workload
    calibration: Calibration
    run: RunSettings
    max_evaluations: int = MAX_LAYOUT_EVALUATIONS
    """Layouts this search may price; one more raises `PlanInputError`."""
    evaluations: int = 0
    """Layouts priced so far."""
    _steps: dict[Layout, StepTime] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        shape = self.workload.shape
        self.model_flops_per_step = (
            model_flops_per_token(shape, self.workload.tuning) * self.workload.tokens_per_step
        )
        self.peak_flops_per_gpu = self.workload.gpu.peak_flops_for(self.workload.precision)

    def memory(self, layout: Layout) -> MemoryEstimate:
        return estimate_memory(self.workload, layout, self.calibration)

    def evaluate(self, layout: Layout, *, memory: MemoryEstimate | None = None) -> Evaluation:
        """Price `layout`; step time and duration only when it fits in memory.
        `PlanInputError` once the search has priced `max_evaluations` layouts."""
        if self.evaluations >= self.max_evaluations:
            raise PlanInputError(
                [
                    (
                        "spec",
                        f"the search would price more than {self.max_evaluations:,}"
                        " layouts; narrow it: pin parallelism.tensor and pipeline, lower"
                        " objective.maxGPUs, or give a globalBatchSize with fewer divisors",
                    )
                ]
            )
        self.evaluations += 1
        memory = memory if memory is not None else self.memory(layout)
        step: StepTime | None = None
        reliability: ReliabilityEstimate | None = None
        if memory.fits:
            step = self._steps.get(layout)
            if step is None:
                step = step_time(self.workload, layout, self.calibration)
                self._steps[layout] = step
            reliability = estimate_reliability(
                compute_seconds=step.step_seconds * self.run.total_steps,
                step_seconds=step.step_seconds,
                total_steps=self.run.total_steps,
                gpus=layout.gpus,
                interruptions_per_gpu_hour=self.run.interruptions_per_gpu_hour,
                checkpoint_seconds=self.run.checkpoint_seconds,
                restart_seconds=self.run.restart_seconds,
                checkpoint_interval_steps=self.run.checkpoint_interval_steps,
                goodput=self.calibration.run_goodput,
                whole_run_factor=self.calibration.whole_run_factor,
            )
        return Evaluation(
            layout=layout,
            memory=memory,
            step=step,
            reliability=reliability,
            model_flops_per_step=self.model_flops_per_step,
            peak_flops_per_gpu=self.peak_flops_per_gpu,
        )

    def evaluate_all(self, layouts: Iterable[Layout]) -> list[Evaluation]:
        """Evaluate layouts; once a micro-batch does not fit, skip the larger ones of the
        same layout (memory grows with the micro-batch)."""
        results: list[Evaluation] = []
        too_big: set[Layout] = set()
        for layout in layouts:
            key = replace(layout, micro_batch_size=0, accumulation_steps=0)
            if key in too_big:
                continue
            evaluation = self.evaluate(layout)
            if not evaluation.memory.fits:
                too_big.add(key)
            results.append(evaluation)
        return results


def rank_key(evaluation: Evaluation) -> tuple[float, int, float]:
    """Order of preference: shortest run, then fewer GPUs, then less memory."""
    return (evaluation.duration_seconds, evaluation.layout.gpus, evaluation.memory.total_bytes)


def feasible_sorted(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    """Feasible evaluations, best first."""
    return sorted((e for e in evaluations if e.feasible), key=rank_key)


def select_fastest(evaluations: Iterable[Evaluation]) -> Evaluation | None:
    """The feasible evaluation with the shortest run (ties: fewer GPUs, less memory)."""
    ranked = feasible_sorted(evaluations)
    return ranked[0] if ranked else None


def best_at(evaluator: Evaluator, gpus: int, pins: LayoutPins) -> list[Evaluation]:
    """All evaluations on exactly `gpus` GPUs, in generation order."""
    return evaluator.evaluate_all(generate_layouts(evaluator.workload, gpus, pins))


def duration_lower_bound_seconds(evaluator: Evaluator, gpus: int) -> float:
    """A duration no layout on `gpus` GPUs can beat: the model FLOPs of the run at the
    fastest rate any kernel of the step-time model reaches (no communication, bubble,
    memory traffic, recomputation or failures)."""
    calibration = evaluator.calibration
    arch = calibration.architecture(evaluator.workload.gpu.architecture)
    fastest_fraction = max(
        arch.gemm_efficiency_for(evaluator.workload.kernels),
        arch.flash_attention_efficiency_for(evaluator.workload.kernels) / FLASH_CAUSAL_FRACTION,
    )
    rate = gpus * evaluator.peak_flops_per_gpu * fastest_fraction
    seconds = evaluator.model_flops_per_step * evaluator.run.total_steps / rate
    return seconds * calibration.step_seconds_factor


def select_fewest_gpus_for_deadline(
    evaluator: Evaluator, counts: list[int], pins: LayoutPins, deadline_seconds: float
) -> tuple[Evaluation | None, dict[int, list[Evaluation]]]:
    """The smallest GPU count whose best plan finishes by the deadline.

    Counts are tried from the smallest up, skipping those whose lower bound
    (`duration_lower_bound_seconds`) already misses the deadline; the first count whose
    best plan meets it wins. The best duration is not monotone in the GPU count (batch
    divisibility and pipeline shapes), so no count is assumed from its neighbours.
    Returns the choice and every count it evaluated.
    """
    seen: dict[int, list[Evaluation]] = {}
    for count in counts:
        if duration_lower_bound_seconds(evaluator, count) > deadline_seconds:
            continue
        seen[count] = best_at(evaluator, count, pins)
        choice = select_fastest(seen[count])
        if choice is not None and choice.duration_seconds <= deadline_seconds:
            return choice, seen
    return None, seen
