"""Serving capacity: the GPUs and tensor degree to serve a model under a request load (pure).

The same roofline as training (`planner.steptime`): FLOPs at an achieved fraction of the
peak plus HBM bytes at an achieved fraction of the bandwidth, with the catalog's fitted
efficiencies. A replica is `tensor` GPUs holding the weights split `tensor` ways and a
key/value cache for the sequences it runs together (continuous batching, Yu et al. 2022,
Orca, OSDI; paged cache, Kwon et al. 2023, vLLM, arXiv 2309.06180):

- key/value cache: 2 x layers x kv_heads x head_dim values a token (grouped-query
  attention shrinks it), split over the tensor ranks (replicated when there are fewer kv
  heads than ranks), for prompt + output tokens of every sequence in flight; latent
  attention caches its key-value latent and rotary key, layers x (kv_rank + rope_dim)
  values, on every tensor rank (DeepSeek-V2, arXiv 2405.04434, section 2.1.2);
- mixture of experts: the FLOPs of a token are those of its active parameters; a decode
  step reads the dense weights and the routed experts that its batch's tokens reach, an
  expected 1 - (1 - k / E)^B of them for B tokens with top-k of E experts each;
- decode step (one token for each of `batch` sequences): the weights read once, every
  sequence's cache read once (at its mean length, prompt + output / 2), 2 x parameters
  FLOPs a token, two all-reduces a layer of the batch's hidden states; no launch overhead
  (the step is replayed as a CUDA graph);
- prefill (one prompt, alone): 2 x parameters FLOPs a token plus causal attention (fused
  kernel), the weights read once, two all-reduces a layer and the training constants'
  kernel overhead a layer: the time to first token;
- a replica spends `rate x C` of each second prefilling, C a prompt's compute alone
  (prompts are prefilled in batches or chunks, sharing the weights' read), and the rest
  decoding, so it serves rate = B / (O x step) / (1 + C x B / (O x step)) requests a
  second.

Time to first token is the prefill of one prompt (no queueing); time per output token is
the decode step at the batch. The search tries tensor degrees (divisors of the NVLink
reach that split the heads) and batches (powers of two that fit), keeps those within the
latency targets and picks the fewest GPUs for the load, then the most throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

from trainplan.planner.calibration import Calibration
from trainplan.planner.catalog import GPUSpec
from trainplan.planner.collectives import all_reduce_seconds
from trainplan.planner.flops import attention_core_flops_per_token
from trainplan.planner.layout import Precision, Workload
from trainplan.planner.search import divisors
from trainplan.planner.shapes import (
    ModelShape,
    active_parameter_count,
    expert_layer_parameter_count,
    parameter_count,
)
from trainplan.planner.steptime import FLASH_CAUSAL_FRACTION, communicator

MAX_BATCH: Final = 4096
"""The largest number of sequences a replica is sized to run together."""


@dataclass(frozen=True, slots=True)
class ServingLoad:
    """Requests per second of one prompt and output length, and latency bounds."""

    requests_per_second: float
    prompt_tokens: int
    output_tokens: int
    time_to_first_token_seconds: float | None = None
    time_per_output_token_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica of `tensor` GPUs running `batch` sequences together."""

    tensor: int
    batch: int
    weights_bytes: float
    """Per GPU."""
    kv_cache_bytes: float
    """Per GPU, for `batch` sequences at their full length."""
    overhead_bytes: float
    capacity_bytes: float
    prefill_seconds: float
    decode_step_seconds: float
    requests_per_second: float
    """What the replica sustains."""
    output_tokens_per_second: float

    @property
    def memory_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.capacity_bytes


@dataclass(frozen=True, slots=True)
class ServingPlan:
    """The chosen replica and how many of them the load needs."""

    replica: Replica
    replicas: int
    evaluated: int

    @property
    def gpus(self) -> int:
        return self.replica.tensor * self.replicas


