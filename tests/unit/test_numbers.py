"""How counts are written for people (`trainplan.api.format_count`)."""

from __future__ import annotations

import math

import pytest

from trainplan.api import format_count


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 steps"),
        (1, "1 step"),
        (1.4, "1 step"),
        (2, "2 steps"),
        (2_329, "2,329 steps"),
        (999_999.4, "999,999 steps"),
        (1e6, "1 million steps"),
        (4_194_304, "4.19 million steps"),
        (6_738_415_616, "6.74 billion steps"),
        (2.0000035e12, "2 trillion steps"),
        (123e9, "123 billion steps"),
        (1_234e12, "1,234 trillion steps"),
    ],
)
def test_counts_read_as_a_person_writes_them(count: float, text: str) -> None:
    assert format_count(count, "step") == text


def test_an_irregular_plural() -> None:
    assert format_count(3, "data-parallel replica", "data-parallel replicas") == (
        "3 data-parallel replicas"
    )
    assert format_count(1, "process", "processes") == "1 process"
    assert format_count(2, "process", "processes") == "2 processes"


@pytest.mark.parametrize("count", [-1, math.nan, math.inf])
def test_a_count_that_is_not_one_is_refused(count: float) -> None:
    with pytest.raises(ValueError, match="not a finite, non-negative number"):
        format_count(count, "step")
