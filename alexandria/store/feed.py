"""Feed membership: which roots' feeds hold a revision, at a cost per admission that does not
grow with the depth of a conversation.

The feed of a root R (``/api/changes``, ``section=all``, a conversation's ``discussion``) is
every revision of R and of every object below R through feed relations (``FEED_RELATIONS``).
The state rules shape that graph (rules/state.py, step 8b):

* a reply has exactly one ``replies_to``/``answers`` link, to a discussion or reply; a
  discussion at most one ``branches_from`` (discussion or reply), one ``about`` (claim or space)
  and one ``contained_in`` (space); every other kind has at most one feed parent, never a
  discussion or reply, and containment stops at ``MAX_DEPTH`` levels.

So discussions and replies form a forest of *conversation trees* (each has at most one
conversation parent), hanging off a forest of bounded depth (everything else) through the
discussions' ``about``/``contained_in`` links.  Only conversation depth is unbounded, and a
naive encoding (one ``feed`` row per ancestor per revision) costs a reply at depth d d rows.

The encoding here:

* **Near ancestors** (``objects.ancestors``, ``feed`` rows): a revision writes one ``feed`` row
  for each ancestor of its object reached through at most ``NEAR`` conversation edges: its
  conversation ancestors up to ``NEAR`` levels up and the non-conversation ancestors of the
  discussions among them (and of itself).  A non-conversation object keeps all its ancestors
  (at most ``MAX_DEPTH`` + 2).  ``objects.ancestors`` lists them as tokens: ``s`` (reached
  through no conversation edge), ``s:d`` (a non-conversation ancestor of the discussion d
  levels up) and ``s/d`` (the conversation ancestor d levels up), so a child's list is its
  parent's shifted by one level and cut at ``NEAR``: constant work, constant size.
* **Integer keys**: an ancestor is named by its ``objects`` key ``s`` (the sequence of its
  first revision), in the near lists and as the ``owner`` of ``feed`` and ``deep`` rows, never
  by its 64-hex root.  A ``feed`` row is then ~12 bytes instead of ~75: at 1,000,000 entries
  the table is ~6× smaller, so the rows an admission adds at random owners dirty fewer pages
  and the writer's cache holds more of them, a feed is read from fewer pages, and an
  object's ancestors are probes of ``objects``' integer key.
* **Conversation positions** (``objects.tree``, ``cdepth``, ``cparent``, ``jump``; zero for
  other kinds): the tree's top (its first sequence), the depth in the tree, the conversation
  parent and a skew-binary jump pointer (Myers 1983), so that the ancestor of a node at a given
  depth (a *level-ancestor* query) takes O(log depth) probes of ``objects``' integer key.
  ``revisions.tree`` (partial index ``revisions_tree``) lists a tree's revisions in order.
* **Deep marks** (``deep(owner, tree, hang)``): when an object is created more than ``NEAR``
  conversation edges below a node P (P = its ancestor ``NEAR`` + 1 levels up), the feed of P
  and of P's own non-conversation ancestors (when P is a discussion) misses it.  P is marked
  once: rows ``(P, tree, P)`` and ``(A, tree, P)`` for each such A.  Every conversation
  ancestor of P was marked before (P's parent was marked when the new object's parent was
  created), so the marks are upward closed and each admission marks at most one node: a
  constant number of rows.

* **Recent rows** (``feed_recent``, SQLite): a revision's ``feed`` rows go first into a small
  table of the same shape, and each write transaction moves one range of owners (``1/MERGE_ROUNDS``
  of the ``objects`` keys, in turn) from it into ``feed`` (``merge_recent``).  The rows an
  admission adds land at scattered owners; written straight into ``feed`` each of them would dirty
  a page of that table, the most of any table once the library outgrows memory
  (docs/decisions/0003-staged-feed-rows.md).  Staged, they dirty pages of a table of about
  ``MERGE_ROUNDS`` batches' rows, and ``feed`` takes each owner's rows of those ``MERGE_ROUNDS``
  batches in one sorted run instead of one per batch (how many rows a range holds varies: the first
  objects, the library's early spaces, own most rows).  A root's feed rows are those of both tables
  (every read takes both ranges).  PostgreSQL writes ``feed`` directly: its ``feed_recent`` stays
  empty.

A root R's feed is then: its own revisions, its ``feed`` rows, and for each ``(tree, hang)``
mark of R the revisions of that tree whose object has ``hang`` as an ancestor-or-self (one
level-ancestor query per distinct hang depth); ``reads/members.py`` merges them.  A root with no
mark (every root of a library without a conversation deeper than ``NEAR``) reads exactly as
before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import orjson

from alexandria.core.cache import Bounded
from alexandria.rules.state import FEED_RELATIONS
from alexandria.store.postgresql import is_postgresql
from alexandria.store.schema import revision_id

#: Conversation edges through which a revision still writes ``feed`` rows.  Tests lower it to
#: exercise deep conversations cheaply; the layout recorded in ``meta`` names it, and a library
#: written with another value is rebuilt when opened (``ensure_layout``).
NEAR = 64
LAYOUT = "near-conversation-2"  # 2: ancestors and owners by ``objects`` key
CONVERSATION = frozenset(("discussion", "reply"))
#: the links naming a conversation parent, by kind of the child
CONVERSATION_LINKS = frozenset(("replies_to", "answers", "branches_from"))
LIMIT = 20_000  # entries of each writer cache
#: ``merge_recent`` moves 1/MERGE_ROUNDS of the owners' recent rows per write transaction: a row
#: waits at most MERGE_ROUNDS + 1 transactions, and ``feed_recent`` holds about MERGE_ROUNDS
#: batches' rows
MERGE_ROUNDS = 32


#: every feed row, in either table (checks and tests; the reads take each table's range)
ROWS = "(SELECT owner, sequence FROM feed UNION ALL SELECT owner, sequence FROM feed_recent)"


def layout() -> str:
    """The ``meta`` value ``feed_layout`` of a library written with this module's ``NEAR``."""
    return f"{LAYOUT}/{NEAR}"


