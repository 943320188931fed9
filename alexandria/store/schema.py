"""Every table of a library's SQLite database, and how an older layout becomes this one.

The store owns its tables (as Tessera's drivers own ``schema.sql``): the ledger (log, Merkle
nodes, revisions, objects, links, votes, authorities, revocations, feed), the log's signed
checkpoints, personal lists and the catalogue's derived indexes are all declared here, and
nothing above the store declares or alters a table.  ``TABLES`` is idempotent
(``CREATE … IF NOT EXISTS``); ``migrate_layout`` brings a database of an earlier layout to this
one in the opening transaction.
"""

from __future__ import annotations

import sqlite3

from alexandria.rules.state import FEED_RELATIONS

#: Relations of an object's ``related`` section: anything but tree links and votes.  The same
#: text is the WHERE clause of the partial index ``links_related`` and of the query that reads
#: it (``reads/objects.py``): SQLite uses a partial index only when the query repeats its
#: condition.
NOT_RELATED = "('" + "', '".join((*FEED_RELATIONS, "votes_on")) + "')"

# One row per object, in creation order: the rowid is the sequence of its first revision, so a
# new object appends to the table instead of splitting a page of rows keyed by a random root
# (the root index holds 64 hex characters and a rowid per entry).  ``ancestors``: the roots
# whose feeds include the object's (its feed parents and theirs), space-separated.
_OBJECTS = """
CREATE TABLE IF NOT EXISTS {name}(
    created_sequence INTEGER PRIMARY KEY,
    root TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    head TEXT NOT NULL,
    head_sequence INTEGER NOT NULL,
    revisions INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    parent TEXT NOT NULL,
    vote_target TEXT NOT NULL,
    feed_links TEXT NOT NULL,
    ancestors TEXT NOT NULL DEFAULT ''
);
"""
_OBJECT_INDEXES = """
CREATE INDEX IF NOT EXISTS objects_head_sequence ON objects(head_sequence);
DROP INDEX IF EXISTS objects_parent;  -- superseded by objects_contents
CREATE INDEX IF NOT EXISTS objects_contents ON objects(parent, kind, created_sequence)
    WHERE parent != '';
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log(
    sequence INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    leaf BLOB NOT NULL,
    leaf_hash BLOB NOT NULL,
    admitted_at TEXT NOT NULL
);
-- authority documents are found again by their leaf hash; contributions by revision id, so
-- indexing their (random) leaf hashes too would only cost a B-tree page per admission
DROP INDEX IF EXISTS log_leaf_hash;
CREATE UNIQUE INDEX IF NOT EXISTS log_document_hash ON log(leaf_hash) WHERE type != 'contribution';
-- the perfect Merkle nodes, keyed by their in-order position (merkle.position)
CREATE TABLE IF NOT EXISTS merkle_nodes(position INTEGER PRIMARY KEY, hash BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS revisions(
    sequence INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    root TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    authored_at TEXT NOT NULL,
    title TEXT NOT NULL,
    record_length INTEGER NOT NULL,
    authority_seq INTEGER NOT NULL
);
-- an object's first revision is found by its root (objects.created_sequence); only the later
-- ones are indexed by root, so creating an object writes no page of this index
DROP INDEX IF EXISTS revisions_root;
CREATE INDEX IF NOT EXISTS revisions_later ON revisions(root, sequence) WHERE id != root;
""" + _OBJECTS.format(name="objects") + _OBJECT_INDEXES + """CREATE TABLE IF NOT EXISTS links(
    source_sequence INTEGER NOT NULL,
    position INTEGER NOT NULL,
    relation TEXT NOT NULL,
    target TEXT NOT NULL,
    target_root TEXT NOT NULL,
    PRIMARY KEY(source_sequence, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_target ON links(target, relation);
CREATE INDEX IF NOT EXISTS links_target_root ON links(target_root, relation);
-- object views (objects.py): incoming links in admission order, without tree links and votes
CREATE INDEX IF NOT EXISTS links_related ON links(target_root, source_sequence) WHERE relation
    NOT IN """ + NOT_RELATED + """;
CREATE INDEX IF NOT EXISTS links_incoming ON links(target, source_sequence)
    WHERE relation != 'votes_on';
CREATE INDEX IF NOT EXISTS links_relationships ON links(target_root, source_sequence)
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
-- one row per revision and ancestor of its object (the object's own revisions are found
-- through objects and revisions_later: no page keyed by a fresh root is written twice)
CREATE TABLE IF NOT EXISTS feed(
    root TEXT NOT NULL, sequence INTEGER NOT NULL, PRIMARY KEY(root, sequence)
) WITHOUT ROWID;
"""


