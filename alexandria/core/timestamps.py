"""Timestamps: UTC, exactly ``YYYY-MM-DDTHH:MM:SS.sssZ`` (PROTOCOL §1), compared as integer
milliseconds since the epoch."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from functools import lru_cache

# \Z, not $: "$" also matches before a final newline
_SHAPE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")


def is_timestamp(text: object) -> bool:
    return isinstance(text, str) and parse_ms(text) is not None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=4096)
def parse_ms(text: str) -> int | None:
    """Milliseconds since the epoch, or None when ``text`` is not an exact timestamp (the
    shape, and a real calendar date and time)."""
    if not _SHAPE.match(text):
        return None
    try:
        dt = datetime(
            int(text[0:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
            int(text[17:19]), tzinfo=UTC,
        )
    except ValueError:
        return None
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + int(text[20:23])


@lru_cache(maxsize=64)
def _second_text(second: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.`` of a second since the epoch: the writer formats one admission
    time after another within the same second (a pure memo, like ``parse_ms``'s)."""
    dt = _EPOCH + timedelta(seconds=second)  # four-digit years even before 1000 (strftime: no)
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:" \
        f"{dt.second:02d}."


def format_ms(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    return f"{_second_text(ms // 1000)}{ms % 1000:03d}Z"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def now() -> str:
    return format_ms(now_ms())
