"""Timestamps: exact text, and formatting that agrees with the calendar everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from alexandria.core.timestamps import format_ms, parse_ms

# 0001-01-01 .. 9999-12-31, the years the four-digit shape can hold
_FIRST = -62_135_596_800_000
_LAST = 253_402_300_799_999


def _reference(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:" \
        f"{dt.second:02d}.{ms % 1000:03d}Z"


@given(st.lists(st.integers(_FIRST, _LAST), min_size=1, max_size=20),
       st.lists(st.integers(0, 2_000), max_size=5))
def test_format_ms_is_the_calendar_time_and_parses_back(
    starts: list[int], steps: list[int]
) -> None:
    for ms in starts:  # the remembered second must never leak into another second
        for t in (ms, *(ms + s for s in steps)):
            if t > _LAST:
                continue
            text = format_ms(t)
            if t >= 0:  # (the float reference is exact from the epoch on)
                assert text == _reference(t)
            assert parse_ms(text) == t


def test_format_ms_edges() -> None:
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_ms(999) == "1970-01-01T00:00:00.999Z"
    assert format_ms(1000) == "1970-01-01T00:00:01.000Z"
    assert format_ms(-1) == "1969-12-31T23:59:59.999Z"
    assert format_ms(1_780_000_000_123) == "2026-05-28T20:26:40.123Z"
    assert format_ms(_LAST) == "9999-12-31T23:59:59.999Z"
    assert format_ms(_FIRST) == "0001-01-01T00:00:00.000Z"
    assert format_ms(-60_000_000_000_000) == "0068-09-03T13:20:00.000Z"
