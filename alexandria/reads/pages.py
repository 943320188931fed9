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

from alexandria.core.keys import HEX64
from alexandria.reads import catalogue, log, objects, scores
from alexandria.store import enrolments
from alexandria.store.interface import Records
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
#: Distinct revision ids a page resolves to their kind and title (links, body references,
#: the links of its history's revisions); beyond, ids are shown as they are.
MAX_TARGETS = 120
#: Body fields that name a revision (``evidence.claim``, ``relationship.from``, ...).
REFERENCE_FIELDS = ("claim", "from", "to", "base", "evidence")
#: Log leaves the log page lists, newest first.
LOG_PAGE_ENTRIES = 20


@dataclass(frozen=True)
class Section:
    name: str
    items: list[bytes]
    offset: int
    next_offset: int | None


@dataclass(frozen=True)
class Target:
    """What a revision id names, for a link's text: the exact revision's kind and title, its
    number among its object's revisions and the object's current title."""

    id: str
    root: str
    kind: str
    title: str
    number: int  # 1 for the object's first revision
    revisions: int
    head: str
    head_title: str


def referenced_ids(raws: Sequence[bytes]) -> list[str]:
    """The revision ids the records name: their links' targets and the body fields that hold
    revision ids (a proposal's proposed links too), in order, once each."""
    out: dict[str, None] = {}

    def add(value: object) -> None:
        if isinstance(value, str) and HEX64.match(value):
            out.setdefault(value)

    for raw in raws:
        record = orjson.loads(raw)["record"]
        for link in record["links"]:
            add(link["target"])
        add(record["previous"])
        if record["kind"] in ("reply", "vote"):
            continue
        body = orjson.loads(record["body"])
        if not isinstance(body, dict):
            continue
        for name in REFERENCE_FIELDS:
            value = body.get(name)
            for v in value if isinstance(value, list) else (value,):
                add(v)
        proposed = body.get("links")
        if isinstance(proposed, list):
            for link in proposed:
                if isinstance(link, dict):
                    add(link.get("target"))
    return list(out)


def link_targets(conn: sqlite3.Connection, store: Records, revs: Sequence[str]
            ) -> dict[str, Target]:
    """Each known revision of the first ``MAX_TARGETS`` of ``revs`` as a ``Target``: one
    subject lookup and one count per id, and the records of the revisions and their heads."""
    found: dict[str, tuple[objects.Subject, int]] = {}
    for rev in list(dict.fromkeys(revs))[:MAX_TARGETS]:
        subj = objects.subject(conn, rev)
        if subj is None:
            continue
        number = 1
        if rev != subj.root:
            (later,) = conn.execute(
                "SELECT count(*) FROM revisions WHERE root = ? AND id != root"
                " AND sequence <= ?", (subj.root, subj.sequence)).fetchone()
            number += int(later)
        found[rev] = (subj, number)
    seqs = [s.sequence for s, _ in found.values()] + [s.head_sequence for s, _ in found.values()]
    records = {}
    for raw in store.signed_many(conn, seqs):
        signed = orjson.loads(raw)
        records[signed["admission"]["sequence"]] = signed["record"]
    out = {}
    for rev, (subj, number) in found.items():
        record, head = records.get(subj.sequence), records.get(subj.head_sequence)
        if record is None or head is None:
            continue
        out[rev] = Target(rev, subj.root, record["kind"], record["title"], number,
                          subj.revisions, subj.head, head["title"])
    return out


def author_names(conn: sqlite3.Connection, raws: Sequence[bytes]) -> dict[str, str]:
    """The name the operator approved at enrolment for each author of ``raws`` whose signing
    worker key the library enrolled (``store/enrolments.py``)."""
    workers: dict[str, str] = {}
    for raw in raws:
        signed = orjson.loads(raw)
        cert = signed["signature"]["certificate"]["certificate"]
        if cert.get("actor") == signed["record"]["author"]:
            workers.setdefault(cert["worker"], cert["actor"])
    return enrolments.approved_names(conn, workers)


@dataclass(frozen=True)
class ObjectPage:
    subject: objects.Subject
    item: bytes  # the current head
    ancestors: list[bytes]
    sections: dict[str, Section]
    history: Section  # its ``items`` oldest first; ``offset`` counts from the newest
    before_history: bytes | None  # the revision just before the history page, for its diff
    thread: objects.Discussion | None  # discussions and replies: the conversation below
    thread_offset: int
    roots: dict[str, str] = field(default_factory=dict)  # revision → root of thread links
    targets: dict[str, Target] = field(default_factory=dict)  # ids the page names
    names: dict[str, str] = field(default_factory=dict)  # actor → name approved at enrolment