class NoServingLayoutError(ValueError):
    """No tensor degree and batch fits the GPU and meets the latency targets."""


def weight_bytes_per_parameter(precision: Precision) -> float:
    """Bytes a served weight takes: 1 in fp8, else 2 (no optimizer, no master copy)."""
    return 1.0 if precision == "fp8" else 2.0


def kv_cache_bytes_per_token(shape: ModelShape, precision: Precision, tensor: int) -> float:
    """Key and value bytes one token keeps on one GPU: 2 x layers x kv heads on the GPU x
    head_dim values (kv heads replicated when fewer than the tensor ranks); with latent
    attention, layers x (kv_rank + rope_dim) values on every rank."""
    latent = shape.latent_attention
    if latent is not None:
        values = latent.kv_rank + latent.rope_head_dim
        return shape.layers * values * weight_bytes_per_parameter(precision)
    heads_per_gpu = max(1.0, shape.kv_heads / tensor)
    return (
        2.0 * shape.layers * heads_per_gpu * shape.head_dim * weight_bytes_per_parameter(precision)
    )


def _decode_weight_parameters(shape: ModelShape, parameters: float, tokens: float) -> float:
    """Parameters a decode step of `tokens` tokens reads: all of a dense model; an MoE
    model's dense part and the expected share of its routed experts that the tokens reach
    (each token picks k of E experts in each MoE layer)."""
    experts = shape.experts
    if experts is None:
        return parameters
    routed = shape.layers * expert_layer_parameter_count(shape)
    untouched = math.pow(1.0 - experts.per_token / experts.routed, tokens)
    return parameters - routed * untouched


def active_parameters(shape: ModelShape, parameters: float) -> float:
    """`parameters` less the routed experts a token skips (all of them when dense)."""
    return parameters - (parameter_count(shape) - active_parameter_count(shape))


def _rates(gpu: GPUSpec, precision: Precision, calibration: Calibration) -> tuple[float, ...]:
    arch = calibration.architecture(gpu.architecture)
    peak = gpu.peak_flops_for(precision)
    bf16 = gpu.peak_flops_for("bf16" if precision == "fp8" else precision)
    return (
        peak * arch.gemm_efficiency,
        bf16 * arch.flash_attention_efficiency,
        gpu.hbm_bandwidth_bytes_per_second * arch.hbm_efficiency,
        arch.kernel_overhead_seconds_per_layer,
    )


def _all_reduces_seconds(
    workload: Workload, tensor: int, tokens: float, calibration: Calibration
) -> float:
    """Two all-reduces a layer of `tokens` hidden states (Shoeybi et al. 2019)."""
    if tensor == 1:
        return 0.0
    shape = workload.shape
    size = tokens * shape.hidden_size * weight_bytes_per_parameter(workload.precision)
    members = min(tensor, workload.nvlink_domain_gpus)
    group = communicator(workload, tensor, members, calibration)
    return 2 * shape.layers * all_reduce_seconds(size, group)