@dataclass(frozen=True)
class Near:
    """An object's near ancestors: their ``objects`` keys (the sequences of their first
    revisions), the conversation edges through which each is reached (0: none), and whether
    each is a conversation ancestor (``seq/d``) rather than the non-conversation ancestor of a
    discussion (``seq:d``)."""

    seqs: tuple[int, ...]
    levels: tuple[int, ...]
    conversation: tuple[bool, ...]

    def encode(self) -> str:
        return " ".join(
            str(s) if d == 0 else f"{s}{'/' if c else ':'}{d}"
            for s, d, c in zip(self.seqs, self.levels, self.conversation, strict=True)
        )

    @staticmethod
    def decode(text: str) -> Near:
        seqs: list[int] = []
        levels: list[int] = []
        conv: list[bool] = []
        for token in text.split():
            seq, sep, level = token.partition("/")
            if not sep:
                seq, sep, level = token.partition(":")
            seqs.append(int(seq))
            levels.append(int(level) if sep else 0)
            conv.append(sep == "/")
        return Near(tuple(seqs), tuple(levels), tuple(conv))

    def base(self) -> tuple[int, ...]:
        """The ancestors reached through no conversation edge: a discussion's own
        non-conversation ancestors (all of a non-conversation object's ancestors)."""
        return tuple(s for s, d in zip(self.seqs, self.levels, strict=True) if d == 0)

    def outside(self) -> tuple[int, ...]:
        """The ancestors that are not conversation nodes (spaces, claims): every near ancestor
        but the conversation ancestors (``seq/d``), which are discussions and replies."""
        return tuple(s for s, c in zip(self.seqs, self.conversation, strict=True) if not c)


EMPTY = Near((), (), ())


@dataclass(frozen=True)
class Node:
    """A conversation node's position: ``seq`` its first sequence (``objects`` key), its
    ``depth`` in its ``tree``, its conversation ``parent`` and its skew-binary
    ``jump_pointer`` (the columns ``cdepth``, ``cparent`` and ``jump`` of ``objects``)."""

    seq: int
    tree: int
    depth: int
    parent: int
    jump_pointer: int


@dataclass(frozen=True)
class Placement:
    """What a new object's creation writes: its near ancestors, its position (``None``: not a
    conversation node) and the node to mark deep (its ``objects`` key; ``None``: nothing)."""

    near: Near
    node: Node | None
    mark: int | None


_NODE = "SELECT created_sequence, tree, cdepth, cparent, jump FROM objects"


def _node(row: Sequence[int] | None) -> Node | None:
    return None if row is None else Node(*(int(x) for x in row))


