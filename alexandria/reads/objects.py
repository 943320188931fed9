"""Objects in context: one object with its sections, an entry's connections and its discussion.

Pure reads over the admission tables, run on the reader connection (``storage.read``).  Every
list is one indexed range read in admission order (several ranges merged by SQLite's ordered
``UNION``), cut to a page of at most ``PAGE_SIZE``; nothing walks the library.  Which index
serves which list is noted beside each query and in ``docs/objects.md``, which also gives the
decisions taken where the contract is terse:

* an object's *children* are the objects whose tree link (a relation ``/api/changes`` follows)
  names it; ``all`` is its whole tree below it; ``history`` its revisions, oldest first;
* ``related`` is what it links to (exact targets) and what links to it outside the tree and
  outside votes (citations, includes, relationships, merges);
* ``graph`` is the relationships incident to it, its direct children or its included knowledge;
* ``discussions`` are the discussions about it, contained in it or branching from it;
* ``knowledge`` is what a space holds (included exact claims and documents, then contained
  ones) and what judges a claim (its evidence and assessments);
* ``exact=true`` pins the view to one revision: links from other objects count only when they
  name that revision;
* votes are never items: ``/api/scores`` counts them.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from alexandria.reads import members
from alexandria.reads.catalogue import Warm
from alexandria.rules.state import FEED_RELATIONS
from alexandria.store import feed, read_sql
from alexandria.store.interface import Records
from alexandria.store.schema import related_link, revision_id

PAGE_SIZE = 50
SECTIONS = ("all", "children", "related", "history", "graph", "discussions", "knowledge")
DISCUSSION_SORTS = ("old", "new", "top")

#: The tree relations that can name an object of each kind (rules.state's target kinds).
CHILD_RELATIONS: dict[str, tuple[str, ...]] = {
    "space": ("contained_in", "about", "proposes_for"),
    "claim": ("about", "evidence_for", "assesses", "proposes_for"),
    "document": ("proposes_for",),
    "discussion": ("replies_to", "answers", "branches_from"),
    "reply": ("replies_to", "answers", "branches_from"),
}
RELATIONSHIP_LINKS = "('relates_from', 'relates_to')"
P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Subject:
    """A requested revision and the object it belongs to."""

    rev: str
    sequence: int
    root: str
    kind: str
    head: str
    head_sequence: int
    revisions: int
    created_sequence: int


@dataclass(frozen=True)
class ObjectView:
    item: bytes
    head: str
    original: bytes
    ancestors: list[bytes]
    items: list[bytes]
    revisions: int
    next_offset: int | None


@dataclass(frozen=True)
class Incoming:
    source: str
    relation: str
    title: str

    def to_json(self) -> dict[str, str]:
        return {"source": self.source, "relation": self.relation, "title": self.title}


@dataclass(frozen=True)
class Connections:
    outgoing: list[dict[str, str]]
    incoming: list[Incoming]
    history: list[str]
    history_total: int
    next_offset: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "outgoing": self.outgoing,
            "incoming": [i.to_json() for i in self.incoming],
            "history": self.history,
            "history_total": self.history_total,
            "next_offset": self.next_offset,
        }


@dataclass(frozen=True)
class Discussion:
    items: list[bytes]
    total: int
    next_offset: int | None


def snapshot(
    fn: Callable[Concatenate[sqlite3.Connection, P], T],
) -> Callable[Concatenate[sqlite3.Connection, P], T]:
    """Run a read in one read transaction, so that a response's parts (head, lists, counts)
    come from the same state of the library."""

    @functools.wraps(fn)
    def read(conn: sqlite3.Connection, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if conn.in_transaction:  # part of a larger read (``pages``): already one snapshot
            return fn(conn, *args, **kwargs)
        conn.execute("BEGIN")
        try:
            return fn(conn, *args, **kwargs)
        finally:
            conn.execute("COMMIT")

    return read


def subject(conn: sqlite3.Connection, rev: str) -> Subject | None:
    row = conn.execute(
        "SELECT r.sequence, r.root, r.kind, o.head, o.head_sequence, o.revisions,"
        " o.created_sequence FROM revisions r"
        f" JOIN revisions f ON {revision_id('r.root', 'f.id')}"
        f" JOIN objects o ON o.created_sequence = f.sequence WHERE {revision_id('?', 'r.id')}",
        (rev, rev),
    ).fetchone()
    return None if row is None else Subject(rev, *row)


# --- building blocks -------------------------------------------------------------------------

SectionResult = tuple[list[int], bool]  # a page of sequences, and whether more follow


def _tree_arm(relations: str | Sequence[str], exact: bool, heads: bool = False) -> str:
    """First revisions (``seq``) of the objects whose tree link of one of ``relations`` names the
    subject (any of its revisions, ``:owner``, or exactly the one at ``:seq``), in order; with
    ``heads``, each beside its object's current head (``head``).

    By the object: one range of the table ``tree_heads(target_owner, relation,
    created_sequence)``, which holds the first revisions' tree links (tree links never change
    across revisions) and their objects' heads, so a page of heads is read from a page or two
    of it, with no row read per child.  Exactly: ``links_to_revision(target_seq,
    source_sequence, …)``, which holds every revision's links, each probed against ``objects``
    by its integer key (a link is a first revision's exactly when an object was created at its
    sequence), one arm for all the relations, since the index is not keyed by relation."""
    if isinstance(relations, str):
        relations = (relations,)
    assert relations and all(r in FEED_RELATIONS for r in relations)
    named = (
        f"relation = '{relations[0]}'" if len(relations) == 1
        else "relation IN ('" + "', '".join(relations) + "')"
    )
    # DISTINCT: one object may hold two of the relations to the subject
    distinct = "DISTINCT " if len(relations) > 1 else ""
    if not exact:
        column = "created_sequence AS seq" + (", head_sequence AS head" if heads else "")
        return f"SELECT {distinct}{column} FROM tree_heads WHERE target_owner = :owner AND {named}"
    column = "l.source_sequence AS seq" + (", o.head_sequence AS head" if heads else "")
    return (
        f"SELECT {distinct}{column} FROM links l"
        " JOIN objects o ON o.created_sequence = l.source_sequence"
        f" WHERE {_EXACT_TREE_LINKS} AND l.{named}"
    )


def _tree_arms(relations: Sequence[str], exact: bool, heads: bool = False) -> list[str]:
    """``_tree_arm`` of every relation: one range each by object, one range in all exactly."""
    if exact and relations:
        return [_tree_arm(relations, True, heads)]
    return [_tree_arm(r, exact, heads) for r in relations]


#: The links naming the subject's revision at ``:seq``, with the WHERE clause of the partial
#: index that holds them, ``links_to_revision`` (SQLite uses a partial index only when the
#: query repeats its condition).
_EXACT_TREE_LINKS = "l.target_seq = :seq AND l.relation != 'votes_on'"


def _contained_arm(kind: str) -> str:
    """Objects of ``kind`` contained in the subject space, by creation (``objects_contents``)."""
    return (
        "SELECT created_sequence AS seq FROM objects"
        f" WHERE parent = :root AND parent != '' AND kind = '{kind}'"
    )


# Every revision of :root, oldest first: the first one (``objects``), then the later ones
# (``revisions_later``): two ordered ranges that SQLite merges without sorting.
_HISTORY_SEQUENCES = (
    "SELECT created_sequence AS sequence FROM objects WHERE created_sequence = :created"
    " UNION ALL SELECT sequence FROM revisions WHERE root = :root AND id != root"
    " ORDER BY sequence"
)
_HISTORY_IDS = (
    "SELECT root AS id, created_sequence AS sequence FROM objects"
    " WHERE created_sequence = :created"
    " UNION ALL SELECT id, sequence FROM revisions WHERE root = :root AND id != root"
    " ORDER BY sequence"
)


def _merged(arms: Sequence[str], descending: bool = False) -> str:
    """One ordered stream of first-revision sequences: SQLite merges the ordered arms."""
    return " UNION ".join(arms) + (" ORDER BY seq DESC" if descending else " ORDER BY seq")


def _page(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any], offset: int,
    limit: int = PAGE_SIZE, column: int = 0,
) -> SectionResult:
    """``limit`` sequences (the query's ``column``) from ``offset`` of an ordered query, and
    whether more follow."""
    rows = conn.execute(
        f"{sql} LIMIT :limit OFFSET :offset", {**params, "limit": limit + 1, "offset": offset}
    ).fetchall()
    return [r[column] for r in rows[:limit]], len(rows) > limit


def _heads(
    conn: sqlite3.Connection, first_sequences: Sequence[int], warm: Warm | None = None
) -> list[int]:
    """Current head sequences of the objects created at ``first_sequences``: one probe each of
    ``objects``' integer key (its rowid is the object's first sequence), their rows read ahead
    several at once by ``warm`` (``catalogue.Warm``) when given."""
    if warm is not None:
        warm("object_records", first_sequences)  # the rows and their heads' records at once
    if read_sql.asks_together(conn) and first_sequences:  # one statement, not one per object
        heads = dict(_by_key(conn, "SELECT created_sequence, head_sequence FROM objects"
                                   " WHERE created_sequence", first_sequences))
        return [heads[seq] for seq in first_sequences]
    out = []
    for seq in first_sequences:
        row = conn.execute(
            "SELECT head_sequence FROM objects WHERE created_sequence = ?", (seq,)
        ).fetchone()
        out.append(row[0])
    return out


def _by_key(conn: sqlite3.Connection, select: str, keys: Sequence[Any]) -> list[Any]:
    """The rows of ``select`` (ending in ``WHERE column``) whose column is one of ``keys``, by
    one statement: on PostgreSQL each statement is a round trip to the server, so a page's
    lookups are asked together rather than one by one as SQLite does in-process."""
    return conn.execute(f"{select} IN ({','.join('?' * len(keys))})", list(keys)).fetchall()


def _links_of(conn: sqlite3.Connection, sequence: int) -> list[tuple[str, str, int]]:
    """The links of the revision at ``sequence``, in order: relation, target revision id and
    the target's sequence."""
    return [
        (r[0], r[1], int(r[2])) for r in conn.execute(
            "SELECT relation, target, target_seq FROM links WHERE source_sequence = ?"
            " ORDER BY position", (sequence,),
        )
    ]


