"""Is this contribution one this home already published or holds pending?

Two contributions are the same when their kind, title, body, links (as a set) and previous are
the same for the same library (genesis): signing them again would only add a second,
identical entry to a log that keeps every entry forever.  ``find_duplicate`` looks in the
home's ``pending/`` (envelopes) and ``published/`` (the signed records the library returned),
and names the first match.  What each file holds is remembered per process by
its path, modification time and size (a long-running ``alexandria mcp`` reads each file once;
at most ``MAX_REMEMBERED`` files).
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
MAX_REMEMBERED = 100_000
_seen: dict[str, tuple[int, int, tuple[Any, ...] | None]] = {}


def _same(record: Mapping[str, Any]) -> tuple[Any, ...]:
    links = record.get("links")
    pairs = sorted((str(lk.get("relation")), str(lk.get("target"))) for lk in links
                   if isinstance(lk, Mapping)) if isinstance(links, list) else []
    return (record.get("genesis"), record.get("kind"), record.get("title"), record.get("body"),
            tuple(pairs), record.get("previous"))


def _records(folder: Path) -> list[tuple[str, Path]]:
    if not folder.is_dir():
        return []
    return [(p.name[:-5], p) for p in sorted(folder.iterdir())
            if p.name.endswith(".json") and HEX64.match(p.name[:-5])]


def find_duplicate(home: Home, record: Mapping[str, Any]) -> str | None:
    """The revision id (a pending one included) of a contribution identical to ``record`` —
    same genesis, kind, title, body, links and previous — that ``home`` holds pending or has
    published; ``None`` when there is none."""
    wanted = _same(record)
    for folder in (home.pending_dir, home.published_dir):
        for rev, path in _records(folder):
            if _held(path) == wanted:
                return rev
    return None


def _held(path: Path) -> tuple[Any, ...] | None:
    """What ``_same`` says of the record in ``path``; ``None`` when it holds none."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = str(path)
    known = _seen.get(key)
    if known is not None and known[:2] == (st.st_mtime_ns, st.st_size):
        return known[2]
    held: tuple[Any, ...] | None = None
    if st.st_size <= MAX_FILE_BYTES:
        try:
            value = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            value = None
        record = value.get("record") if isinstance(value, Mapping) else None
        held = _same(record) if isinstance(record, Mapping) else None
    if len(_seen) >= MAX_REMEMBERED:
        _seen.clear()
    _seen[key] = (st.st_mtime_ns, st.st_size, held)
    return held
