"""The PostgreSQL schema (``schema.sql`` beside this file) and its migrations, applied when a
node starts.

``MIGRATIONS`` lists the schema's versions in order; version 1 is ``schema.sql``.  A node
applies, in one transaction under an advisory lock (nodes starting together wait for each
other), every version the database has not recorded in ``schema_migrations``, and refuses a
database of a newer version than it knows (an older node must not write to a newer layout).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import psycopg

from alexandria.store.migrations import SchemaTooNew
from alexandria.store.schema import OBJECT_SCORES_ROWS, TREE_HEADS_COLUMNS, TREE_HEADS_ROWS

#: ``pg_advisory_xact_lock`` key of schema changes (the text "alexschm" as a 64-bit integer)
MIGRATION_LOCK = 0x616C65787363686D


def _schema_sql() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


#: Version 3: fewer B-trees written per admission — tree links only in the index by target
#: root (the list is ``store/schema.TREE_LINKS``; a test compares), none by exact target and
#: relation (reads use ``links_to_revision``, which also holds the relation) — and the scores
#: page read from one covering index.
TREE_LINKS_AND_COVERING_VOTES = """
DROP INDEX IF EXISTS links_target;
DROP INDEX IF EXISTS links_target_root;
DROP INDEX IF EXISTS links_incoming;
CREATE INDEX IF NOT EXISTS links_to_revision ON links(target, source_sequence, position, relation)
    WHERE relation != 'votes_on';
CREATE INDEX IF NOT EXISTS links_tree ON links(target_root, relation, source_sequence)
    WHERE relation IN ('contained_in', 'replies_to', 'answers', 'branches_from', 'about',
    'evidence_for', 'assesses', 'proposes_for');
DROP INDEX IF EXISTS vote_values_author;
CREATE INDEX IF NOT EXISTS vote_values_by_author
    ON vote_values(author_id, head_sequence, target, value, vote_root);
"""

#: Version 4 (as ``store/schema.py``'s ``vote_values.target_seq``): each vote row names
#: its target object's integer key, so the scores page reaches the targets without the 64-hex
#: root index; filled from ``objects`` for the votes already there.
VOTE_TARGET_KEYS = """
ALTER TABLE vote_values ADD COLUMN IF NOT EXISTS target_seq BIGINT NOT NULL DEFAULT 0;
UPDATE vote_values v SET target_seq = o.created_sequence FROM objects o
    WHERE o.root = v.target AND v.target_seq = 0;
DROP INDEX IF EXISTS vote_values_by_author;
CREATE INDEX IF NOT EXISTS vote_values_by_target_seq
    ON vote_values(author_id, head_sequence, target_seq, value, vote_root);
"""

#: Version 5 (read speed): the search postings' primary key also carries the counts
#: a query sums, so a word's heads are read from the index alone (an index-only scan: a few
#: pages for a word in 700 heads, where the table's rows of that word lie on ~700 pages, one
#: per head, as admissions wrote them).  The key stays ``(term, seq)``: the same uniqueness,
#: and one B-tree written per posting as before.  And the planner learns that a catalogue
#: facet implies its kind (``method:…`` only on evidence, ``verdict:…`` only on assessments):
#: estimating them as independent, it would read all of a facet's heads through a bitmap and
#: sort them for a page of 50, where the facet's index read backwards gives the page at once.
COVERING_POSTINGS = """
CREATE UNIQUE INDEX catalogue_postings_cover ON catalogue_postings(term, seq)
    INCLUDE (title_count, body_count);
ALTER TABLE catalogue_postings DROP CONSTRAINT catalogue_postings_pkey;
ALTER TABLE catalogue_postings ADD CONSTRAINT catalogue_postings_pkey
    PRIMARY KEY USING INDEX catalogue_postings_cover;
CREATE STATISTICS IF NOT EXISTS catalogue_facet_kind (dependencies) ON facet, kind
    FROM catalogue;
ANALYZE catalogue;
"""

#: Version 6 (as ``store/schema.py``'s ``feed``, ``deep`` and ``links``): integer
#: keys where 64-hex roots and revision ids keyed the indexes every admission writes at
#: scattered places.  ``feed`` and ``deep`` name their owners by ``objects`` key: the tables
#: of the earlier layout are replaced, empty, and ``feed.ensure_layout`` refills them and
#: rewrites the near lists in the writer's first transaction (the layout recorded is forgotten
#: here).  ``links`` gets its targets' sequences and their objects' keys, filled from
#: ``revisions``, and its indexes on them; the column of target roots goes.
INTEGER_KEYS = """
DROP TABLE IF EXISTS feed;
DROP TABLE IF EXISTS deep;
CREATE TABLE feed(
    owner BIGINT NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(owner, sequence)
);
CREATE TABLE deep(
    owner BIGINT NOT NULL, tree BIGINT NOT NULL, hang BIGINT NOT NULL,
    PRIMARY KEY(owner, tree, hang)
);
CREATE INDEX deep_tree ON deep(tree, hang);
DELETE FROM meta WHERE key = 'feed_layout';
ALTER TABLE links ADD COLUMN target_seq BIGINT, ADD COLUMN target_owner BIGINT;
UPDATE links l SET target_seq = t.sequence, target_owner = o.sequence
    FROM revisions t, revisions o WHERE t.id = l.target AND o.id = l.target_root;
