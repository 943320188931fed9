"""What the writer connection remembers between admissions, and when it must forget.

Most of what the rules and the storage ask of the ledger at each admission is either immutable
once committed (a revision's identity, an object's near ancestors and conversation position
(``store/feed.py``: both of constant size, never a list that grows with depth), an actor's
catalogue id, the newest Merkle node of each level, the log's tail) or changed only through
this very connection, which updates the memory as it writes (an object's head; the authorities
and revocations are simply forgotten when one is admitted).  Answering those from memory
instead of from SQLite saves about half of the writer's statements.

The memory is only an answer to "what did the database hold the last time this connection
looked", so it forgets everything when that may no longer be true:

- at the start of every write transaction, when ``PRAGMA data_version`` moved: another
  connection (another server process, an operator command) committed in between;
- whenever a transaction or savepoint of this connection is rolled back, since facts learnt or
  written inside it may never have been committed, and after every write job that is not an
  admission, since it may change what is remembered (``store/writer.py`` calls ``forget``),
  but a job that says it writes nothing remembered (``Job.keeps_memory``: a checkpoint).

Caches of unbounded key sets are ``core.cache.Bounded`` to ``LIMIT`` entries each, simply
emptied when full: the hot entries (the spaces and discussions everyone links to) come back at
once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from alexandria.core import merkle
from alexandria.core.cache import Bounded
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import AuthorityCertificate
from alexandria.rules.view import ObjectFacts, RevisionFacts
from alexandria.store.feed import FeedCache
from alexandria.store.merkle_nodes import node_reader

LIMIT = 20_000  # entries of each cache of an unbounded key set


class WriterMemory:
    def __init__(self) -> None:
        self._version: int | None = None
        #: counts the ``forget`` calls: what was learnt in one generation holds until the next
        self.generation = 0
        self.forget()

    def forget(self) -> None:
        self.generation += 1
        self._tail: tuple[int, int] | None = None  # (log size, last admitted_at in ms)
        self._newest: dict[int, tuple[int, bytes]] = {}  # level -> (index, hash)
        self.authorities: Bounded[str, list[tuple[int, AuthorityCertificate]]] = Bounded(LIMIT)
        self.revoked: Bounded[tuple[str, str], bool] = Bounded(LIMIT)
        self.actors: Bounded[str, int] = Bounded(LIMIT)
        self.revisions: Bounded[str, RevisionFacts] = Bounded(LIMIT)
        self.objects: Bounded[str, ObjectFacts] = Bounded(LIMIT)
        self.feed = FeedCache(LIMIT)
        #: revision ids known not to be admitted, valid inside the current write transaction
        #: only (the backend's ``absent``; an admission discards its own)
        self.absent: set[str] = set()

    def begin(self, conn: sqlite3.Connection) -> None:
        """Call inside each write transaction, before anything is read."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self.forget()
            self._version = version

    # --- the log -----------------------------------------------------------------------------

    def tail(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """The log's size and its last ``admitted_at`` in ms (0 for an empty log)."""
        if self._tail is None:
            row = conn.execute(
                "SELECT sequence, admitted_at FROM log ORDER BY sequence DESC LIMIT 1"
            ).fetchone()
            if row is None:
                self._tail = (0, 0)
            else:
                ms = parse_ms(row[1])
                assert ms is not None
                self._tail = (int(row[0]), ms)
        return self._tail

    def node_getter(self, conn: sqlite3.Connection) -> merkle.GetNode:
        """``get(level, index)`` for ``merkle.append_nodes``: the left sibling it asks for is
        always the newest complete node of its level."""
        stored = node_reader(conn)

        def get(level: int, index: int) -> bytes:
            newest = self._newest.get(level)
            if newest is not None and newest[0] == index:
                return newest[1]
            return stored(level, index)

        return get

    def appended(self, sequence: int, admitted_ms: int, nodes: list[merkle.Node]) -> None:
        self._tail = (sequence, admitted_ms)
        for level, index, h in nodes:
            self._newest[level] = (index, h)

    # --- derived facts -----------------------------------------------------------------------

    @staticmethod
    def cached(cache: dict[Any, Any], key: Any, load: Callable[[], Any]) -> Any:
        """``cache[key]``, loading (and remembering) it when absent; ``None`` is not kept."""
        found = cache.get(key)
        if found is None:
            found = load()
            if found is not None:
                cache[key] = found
        return found
