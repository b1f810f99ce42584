"""`python -m benchmarks.serving`: `planner.serving` against published serving measurements
(tests/data/published_serving.csv: TensorRT-LLM's performance pages), never fitted to them.

Three kinds of row are priced on their published GPU, tensor degree, precision and lengths:
- maximum throughput (no batch given): the planner's best output tokens/s per GPU over the
  batches that fit;
- a stated static batch: output tokens/s per GPU at that batch;
- time to first token at batch 1 (one output token): the planner's prefill.
Online rows (a request rate, not a batch) are left out. Prints a markdown table; exits 0
(tolerances: tests/reference/test_serving_published.py).
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from benchmarks.arguments import benchmark_parser
from trainplan.planner import Catalog, load_catalog
from trainplan.planner.layout import Precision, Workload
from trainplan.planner.serving import MAX_BATCH, ServingLoad, price_replica

DATA: Final = Path(__file__).resolve().parent.parent / "tests" / "data" / "published_serving.csv"

MODELS: Final = (
    ("405B", "llama3.1-405b"),
    ("Llama-2-70b", "llama2-70b"),
    ("Llama-2-7b", "llama2-7b"),
    ("70B", "llama3-70b"),
    ("8B", "llama3-8b"),
)
"""A fragment of the published model name and its preset (Llama 3.3 70B has 3.1's shape)."""

GPUS: Final = (("H200", "H200-SXM-141GB"), ("H100", "H100-SXM5-80GB"), ("A100", "A100-SXM4-80GB"))


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    kind: str
    """throughput, batch or ttft."""
    published: float
    planned: float

    @property
    def error(self) -> float:
        return self.planned / self.published - 1.0


def _lookup(table: tuple[tuple[str, str], ...], text: str) -> str | None:
    return next((name for fragment, name in table if fragment in text), None)


def _throughput(
    catalog: Catalog, record: dict[str, str], workload: Workload, parameters: float
) -> float:
    tensor = int(record["tensor_parallel"])
    load = ServingLoad(1.0, int(record["input_tokens"]), int(record["output_tokens"]))
    batches = (
        [int(record["concurrency"])]
        if record["concurrency"]
        else [2**k for k in range(MAX_BATCH.bit_length())]
    )
    best = 0.0
    for batch in batches:
        replica = price_replica(
            workload, parameters, load, catalog.calibration, tensor=tensor, batch=batch
        )
        if not replica.fits and not record["concurrency"]:
            break
        best = max(best, replica.output_tokens_per_second / tensor)
    return best


def price(catalog: Catalog, record: dict[str, str]) -> Row | None:
    """The planner's figure for a row, or None when it is not priced."""
    preset, gpu = _lookup(MODELS, record["model"]), _lookup(GPUS, record["gpu_type"])
    if preset is None or gpu is None or record["requests_per_second"]:
        return None
    model = catalog.model(preset)
    workload = Workload(
        shape=model.shape,
        gpu=catalog.gpu(gpu),
        gpus_per_node=8,
        global_batch_size=1,
        precision=cast(Precision, record["precision"]),
    )
    if record["ttft_seconds"] and record["output_tokens"] == "1":
        load = ServingLoad(1.0, int(record["input_tokens"]), 1)
        replica = price_replica(
            workload,
            model.parameters,
            load,
            catalog.calibration,
            tensor=int(record["tensor_parallel"]),
            batch=1,
        )
        return Row(record["id"], "ttft", float(record["ttft_seconds"]), replica.prefill_seconds)
    published = float(record["output_tokens_per_second_per_gpu"])
    planned = _throughput(catalog, record, workload, model.parameters)
    return Row(record["id"], "batch" if record["concurrency"] else "throughput", published, planned)


def compare(catalog: Catalog, path: Path = DATA) -> tuple[list[Row], list[str]]:
    """The rows priced, and the ids of those left out."""
    priced, left_out = [], []
    with path.open(newline="") as handle:
        for record in csv.DictReader(handle):
            row = price(catalog, record)
            if row is None:
                left_out.append(record["id"])
            else:
                priced.append(row)
    return priced, left_out


def report(rows: Sequence[Row], left_out: Sequence[str]) -> str:
    units = {"throughput": "max tokens/s/GPU", "batch": "tokens/s/GPU", "ttft": "TTFT s"}
    lines = ["| row | what | published | planned | error |", "|---|---|---:|---:|---:|"]
    lines += [
        f"| {r.id} | {units[r.kind]} | {r.published:,.3g} | {r.planned:,.3g} | {r.error:+.0%} |"
        for r in rows
    ]
    lines.append("")
    for kind, unit in units.items():
        errors = [abs(r.error) for r in rows if r.kind == kind]
        if errors:
            lines.append(
                f"{unit}: median absolute error {statistics.median(errors):.0%}"
                f" over {len(errors)} rows."
            )
    lines += ["", f"Left out (online request rates): {', '.join(left_out)}."]
    return "\n".join(lines)


def main() -> int:
    benchmark_parser("benchmarks.serving", __doc__).parse_args()
    rows, left_out = compare(load_catalog())
    print(report(rows, left_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