def _keys(subj: Subject) -> dict[str, Any]:
    """The parameters naming the subject in a section's SQL: its root (``:root``, for
    ``objects.parent`` and ``revisions.root``), requested revision (``:rev``), the object's
    ``objects`` key (``:owner``, for ``feed`` and the links' indexes) and the requested
    revision's sequence (``:seq``, for links naming it exactly)."""
    return {"root": subj.root, "rev": subj.rev, "owner": subj.created_sequence,
            "seq": subj.sequence}


def _next(offset: int, count: int, more: bool) -> int | None:
    return offset + count if more else None


# --- /api/objects/{revision} -----------------------------------------------------------------


@snapshot
def object_view(
    conn: sqlite3.Connection, store: Records, rev: str, section: str, offset: int,
    exact: bool,
) -> ObjectView | None:
    subj = subject(conn, rev)
    if subj is None:
        return None
    item_sequence = subj.sequence if exact else subj.head_sequence
    seqs, more = _SECTIONS[section](conn, subj, item_sequence, offset, exact, store.read_ahead)
    ancestors = _ancestors(conn, subj)
    # the item's, the original's, the ancestors' and the section's records, each on its own
    # pages, read by one call: the read-ahead fetches them together, rather than the reader
    # one after another (the first three are too few for a call of their own)
    wanted = [item_sequence, subj.created_sequence, *ancestors, *seqs]
    signed = store.signed_many(conn, wanted)
    if len(signed) == len(wanted):
        item, original = signed[:2]
        above, items = signed[2:2 + len(ancestors)], signed[2 + len(ancestors):]
    else:  # a sequence without a record (none is expected): left out, as by separate calls
        item, original = store.signed_many(conn, [item_sequence, subj.created_sequence])
        above, items = store.signed_many(conn, ancestors), store.signed_many(conn, seqs)
    return ObjectView(
        item=item,
        head=subj.head,
        original=original,
        ancestors=above,
        items=items,
        revisions=subj.revisions,
        next_offset=_next(offset, len(seqs), more),
    )


