"""`ServingSpec`: what `trainplan serve FILE` sizes (pure, frozen pydantic models).

A model (the TrainingPlan's `model` section), a GPU type, a weight precision, the request
load (requests per second of a fixed prompt and output length) and optional latency
targets. Every number is bounded; the file is input like any other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainplan.api.base import ApiModel
from trainplan.api.spec import ModelSpec

_TOKENS_MAX = 10_000_000
_SECONDS_MAX = 86_400.0


class ServingHardware(ApiModel):
    """The GPUs a model is served on."""

    gpu_type: str = Field(
        "A100-SXM4-80GB", min_length=1, max_length=253, description="Catalog GPU name."
    )
    gpus_per_node: int = Field(8, ge=1, le=16, description="GPUs per node.")


class RequestLoad(ApiModel):
    """The traffic to serve: a steady rate of requests of one shape."""

    per_second: float = Field(gt=0, le=1.0e7, description="Requests per second to sustain.")
    prompt_tokens: int = Field(ge=1, le=_TOKENS_MAX, description="Prompt tokens a request.")
    output_tokens: int = Field(ge=1, le=_TOKENS_MAX, description="Tokens generated a request.")


class LatencyTargets(ApiModel):
    """Upper bounds a serving layout must meet; unset: throughput alone decides."""

    time_to_first_token_seconds: float | None = Field(
        None, gt=0, le=_SECONDS_MAX, description="Prefill of one prompt, seconds."
    )
    time_per_output_token_seconds: float | None = Field(
        None, gt=0, le=_SECONDS_MAX, description="One decode step of the running batch, seconds."
    )


class ServingSpec(ApiModel):
    """What to size: a model on a GPU type under a request load."""

    model: ModelSpec = Field(description="The model: a catalog preset or an explicit shape.")
    hardware: ServingHardware = Field(
        default_factory=ServingHardware, description="GPU type and GPUs per node."
    )
    precision: Literal["bf16", "fp16", "fp8"] = Field(
        "bf16", description="Weights, key/value cache and compute: bf16, fp16 or fp8."
    )
    requests: RequestLoad = Field(description="The request load.")
    latency: LatencyTargets = Field(
        default_factory=LatencyTargets, description="Latency bounds, if any."
    )