class FeedCache:
    """The writer's memory of objects' keys, near lists and conversation positions (all of
    constant size per object: nothing cached grows with depth)."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.seqs: Bounded[str, int] = Bounded(limit)
        self.near: Bounded[int, Near] = Bounded(limit)
        self.nodes: Bounded[int, Node] = Bounded(limit)

    def seq_of(self, conn: sqlite3.Connection, root: str) -> int:
        """The ``objects`` key of the object ``root`` (the sequence of its first revision)."""
        found = self.seqs.get(root)
        if found is None:
            row = conn.execute(f"SELECT sequence FROM revisions WHERE {revision_id('?')}",
                               (root, root)).fetchone()
            assert row is not None, root
            found = self.seqs[root] = int(row[0])
        return found

    def near_of(self, conn: sqlite3.Connection, seq: int) -> Near:
        found = self.near.get(seq)
        if found is None:
            row = conn.execute(
                "SELECT ancestors FROM objects WHERE created_sequence = ?", (seq,)
            ).fetchone()
            found = Near.decode(row[0]) if row is not None else EMPTY
            self.near[seq] = found
        return found

    def node(self, conn: sqlite3.Connection, seq: int) -> Node:
        found = self.nodes.get(seq)
        if found is None:
            found = _node(conn.execute(f"{_NODE} WHERE created_sequence = ?", (seq,)).fetchone())
            assert found is not None, seq
            self.nodes[seq] = found
        return found

    def remember(self, root: str, seq: int, near: Near, node: Node | None) -> None:
        self.seqs[root] = seq
        self.near[seq] = near
        if node is not None:
            self.nodes[seq] = node


def place(
    conn: sqlite3.Connection, cache: FeedCache, kind: str, sequence: int,
    parents: Iterable[tuple[str, str]],
) -> Placement:
    """A new object's near ancestors, position and deep mark; ``parents``: its feed links as
    ``(relation, target root)``."""
    merged: dict[int, tuple[int, bool]] = {}

    def add(seq: int, level: int, conv: bool) -> None:
        seen = merged.get(seq)
        if seen is None or level < seen[0]:
            merged[seq] = (level, conv)

    conv_parent: int | None = None
    for relation, root in parents:
        seq = cache.seq_of(conn, root)
        if relation in CONVERSATION_LINKS:
            conv_parent = seq
            continue
        add(seq, 0, False)
        for s in cache.near_of(conn, seq).base():
            add(s, 0, False)
    node: Node | None = None
    mark: int | None = None
    if conv_parent is not None:
        above = cache.near_of(conn, conv_parent)
        add(conv_parent, 1, True)
        for s, d, c in zip(above.seqs, above.levels, above.conversation, strict=True):
            if d + 1 <= NEAR:
                add(s, d + 1, c)
            elif c:
                mark = s  # the conversation ancestor NEAR + 1 levels up
        p = cache.node(conn, conv_parent)
        j = cache.node(conn, p.jump_pointer)
        jj = cache.node(conn, j.jump_pointer)
        jump_pointer = jj.seq if p.depth - j.depth == j.depth - jj.depth else p.seq
        node = Node(sequence, p.tree, p.depth + 1, p.seq, jump_pointer)
    elif kind in CONVERSATION:
        node = Node(sequence, sequence, 0, 0, sequence)
    items = list(merged.items())
    near = Near(tuple(s for s, _ in items), tuple(v[0] for _, v in items),
                tuple(v[1] for _, v in items))
    return Placement(near, node, mark)


def write_rows(conn: sqlite3.Connection, near: Near, sequence: int) -> None:
    """The feed rows of one revision, one per near ancestor of its object: into
    ``feed_recent`` (SQLite, moved into ``feed`` by ``merge_recent``) or ``feed``."""
    table = "feed" if is_postgresql(conn) else "feed_recent"
    conn.executemany(
        f"INSERT INTO {table}(owner, sequence) VALUES (?, ?)", [(s, sequence) for s in near.seqs]
    )


def merge_recent(conn: sqlite3.Connection, start: int, keys: int) -> int:
    """Move the rows of ``feed_recent`` whose owners are in ``[start, start + step)`` into
    ``feed``, ``step`` being 1/``MERGE_ROUNDS`` of the ``keys`` (the log's size) objects keys could
    be; the start of the next range (0 once the range passed the last key).  Inside the
    writer's transaction, once per transaction: every row moves within ``MERGE_ROUNDS`` + 1
    transactions of its own, and the rows go into ``feed`` in its order, each owner's as one
    run at its end."""
    step = max(1, -(-keys // MERGE_ROUNDS))
    end = start + step
    bounds = (start, end)
    conn.execute(
        "INSERT OR IGNORE INTO feed(owner, sequence) SELECT owner, sequence FROM feed_recent"
        " WHERE owner >= ? AND owner < ? ORDER BY owner, sequence", bounds,
    )
    conn.execute("DELETE FROM feed_recent WHERE owner >= ? AND owner < ?", bounds)
    return 0 if end > keys else end


def mark_deep(conn: sqlite3.Connection, cache: FeedCache, seq: int) -> None:
    """Mark the conversation node created at ``seq`` and, when it is a discussion, its own
    non-conversation ancestors, as having members beyond their ``feed`` rows in its tree.  A
    node is marked once; the marks stay upward closed (see the module docstring)."""
    node = cache.node(conn, seq)
    if conn.execute(
        "SELECT 1 FROM deep WHERE owner = ? AND tree = ? AND hang = ?", (seq, node.tree, seq)
    ).fetchone() is not None:
        return
    conn.executemany(
        "INSERT INTO deep(owner, tree, hang) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        [(s, node.tree, seq) for s in (seq, *cache.near_of(conn, seq).base())],
    )


def level_ancestor(node: Callable[[int], Node], seq: int, depth: int) -> int:
    """The ancestor-or-self at conversation depth ``depth`` of the node created at ``seq``
    (whose depth is at least ``depth``), in O(log depth) calls of ``node``."""
    at = node(seq)
    while at.depth > depth:
        jumped = node(at.jump_pointer)
        at = jumped if jumped.depth >= depth else node(at.parent)
    return at.seq


# --- carrying a library of an earlier layout over ------------------------------------------


def ensure_layout(conn: sqlite3.Connection) -> bool:
    """Rebuild ``feed``, ``deep``, the near lists and positions when the library was written
    with another layout (an earlier version, or another ``NEAR``), inside the caller's write
    transaction; whether it rebuilt."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'feed_layout'").fetchone()
    if row is not None and row[0] == layout():
        return False
    rebuilt = conn.execute("SELECT 1 FROM objects LIMIT 1").fetchone() is not None
    if rebuilt:
        rebuild(conn)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('feed_layout', ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (layout(),),
    )
    return rebuilt


