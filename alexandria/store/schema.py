"""Every table of a library's SQLite database.

The store owns its tables (as Tessera's drivers own ``schema.sql``): the ledger (log, Merkle
nodes, revisions, objects, links, votes, authorities, revocations, feed), the log's signed
checkpoints, personal lists and the catalogue's derived indexes are all declared here, and
nothing above the store declares or alters a table.  ``TABLES`` is the baseline layout, version
1 of ``store/migrations.py``, which creates it in a new database and records its version.  A
database of an earlier leaf format (before leaves committed to their admission times, PROTOCOL
§7) is refused (``check_leaf_format``) — there were no deployments to carry over.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alexandria.core.leaf import LEAF_FORMAT
from alexandria.errors import Failed
from alexandria.rules.state import FEED_RELATIONS

#: Relations of an object's ``related`` section: anything but tree links and votes: the
#: condition of the partial index ``links_related`` in the baseline layout (``TABLES``) and in
#: PostgreSQL's; ``related_link`` says it for SQLite's since version 2.  SQLite uses a partial
#: index only when the query repeats its condition (``reads/objects.py``).
_NOT_RELATED = (*FEED_RELATIONS, "votes_on")
NOT_RELATED = "('" + "', '".join(_NOT_RELATED) + "')"


def related_link(column: str = "relation") -> str:
    """``column NOT IN NOT_RELATED`` as ``column != 'a' AND column != 'b' …``: the condition of
    ``links_related`` from schema version 2 on (``store/migrations.py``).  SQLite evaluates a
    partial index's ``NOT IN (…)`` by filling a temporary table with the list at every insert
    into ``links`` (~4 µs a link); the comparisons cost nothing.  PostgreSQL keeps ``NOT IN``
    in its index and proves it from these comparisons."""
    return " AND ".join(f"{column} != '{r}'" for r in _NOT_RELATED)


#: schema version 2: ``links_related`` on ``related_link``'s condition
LINKS_RELATED_COMPARED = f"""
DROP INDEX IF EXISTS links_related;
CREATE INDEX links_related ON links(target_owner, source_sequence) WHERE {related_link()};
"""

#: Tree links (the relations of a feed): those ``tree_heads`` holds (``TREE_HEADS_ROWS``).
TREE_LINKS = "('" + "', '".join(FEED_RELATIONS) + "')"

# One row per revision, in admission order.  A revision is found by its id through
# ``revisions_id``, an index of the id's first 16 hex digits (64 bits) rather than of all 64
# (``revision_id``): its entries are ~25 bytes instead of ~75, so at 1,000,000 entries the index
# every admission writes a leaf of (at a random place: ids are hashes) is ~3x smaller, and
# holds fewer levels and pages for the writer's cache and a cold lookup to read.
# Ids sharing a prefix are told apart by the whole id, compared in the row: nothing anyone
# chooses to publish can make a lookup find the wrong revision or refuse one.
_REVISIONS = """
CREATE TABLE IF NOT EXISTS {name}(
    sequence INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    root TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    authored_at TEXT NOT NULL,
    title TEXT NOT NULL,
    record_length INTEGER NOT NULL,
    authority_seq INTEGER NOT NULL,
    tree INTEGER NOT NULL DEFAULT 0
);
"""
#: The columns of ``revisions``, in the order ``_REVISIONS`` declares them.
REVISION_COLUMNS = ("sequence", "id", "root", "kind", "author", "authored_at", "title",
                    "record_length", "authority_seq", "tree")


def revision_id(value: str, column: str = "id") -> str:
    """The SQL condition naming the ``revisions`` row whose ``column`` (``f.id`` under an
    alias) is ``value`` — a column, or an SQL parameter, which the condition names twice (a
    ``?`` is bound twice) — through the index of id prefixes ``revisions_id``.  PostgreSQL
    indexes whole ids (``UNIQUE``) and finds the row by the second half of the condition.

    The ``CAST``: given ``id = ?``, SQLite's constant propagation would rewrite
    ``substr(id, 1, 16)`` into ``substr(?, 1, 16)``, which no index matches (a full scan); it
    leaves a column alone when the value it equals has an affinity of its own."""
    return (f"substr({column}, 1, 16) = substr({value}, 1, 16)"
            f" AND {column} = CAST({value} AS TEXT)")


# One row per object, in creation order: the rowid is the sequence of its first revision, so a
# new object appends to the table instead of splitting a page of rows keyed by a random root.
# No index of roots: an object's root is its first revision's id, whose sequence the index of
# revision ids already gives (``object_row``); a second B-tree keyed by the same 64-hex values
# cost every new object one more dirty leaf page and every lookup one more leaf read.
# ``ancestors``: the object's *near* ancestors, whose ``feed`` rows its revisions write;
# ``tree``, ``cdepth``, ``cparent``, ``jump``: a discussion's or reply's position in its
# conversation tree (zeros for other kinds).  Both are ``store/feed.py``'s encoding of feed
# membership.
_OBJECTS = """
CREATE TABLE IF NOT EXISTS {name}(
    created_sequence INTEGER PRIMARY KEY,
    root TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    head TEXT NOT NULL,
    head_sequence INTEGER NOT NULL,
    revisions INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    parent TEXT NOT NULL,
    vote_target TEXT NOT NULL,
    feed_links TEXT NOT NULL,
    ancestors TEXT NOT NULL DEFAULT '',
    tree INTEGER NOT NULL DEFAULT 0,
    cdepth INTEGER NOT NULL DEFAULT 0,
    cparent INTEGER NOT NULL DEFAULT 0,
    jump INTEGER NOT NULL DEFAULT 0
);
"""
_OBJECT_INDEXES = """
CREATE INDEX IF NOT EXISTS objects_head_sequence ON objects(head_sequence);
CREATE INDEX IF NOT EXISTS objects_contents ON objects(parent, kind, created_sequence)
    WHERE parent != '';
