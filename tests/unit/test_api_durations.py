"""Durations: the forms users write, the errors they get, and the compact printed form."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from trainplan.api import ApiModel, Duration, format_duration, parse_duration_seconds

DAY, HOUR, MINUTE = 86_400.0, 3_600.0, 60.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("14d", 14 * DAY),
        ("36h", 36 * HOUR),
        ("90m", 90 * MINUTE),
        ("45s", 45.0),
        ("2w", 14 * DAY),
        ("1d12h", 36 * HOUR),
        ("1h30m", 90 * MINUTE),
        ("1.5h", 90 * MINUTE),
        ("13d 4h", 13 * DAY + 4 * HOUR),
        ("2h 05m", 2 * HOUR + 5 * MINUTE),
        (" 14d ", 14 * DAY),
        ("P14D", 14 * DAY),
        ("PT36H", 36 * HOUR),
        ("P1DT12H", 36 * HOUR),
        ("PT90M", 90 * MINUTE),
        ("P2W", 14 * DAY),
        ("PT1.5H", 90 * MINUTE),
        ("p1dt12h", 36 * HOUR),
    ],
)
def test_accepted_forms(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("0d", "longer than zero"),
        ("0h0m", "longer than zero"),
        ("PT0S", "longer than zero"),
        ("-1d", "positive"),
        ("+1d", "positive"),
        ("14", "no unit"),
        ("5x", "unknown unit 'x'"),
        ("3D", "unknown unit 'D'"),
        ("1y", "months and years"),
        ("2mo", "months and years"),
        ("3M", "months and years"),
        ("P1M", "months and years"),
        ("P1Y", "months and years"),
        ("P1Y2M3D", "months and years"),
        ("30m1h", "largest first"),
        ("1h1h", "largest first"),
        ("P", "ISO 8601"),
        ("PT", "ISO 8601"),
        ("P1DT", "ISO 8601"),
        ("P1H", "ISO 8601"),
        ("d", "number"),
        ("1d-", "cannot read"),
        ("soon", "number"),
    ],
)
def test_rejected_forms_name_the_accepted_ones(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match="accepted forms") as caught:
        parse_duration_seconds(text)
    message = str(caught.value)
    assert reason in message
    assert "'14d'" in message
    assert "'P1DT12H'" in message


def _short_form(days: int, hours: int, minutes: int, seconds: int) -> str:
    parts = zip((days, hours, minutes, seconds), "dhms", strict=True)
    return "".join(f"{value}{unit}" for value, unit in parts if value)


def _iso_form(days: int, hours: int, minutes: int, seconds: int) -> str:
    time = "".join(
        f"{value}{unit}"
        for value, unit in zip((hours, minutes, seconds), "HMS", strict=True)
        if value
    )
    return "P" + (f"{days}D" if days else "") + (f"T{time}" if time else "")


parts = st.tuples(
    st.integers(0, 400), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59)
).filter(any)


@given(parts)
def test_short_and_iso_forms_compose(value: tuple[int, int, int, int]) -> None:
    days, hours, minutes, seconds = value
    expected = days * DAY + hours * HOUR + minutes * MINUTE + seconds
    assert parse_duration_seconds(_short_form(*value)) == expected
    assert parse_duration_seconds(_iso_form(*value)) == expected


@given(st.integers(1, 520), st.integers(0, 6))
def test_weeks_compose_with_days(weeks: int, days: int) -> None:
    text = f"{weeks}w{days}d" if days else f"{weeks}w"
    assert parse_duration_seconds(text) == (7 * weeks + days) * DAY
    assert parse_duration_seconds(f"P{weeks}W") == 7 * weeks * DAY


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (1e-7, "0.0001ms"),
        (0.0005, "0.5ms"),
        (0.001, "1ms"),
        (0.0099, "9.9ms"),
        (0.01, "0.01s"),
        (0.853, "0.85s"),
        (2.5, "2.5s"),
        (45.0, "45s"),
        (59.6, "1m"),
        (303.0, "5m 03s"),
        (3_590.0, "59m 50s"),
        (3_599.6, "1h"),
        (7_500.0, "2h 05m"),
        (86_399.0, "1d"),
        (13 * DAY + 4 * HOUR + 20 * MINUTE, "13d 4h"),
        (14 * DAY, "14d"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [-1.0, float("inf"), float("nan")])
def test_format_duration_rejects_negative_and_non_finite(seconds: float) -> None:
    with pytest.raises(ValueError, match="cannot format"):
        format_duration(seconds)


@given(st.floats(min_value=10, max_value=1e9))
def test_formatted_durations_parse_back_within_rounding(seconds: float) -> None:
    text = format_duration(seconds)
    if seconds < 3_600:
        tolerance = 0.5
    elif seconds < DAY:
        tolerance = 30.0
    else:
        tolerance = 1_800.0
    assert abs(parse_duration_seconds(text) - seconds) <= tolerance


class _WithDuration(ApiModel):
    period: Duration


def test_duration_type_keeps_the_users_text() -> None:
    assert _WithDuration(period="1d12h").period == "1d12h"
    assert _WithDuration(period="P2W").to_document() == {"period": "P2W"}


def test_duration_type_rejects_bad_text_with_the_accepted_forms() -> None:
    with pytest.raises(ValidationError, match="accepted forms"):
        _WithDuration(period="3 months")