ALTER TABLE links ALTER COLUMN target_seq SET NOT NULL,
    ALTER COLUMN target_owner SET NOT NULL;
DROP INDEX IF EXISTS links_to_revision;
DROP INDEX IF EXISTS links_tree;
DROP INDEX IF EXISTS links_related;
DROP INDEX IF EXISTS links_relationships;
ALTER TABLE links DROP COLUMN target_root;
CREATE INDEX links_to_revision ON links(target_seq, source_sequence, position, relation)
    WHERE relation != 'votes_on';
CREATE INDEX links_tree ON links(target_owner, relation, source_sequence)
    WHERE relation IN ('contained_in', 'replies_to', 'answers', 'branches_from', 'about',
    'evidence_for', 'assesses', 'proposes_for');
CREATE INDEX links_related ON links(target_owner, source_sequence) WHERE relation
    NOT IN ('contained_in', 'replies_to', 'answers', 'branches_from', 'about', 'evidence_for',
    'assesses', 'proposes_for', 'votes_on');
CREATE INDEX links_relationships ON links(target_owner, source_sequence)
    WHERE relation IN ('relates_from', 'relates_to');
ANALYZE links;
"""

#: SQLite stages the feed rows of recent admissions in ``feed_recent`` (store/feed.py); the
#: reads take a root's rows from both tables, so PostgreSQL has the table too, always empty:
#: it writes ``feed`` directly
FEED_RECENT = """
CREATE TABLE IF NOT EXISTS feed_recent(
    owner BIGINT NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(owner, sequence)
);
"""

#: Version 9 (as ``store/schema.py``'s ``tree_heads``): a children page is one range
#: of a table that gives each child's head, not one ``objects`` row read per child; it replaces
#: the index ``links_tree``.  Filled from the links and objects already there.
TREE_HEADS = f"""
CREATE TABLE IF NOT EXISTS tree_heads(
    target_owner BIGINT NOT NULL,
    relation TEXT COLLATE "C" NOT NULL,
    created_sequence BIGINT NOT NULL,
    head_sequence BIGINT NOT NULL,
    PRIMARY KEY(target_owner, relation, created_sequence)
);
INSERT INTO tree_heads({TREE_HEADS_COLUMNS}) {TREE_HEADS_ROWS} ON CONFLICT DO NOTHING;
DROP INDEX IF EXISTS links_tree;
ANALYZE tree_heads;
"""

#: Version 10 (as ``store/schema.py``'s ``vote_values.head`` and ``target_root``): a
#: page of votes takes each vote's head id and its target's root from the index, not from a
#: ``revisions`` and an ``objects`` row each; filled for the votes already there.
VOTE_PAGE = """
ALTER TABLE vote_values ADD COLUMN IF NOT EXISTS head TEXT COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS target_root TEXT COLLATE "C" NOT NULL DEFAULT '';
UPDATE vote_values v SET head = h.id, target_root = o.root FROM revisions h, objects o
    WHERE h.sequence = v.head_sequence AND o.created_sequence = v.target_seq;
DROP INDEX IF EXISTS vote_values_by_target_seq;
CREATE INDEX IF NOT EXISTS vote_values_page ON vote_values(author_id, head_sequence, target_seq,
    value) INCLUDE (vote_root, head, target_root);
ANALYZE vote_values;
"""

#: Version 11 (as ``store/schema.py``'s ``object_scores``): each voted object's score
#: by its ``objects`` key, one row per vote of a scores page; filled from the votes there.
OBJECT_SCORES = f"""
CREATE TABLE IF NOT EXISTS object_scores(
    created_sequence BIGINT PRIMARY KEY, score BIGINT NOT NULL
);
INSERT INTO object_scores(created_sequence, score) {OBJECT_SCORES_ROWS} ON CONFLICT DO NOTHING;
ANALYZE object_scores;
"""

#: Version 12: a head's postings are forgotten by their terms, which the writer knows
#: (``postings.forget``), through the primary key: the index of postings by head, one more
#: entry for every word of every head admitted, goes.
POSTINGS_BY_TERMS = """
DROP INDEX IF EXISTS catalogue_postings_seq;
"""

#: Version 13 (admission cost): the full-text index is one row per head, its words' levels
#: under a GIN index (``postings``), instead of one posting row and one B-tree entry per
#: distinct word of each head, a cost that grew with a text's length (decision record 0013).
#: The rows come from the postings (a level is 3 × title count + body count); a head's text
#: goes out of line (``toast_tuple_target``), so a read of many heads' levels visits small rows.
CATALOGUE_LEVELS = """
CREATE TABLE catalogue_levels(
    seq BIGINT PRIMARY KEY, tokens TEXT COLLATE "C" NOT NULL, over TEXT COLLATE "C" NOT NULL
) WITH (toast_tuple_target = 128);
INSERT INTO catalogue_levels(seq, tokens, over)
    SELECT seq, string_agg(term || '·' || least(3 * title_count + body_count, 64), ' '
            ORDER BY term),
        coalesce(string_agg(term || '·' || (3 * title_count + body_count), ' ' ORDER BY term)
            FILTER (WHERE 3 * title_count + body_count >= 64), '')
    FROM catalogue_postings GROUP BY seq;