-- the spaces, covering what an object's view asks of its ancestors (``reads/objects``: the
-- containment chain's depths and heads); ~90 pages at 1,000,000 entries, which stay cached,
-- where each space's ``objects`` row is on a page of its own
CREATE INDEX IF NOT EXISTS objects_spaces
    ON objects(created_sequence, depth, head_sequence, kind) WHERE kind = 'space';
"""

# A link names its target revision by id (``target``, as the record does) and, for the
# indexes, by integer keys: the target's sequence and its object's ``objects`` key (the
# sequence of its first revision), never by 64-hex text, so an index row is ~15 bytes instead
# of ~80: fewer pages dirtied per admission once the library outgrows memory.
_LINKS = """
CREATE TABLE IF NOT EXISTS {name}(
    source_sequence INTEGER NOT NULL,
    position INTEGER NOT NULL,
    relation TEXT NOT NULL,
    target TEXT NOT NULL,
    target_seq INTEGER NOT NULL,
    target_owner INTEGER NOT NULL,
    PRIMARY KEY(source_sequence, position)
) WITHOUT ROWID;
"""
#: The columns of ``links``, in the order ``_LINKS`` declares them.
LINK_COLUMNS = ("source_sequence", "position", "relation", "target", "target_seq",
                "target_owner")

# Children, discussions, knowledge (``reads/objects._tree_arm``): one row per tree link of an
# object (its first revision's: tree links never change across revisions), by the target's
# object, relation and the child's ``objects`` key, with the child's current head beside it.
# A page of a space's children is one range of this table, which gives each child's head: the
# heads' records are then read at once, with no ``objects`` row read per child first (issue
# 22: a children page read 118 pages cold, one per child's row and one per record).  A new
# object inserts its rows (where ``links_tree``, the index this replaces, took an entry); a
# revision updates its object's head in them (where ``links_tree`` took a new entry for the
# revision's own tree links, which no read used).  Links naming one exact revision are found
# through ``links_to_revision``.
_TREE_HEADS = """
CREATE TABLE IF NOT EXISTS {name}(
    target_owner INTEGER NOT NULL,
    relation TEXT NOT NULL,
    created_sequence INTEGER NOT NULL,
    head_sequence INTEGER NOT NULL,
    PRIMARY KEY(target_owner, relation, created_sequence)
) WITHOUT ROWID;
"""
#: ``tree_heads``' rows, from ``links`` and ``objects`` (a copy made by ``alexandria migrate``
#: or ``backup``): every tree link of a first revision, with its object's head.
TREE_HEADS_ROWS = (
    "SELECT l.target_owner, l.relation, o.created_sequence, o.head_sequence FROM links l"
    " JOIN objects o ON o.created_sequence = l.source_sequence"
    f" WHERE l.relation IN {TREE_LINKS} ORDER BY 1, 2, 3"
)
TREE_HEADS_COLUMNS = "target_owner, relation, created_sequence, head_sequence"

# Each voted object's score — the current values of the votes on it, across its revisions,
# summed (``vote_values`` by ``target_seq``) — by its ``objects`` key: a scores page reads one
# row of this small table per vote (the target's score), not the target's ``objects`` row and
# its head's ``catalogue`` row (which keeps the same score for ``sort=top``).
OBJECT_SCORES = """
CREATE TABLE IF NOT EXISTS object_scores(
    created_sequence INTEGER PRIMARY KEY, score INTEGER NOT NULL
);
"""
#: ``object_scores``' rows, from the votes (``search_index.rebuild``)
OBJECT_SCORES_ROWS = (
    "SELECT target_seq, sum(value) FROM vote_values GROUP BY target_seq ORDER BY target_seq"
)



#: The columns a signed record is assembled from (``SignedRecords.assemble``): the leaf ``l``
#: and, beside it, the revision's id, root, record length and authority, which a contribution's
#: ``log`` row carries itself since this layout, so a record is one row of one table (one page
#: read cold, not two); a leaf admitted before it takes them from its ``revisions`` row ``r``,
#: which ``_SIGNED_FROM`` joins only for such a leaf.  Rows that never change once admitted, so a
#: row read through any snapshot is the one every later snapshot holds (``store/read_ahead.py``
#: keeps them).
SIGNED_COLUMNS = (
    "coalesce(l.id, r.id), coalesce(l.root, r.root), l.sequence,"
    " coalesce(l.record_length, r.record_length), coalesce(l.authority_seq, r.authority_seq),"
    " l.leaf, l.admitted_at"
)
#: What ``SIGNED_COLUMNS`` joins to a query's ``log l``: the ``revisions`` row, sought only for
#: a leaf without the columns (a ``CASE`` gives NULL otherwise, which seeks nothing; ``ON l.id
#: IS NULL AND r.sequence = l.sequence`` would still read the row's page before testing).  A
#: leaf of an authority document has neither (``_SIGNED_IS_RECORD``).
_SIGNED_FROM = (
    " LEFT JOIN revisions r ON r.sequence = CASE WHEN l.id IS NULL THEN l.sequence END"
)
#: The condition that the leaf ``l`` is a contribution's (a signed record)
_SIGNED_IS_RECORD = "coalesce(l.id, r.id) IS NOT NULL"


def signed_sql(condition: str) -> str:
    """The ``SIGNED_COLUMNS`` of the contribution leaves ``l`` meeting ``condition``."""
    return (f"SELECT {SIGNED_COLUMNS} FROM log l{_SIGNED_FROM}"
            f" WHERE {_SIGNED_IS_RECORD} AND {condition}")

#: The columns of ``objects``, in the order ``_OBJECTS`` declares them.
OBJECT_COLUMNS = ("created_sequence", "root", "kind", "author", "head", "head_sequence",
                  "revisions", "depth", "parent", "vote_target", "feed_links", "ancestors",
                  "tree", "cdepth", "cparent", "jump")


def object_row(root: str) -> str:
    """The SQL condition naming the ``objects`` row of the root ``root`` (an SQL parameter,
    named twice: a ``?`` is bound twice): its key is the sequence of the revision whose id is
    the root, found through ``revisions``' index of ids (``revision_id``).  (A join names it as
    ``JOIN revisions f ON {revision_id("…", "f.id")} JOIN objects o ON o.created_sequence =
    f.sequence``.)  PostgreSQL keeps an index of roots; this form serves both."""
    return f"created_sequence = (SELECT sequence FROM revisions WHERE {revision_id(root)})"


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- id, root, record_length, authority_seq: a contribution's revision id, root, record length
-- and authority (SIGNED_COLUMNS); NULL for an authority document, and for a leaf admitted
-- before this layout
CREATE TABLE IF NOT EXISTS log(
    sequence INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    leaf BLOB NOT NULL,
    leaf_hash BLOB NOT NULL,
    admitted_at TEXT NOT NULL,
    id TEXT,
    root TEXT,
    record_length INTEGER,
    authority_seq INTEGER
);
-- leaves are found by sequence; contributions again by revision id, authority documents by
-- their key (authorities, revocations): a leaf commits to its admission time, so its hash
-- does not find a resubmitted document
-- the perfect Merkle nodes, keyed by their in-order position (merkle.position)
CREATE TABLE IF NOT EXISTS merkle_nodes(position INTEGER PRIMARY KEY, hash BLOB NOT NULL);
""" + _REVISIONS.format(name="revisions") + """
-- a revision by its id (``revision_id``)
CREATE INDEX IF NOT EXISTS revisions_id ON revisions(substr(id, 1, 16));
-- a conversation tree's revisions in order (store/feed.py: the feeds of deep roots)
CREATE INDEX IF NOT EXISTS revisions_tree ON revisions(tree, sequence) WHERE tree != 0;
-- an object's first revision is found by its root (objects.created_sequence); only the later
-- ones are indexed by root, so creating an object writes no page of this index
CREATE INDEX IF NOT EXISTS revisions_later ON revisions(root, sequence) WHERE id != root;
""" + _OBJECTS.format(name="objects") + _OBJECT_INDEXES + _LINKS.format(name="links") + """
""" + _TREE_HEADS.format(name="tree_heads") + """
-- object views (objects.py): incoming links in admission order, without tree links and votes
CREATE INDEX IF NOT EXISTS links_related ON links(target_owner, source_sequence) WHERE relation
    NOT IN """ + NOT_RELATED + """;
CREATE INDEX IF NOT EXISTS links_to_revision
    ON links(target_seq, source_sequence, position, relation) WHERE relation != 'votes_on';
CREATE INDEX IF NOT EXISTS links_relationships ON links(target_owner, source_sequence)
    WHERE relation IN ('relates_from', 'relates_to');
CREATE TABLE IF NOT EXISTS votes(
    author TEXT NOT NULL, target TEXT NOT NULL, vote_root TEXT NOT NULL,
    PRIMARY KEY(author, target)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS authorities(
    sequence INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    roles TEXT NOT NULL,
    document BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS authorities_key ON authorities(key);
CREATE TABLE IF NOT EXISTS revocations(
    sequence INTEGER PRIMARY KEY, key TEXT NOT NULL, issuer TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS revocations_key ON revocations(key);
-- one row per revision and *near* ancestor of its object, the ``owner`` (store/feed.py), by
-- the ancestor's objects key (created_sequence), not its root: ~12 bytes a row instead of ~75
-- (the object's own revisions are found through objects and revisions_later)
CREATE TABLE IF NOT EXISTS feed(
    owner INTEGER NOT NULL, sequence INTEGER NOT NULL, PRIMARY KEY(owner, sequence)
) WITHOUT ROWID;
-- the feed rows of the latest admissions, moved into ``feed`` a range of owners at a time
-- (store/feed.py: ``merge_recent``); a root's feed is its rows in both
CREATE TABLE IF NOT EXISTS feed_recent(
    owner INTEGER NOT NULL, sequence INTEGER NOT NULL, PRIMARY KEY(owner, sequence)
) WITHOUT ROWID;
-- objects (by objects key) whose feed holds members of a conversation tree beyond their feed
-- rows: those below the conversation node created at ``hang`` (store/feed.py)
CREATE TABLE IF NOT EXISTS deep(
    owner INTEGER NOT NULL, tree INTEGER NOT NULL, hang INTEGER NOT NULL,
    PRIMARY KEY(owner, tree, hang)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deep_tree ON deep(tree, hang);
"""

