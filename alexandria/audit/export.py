"""``alexandria export``: every leaf and every checkpoint of a log, as JSON Lines (docs/log.md).

Each line is the RFC 8785 canonical form of one JSON object, then a newline:

1. a header ``{"format": "alexandria.log-export/1", "genesis": GENESIS_DOCUMENT, "size": N}``;
2. for every leaf, in order, ``{"leaf", "sequence", "type"}`` — exactly the objects
   ``GET /api/log/entries`` returns, the leaf ``{"admitted_at", "document"}`` spliced in as
   the canonical bytes that were hashed;
3. right after the leaf with ``sequence == S``, the checkpoint of size ``S`` if one was signed:
   ``{"checkpoint": SIGNED_NOTE}``.

An export is a stream: from a server (here) one page at a time, from a database
(``reads/export.py``) a bounded window at a time, and the same log gives the same bytes either
way (the lines are made by ``core/log_wire.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import orjson

from alexandria.audit.answer_caps import answer_cap
from alexandria.core.canonical import canonical
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.log_wire import checkpoint_line, header_line
from alexandria.errors import Failed

Fetch = Callable[[str], bytes]
"""``fetch(path_and_query) -> response body`` of a server; raises on a non-200 answer."""


def iter_server(fetch: Fetch) -> Iterator[bytes]:
    """The export of a running server, up to the checkpoint it signs (or serves) first, so
    that every leaf exported is covered by a signed checkpoint."""
    genesis = orjson.loads(fetch("/api/genesis"))["document"]
    latest, _sigs = parse_checkpoint(fetch("/api/log/checkpoint"))
    size = latest.size
    yield header_line(genesis, size)
    checkpoints = _server_checkpoints(fetch, size)
    pending = next(checkpoints, None)
    start = 0
    while start < size:
        page = orjson.loads(fetch(f"/api/log/entries?start={start}&end={size}"))
        entries = page["entries"]
        if not entries:
            raise Failed("the server returned an empty page of entries", "BAD_PAGE")
        for entry in entries:
            yield canonical(entry) + b"\n"
            seq = entry.get("sequence") if isinstance(entry, dict) else None
            while pending is not None and pending[0] == seq:
                yield checkpoint_line(pending[1])
                pending = next(checkpoints, None)
        start += len(entries)


def _server_checkpoints(fetch: Fetch, upto: int) -> Iterator[tuple[int, str]]:
    """``(size, note)`` of the server's persisted checkpoints up to ``upto``, page by page."""
    after: int | None = 0
    while after is not None:
        page = orjson.loads(fetch(f"/api/log/checkpoints?after={after}"))
        for c in page["checkpoints"]:
            if c["size"] > upto:
                return
            yield c["size"], c["note"]
        following = page["next"]
        if following is not None and (type(following) is not int or following <= after):
            raise Failed(f"the server's page of checkpoints after {after} names next"
                         f" {str(following)[:40]}: it does not advance", "BAD_PAGE",
                         after=after)
        after = following


class HttpSource:
    """A ``Fetch`` over HTTP for the library at ``url`` (the CLI's typed ``client.Client``):
    each answer capped at what the protocol allows for its route (``answer_caps.py``), its
    reading stopped at the cap (``ANSWER_TOO_LARGE``).  ``abort()``, from another thread, ends
    the request in progress at once; ``answered`` is the ``time.monotonic()`` of the last
    answer read whole (0 before the first)."""

    def __init__(self, url: str) -> None:
        from alexandria.client import Client

        self.client = Client(url)
        self.answered = 0.0

    def __call__(self, path: str) -> bytes:
        content = self.client.request("GET", path, max_bytes=answer_cap(path)).content
        self.answered = time.monotonic()
        return content

    def abort(self) -> None:
        self.client.abort()

    def close(self) -> None:
        self.client.close()


def http_fetcher(url: str) -> tuple[Fetch, Callable[[], None]]:
    """A ``fetch`` over HTTP for the library at ``url`` (an ``HttpSource``) and a function
    that closes its connection."""
    source = HttpSource(url)
    return source, source.close