@objects.snapshot
def object_page(
    conn: sqlite3.Connection, store: Records, rev: str, section: str | None, offset: int
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
    # a page of the history, newest first (``offset`` counts from the newest), read oldest
    # first with the revision before its oldest one (for that one's diff)
    start = at("history")
    count = max(0, min(HISTORY_PAGE_SIZE, subj.revisions - start))
    oldest = max(0, subj.revisions - start - count)
    head = objects.object_view(conn, store, subj.root, "history", max(0, oldest - 1), False)
    assert head is not None
    items = head.items
    before = None
    if oldest > 0 and items:
        before, items = items[0], items[1:]
    history = Section("history", items[:count], start,
                      start + count if start + count < subj.revisions else None)
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
        parents = [
            link["target"]
            for raw in thread.items
            for link in orjson.loads(raw)["record"]["links"]
            if link["relation"] in THREAD_RELATIONS
        ]
        roots = roots_of(conn, parents)
    cards = [raw for name in ("evidence", "assessments") if name in sections
             for raw in sections[name].items]
    listed = [raw for s in sections.values() for raw in s.items]
    named = [head.item, *history.items, *([before] if before else []), *cards]
    replies = thread.items if thread is not None else []
    return ObjectPage(
        subj, head.item, head.ancestors, sections, history, before, thread, at("thread"), roots,
        link_targets(conn, store, referenced_ids(named)),
        author_names(conn, named + replies + listed),
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
    names: dict[str, str] = field(default_factory=dict)  # actor → name approved at enrolment


@objects.snapshot
def catalogue_page(
    conn: sqlite3.Connection, store: Records, query: catalogue.CatalogueQuery
) -> CataloguePage:
    """A page of ``GET /api/catalogue``'s full projection: the listed heads' signed records."""
    found = catalogue.find(conn, query)
    raws = store.signed_many(conn, found.sequences)
    return CataloguePage(raws, found.total, author_names(conn, raws))


@dataclass(frozen=True)
class RevisionPage:
    signed: bytes
    subject: objects.Subject
    head: bytes
    targets: dict[str, Target] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)


@objects.snapshot
def revision_page(
    conn: sqlite3.Connection, store: Records, rev: str
) -> RevisionPage | None:
    subj = objects.subject(conn, rev)
    if subj is None:
        return None
    signed, head = store.signed_many(conn, [subj.sequence, subj.head_sequence])
    return RevisionPage(
        signed, subj, head, link_targets(conn, store, [rev, *referenced_ids([signed])]),
        author_names(conn, [signed]),
    )


@dataclass(frozen=True)
class ComparePage:
    subject: objects.Subject  # the object, at its root
    old: bytes
    new: bytes
    head: bytes
    targets: dict[str, Target]
    names: dict[str, str]


class NotOfObject(ValueError):
    """A revision compared on an object's page is not one of its revisions."""

    def __init__(self, rev: str) -> None:
        super().__init__(rev)
        self.rev = rev


@objects.snapshot
def compare_page(
    conn: sqlite3.Connection, store: Records, root: str, old: str, new: str
) -> ComparePage | None:
    """Two revisions of the object ``root`` (any of its revision ids), for their diff; ``None``
    when ``root`` is unknown; ``NotOfObject`` when one of them is not a revision of it."""
    subj = objects.subject(conn, root)
    if subj is None:
        return None
    sides = []
    for rev in (old, new):
        side = objects.subject(conn, rev)
        if side is None or side.root != subj.root:
            raise NotOfObject(rev)
        sides.append(side.sequence)
    raws = store.signed_many(conn, [*sides, subj.head_sequence])
    by_seq = {orjson.loads(raw)["admission"]["sequence"]: raw for raw in raws}
    a, b, head = by_seq[sides[0]], by_seq[sides[1]], by_seq[subj.head_sequence]
    return ComparePage(subj, a, b, head,
                       link_targets(conn, store, [old, new, *referenced_ids([a, b])]),
                       author_names(conn, [a, b]))


@dataclass(frozen=True)
class AuthorPage:
    contributions: list[bytes]
    total: int
    offset: int
    scores: dict[str, object]
    names: dict[str, str]  # actor → name approved at enrolment, for the page's authors


@objects.snapshot
def author_page(
    conn: sqlite3.Connection, store: Records, actor: str, offset: int
) -> AuthorPage:
    """An actor's listed contributions (current heads of what they created, newest first),
    their host-projected scores with the first page of the votes they hold, and the name
    approved at their enrolment (from the worker keys that signed the page's contributions)."""
    found = catalogue.find(conn, catalogue.CatalogueQuery(author=actor, offset=offset))
    raws = store.signed_many(conn, found.sequences)
    return AuthorPage(
        raws, found.total, offset, scores.scores(conn, actor, 0), author_names(conn, raws),
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
