"""Durations as users write them ("14d", "1h30m", "P1DT12H") and as the CLI prints them.

Pure: string parsing and formatting only; no I/O, no clock.
"""

import math
import re
from types import MappingProxyType
from typing import Annotated, Final

from pydantic import AfterValidator, WithJsonSchema

_UNIT_SECONDS: Final = MappingProxyType(
    {"w": 604_800.0, "d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
)
_ISO_GROUP_UNITS: Final = (("W", "w"), ("D", "d"), ("TH", "h"), ("TM", "m"), ("TS", "s"))

_AMBIGUOUS_UNITS: Final = frozenset(
    {"y", "yr", "yrs", "year", "years", "mo", "mon", "month", "months"}
)

_ACCEPTED_FORMS: Final = (
    "accepted forms: a positive number with a unit w, d, h, m or s ('14d', '36h', '90m', "
    "'45s', '2w', '1.5h'), units combined largest first ('1d12h', '1h30m'), or an ISO 8601 "
    "duration ('P14D', 'PT36H', 'P1DT12H', 'PT90M', 'P2W'); months and years are not accepted"
)

DURATION_MAX_SECONDS: Final = 100 * 365.25 * 86_400.0
"""The longest duration accepted (100 years): a deadline or a job limit beyond it is a
mistake, and datetimes beyond it are not far from `datetime`'s range."""

_NUMBER: Final = r"\d+(?:\.\d+)?"
_SHORT_PART: Final = re.compile(rf"\s*({_NUMBER})([a-zA-Z]+)")
_ISO: Final = re.compile(
    rf"P(?:(?P<Y>{_NUMBER})Y)?(?:(?P<M>{_NUMBER})M)?(?:(?P<W>{_NUMBER})W)?(?:(?P<D>{_NUMBER})D)?"
    rf"(?:T(?:(?P<TH>{_NUMBER})H)?(?:(?P<TM>{_NUMBER})M)?(?:(?P<TS>{_NUMBER})S)?)?",
    re.IGNORECASE,
)


def _invalid(text: str, reason: str) -> ValueError:
    return ValueError(f"invalid duration {text!r}: {reason}; {_ACCEPTED_FORMS}")


def _parse_iso(text: str, body: str) -> float:
    match = _ISO.fullmatch(body)
    if match is None or body.upper().endswith("T") or all(v is None for v in match.groups()):
        raise _invalid(text, "not an ISO 8601 duration of weeks, days, hours, minutes, seconds")
    if match["Y"] is not None or match["M"] is not None:
        raise _invalid(text, "months and years have no fixed length")
    return sum(
        float(match[group]) * _UNIT_SECONDS[unit]
        for group, unit in _ISO_GROUP_UNITS
        if match[group] is not None
    )


def _parse_short(text: str, body: str) -> float:
    seconds = 0.0
    position = 0
    previous_unit_seconds = math.inf
    while position < len(body):
        match = _SHORT_PART.match(body, position)
        if match is None:
            rest = body[position:].strip()
            if re.fullmatch(_NUMBER, rest):
                raise _invalid(text, f"the number {rest!r} has no unit")
            raise _invalid(text, f"cannot read {rest!r}")
        number, unit = match.groups()
        if unit not in _UNIT_SECONDS:
            if unit == "M" or unit.lower() in _AMBIGUOUS_UNITS:
                raise _invalid(text, "months and years have no fixed length")
            raise _invalid(text, f"unknown unit {unit!r}")
        unit_seconds = _UNIT_SECONDS[unit]
        if unit_seconds >= previous_unit_seconds:
            raise _invalid(text, "units must appear once each, largest first")
        previous_unit_seconds = unit_seconds
        seconds += float(number) * unit_seconds
        position = match.end()
    return seconds


def parse_duration_seconds(text: str) -> float:
    """Seconds in a positive duration such as "14d", "1h30m" or "P1DT12H".

    Raises ValueError, naming the accepted forms, for anything else: empty, zero, negative,
    unknown units, months or years.
    """
    body = text.strip()
    if not body:
        raise _invalid(text, "empty")
    if body.startswith(("-", "+")):
        raise _invalid(text, "a sign is not allowed; durations are positive")
    if body[0] in "Pp":
        seconds = _parse_iso(text, body)
    elif body[0].isdigit():
        seconds = _parse_short(text, body)
    else:
        raise _invalid(text, "does not start with a number or 'P'")
    if not math.isfinite(seconds):
        raise _invalid(text, "too large")
    if seconds <= 0:
        raise _invalid(text, "must be longer than zero")
    if seconds > DURATION_MAX_SECONDS:
        raise _invalid(text, "longer than 100 years")
    return seconds


def _validate_duration(text: str) -> str:
    parse_duration_seconds(text)
    return text


_SCHEMA_NUMBER: Final = r"[0-9]+(\.[0-9]+)?"
DURATION_PATTERN: Final = (
    rf"^\s*(({_SCHEMA_NUMBER}[wdhms]\s*)+"
    rf"|[Pp]({_SCHEMA_NUMBER}[Ww])?({_SCHEMA_NUMBER}[Dd])?"
    rf"([Tt]({_SCHEMA_NUMBER}[Hh])?({_SCHEMA_NUMBER}[Mm])?({_SCHEMA_NUMBER}[Ss])?)?)\s*$"
)
"""The shape of a duration for JSON Schema and the CRD (RE2- and Python-compatible).

Looser than `parse_duration_seconds` (it admits "0d" or "P"), never stricter: the API server
rejects obvious mistakes such as "14" or "1mo", and the operator checks the rest.
"""

Duration = Annotated[
    str,
    AfterValidator(_validate_duration),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
"""A duration string, kept as the user wrote it and checked by `parse_duration_seconds`."""


def format_duration(seconds: float) -> str:
    """A compact human form with at most two units: "13d 4h", "2h 05m", "5m 03s", "45s", "0.85s",
    "1ms" (below 10 ms).

    Rounded to the smaller unit shown. Raises ValueError for negative or non-finite input.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(
            f"cannot format {seconds!r} as a duration: not a finite, non-negative number"
        )
    if 0 < seconds < 0.01:  # never "0s" for a duration that is not zero
        return f"{seconds * 1000:.3g}ms"
    if seconds < 10:
        text = f"{seconds:.2f}".rstrip("0").rstrip(".")
        return f"{text}s"
    whole_seconds = round(seconds)
    if whole_seconds < 60:
        return f"{whole_seconds}s"
    if whole_seconds < 3_600:
        minutes, rest = divmod(whole_seconds, 60)
        return f"{minutes}m {rest:02d}s" if rest else f"{minutes}m"
    whole_minutes = round(seconds / 60)
    if whole_minutes < 24 * 60:
        hours, rest = divmod(whole_minutes, 60)
        return f"{hours}h {rest:02d}m" if rest else f"{hours}h"
    days, rest = divmod(round(seconds / 3_600), 24)
    return f"{days}d {rest}h" if rest else f"{days}d"
