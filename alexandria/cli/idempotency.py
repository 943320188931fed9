"""What ``publish`` answered for an idempotency key, remembered in the config home.

Agents repeat calls (a timeout on their side, a restarted plan): a ``publish`` that carries an
idempotency key the home has seen returns the first outcome instead of signing anew.  The key
is bound to the revision before the envelope is sent, so a repeat after an uncertain answer
resends that pending envelope (never re-signed); once the library answered definitively the
answer itself is kept.  ``mcp-idempotency.json`` holds the newest ``MAX_KEYS`` keys; it is
replaced atomically, so a crash leaves the old or the new file, never half of one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from alexandria.cli.config import Home
from alexandria.core.canonical import canonical
from alexandria.core.timestamps import now
from alexandria.errors import AlexandriaError
from alexandria.files import read_json, write_json

MAX_KEYS = 1_000
FILE = "mcp-idempotency.json"


def content_digest(content: Mapping[str, Any]) -> str:
    """What a key is bound to: the SHA-256 of the content's canonical JSON."""
    return hashlib.sha256(canonical(dict(content))).hexdigest()


class Keys:
    """Idempotency key → ``{"digest", "id", "outcome"?}`` in the home, newest last."""

    def __init__(self, home: Home) -> None:
        self.path = home.root / FILE

    def _all(self) -> dict[str, dict[str, Any]]:
        if not self.path.exists():
            return {}
        try:
            value = read_json(self.path)
        except (OSError, AlexandriaError):
            return {}
        return value if isinstance(value, dict) else {}

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._all().get(key)
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        keys = self._all()
        keys.pop(key, None)
        keys[key] = {**entry, "at": now()}
        while len(keys) > MAX_KEYS:
            keys.pop(next(iter(keys)))
        write_json(self.path, keys)
