"""The members of a *deep* root's feed: those its ``feed`` rows miss (``store/feed.py``).

A root R is deep when a conversation below it reaches more than ``feed.NEAR`` levels beneath R
(or beneath a discussion hanging from R): ``deep`` then names, per conversation tree, the
marked nodes (its ``hang`` column; :class:`DeepMark` here) below which every node of the tree
belongs to R's feed.  R's members are its own
revisions and its ``feed`` rows (what every root reads, ``own_and_near``) merged, in admission
order and without duplicates, with the revisions of each marked tree whose object has a marked node
as an ancestor-or-self: a tree's revisions come in order from ``revisions_tree`` (from its first
marked node on: nothing created before a node is below it), and each object is tested with one
level-ancestor query per distinct depth of a marked node (``feed.level_ancestor``, O(log depth)
probes of ``objects``' integer key, remembered for the call).

Every index entry and probe is counted against a ``budget`` when the caller has one
(``/api/changes``' scan bound): a call that spends it stops after the sequence it was deciding,
and says up to where it decided, so that its cursor goes past the scanned range and never
leaves a gap or repeats an item.  The work of a call is at most its budget plus one batch.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from alexandria.store.feed import Node, level_ancestor

BATCH = 64  # index entries fetched per statement from one range


@dataclass(frozen=True)
class DeepMark:
    """A node of a conversation tree marked in ``deep`` (its ``objects`` key and depth): every
    node below it belongs to the owner's feed."""

    seq: int
    depth: int


def deep_trees(conn: sqlite3.Connection, owner: int) -> dict[int, list[DeepMark]]:
    """The conversation trees where the feed of the object created at ``owner`` has members
    beyond its ``feed`` rows, and their marked nodes (empty for every root of a library without a
    conversation deeper than ``feed.NEAR``: one probe of the primary key of ``deep``)."""
    trees: dict[int, list[DeepMark]] = {}
    for tree, mark, node_depth in conn.execute(
        "SELECT d.tree, d.hang, o.cdepth FROM deep d JOIN objects o ON o.created_sequence = d.hang"
        " WHERE d.owner = ? ORDER BY d.tree, d.hang", (owner,),
    ):
        trees.setdefault(int(tree), []).append(DeepMark(int(mark), int(node_depth)))
    return trees


@dataclass
class Budget:
    """Index entries and probes a call may still spend (``None``: unbounded)."""

    left: int | None

    def spend(self, n: int = 1) -> None:
        if self.left is not None:
            self.left -= n

    @property
    def spent(self) -> bool:
        return self.left is not None and self.left <= 0


@dataclass
class Positions:
    """Conversation positions read during one call, each probe counted once."""

    conn: sqlite3.Connection
    budget: Budget
    known: dict[int, Node] = field(default_factory=dict)

    def node(self, seq: int) -> Node:
        found = self.known.get(seq)
        if found is None:
            row = self.conn.execute(
                "SELECT created_sequence, tree, cdepth, cparent, jump FROM objects"
                " WHERE created_sequence = ?", (seq,),
            ).fetchone()
            found = Node(*(int(x) for x in row))
            self.known[seq] = found
            self.budget.spend()
        return found

    def below(self, seq: int, node_depth: int, marks: list[DeepMark]) -> bool:
        """Whether the object created at ``seq`` (at ``node_depth``) has a marked node as an
        ancestor-or-self."""
        wanted: dict[int, set[int]] = {}
        for h in marks:
            if h.depth == 0:
                return True  # the tree's top: everything in the tree is below it
            if h.depth <= node_depth:
                wanted.setdefault(h.depth, set()).add(h.seq)
        return any(
            level_ancestor(self.node, seq, depth) in seqs for depth, seqs in wanted.items()
        )


# A range: ``fetch(after, n)`` returns up to n (sequence, object's first sequence, cdepth)
# after ``after``, ascending; ``marks`` None means every row is a member.
ReadRange = Callable[[int, int], list[tuple[int, int, int]]]


@dataclass
class _Range:
    fetch: ReadRange
    marks: list[DeepMark] | None
    rows: list[tuple[int, int, int]] = field(default_factory=list)
    at: int = 0
    done: bool = False


def merge(ranges: list[tuple[ReadRange, list[DeepMark] | None]], after: int, want: int,
          positions: Positions, exclude: int = -1) -> tuple[list[int], int | None]:
    """Members ascending after ``after``: at most ``want`` of them, and the last sequence up to
    which everything was decided (``None``: every range was read to its end).  ``exclude``: a
    sequence never counted as a member (the root's own first revision, for object views)."""
    budget = positions.budget
    state = [_Range(fetch, marks) for fetch, marks in ranges]
    heap: list[tuple[int, int]] = []

    def refill(i: int, last: int) -> None:
        r = state[i]
        if r.at >= len(r.rows):
            if r.done:
                return
            r.rows = r.fetch(last, BATCH)
            r.at = 0
            budget.spend(len(r.rows) or 1)
            if len(r.rows) < BATCH:
                r.done = True
            if not r.rows:
                return
        heapq.heappush(heap, (r.rows[r.at][0], i))

    for i, r in enumerate(state):
        # a marked node's members were created after it: a tree is read from its first mark on
        refill(i, after if r.marks is None else max(after, min(h.seq for h in r.marks) - 1))
    found: list[int] = []
    decided: int | None = None
    while heap and len(found) < want:
        if decided is not None and budget.spent:
            return found, decided
        seq = heap[0][0]
        member = False
        while heap and heap[0][0] == seq:
            _s, i = heapq.heappop(heap)
            r = state[i]
            _seq, first, node_depth = r.rows[r.at]
            r.at += 1
            if not member and seq != exclude:
                member = r.marks is None or positions.below(first, node_depth, r.marks)
            refill(i, seq)
        if member:
            found.append(seq)
        decided = seq
    if len(found) == want:
        return found, found[-1]
    return found, None