def price_replica(
    workload: Workload,
    parameters: float,
    load: ServingLoad,
    calibration: Calibration,
    *,
    tensor: int,
    batch: int,
) -> Replica:
    """One replica's memory, prefill, decode step and sustained request rate."""
    shape = workload.shape
    precision = workload.precision
    gemm_rate, attention_rate, hbm_rate, overhead = _rates(workload.gpu, precision, calibration)
    weight_bytes = weight_bytes_per_parameter(precision)
    weights = parameters * weight_bytes / tensor
    per_token_kv = kv_cache_bytes_per_token(shape, precision, tensor)
    length = load.prompt_tokens + load.output_tokens
    flops_per_token = 2.0 * active_parameters(shape, parameters) / tensor
    # Decode: every sequence's cache at its mean length, its queries against it.
    mean_context = load.prompt_tokens + load.output_tokens / 2.0
    if shape.latent_attention is None:
        width = shape.attention_width
        decode_attention = (
            batch * shape.layers * 4.0 * mean_context * width / tensor / attention_rate
        )
    else:
        per_context_token = attention_core_flops_per_token(shape) / shape.sequence_length
        decode_attention = (
            batch * shape.layers * per_context_token * mean_context / tensor / attention_rate
        )
    read = _decode_weight_parameters(shape, parameters, batch) * weight_bytes / tensor
    # No per-layer launch overhead: serving engines replay the decode step as a CUDA graph
    # (TensorRT-LLM and vLLM both capture it).
    decode = (
        batch * flops_per_token / gemm_rate
        + (read + batch * mean_context * per_token_kv) / hbm_rate
        + decode_attention
        + _all_reduces_seconds(workload, tensor, batch, calibration)
    )
    prompt_shape = replace(shape, sequence_length=load.prompt_tokens)
    prefill_attention = (
        load.prompt_tokens
        * shape.layers
        * attention_core_flops_per_token(prompt_shape)
        * FLASH_CAUSAL_FRACTION
        / tensor
        / attention_rate
    )
    prompt_compute = load.prompt_tokens * flops_per_token / gemm_rate + prefill_attention
    prefill = (
        prompt_compute
        + weights / hbm_rate
        + shape.layers * overhead
        + _all_reduces_seconds(workload, tensor, load.prompt_tokens, calibration)
    )
    # Under load, prompts are prefilled in batches (or chunks beside the decode steps): a
    # request costs its prompt's compute, the weights' read and launches being shared.
    decoding_rate = batch / (load.output_tokens * decode)
    rate = decoding_rate / (1.0 + prompt_compute * decoding_rate)
    return Replica(
        tensor=tensor,
        batch=batch,
        weights_bytes=weights,
        kv_cache_bytes=batch * length * per_token_kv,
        overhead_bytes=float(calibration.memory_overhead_bytes),
        capacity_bytes=float(workload.gpu.memory_bytes),
        prefill_seconds=prefill,
        decode_step_seconds=decode,
        requests_per_second=rate,
        output_tokens_per_second=rate * load.output_tokens,
    )


def tensor_degrees(workload: Workload) -> list[int]:
    """Divisors of the NVLink reach that split the attention heads and key/value heads."""
    shape = workload.shape
    return [
        t
        for t in divisors(workload.nvlink_domain_gpus)
        if shape.attention_heads % t == 0 and (shape.kv_heads % t == 0 or t % shape.kv_heads == 0)
    ]


def _meets(replica: Replica, load: ServingLoad) -> bool:
    ttft, tpot = load.time_to_first_token_seconds, load.time_per_output_token_seconds
    return (ttft is None or replica.prefill_seconds <= ttft) and (
        tpot is None or replica.decode_step_seconds <= tpot
    )


def plan_serving(
    workload: Workload, parameters: float, load: ServingLoad, calibration: Calibration
) -> ServingPlan:
    """The fewest GPUs (then the most throughput) that serve `load` within its targets."""
    best: tuple[tuple[int, float], Replica, int] | None = None
    evaluated = 0
    for tensor in tensor_degrees(workload):
        batch = 1
        while batch <= MAX_BATCH:
            replica = price_replica(
                workload, parameters, load, calibration, tensor=tensor, batch=batch
            )
            evaluated += 1
            if not replica.fits:
                break  # the cache only grows with the batch
            if _meets(replica, load):
                replicas = math.ceil(load.requests_per_second / replica.requests_per_second)
                key = (replicas * tensor, -replica.output_tokens_per_second)
                if best is None or key < best[0]:
                    best = (key, replica, replicas)
            batch *= 2
    if best is None:
        raise NoServingLayoutError(
            f"no tensor degree of {workload.gpu.name} holds the model and a sequence of"
            f" {load.prompt_tokens + load.output_tokens} tokens within the latency targets"
        )
    _, replica, replicas = best
    return ServingPlan(replica=replica, replicas=replicas, evaluated=evaluated)
