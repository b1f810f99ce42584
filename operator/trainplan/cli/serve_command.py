"""`trainplan serve FILE`: the GPUs and tensor degree to serve a model under a request
load (`trainplan.planner.serving`), as a table or as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from trainplan.api import format_count, format_duration
from trainplan.api.serving import ServingSpec
from trainplan.cli.common import EXIT_INFEASIBLE, EXIT_INVALID
from trainplan.cli.inputs import read_serving_spec
from trainplan.planner import load_catalog
from trainplan.planner.catalog import Catalog, UnknownGPUError, UnsupportedPrecisionError
from trainplan.planner.errors import PlanInputError
from trainplan.planner.layout import Workload
from trainplan.planner.resolve import resolve_model
from trainplan.planner.serving import NoServingLayoutError, ServingLoad, ServingPlan, plan_serving

_GIB = 2**30


def serve(spec: ServingSpec, catalog: Catalog) -> ServingPlan:
    """Size `spec`; `PlanInputError` names the fields it cannot use."""
    shape, parameters = resolve_model(spec.model, catalog)
    try:
        gpu = catalog.gpu(spec.hardware.gpu_type)
        gpu.peak_flops_for(spec.precision)
    except UnknownGPUError as error:
        raise PlanInputError([("hardware.gpuType", str(error))]) from None
    except UnsupportedPrecisionError as error:
        raise PlanInputError([("precision", str(error))]) from None
    requests, latency = spec.requests, spec.latency
    workload = Workload(
        shape=shape,
        gpu=gpu,
        gpus_per_node=spec.hardware.gpus_per_node,
        global_batch_size=1,
        precision=spec.precision,
    )
    load = ServingLoad(
        requests_per_second=requests.per_second,
        prompt_tokens=requests.prompt_tokens,
        output_tokens=requests.output_tokens,
        time_to_first_token_seconds=latency.time_to_first_token_seconds,
        time_per_output_token_seconds=latency.time_per_output_token_seconds,
    )
    return plan_serving(workload, parameters, load, catalog.calibration)


def serving_document(spec: ServingSpec, result: ServingPlan) -> dict[str, Any]:
    """The sizing as plain data (camelCase, units in the names)."""
    replica = result.replica
    return {
        "gpuType": spec.hardware.gpu_type,
        "gpus": result.gpus,
        "replicas": result.replicas,
        "tensor": replica.tensor,
        "batch": replica.batch,
        "memoryBytesPerGPU": {
            "weights": round(replica.weights_bytes),
            "kvCache": round(replica.kv_cache_bytes),
            "overhead": round(replica.overhead_bytes),
            "capacity": round(replica.capacity_bytes),
        },
        "timeToFirstTokenSeconds": replica.prefill_seconds,
        "timePerOutputTokenSeconds": replica.decode_step_seconds,
        "requestsPerSecondPerReplica": replica.requests_per_second,
        "outputTokensPerSecondPerGPU": replica.output_tokens_per_second / replica.tensor,
        "layoutsPriced": result.evaluated,
    }


def _table(spec: ServingSpec, result: ServingPlan) -> Table:
    replica = result.replica
    requests = spec.requests
    table = Table(title=f"Serving {requests.per_second:g} requests/s", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row(
        "GPUs",
        f"{result.gpus:,} x {spec.hardware.gpu_type}: {format_count(result.replicas, 'replica')}"
        f" of {replica.tensor} (tensor parallel)",
    )
    table.add_row(
        "Load",
        f"{requests.prompt_tokens:,} prompt + {requests.output_tokens:,} output tokens a request",
    )
    table.add_row("Batch", f"{replica.batch:,} sequences in flight per replica")
    table.add_row(
        "Memory per GPU",
        f"{replica.memory_bytes / _GIB:.1f} GiB of {replica.capacity_bytes / _GIB:.1f}:"
        f" weights {replica.weights_bytes / _GIB:.1f}, key/value cache"
        f" {replica.kv_cache_bytes / _GIB:.1f}, overhead {replica.overhead_bytes / _GIB:.1f}",
    )
    table.add_row("Time to first token", format_duration(replica.prefill_seconds))
    table.add_row("Time per output token", f"{replica.decode_step_seconds * 1000:.1f} ms")
    table.add_row(
        "Throughput per replica",
        f"{replica.requests_per_second:.2f} requests/s,"
        f" {replica.output_tokens_per_second:,.0f} output tokens/s",
    )
    return table


@click.command("serve")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people; json for scripts.",
)
def command(file: Path, output: str) -> None:
    """Size serving for the model in FILE (YAML or JSON: model, hardware, precision,
    requests, latency): the GPUs, tensor degree and batch that sustain the request rate
    within the latency targets.

    Exit status: 0 sized, 2 the file is invalid, 3 no layout meets the targets."""
    spec, problems = read_serving_spec(file)
    if spec is None:
        for problem in problems:
            click.echo(f"{file}: {problem}", err=True)
        sys.exit(EXIT_INVALID)
    try:
        result = serve(spec, load_catalog())
    except PlanInputError as error:
        for field, message in error.problems:
            click.echo(f"{file}: {field}: {message}", err=True)
        sys.exit(EXIT_INVALID)
    except NoServingLayoutError as error:
        click.echo(f"{file}: {error}", err=True)
        sys.exit(EXIT_INFEASIBLE)
    if output == "json":
        click.echo(json.dumps(serving_document(spec, result), indent=2))
        return
    Console().print(_table(spec, result))