CREATE INDEX catalogue_levels_tokens ON catalogue_levels USING gin (string_to_array(tokens, ' '));
DROP TABLE catalogue_postings;
ANALYZE catalogue_levels;
"""

#: Version 14 (admission cost of long texts): ``catalogue_words`` goes — SQLite's FTS5 needs a
#: head's words to forget it and counts relevance in them, ``catalogue_levels`` needs neither —
#: and the values stored out of line that an admission writes, a leaf (its signed record) and
#: a head's tokens, are compressed with LZ4 instead of PostgreSQL's own pglz, which costs the
#: backend several times LZ4's CPU for a result no smaller (docs/performance.md, "Admission").
#: Values already stored keep pglz, and a server built without LZ4 keeps pglz for every
#: value.
LZ4_AND_NO_WORDS = """
DROP TABLE IF EXISTS catalogue_words;
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_settings WHERE name = 'default_toast_compression'
               AND 'lz4' = ANY(enumvals)) THEN
        EXECUTE 'ALTER TABLE log ALTER COLUMN leaf SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE catalogue_levels ALTER COLUMN tokens SET COMPRESSION lz4';
    END IF;
END $$;
"""

#: (version, SQL) in order; a later layout appends its own step, never edits an applied one
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, "schema.sql"),
    # store/feed.py's encoding of feed membership (schema.sql has them for new databases;
    # the rows are rebuilt by feed.ensure_layout when the library opens)
    (2, """
ALTER TABLE revisions ADD COLUMN IF NOT EXISTS tree BIGINT NOT NULL DEFAULT 0;
ALTER TABLE objects ADD COLUMN IF NOT EXISTS tree BIGINT NOT NULL DEFAULT 0;
ALTER TABLE objects ADD COLUMN IF NOT EXISTS cdepth BIGINT NOT NULL DEFAULT 0;
ALTER TABLE objects ADD COLUMN IF NOT EXISTS cparent BIGINT NOT NULL DEFAULT 0;
ALTER TABLE objects ADD COLUMN IF NOT EXISTS jump BIGINT NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS revisions_tree ON revisions(tree, sequence) WHERE tree != 0;
CREATE TABLE IF NOT EXISTS deep(
    root TEXT COLLATE "C" NOT NULL, tree BIGINT NOT NULL, hang BIGINT NOT NULL,
    PRIMARY KEY(root, tree, hang)
);
CREATE INDEX IF NOT EXISTS deep_tree ON deep(tree, hang);
"""),
    (3, TREE_LINKS_AND_COVERING_VOTES),
    (4, VOTE_TARGET_KEYS),
    (5, COVERING_POSTINGS),
    (6, INTEGER_KEYS),
    (7, FEED_RECENT),
    # a contribution's leaf carries its signed record's other pieces (store/schema.py
    # SIGNED_COLUMNS; NULL in the leaves admitted before, read from revisions)
    (8, """
ALTER TABLE log ADD COLUMN IF NOT EXISTS id TEXT COLLATE "C";
ALTER TABLE log ADD COLUMN IF NOT EXISTS root TEXT COLLATE "C";
ALTER TABLE log ADD COLUMN IF NOT EXISTS record_length BIGINT;
ALTER TABLE log ADD COLUMN IF NOT EXISTS authority_seq BIGINT;
"""),
    (9, TREE_HEADS),
    (10, VOTE_PAGE),
    (11, OBJECT_SCORES),
    (12, POSTINGS_BY_TERMS),
    (13, CATALOGUE_LEVELS),
    (14, LZ4_AND_NO_WORDS),
)
VERSION = MIGRATIONS[-1][0]


def apply(raw: psycopg.Connection[Any]) -> list[int]:
    """Bring the database to ``VERSION``; the versions applied now (none when current)."""
    applied: list[int] = []
    with raw.transaction():
        raw.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        raw.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations("
            " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        row = raw.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        current = int(row[0]) if row is not None else 0
        if current > VERSION:
            raise SchemaTooNew(
                f"the database's schema is version {current}; this Alexandria knows up to"
                f" {VERSION}: upgrade Alexandria on this node", current=current, known=VERSION,
            )
        for version, name in MIGRATIONS:
            if version <= current:
                continue
            sql = _schema_sql() if name == "schema.sql" else name
            raw.execute(sql.encode())
            raw.execute("INSERT INTO schema_migrations(version) VALUES (%s)", (version,))
            applied.append(version)
    return applied