#: roots asked per statement when finding an object's ancestor spaces
ANCESTOR_CHUNK = 500


def _ancestors(conn: sqlite3.Connection, subj: Subject) -> list[int]:
    """Heads of the spaces above the object in its tree, outermost first.

    ``objects.ancestors`` names the object's near ancestors (``store/feed.py``: all of them
    but for a conversation deeper than ``feed.NEAR``); its spaces are the containment chain,
    plus the space a debate is about or a proposal is for.  A discussion or reply deeper than
    that in its tree also has the spaces marked in ``deep`` for its tree whose hang is its
    ancestor (``_far_spaces``).  Only the near ancestors outside the conversation are asked:
    a reply's conversation ancestors (up to ``feed.NEAR`` of them, each an ``objects`` row on a
    page of its own, read cold one after another) are discussions and replies, never spaces."""
    row = conn.execute(
        "SELECT ancestors, tree, cdepth FROM objects WHERE created_sequence = ?",
        (subj.created_sequence,)
    ).fetchone()
    keys = list(feed.Near.decode(row[0]).outside()) if row is not None else []
    if row is not None and row[1] and int(row[2]) > feed.NEAR:  # else every ancestor is near
        keys += _far_spaces(conn, int(row[1]), subj.created_sequence, int(row[2]))
    keys = list(dict.fromkeys(keys))
    # asked in chunks of ANCESTOR_CHUNK parameters (SQLite refuses more than 32,766 in one
    # statement, PostgreSQL 65,535); the spaces found are few (containment stops at 64 levels)
    spaces: list[tuple[int, int, int]] = []
    # SQLite would rather probe each row by its key (a page of its own, read cold) than the
    # small covering index of spaces
    spaces_only = read_sql.indexed_by(conn, "objects_spaces")
    for at in range(0, len(keys), ANCESTOR_CHUNK):
        chunk = keys[at:at + ANCESTOR_CHUNK]
        spaces += conn.execute(
            f"SELECT depth, created_sequence, head_sequence FROM objects{spaces_only}"
            f" WHERE created_sequence IN ({', '.join('?' * len(chunk))}) AND kind = 'space'",
            chunk,
        ).fetchall()
    return [head for _depth, _created, head in sorted(spaces)]


