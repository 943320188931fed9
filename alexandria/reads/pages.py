"""What the HTML pages read (``alexandria/api/web``): compositions of the other read models.

Each function runs on the reader connection (``storage.read``) and returns stored signed records
as bytes, exactly as the JSON API would serve them; the web layer parses and renders them.  No
new query shape lives here except two bounded lookups (revision → root, and the ids of a page of
log leaves), so every page costs what its parts cost in the JSON API: a handful of index range
reads of at most ``objects.PAGE_SIZE`` rows each.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from alexandria.reads import catalogue, log, objects, scores
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.merkle_nodes import tree_size
from alexandria.store.schema import revision_id

#: Sections that list the objects whose one tree relation names the object.
TREE_SECTIONS = {
    "evidence": "evidence_for", "assessments": "assesses", "proposals": "proposes_for",
}
#: The sections each kind's page shows, besides ``history`` (every page) and the ``thread`` of
#: a discussion or reply: ``objects.SECTIONS`` names and ``TREE_SECTIONS``.
KIND_SECTIONS: dict[str, tuple[str, ...]] = {
    "space": ("children", "knowledge", "graph", "discussions"),
    "claim": ("evidence", "assessments", "discussions", "proposals", "graph", "related"),
    "document": ("proposals", "graph", "related"),
    "discussion": ("related",),
    "reply": ("related",),
    "evidence": ("related",),
    "assessment": ("related",),
    "relationship": ("related",),
    "proposal": ("related",),
}
PAGED_SECTIONS = ("history", "thread", *objects.SECTIONS, *TREE_SECTIONS)
#: The links that place a reply or a branch in a thread.
THREAD_RELATIONS = ("replies_to", "answers", "branches_from")
#: Revisions a page of an object's history shows, each with its diff from the one before: a
#: page of diffs is bounded by this times the bound of one (``api/web/diffs.py``).
HISTORY_PAGE_SIZE = 10
assert HISTORY_PAGE_SIZE < objects.PAGE_SIZE  # one read holds a page and the revision before
#: Log leaves the log page lists, newest first.
LOG_PAGE_ENTRIES = 20


@dataclass(frozen=True)
class Section:
    name: str
    items: list[bytes]
    offset: int
    next_offset: int | None


@dataclass(frozen=True)
class ObjectPage:
    subject: objects.Subject
    item: bytes  # the current head
    ancestors: list[bytes]
    sections: dict[str, Section]
    history: Section
    before_history: bytes | None  # the revision just before the history page, for its diff
    thread: objects.Discussion | None  # discussions and replies: the conversation below
    thread_offset: int
    roots: dict[str, str] = field(default_factory=dict)  # revision → root of thread links


@objects.snapshot
def object_page(
    conn: sqlite3.Connection, store: LedgerStorage, rev: str, section: str | None, offset: int
) -> ObjectPage | None:
    """An object's page: its head, its ancestors, the sections of its kind (``section`` paged
    at ``offset``, the others at their first page), its history and, for a discussion or reply,
    its thread — all from one read transaction, so that they agree with each other."""
    subj = objects.subject(conn, rev)
    if subj is None:
        return None

    def at(name: str) -> int:
        return offset if name == section else 0

    sections: dict[str, Section] = {}
    # the history page and, after the first, the revision before it (for the first one's diff)
    start = at("history")
    head = objects.object_view(conn, store, subj.root, "history", max(0, start - 1), False)
    assert head is not None
    items = head.items
    before = None
    if start > 0 and items:
        before, items = items[0], items[1:]
    later = len(items) > HISTORY_PAGE_SIZE or head.next_offset is not None
    history = Section("history", items[:HISTORY_PAGE_SIZE], start,
                      start + HISTORY_PAGE_SIZE if later else None)
    for name in KIND_SECTIONS.get(subj.kind, ()):
        if name in TREE_SECTIONS:
            seqs, more = objects.tree_children(conn, subj, TREE_SECTIONS[name], at(name))
            sections[name] = Section(
                name, store.signed_many(conn, seqs), at(name),
                at(name) + len(seqs) if more else None,
            )
            continue
        view = objects.object_view(conn, store, subj.root, name, at(name), False)
        assert view is not None
        sections[name] = Section(name, view.items, at(name), view.next_offset)
    thread = None
    roots: dict[str, str] = {}
    if subj.kind in ("discussion", "reply"):
        thread = objects.discussion(conn, store, subj.root, "old", at("thread"))
        assert thread is not None
        targets = [
            link["target"]
            for raw in thread.items
            for link in orjson.loads(raw)["record"]["links"]
            if link["relation"] in THREAD_RELATIONS
        ]
        roots = roots_of(conn, targets)
    return ObjectPage(
        subj, head.item, head.ancestors, sections, history, before, thread, at("thread"), roots
    )


def roots_of(conn: sqlite3.Connection, revs: Sequence[str]) -> dict[str, str]:
    """The root of each known revision id (a thread's links name exact revisions)."""
    out: dict[str, str] = {}
    for rev in dict.fromkeys(revs):
        row = conn.execute(f"SELECT root FROM revisions WHERE {revision_id('?')}",
                           (rev, rev)).fetchone()
        if row is not None:
            out[rev] = str(row[0])
    return out


@dataclass(frozen=True)
class CataloguePage:
    items: list[bytes]
    total: int


@objects.snapshot
def catalogue_page(
    conn: sqlite3.Connection, store: LedgerStorage, query: catalogue.CatalogueQuery
) -> CataloguePage:
    """A page of ``GET /api/catalogue``'s full projection: the listed heads' signed records."""
    found = catalogue.find(conn, query)
    return CataloguePage(store.signed_many(conn, found.sequences), found.total)


@dataclass(frozen=True)
class RevisionPage:
    signed: bytes
    subject: objects.Subject
    head: bytes


@objects.snapshot
def revision_page(
    conn: sqlite3.Connection, store: LedgerStorage, rev: str
) -> RevisionPage | None:
    subj = objects.subject(conn, rev)
    if subj is None:
        return None
    signed, head = store.signed_many(conn, [subj.sequence, subj.head_sequence])
    return RevisionPage(signed, subj, head)


@dataclass(frozen=True)
class AuthorPage:
    contributions: list[bytes]
    total: int
    offset: int
    scores: dict[str, object]


@objects.snapshot
def author_page(
    conn: sqlite3.Connection, store: LedgerStorage, actor: str, offset: int
) -> AuthorPage:
    """An actor's listed contributions (current heads of what they created, newest first) and
    their host-projected scores with the first page of the votes they hold."""
    found = catalogue.find(conn, catalogue.CatalogueQuery(author=actor, offset=offset))
    return AuthorPage(
        store.signed_many(conn, found.sequences), found.total, offset,
        scores.scores(conn, actor, 0),
    )


@dataclass(frozen=True)
class LogPage:
    size: int
    checkpoint: log.StoredCheckpoint | None
    entries: bytes | None  # ``GET /api/log/entries`` of the page's leaves
    first: int = 0  # the entry numbers (sequences) the page asked for, oldest and newest
    last: int = 0


def log_window(size: int, before: int | None = None, after: int | None = None,
               entry: int | None = None) -> tuple[int, int]:
    """The entry numbers ``(first, last)`` a page of the log shows: the newest
    ``LOG_PAGE_ENTRIES``; those just before entry ``before`` or just after ``after``; or those
    around ``entry`` (which must exist).  ``(0, 0)`` for an empty log."""
    n = LOG_PAGE_ENTRIES
    if size == 0:
        return 0, 0
    if entry is not None:
        if not 1 <= entry <= size:
            raise log.LogRange(f"there is no entry {entry}: the log holds entries 1 to {size}",
                               entry=entry, tree_size=size)
        last = min(size, entry + n // 2 - 1)
    elif before is not None:
        last = min(size, before - 1)
    elif after is not None:
        last = min(size, after + n)
    else:
        last = size
    last = max(last, min(size, n))  # past either end: the page at that end
    return max(1, last - n + 1), last


@objects.snapshot
def log_page(conn: sqlite3.Connection, before: int | None = None, after: int | None = None,
             entry: int | None = None) -> LogPage:
    """A page of the log, newest first (``log_window``): one range read of ``log`` by its key,
    so any page costs the same at any size."""
    size = tree_size(conn)
    first, last = log_window(size, before, after, entry)
    entries = log.entries_page(conn, first - 1, last) if size else None
    return LogPage(size, log.latest_checkpoint(conn), entries, first, last)
