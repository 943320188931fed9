"""Schemathesis hooks (``SCHEMATHESIS_HOOKS=tests.support.schemathesis_hooks``): how to send a
generated body of ``POST /api/entries/batch``, whose media type Schemathesis does not know:
each generated item as one NDJSON line (PROTOCOL §4.1)."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx: Any, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    items = value if isinstance(value, list) else [value]
    return b"".join(json.dumps(item).encode("utf-8", "surrogatepass") + b"\n" for item in items)
