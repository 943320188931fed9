"""A running library: its pinned genesis, its storage and its log key.  The HTTP app and the
operator commands share this object; nothing else holds global state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from alexandria.keys import SigningKey
from alexandria.sqlite_store import SqliteStorage
from alexandria.trust import Genesis


@dataclass
class Library:
    genesis: Genesis
    storage: SqliteStorage
    log_key: SigningKey | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_files(
        cls, genesis_path: str | Path, db_path: str | Path, log_key_path: str | Path | None = None
    ) -> Library:
        genesis = load_genesis(genesis_path)
        log_key = SigningKey.load(log_key_path) if log_key_path else None
        return cls(genesis, SqliteStorage(db_path, genesis), log_key)

    async def open(self) -> None:
        await self.storage.open()

    async def close(self) -> None:
        await self.storage.close()


def load_genesis(path: str | Path) -> Genesis:
    return Genesis.from_document(orjson.loads(Path(path).read_bytes()))
