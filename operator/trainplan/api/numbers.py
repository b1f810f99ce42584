"""How counts are written for people: thousands separators below a million, three
significant digits and a scale word above, and the noun in the singular only for one
(pure)."""

from __future__ import annotations

import math
from typing import Final

_SCALES: Final = ((1e12, "trillion"), (1e9, "billion"), (1e6, "million"))


def format_count(count: float, noun: str, plural: str | None = None) -> str:
    """`count` with its noun: "1 step", "2,329 steps", "6.74 billion parameters",
    "2 trillion tokens". Below a million the count is rounded to a whole number;
    `plural` defaults to the noun with an "s". Raises ValueError for a negative or
    non-finite count."""
    if not math.isfinite(count) or count < 0:
        raise ValueError(f"cannot write {count!r} as a count: not a finite, non-negative number")
    many = plural if plural is not None else f"{noun}s"
    for scale, word in _SCALES:
        if count >= scale:
            value = count / scale
            digits = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
            return f"{digits} {word} {many}"
    whole = round(count)
    return f"{whole:,} {noun if whole == 1 else many}"