def rebuild(conn: sqlite3.Connection) -> None:
    """Recompute every object's near list and position, the deep marks and every ``feed`` row
    from ``objects``, ``revisions`` and the objects' feed links, in creation order (a parent
    is always created before its children), with the admission code's own functions."""
    conn.execute("DELETE FROM feed")
    conn.execute("DELETE FROM feed_recent")
    conn.execute("DELETE FROM deep")
    cache = FeedCache(limit=200_000)
    last = 0
    while True:  # keyset pages: never the whole table in memory
        objects = conn.execute(
            "SELECT created_sequence, root, kind, feed_links FROM objects"
            " WHERE created_sequence > ? ORDER BY created_sequence LIMIT 2000", (last,)
        ).fetchall()
        if not objects:
            break
        for seq, root, kind, links in objects:
            parents = []
            for relation, target in orjson.loads(links):
                if relation in FEED_RELATIONS:
                    found = conn.execute(
                        f"SELECT root FROM revisions WHERE {revision_id('?')}", (target, target)
                    ).fetchone()
                    parents.append((relation, str(found[0])))
            placed = place(conn, cache, kind, int(seq), parents)
            conn.execute(
                "UPDATE objects SET ancestors = ?, tree = ?, cdepth = ?, cparent = ?, jump = ?"
                " WHERE created_sequence = ?",
                (placed.near.encode(), *position(placed.node), seq),
            )
            cache.remember(root, int(seq), placed.near, placed.node)
            if placed.mark is not None:
                mark_deep(conn, cache, placed.mark)
        last = int(objects[-1][0])
    conn.execute("UPDATE revisions SET tree = 0 WHERE tree != 0")
    conn.execute(
        "UPDATE revisions SET tree = (SELECT o.tree FROM objects o WHERE o.created_sequence ="
        f" (SELECT f.sequence FROM revisions f WHERE {revision_id('revisions.root', 'f.id')}))"
        " WHERE kind IN ('discussion', 'reply')"
    )
    last = 0
    while True:
        chunk = conn.execute(
            "SELECT sequence, root FROM revisions WHERE sequence > ? ORDER BY sequence"
            " LIMIT 2000", (last,)
        ).fetchall()
        if not chunk:
            break
        rows = [(owner, s) for s, root in chunk
                for owner in cache.near_of(conn, cache.seq_of(conn, root)).seqs]
        conn.executemany("INSERT INTO feed(owner, sequence) VALUES (?, ?)", rows)
        last = int(chunk[-1][0])


def position(node: Node | None) -> tuple[int, int, int, int]:
    """``objects``' (tree, cdepth, cparent, jump): zeros for an object outside conversations."""
    if node is None:
        return (0, 0, 0, 0)
    return (node.tree, node.depth, node.parent, node.jump_pointer)
