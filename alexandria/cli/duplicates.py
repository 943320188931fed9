"""Is this contribution one this home already published or holds pending?

Two contributions are the same when their kind, title, body, links (as a set) and previous are
the same for the same library (genesis): signing them again would only add a second,
identical entry to a log that keeps every entry forever.  ``find_duplicate`` looks in the
home's ``pending/`` (envelopes) and ``published/`` (the signed records the library returned),
newest first, and names the first match.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from alexandria.cli.config import Home
from alexandria.core.keys import HEX64

MAX_FILE_BYTES = 1 << 20
"""A file in pending/ or published/ larger than this is not a record this home wrote."""


def _same(record: Mapping[str, Any]) -> tuple[Any, ...]:
    links = record.get("links")
    pairs = sorted((str(lk.get("relation")), str(lk.get("target"))) for lk in links
                   if isinstance(lk, Mapping)) if isinstance(links, list) else []
    return (record.get("genesis"), record.get("kind"), record.get("title"), record.get("body"),
            tuple(pairs), record.get("previous"))


def _records(folder: Path) -> list[tuple[str, Path]]:
    if not folder.is_dir():
        return []
    found = [(p.name[:-5], p) for p in folder.iterdir()
             if p.name.endswith(".json") and HEX64.match(p.name[:-5])]
    return sorted(found, key=lambda f: f[1].stat().st_mtime_ns, reverse=True)


def find_duplicate(home: Home, record: Mapping[str, Any]) -> str | None:
    """The revision id (a pending one included) of a contribution identical to ``record`` —
    same genesis, kind, title, body, links and previous — that ``home`` holds pending or has
    published; ``None`` when there is none."""
    wanted = _same(record)
    for folder in (home.pending_dir, home.published_dir):
        for rev, path in _records(folder):
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    continue
                held = orjson.loads(path.read_bytes()).get("record")
            except (OSError, orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(held, Mapping) and _same(held) == wanted:
                return rev
    return None