#: Tables whose rows derive from other tables' rows, with the query that gives them: filled
#: where a copy brings the rows they derive from (``alexandria migrate``, ``backup``) and when
#: the catalogue is rebuilt (``search_index.rebuild``).
DERIVED_TABLES = {"tree_heads": TREE_HEADS_ROWS, "object_scores": OBJECT_SCORES_ROWS}


def fill_derived_table(conn: sqlite3.Connection, name: str) -> None:
    """Fill the table ``name`` of ``DERIVED_TABLES`` from the rows it derives from (a row
    already there is kept)."""
    conn.execute(f"INSERT OR IGNORE INTO {name} {DERIVED_TABLES[name]}")


class OldLeafFormat(Failed):
    """The database holds a log whose leaves are of an earlier format (PROTOCOL §7)."""

    default_code = "OLD_LEAF_FORMAT"


def check_leaf_format(conn: sqlite3.Connection, path: str | Path) -> bool:
    """Whether the database records this version's leaf format (``leaf.LEAF_FORMAT``, kept in
    ``meta``).  A database with no leaf yet and no format recorded is new: False, and the
    writer records it.  A log of leaves with no format recorded was written before leaves
    committed to their admission times, and is refused: its tree and checkpoints cannot be
    carried over (there were no deployments; libraries of that format are re-created)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'leaf_format'").fetchone()
    if row is not None and row[0] == LEAF_FORMAT:
        return True
    if row is None and conn.execute("SELECT 1 FROM log LIMIT 1").fetchone() is None:
        return False
    found = "JCS(document), without its admission time" if row is None else repr(row[0])
    raise OldLeafFormat(
        f"{path} holds a log whose leaves are {found}, not {LEAF_FORMAT}"
        " (JCS({admitted_at, document}), PROTOCOL §7); this version can neither serve nor"
        " export it. Move the database aside and create the library afresh: `alexandria serve"
        " --genesis FILE --db NEW_FILE` then admit the authority certificates again, or, for"
        " the embedded default library, remove its alexandria-data/ directory",
        found=None if row is None else row[0], expected=LEAF_FORMAT, path=str(path),
    )


# A head's one-word relevance levels (store/search_index.py): each ``word·score`` token occurs
# once per head and is only ever matched alone, so the index keeps no positions
# (``detail=none``): a much smaller index, and fewer pages written per admission.
CATALOGUE_LEVELS = """
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_levels
    USING fts5(levels, content='', tokenize='ascii', detail=none);
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_level_terms
    USING fts5vocab(catalogue_levels, 'row');