def migrate_layout(conn: sqlite3.Connection) -> None:
    """Bring a database written by an earlier layout to this one, in one transaction: tree
    ancestors move from the ``closure`` table into ``objects.ancestors``; ``feed`` loses the
    rows of each object's own revisions (read through ``objects`` and ``revisions_later``);
    ``objects`` keyed by root becomes a table in creation order; Merkle nodes keyed by
    ``(level, idx)`` are keyed by their in-order position."""
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'merkle'"
    ).fetchone() is not None:
        conn.execute(
            "INSERT INTO merkle_nodes(position, hash)"
            " SELECT (idx << (level + 1)) | ((1 << level) - 1), hash FROM merkle"
        )
        conn.execute("DROP TABLE merkle")
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'closure'"
    ).fetchone() is not None:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(objects)")}
        if "ancestors" not in columns:
            conn.execute("ALTER TABLE objects ADD COLUMN ancestors TEXT NOT NULL DEFAULT ''")
        conn.execute(
            "UPDATE objects SET ancestors = coalesce((SELECT group_concat(ancestor, ' ')"
            " FROM closure WHERE member = objects.root), '')"
        )
        conn.execute(
            "DELETE FROM feed WHERE EXISTS (SELECT 1 FROM revisions r"
            " WHERE r.sequence = feed.sequence AND r.root = feed.root)"
        )
        conn.execute("DROP TABLE closure")
    keyed_by_root = conn.execute(
        "SELECT 1 FROM pragma_table_info('objects') WHERE name = 'root' AND pk = 1"
    ).fetchone()
    if keyed_by_root is not None:
        conn.execute(_OBJECTS.format(name="objects_by_creation"))
        columns_text = (
            "created_sequence, root, kind, author, head, head_sequence, revisions, depth,"
            " parent, vote_target, feed_links, ancestors"
        )
        conn.execute(
            f"INSERT INTO objects_by_creation({columns_text}) SELECT {columns_text} FROM objects"
        )
        conn.execute("DROP TABLE objects")  # and its indexes
        conn.execute("ALTER TABLE objects_by_creation RENAME TO objects")
        for statement in _OBJECT_INDEXES.split(";"):
            if statement.strip():
                conn.execute(statement)

CHECKPOINTS = """
CREATE TABLE IF NOT EXISTS checkpoints(
    size INTEGER PRIMARY KEY,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    key TEXT NOT NULL,
    signed_at TEXT NOT NULL
);
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
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_levels
    USING fts5(levels, content='', tokenize='ascii');
CREATE VIRTUAL TABLE IF NOT EXISTS catalogue_level_terms
    USING fts5vocab(catalogue_levels, 'row');
CREATE TABLE IF NOT EXISTS catalogue_words(
    seq INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS vote_values(
    vote_root TEXT PRIMARY KEY,
    author_id INTEGER NOT NULL,
    target TEXT NOT NULL,
    value INTEGER NOT NULL,
    head_sequence INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vote_values_author ON vote_values(author_id, head_sequence);
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
# rows are deleted when they expire.
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
"""

TABLES = SCHEMA + CHECKPOINTS + PERSONAL + CATALOGUE + ENROLMENT