def _far_spaces(conn: sqlite3.Connection, tree: int, seq: int, node_depth: int) -> list[int]:
    """Spaces hanging from the discussions of ``tree`` that are the object's ancestors beyond
    its near list: the spaces marked deep in its tree, each tested by a level-ancestor query."""
    rows = conn.execute(
        "SELECT d.owner, d.hang, h.cdepth FROM deep d"
        " JOIN objects s ON s.created_sequence = d.owner"
        " JOIN objects h ON h.created_sequence = d.hang"
        " WHERE d.tree = ? AND s.kind = 'space' ORDER BY d.hang", (tree,),
    ).fetchall()
    positions = members.Positions(conn, members.Budget(None))
    return [
        int(owner) for owner, mark, depth in rows
        if positions.below(seq, node_depth, [members.DeepMark(int(mark), int(depth))])
    ]


def _section_all(
    conn: sqlite3.Connection, subj: Subject, _item: int, offset: int, _exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    """The whole tree below the object (``feed`` range), by creation, current heads."""
    trees = members.deep_trees(conn, subj.created_sequence)
    if trees:
        found = _deep_firsts(conn, subj, trees, offset + PAGE_SIZE + 1)
        firsts, more = found[offset:offset + PAGE_SIZE], len(found) > offset + PAGE_SIZE
        return _heads(conn, firsts, warm), more
    warmed = warm is not None and _warm_links(
        conn, _merged([f"SELECT sequence AS seq FROM {t} WHERE owner = :owner"
                       for t in FEED_TABLES]),
        {"owner": subj.created_sequence}, offset, warm)
    firsts, more = _page(conn, _merged(_FIRSTS_BELOW), {"owner": subj.created_sequence}, offset)
    return _heads(conn, firsts, None if warmed else warm), more


#: a root's feed rows: those moved into ``feed`` and the latest admissions' (store/feed.py)
FEED_TABLES = ("feed", "feed_recent")
# First revisions of the members below the object created at :owner within its feed rows
# (a range of each feed table, merged by ``_merged``): a feed row is a first revision's exactly
# when an ``objects`` row was created at its sequence (the probe ``_heads`` repeats, by the
# integer key, rather than one of ``revisions``)
_FIRSTS_BELOW = [
    f"SELECT f.sequence AS seq FROM {table} f JOIN objects o ON o.created_sequence = f.sequence"
    " WHERE f.owner = :owner AND o.created_sequence != :owner"
    for table in FEED_TABLES
]


def _deep_firsts(
    conn: sqlite3.Connection, subj: Subject, trees: dict[int, list[members.DeepMark]],
    want: int | None,
) -> list[int]:
    """First revisions of a deep root's members below it, ascending, at most ``want`` (all
    when ``None``): its ``feed`` rows merged with the members of its marked trees
    (``members.py``).  The work follows the number of first revisions read, as ``OFFSET``'s
    does for the other roots."""

    def near(after: int, n: int) -> list[tuple[int, int, int]]:
        return [(int(r[0]), 0, 0) for r in conn.execute(
            _merged([arm + " AND f.sequence > :after" for arm in _FIRSTS_BELOW]) + " LIMIT :n",
            {"owner": subj.created_sequence, "after": after, "n": n})]

    def tree_range(tree: int) -> members.ReadRange:
        def rows(after: int, n: int) -> list[tuple[int, int, int]]:
            return [(int(a), int(a), int(c)) for a, c in conn.execute(
                "SELECT r.sequence, o.cdepth FROM revisions r"
                " JOIN objects o ON o.created_sequence = r.sequence"
                " WHERE r.tree = :tree AND r.tree != 0 AND r.sequence > :after"
                " ORDER BY r.sequence LIMIT :n",
                {"tree": tree, "after": after, "n": n})]
        return rows

    ranges: list[tuple[members.ReadRange, list[members.DeepMark] | None]] = [(near, None)]
    ranges += [(tree_range(tree), marks) for tree, marks in trees.items()]
    positions = members.Positions(conn, members.Budget(None))
    found, _ = members.merge(ranges, 0, want if want is not None else 2**62, positions,
                             exclude=subj.created_sequence)
    return found


def _section_children(
    conn: sqlite3.Connection, subj: Subject, _item: int, offset: int, exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    """Current heads of the objects whose tree links name the subject, by creation: by the
    object, ranges of ``tree_heads`` give the heads themselves (``object_view`` then reads their
    records at once); exactly, each link's ``objects`` row gives its head, and those rows are
    read ahead first."""
    relations = CHILD_RELATIONS.get(subj.kind, ())
    if not relations:
        return [], False
    params = _keys(subj)
    if exact and warm is not None:
        _warm_exact_tree_links(conn, relations, params, offset, warm)
    return _page(conn, _merged(_tree_arms(relations, exact, heads=True)), params, offset,
                 column=1)


#: rows at most that ``_warm_links`` reads from an index: deep offsets are rare
WARM_LIMIT = 1_000
#: links (feed rows) read ahead beyond a page's: later revisions of its children carry tree
#: links too (and have feed rows)
TREE_LINK_SLACK = PAGE_SIZE // 5


def _warm_exact_tree_links(
    conn: sqlite3.Connection, relations: Sequence[str], params: dict[str, Any], offset: int,
    warm: Warm,
) -> None:
    """An exact ``_tree_arm`` probes ``objects`` once per link, in order, until the page is
    full, and a revision's children were created at scattered times: read ahead, several at
    once, the rows of the links it will probe first (the links from the index alone; a later
    revision's link probes a row that is not there, which costs the same page) and, for the
    page's links, their heads' records too, in the same round (``signed_many`` then finds them
    in memory).  ``TREE_LINK_SLACK`` links beyond the page's allow for later revisions'
    links."""
    arm = (
        f"SELECT l.source_sequence AS seq FROM links l WHERE {_EXACT_TREE_LINKS}"
        " AND l.relation IN ('" + "', '".join(relations) + "')"
    )
    _warm_links(conn, _merged([arm]), params, offset, warm)


def _warm_links(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any], offset: int, warm: Warm
) -> bool:
    """Read ahead the ``objects`` rows a page's query will probe, found by ``sql`` (sequences,
    in the page's order, from an index alone), and the heads' records of the page's own.
    Whether the page's were read (not beyond ``WARM_LIMIT`` rows): if not, ``_heads`` reads
    ahead the page's rows itself."""
    want = offset + PAGE_SIZE + 1 + TREE_LINK_SLACK
    limit = min(want, WARM_LIMIT)
    links = [r[0] for r in conn.execute(sql + " LIMIT :limit", {**params, "limit": limit})]
    if offset:
        warm("objects", links[:offset])  # OFFSET probes them; their records are not shown
    warm("object_records", links[offset:])
    return want <= WARM_LIMIT


def _section_history(
    conn: sqlite3.Connection, subj: Subject, _item: int, offset: int, _exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    """Every revision, oldest first."""
    return _page(conn, _HISTORY_SEQUENCES, {"root": subj.root, "created": subj.created_sequence},
                 offset)


def _discussion_arms(subj: Subject, exact: bool) -> list[str]:
    arms = []
    if subj.kind in ("claim", "space"):
        arms.append(_tree_arm("about", exact))
    if subj.kind in ("discussion", "reply"):
        arms.append(_tree_arm("branches_from", exact))
    if subj.kind == "space" and (not exact or subj.rev == subj.root):
        arms.append(_contained_arm("discussion"))
    return arms


def _section_discussions(
    conn: sqlite3.Connection, subj: Subject, _item: int, offset: int, exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    arms = _discussion_arms(subj, exact)
    if not arms:
        return [], False
    firsts, more = _page(conn, _merged(arms), _keys(subj), offset)
    return _heads(conn, firsts, warm), more


def _prefixed(
    prefix: list[int], offset: int, rest: Callable[[int, int], SectionResult]
) -> SectionResult:
    """A bounded list (an item's own links) followed by a paged query ``rest(offset, limit)``."""
    head = prefix[offset : offset + PAGE_SIZE]
    room = PAGE_SIZE - len(head)
    tail: list[int] = []
    more = False
    if room > 0:
        tail, more = rest(max(0, offset - len(prefix)), room)
    else:
        more = offset + PAGE_SIZE < len(prefix) or bool(rest(0, 0)[1])
    return head + tail, more


def _section_knowledge(
    conn: sqlite3.Connection, subj: Subject, item: int, offset: int, exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    params = _keys(subj)
    if subj.kind == "claim":
        arms = _tree_arms(("evidence_for", "assesses"), exact)
        return _page(conn, _merged(arms), params, offset)  # immutable: first revision is head
    if subj.kind != "space":
        return [], False
    included = [seq for r, _t, seq in _links_of(conn, item) if r == "includes"]
    if exact and subj.rev != subj.root:
        return included[offset : offset + PAGE_SIZE], offset + PAGE_SIZE < len(included)
    sql = _merged([_contained_arm("claim"), _contained_arm("document")])

    def contained(off: int, limit: int) -> SectionResult:
        firsts, more = _page(conn, sql, params, off, limit)
        return _heads(conn, firsts, warm), more

    return _prefixed(included, offset, contained)


def related_incoming(exact: bool) -> str:
    """The heads linking to the object (``:owner``), or to its revision ``:seq`` when
    ``exact``, by citation, includes, relationship or merge: through ``links_related``, or
    ``links_to_revision``."""
    where = (
        "l.target_seq = :seq AND l.relation != 'votes_on'" if exact
        else "l.target_owner = :owner"
    )
    return (
        "SELECT l.source_sequence AS seq FROM links l"
        " JOIN objects o ON o.head_sequence = l.source_sequence"
        f" WHERE {where} AND {related_link('l.relation')} AND o.created_sequence != :owner"
        " GROUP BY l.source_sequence ORDER BY l.source_sequence"
    )


def _section_related(
    conn: sqlite3.Connection, subj: Subject, item: int, offset: int, exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    """Exact targets of the item's links (but its containment: see ``ancestors``), then the
    current heads of other objects linking to it by citation, includes, relationship or merge
    (partial indexes ``links_related`` and, exact, ``links_to_revision``)."""
    outgoing: list[int] = []
    for relation, _target, target_seq in _links_of(conn, item):
        if relation != "contained_in" and target_seq not in outgoing:
            outgoing.append(target_seq)
    sql = related_incoming(exact)

    def incoming(off: int, limit: int) -> SectionResult:
        return _page(conn, sql, _keys(subj), off, limit)

    return _prefixed(outgoing, offset, incoming)


def _section_graph(
    conn: sqlite3.Connection, subj: Subject, item: int, offset: int, exact: bool,
    warm: Warm | None = None,
) -> SectionResult:
    """Relationships (immutable records keeping their exact endpoints) incident to the object,
    to one of its direct children, or to knowledge its item includes.  One probe of the small
    partial index ``links_relationships`` per endpoint, so the cost follows the number of
    direct children; a space's contained children come straight from ``objects_contents``."""
    relations = CHILD_RELATIONS.get(subj.kind, ())
    linked = [rel for rel in relations if rel != "contained_in"]
    endpoints = _tree_arms(linked, exact)
    if "contained_in" in relations and (not exact or subj.rev == subj.root):
        endpoints.append(
            "SELECT created_sequence FROM objects WHERE parent = :root AND parent != ''")
    endpoints.append(
        "SELECT target_owner FROM links WHERE source_sequence = :item AND relation = 'includes'"
    )
    if not exact:
        endpoints.append("SELECT :owner")
    by_endpoint = read_sql.indexed_by(conn, "links_relationships")
    arms = [
        f"SELECT l.source_sequence AS seq FROM links l{by_endpoint}"
        f" WHERE l.relation IN {RELATIONSHIP_LINKS}"
        f" AND l.target_owner IN ({' UNION ALL '.join(endpoints)})"
    ]
    if exact:
        arms.append(
            "SELECT l.source_sequence AS seq FROM links l"
            f" WHERE l.target_seq = :seq AND l.relation != 'votes_on'"
            f" AND l.relation IN {RELATIONSHIP_LINKS}"
        )
    # a relationship between two endpoints has two matching links: DISTINCT keeps it once
    sql = "SELECT DISTINCT seq FROM (" + " UNION ALL ".join(arms) + ") AS u ORDER BY seq"
    return _page(conn, sql, _keys(subj) | {"item": item}, offset)


def tree_children(
    conn: sqlite3.Connection, subj: Subject, relation: str, offset: int
) -> SectionResult:
    """Current heads of the objects whose ``relation`` tree link names the object (any of its
    revisions), by creation: one range of ``tree_heads``, as in ``children``."""
    return _page(conn, _merged([_tree_arm(relation, False, heads=True)]), _keys(subj), offset,
                 column=1)


_SECTIONS = {
    "all": _section_all,
    "children": _section_children,
    "related": _section_related,
    "history": _section_history,
    "graph": _section_graph,
    "discussions": _section_discussions,
    "knowledge": _section_knowledge,
}
assert tuple(_SECTIONS) == SECTIONS


# --- /api/entries/{revision}/connections -----------------------------------------------------


@snapshot
def connections(conn: sqlite3.Connection, rev: str, offset: int) -> Connections | None:
    """The entry's own links; the links naming exactly this revision that the current head of
    another object holds, in admission order (``links_to_revision``: votes are not indexed); the
    object's revision ids, oldest first.  ``offset`` pages incoming and history together."""
    subj = subject(conn, rev)
    if subj is None:
        return None
    rows = conn.execute(
        "SELECT r.id, l.relation, r.title FROM links l"
        " JOIN objects o ON o.head_sequence = l.source_sequence"
        " JOIN revisions r ON r.sequence = l.source_sequence"
        " WHERE l.target_seq = :seq AND l.relation != 'votes_on'"
        " ORDER BY l.source_sequence, l.position LIMIT :limit OFFSET :offset",
        {"seq": subj.sequence, "limit": PAGE_SIZE + 1, "offset": offset},
    ).fetchall()
    history, more_history = _page(
        conn, _HISTORY_IDS, {"root": subj.root, "created": subj.created_sequence}, offset)
    return Connections(
        outgoing=[{"relation": r, "target": t} for r, t, _s in _links_of(conn, subj.sequence)],
        incoming=[Incoming(*row) for row in rows[:PAGE_SIZE]],
        history=[str(h) for h in history],
        history_total=subj.revisions,
        next_offset=offset + PAGE_SIZE if len(rows) > PAGE_SIZE or more_history else None,
    )


# --- /api/entries/{revision}/discussion ------------------------------------------------------


def _conversation_arms(subj: Subject) -> list[str]:
    """First revisions of the conversation around an object.

    A discussion or reply: its thread, every reply and branch below it (the ``feed`` range,
    which only replies and discussions can enter below a discussion).  A claim or space: the
    discussions about it, and for a space those contained in it.  Nothing else can be
    discussed: ``about`` names claims and spaces, replies name discussions and replies."""
    if subj.kind in ("discussion", "reply"):
        return list(_FIRSTS_BELOW)
    return _discussion_arms(subj, exact=False) if subj.kind in ("claim", "space") else []


@snapshot
def discussion(
    conn: sqlite3.Connection, store: Records, rev: str, sort: str, offset: int
) -> Discussion | None:
    subj = subject(conn, rev)
    if subj is None:
        return None
    arms = _conversation_arms(subj)
    if not arms:
        return Discussion([], 0, None)
    trees = members.deep_trees(conn, subj.created_sequence) \
        if subj.kind in ("discussion", "reply") else {}
    if trees:
        return _deep_discussion(conn, store, subj, trees, sort, offset)
    params = _keys(subj)
    total = int(conn.execute(
        "SELECT count(*) FROM (" + " UNION ".join(arms) + ") AS u", params
    ).fetchone()[0])
    if sort == "top":
        page, more = _top(conn, arms, params, offset)
    else:
        page, more = _page(conn, _merged(arms, descending=sort == "new"), params, offset)
    return Discussion(
        store.signed_many(conn, _heads(conn, page, store.read_ahead)), total,
        _next(offset, len(page), more),
    )


def _top(
    conn: sqlite3.Connection, arms: Sequence[str], params: dict[str, Any], offset: int
) -> SectionResult:
    """The conversation ranked as the catalogue's ``sort=top`` ranks: the host-projected vote
    score of each head (``catalogue.score``, kept at admission by ``search_index``), highest
    first, ties by the newest head.  One sort of the conversation, whose size bounds the cost."""
    sql = (
        "SELECT u.seq FROM (" + " UNION ".join(arms) + ") u"
        " JOIN objects o ON o.created_sequence = u.seq"
        " LEFT JOIN catalogue c ON c.seq = o.head_sequence"
        " ORDER BY coalesce(c.score, 0) DESC, o.head_sequence DESC"
    )
    return _page(conn, sql, params, offset)


def _deep_discussion(
    conn: sqlite3.Connection, store: Records, subj: Subject,
    trees: dict[int, list[members.DeepMark]], sort: str, offset: int,
) -> Discussion:
    """The conversation below a deep discussion or reply, in the orders of ``discussion``:
    its exact total needs every member, so the whole conversation is read (as ``count(*)``
    reads it for the other roots) and ordered here."""
    found = _deep_firsts(conn, subj, trees, None)
    if sort == "new":
        found.reverse()
    elif sort == "top":
        ranked: list[tuple[int, int, int]] = []
        for at in range(0, len(found), ANCESTOR_CHUNK):
            chunk = found[at:at + ANCESTOR_CHUNK]
            ranked += [(int(s), int(h), int(c)) for s, h, c in conn.execute(
                "SELECT o.created_sequence, o.head_sequence, coalesce(c.score, 0) FROM objects o"
                " LEFT JOIN catalogue c ON c.seq = o.head_sequence"
                f" WHERE o.created_sequence IN ({', '.join('?' * len(chunk))})", chunk)]
        found = [s for s, _h, _c in sorted(ranked, key=lambda r: (-r[2], -r[1]))]
    page = found[offset:offset + PAGE_SIZE]
    more = len(found) > offset + PAGE_SIZE
    return Discussion(
        store.signed_many(conn, _heads(conn, page, store.read_ahead)), len(found),
        _next(offset, len(page), more),
    )
