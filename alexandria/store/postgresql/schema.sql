-- Every table of a library's PostgreSQL database (store/postgresql/), version 1.
--
-- The same tables and columns as the SQLite schema (store/schema.py), so that the read models
-- in reads/ run unchanged on both, with PostgreSQL's types: INTEGER is BIGINT, BLOB is BYTEA,
-- and TEXT compares byte by byte (COLLATE "C", as SQLite's BINARY collation does) whatever
-- the database's locale.  The catalogue's full-text index is a postings table instead of
-- SQLite's FTS5 tables (catalogue_postings, below).  Applied by store/postgresql/schema.py
-- inside one transaction under an advisory lock; every statement is idempotent.

CREATE TABLE IF NOT EXISTS meta(key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);

-- The write lock: every write transaction of every node first increments the one row, so
-- writers queue on its row lock (admission is serialised by the database, across processes
-- and machines), and a writer whose last version is not the previous one knows another node
-- wrote meanwhile and forgets what it remembered (store/writer_memory.py).
CREATE TABLE IF NOT EXISTS ledger_writes(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO ledger_writes(id, version) VALUES (1, 0) ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS log(
    sequence BIGINT PRIMARY KEY CHECK (sequence > 0),
    type TEXT COLLATE "C" NOT NULL,
    leaf BYTEA NOT NULL,
    leaf_hash BYTEA NOT NULL,
    admitted_at TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C",
    root TEXT COLLATE "C",
    record_length BIGINT,
    authority_seq BIGINT
);
CREATE TABLE IF NOT EXISTS merkle_nodes(position BIGINT PRIMARY KEY, hash BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS revisions(
    sequence BIGINT PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL UNIQUE,
    root TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    author TEXT COLLATE "C" NOT NULL,
    authored_at TEXT COLLATE "C" NOT NULL,
    title TEXT COLLATE "C" NOT NULL,
    record_length INTEGER NOT NULL,  -- substr(bytea, integer, integer)
    authority_seq BIGINT NOT NULL,
    tree BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS revisions_tree ON revisions(tree, sequence) WHERE tree != 0;
CREATE INDEX IF NOT EXISTS revisions_later ON revisions(root, sequence) WHERE id != root;
CREATE TABLE IF NOT EXISTS objects(
    created_sequence BIGINT PRIMARY KEY,
    root TEXT COLLATE "C" NOT NULL UNIQUE,
    kind TEXT COLLATE "C" NOT NULL,
    author TEXT COLLATE "C" NOT NULL,
    head TEXT COLLATE "C" NOT NULL,
    head_sequence BIGINT NOT NULL,
    revisions BIGINT NOT NULL,
    depth BIGINT NOT NULL,
    parent TEXT COLLATE "C" NOT NULL,
    vote_target TEXT COLLATE "C" NOT NULL,
    feed_links TEXT NOT NULL,
    ancestors TEXT COLLATE "C" NOT NULL DEFAULT '',
    tree BIGINT NOT NULL DEFAULT 0,
    cdepth BIGINT NOT NULL DEFAULT 0,
    cparent BIGINT NOT NULL DEFAULT 0,
    jump BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS objects_head_sequence ON objects(head_sequence);
CREATE INDEX IF NOT EXISTS objects_contents ON objects(parent, kind, created_sequence)
    WHERE parent != '';
CREATE TABLE IF NOT EXISTS links(
    source_sequence BIGINT NOT NULL,
    position BIGINT NOT NULL,
    relation TEXT COLLATE "C" NOT NULL,
    target TEXT COLLATE "C" NOT NULL,
    target_root TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY(source_sequence, position)
);
CREATE INDEX IF NOT EXISTS links_target ON links(target, relation);
CREATE INDEX IF NOT EXISTS links_target_root ON links(target_root, relation);
CREATE INDEX IF NOT EXISTS links_incoming ON links(target, source_sequence)
    WHERE relation != 'votes_on';
-- object views (reads/objects.py); the list is store/schema.py's NOT_RELATED (a test compares)
CREATE INDEX IF NOT EXISTS links_related ON links(target_root, source_sequence) WHERE relation
    NOT IN ('contained_in', 'replies_to', 'answers', 'branches_from', 'about', 'evidence_for',
    'assesses', 'proposes_for', 'votes_on');
CREATE INDEX IF NOT EXISTS links_relationships ON links(target_root, source_sequence)
    WHERE relation IN ('relates_from', 'relates_to');
CREATE TABLE IF NOT EXISTS votes(
    author TEXT COLLATE "C" NOT NULL, target TEXT COLLATE "C" NOT NULL,
    vote_root TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY(author, target)
);
CREATE TABLE IF NOT EXISTS authorities(
    sequence BIGINT PRIMARY KEY,
    key TEXT COLLATE "C" NOT NULL,
    roles TEXT NOT NULL,
    document BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS authorities_key ON authorities(key);
CREATE TABLE IF NOT EXISTS revocations(
    sequence BIGINT PRIMARY KEY, key TEXT COLLATE "C" NOT NULL, issuer TEXT COLLATE "C" NOT NULL
);
CREATE INDEX IF NOT EXISTS revocations_key ON revocations(key);
CREATE TABLE IF NOT EXISTS feed(
    root TEXT COLLATE "C" NOT NULL, sequence BIGINT NOT NULL, PRIMARY KEY(root, sequence)
);
-- store/feed.py (store/schema.py documents it)
CREATE TABLE IF NOT EXISTS deep(
    root TEXT COLLATE "C" NOT NULL, tree BIGINT NOT NULL, hang BIGINT NOT NULL,
    PRIMARY KEY(root, tree, hang)
);
CREATE INDEX IF NOT EXISTS deep_tree ON deep(tree, hang);

CREATE TABLE IF NOT EXISTS checkpoints(
    size BIGINT PRIMARY KEY,
    root BYTEA NOT NULL,
    note TEXT NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    signed_at TEXT COLLATE "C" NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoint_cosignatures(
    size BIGINT NOT NULL REFERENCES checkpoints(size),
    witness TEXT COLLATE "C" NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY(size, witness)
);
CREATE INDEX IF NOT EXISTS checkpoint_cosignatures_witness
    ON checkpoint_cosignatures(witness, size);

CREATE TABLE IF NOT EXISTS personal_state(
    author TEXT COLLATE "C" PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL,
    signed BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS personal_requests(
    id TEXT COLLATE "C" PRIMARY KEY,
    author TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    nonce TEXT COLLATE "C" NOT NULL,
    authored_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS personal_requests_nonce
    ON personal_requests(author, nonce) WHERE nonce != '';
CREATE INDEX IF NOT EXISTS personal_requests_authored ON personal_requests(authored_ms);

-- The catalogue's projections (store/search_index.py), derived from the ledger.
CREATE TABLE IF NOT EXISTS catalogue_actors(
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    actor TEXT COLLATE "C" NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS catalogue(
    seq BIGINT PRIMARY KEY,
    kind TEXT COLLATE "C" NOT NULL,
    author_id BIGINT NOT NULL,
    facet TEXT COLLATE "C",
    score BIGINT NOT NULL
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
    kind TEXT COLLATE "C" NOT NULL, facet TEXT COLLATE "C" NOT NULL, author_id BIGINT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY(kind, facet, author_id)
);
CREATE TABLE IF NOT EXISTS catalogue_words(
    seq BIGINT PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL
);
-- The full-text index: one row per (normalised word, head) with the word's occurrences in the
-- head's title and in its body (store/postgresql/postings.py).  A query lists the heads that
-- hold every one of its words; relevance is Σ 3 × title_count + body_count.
CREATE TABLE IF NOT EXISTS catalogue_postings(
    term TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    title_count INTEGER NOT NULL,
    body_count INTEGER NOT NULL,
    PRIMARY KEY(term, seq)
);
CREATE INDEX IF NOT EXISTS catalogue_postings_seq ON catalogue_postings(seq);
CREATE TABLE IF NOT EXISTS vote_values(
    vote_root TEXT COLLATE "C" PRIMARY KEY,
    author_id BIGINT NOT NULL,
    target TEXT COLLATE "C" NOT NULL,
    value BIGINT NOT NULL,
    head_sequence BIGINT NOT NULL,
    target_seq BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS vote_values_author ON vote_values(author_id, head_sequence);
CREATE TABLE IF NOT EXISTS vote_totals(
    author_id BIGINT PRIMARY KEY,
    score BIGINT NOT NULL DEFAULT 0,
    up BIGINT NOT NULL DEFAULT 0,
    down BIGINT NOT NULL DEFAULT 0,
    neutral BIGINT NOT NULL DEFAULT 0,
    cast_votes BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS enrolment_requests(
    code TEXT COLLATE "C" PRIMARY KEY,
    worker TEXT COLLATE "C" NOT NULL,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    requested_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    certificate TEXT
);
CREATE INDEX IF NOT EXISTS enrolment_requests_expires ON enrolment_requests(expires_ms);