"""

CHECKPOINTS = """
CREATE TABLE IF NOT EXISTS checkpoints(
    size INTEGER PRIMARY KEY,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    key TEXT NOT NULL,
    signed_at TEXT NOT NULL
);
"""

# Witness cosignatures of the checkpoints (docs/log.md "Witnesses"): one ``cosignature/v1``
# signature line per (checkpoint, witness key), verified before it is stored, served after the
# log's own signature line.  ``witness`` is the witness's verifier key (vkey).
COSIGNATURES = """
CREATE TABLE IF NOT EXISTS checkpoint_cosignatures(
    size INTEGER NOT NULL REFERENCES checkpoints(size),
    witness TEXT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY(size, witness)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS checkpoint_cosignatures_witness
    ON checkpoint_cosignatures(witness, size);
"""

PERSONAL = """
CREATE TABLE IF NOT EXISTS personal_state(
    author TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    signed BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS personal_requests(
    id TEXT PRIMARY KEY,
    author TEXT NOT NULL,
    kind TEXT NOT NULL,
    nonce TEXT NOT NULL,
    authored_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS personal_requests_nonce
    ON personal_requests(author, nonce) WHERE nonce != '';
CREATE INDEX IF NOT EXISTS personal_requests_authored ON personal_requests(authored_ms);
"""

# The catalogue's projections (``store/search_index.py``): all derived from the ledger, rebuilt
# when absent or when ``search_index.INDEX_VERSION`` changes.
CATALOGUE = """
CREATE TABLE IF NOT EXISTS catalogue_actors(id INTEGER PRIMARY KEY, actor TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS catalogue(
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    author_id INTEGER NOT NULL,
    facet TEXT,
    score INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS catalogue_kind ON catalogue(kind, seq);
CREATE INDEX IF NOT EXISTS catalogue_author ON catalogue(author_id, seq);
CREATE INDEX IF NOT EXISTS catalogue_author_score ON catalogue(author_id, score, seq);
CREATE INDEX IF NOT EXISTS catalogue_facet ON catalogue(facet, seq) WHERE facet IS NOT NULL;
CREATE INDEX IF NOT EXISTS catalogue_score ON catalogue(score, seq);
CREATE INDEX IF NOT EXISTS catalogue_kind_score ON catalogue(kind, score, seq);
CREATE INDEX IF NOT EXISTS catalogue_facet_score ON catalogue(facet, score, seq)
    WHERE facet IS NOT NULL;
CREATE TABLE IF NOT EXISTS catalogue_counts(
    kind TEXT NOT NULL, facet TEXT NOT NULL, author_id INTEGER NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY(kind, facet, author_id)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_text
    USING fts5(title, body, content='', tokenize='ascii');
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_terms USING fts5vocab(catalogue_text, 'instance');
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_vocab USING fts5vocab(catalogue_text, 'row');
""" + CATALOGUE_LEVELS + """
CREATE TABLE IF NOT EXISTS catalogue_words(
    seq INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL
);
-- ``target_seq``: the target object's integer key (``objects.created_sequence``), so a page of
-- votes reaches each target's row without the 64-hex root index; ``head``, ``target_root``: the
-- vote's head revision id and its target's root, which ``/api/scores`` shows (a page of votes
-- read them from a ``revisions`` row and the target's ``objects`` row each)
CREATE TABLE IF NOT EXISTS vote_values(
    vote_root TEXT PRIMARY KEY,
    author_id INTEGER NOT NULL,
    target TEXT NOT NULL,
    value INTEGER NOT NULL,
    head_sequence INTEGER NOT NULL,
    target_seq INTEGER NOT NULL DEFAULT 0,
    head TEXT NOT NULL DEFAULT '',
    target_root TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
-- an actor's votes, newest first, with everything ``/api/scores`` reads of them but the
-- target's score: the page reads one index range, then per vote one ``object_scores`` row (by
-- the target's integer key)
CREATE INDEX IF NOT EXISTS vote_values_page
    ON vote_values(author_id, head_sequence, target_seq, value, head, target_root);
 """ + OBJECT_SCORES + """
CREATE TABLE IF NOT EXISTS vote_totals(
    author_id INTEGER PRIMARY KEY,
    score INTEGER NOT NULL DEFAULT 0,
    up INTEGER NOT NULL DEFAULT 0,
    down INTEGER NOT NULL DEFAULT 0,
    neutral INTEGER NOT NULL DEFAULT 0,
    cast_votes INTEGER NOT NULL DEFAULT 0
);
"""

# Enrolment requests (``store/enrolments.py``, ``service/enrolment.py``): what ``alexandria
# login`` asked and, once the operator approved it, the worker certificate.  Never in the log;
# rows never approved are deleted when they expire; approved ones are kept (their codes answer no
# more), since they hold the names the operator approved, which the pages show beside authors.
ENROLMENT = """
CREATE TABLE IF NOT EXISTS enrolment_requests(
    code TEXT PRIMARY KEY,
    worker TEXT NOT NULL,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    requested_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    certificate TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS enrolment_requests_expires ON enrolment_requests(expires_ms);
CREATE INDEX IF NOT EXISTS enrolment_requests_worker ON enrolment_requests(worker);
"""

#: The baseline: version 1 of ``store/migrations.MIGRATIONS``, the layout a database of no
#: recorded version must have to be adopted.  A later layout is a step appended there, never an
#: edit of these statements (databases of version 1 hold what they created).
TABLES = SCHEMA + CHECKPOINTS + COSIGNATURES + PERSONAL + CATALOGUE + ENROLMENT

# A witness's own database (``alexandria witness serve``), not a library's: per log origin, the
# latest checkpoint it cosigned.  Updated in the same ``BEGIN IMMEDIATE`` transaction as the
# check of the request's old size, and synced before the cosignature is returned.
WITNESS = """
CREATE TABLE IF NOT EXISTS witnessed(
    origin TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    checkpoint TEXT NOT NULL,
    cosigned_at INTEGER NOT NULL
) WITHOUT ROWID;
"""
