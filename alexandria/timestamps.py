"""Timestamps: UTC, exactly ``YYYY-MM-DDTHH:MM:SS.sssZ`` (PROTOCOL §1), compared as integer
milliseconds since the epoch."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

_SHAPE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def is_timestamp(text: object) -> bool:
    return isinstance(text, str) and parse_ms(text) is not None


def parse_ms(text: str) -> int | None:
    """Milliseconds since the epoch, or None when ``text`` is not an exact timestamp."""
    if not _SHAPE.match(text):
        return None
    try:
        dt = datetime.strptime(text[:-1], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(dt.timestamp() * 1000 + 0.5) if dt.microsecond % 1000 == 0 else None


def format_ms(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def now() -> str:
    return format_ms(now_ms())
