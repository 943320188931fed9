"""The offline verifier on a generated export, and the tampering it must catch — each
detected with the first bad sequence named.

The same library is built on each backend (``exported_on``): its export is byte-identical on
both, its replay ends in either server's state, and either server streams the export's
lines.  The tampering tests edit that one export file, so they run once."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from alexandria.api.app import create_app
from alexandria.audit import replay, verify
from alexandria.audit.verify import VerificationFailed, verify_export
from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import make_revocation
from alexandria.reads import export
from alexandria.service.bootstrap import Founding, found_library, resolve_refs
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from tests.support.library import CONTRACT, SEED, T0, Api, Clock

ENTRY = b'{"leaf":{"admitted_at":"'  # how every entry line starts (PROTOCOL §7)


@dataclass
class Exported:
    """A small library's export: the contract's worked example, votes and a vote revision, a
    revoked worker, five checkpoints, and two entries after the last checkpoint."""

    lines: list[bytes]
    founding: Founding
    names: dict[str, str]
    db: Path | str
    server_objects: list[tuple[Any, ...]] = field(default_factory=list)
    server_votes: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def pin(self) -> str:
        return self.founding.genesis.pin

    def entry_index(self, sequence: int) -> int:
        """Index in ``lines`` of the entry line with ``sequence``."""
        return next(i for i, line in enumerate(self.lines)
                    if line.startswith(ENTRY) and _seq(line) == sequence)

    def checkpoint_indices(self) -> list[int]:
        return [i for i, line in enumerate(self.lines) if line.startswith(b'{"checkpoint"')]

    def checkpoint_sizes(self) -> list[int]:
        return [_cp(self.lines[i]).size for i in self.checkpoint_indices()]


def _seq(line: bytes) -> int:
    return int(orjson.loads(line)["sequence"])


def _cp(line: bytes) -> Checkpoint:
    return parse_checkpoint(orjson.loads(line)["checkpoint"])[0]


async def _build(directory: Path, db: Path | str | None = None) -> Exported:
    founding = found_library(seed=SEED, created_at=T0)
    for name in ("owner", "peer", "third"):
        founding.enroll(name)
    clock = Clock()
    db = db or directory / "lib.db"
    storage = storage_for(db, founding.genesis)
    storage.clock = clock
    library = Library(founding.genesis, storage, founding.log_key)
    app = create_app(library)
    names: dict[str, str] = {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            api = Api(client, founding, clock, library)

            async def checkpoint() -> None:
                assert (await client.get("/api/log/checkpoint")).status_code == 200

            for doc in founding.authority_documents():
                assert (await client.post("/api/authority", json=doc)).status_code == 201
            for i, step in enumerate(CONTRACT["object_examples"]["steps"]):
                signed = await api.publish(step["actor"], resolve_refs(step["content"], names))
                names[step["name"]] = signed["id"]
                if i in (3, 7):
                    await checkpoint()
            await checkpoint()
            vote = await api.publish("peer", {
                "kind": "vote", "title": "Vote", "body": "1", "previous": "",
                "links": [{"relation": "votes_on", "target": names["claim"]}]})
            names["vote"] = vote["id"]
            await api.publish("owner", {
                "kind": "vote", "title": "Vote", "body": "-1", "previous": "",
                "links": [{"relation": "votes_on", "target": names["discussion"]}]})
            revised = await api.publish("peer", {
                "kind": "vote", "title": "Vote", "body": "0", "previous": names["vote"],
                "links": [{"relation": "votes_on", "target": names["claim"]}]})
            names["vote-revised"] = revised["id"]
            third = await api.publish("third", {
                "kind": "reply", "title": "Late", "body": "A reply.", "previous": "",
                "links": [{"relation": "replies_to", "target": names["discussion"]}]})
            names["third-reply"] = third["id"]
            await checkpoint()
            revocation = make_revocation(founding.genesis,
                                         founding.participants["third"].worker.public_hex,
                                         "lost laptop", [founding.authority])
            assert (await client.post("/api/authority", json=revocation)).status_code == 201
            for i in range(3):
                await api.publish("owner", {"kind": "discussion", "title": f"More {i}",
                                            "body": {"text": "more"}, "links": [],
                                            "previous": ""})
            await checkpoint()
            for i in range(2):  # not covered by any checkpoint
                await api.publish("peer", {"kind": "discussion", "title": f"Tail {i}",
                                           "body": {"text": "tail"}, "links": [],
                                           "previous": ""})
            objects = await storage.read(lambda conn: conn.execute(
                "SELECT root, kind, author, head, depth FROM objects ORDER BY root").fetchall())
            votes = await storage.read(lambda conn: conn.execute(
                "SELECT author, target, vote_root FROM votes ORDER BY 1, 2").fetchall())
        lines = list(export.iter_db(db))
    return Exported(lines, founding, names, db, objects, votes)


_BUILT: dict[str, Exported] = {}


async def _built(backend: str, request: pytest.FixtureRequest) -> Exported:
    """The library on ``backend``, built once per test session (it is read-only data); the
    database stays for the session (a SQLite file in pytest's temporary directory, which
    pytest removes in later sessions; a database of the session's cluster)."""
    if backend not in _BUILT:
        directory = request.getfixturevalue("tmp_path_factory").mktemp("verify")
        db = request.getfixturevalue("pg_cluster").database() if backend == "postgresql" \
            else None
        _BUILT[backend] = await _build(directory, db)
    return _BUILT[backend]


@pytest.fixture
async def exported(request: pytest.FixtureRequest) -> Exported:
    """The library on SQLite (the tampering tests' export: the same bytes on both backends)."""
    return await _built("sqlite", request)


@pytest.fixture
async def exported_on(backend: str, request: pytest.FixtureRequest) -> Exported:
    """The library on the test's backend."""
    return await _built(backend, request)


def fails(lines: list[bytes], pin: str, workers: int = 0) -> VerificationFailed:
    with pytest.raises(VerificationFailed) as info:
        verify_export(lines, pin, workers=workers)
    return info.value


def entry(line: bytes) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(line)
    return value


def line_of(value: dict[str, Any]) -> bytes:
    return canonical(value) + b"\n"


def renumbered(lines: list[bytes], size_delta: int = 0) -> list[bytes]:
    """Entry lines renumbered 1, 2, ... in their current order; the header's size adjusted."""
    out, n = [], 0
    for line in lines[1:]:
        if line.startswith(ENTRY):
            n += 1
            line = line_of({**entry(line), "sequence": n})
        out.append(line)
    head = entry(lines[0])
    head["size"] += size_delta
    return [line_of(head), *out]


# --- a faithful export verifies --------------------------------------------------------------


async def test_the_export_verifies_with_and_without_threads(exported: Exported) -> None:
    for workers in (0, 2):
        s = verify_export(exported.lines, exported.pin, workers=workers)
        assert (s.size, s.contributions, s.certificates, s.revocations) == (24, 21, 2, 1)
        assert s.checkpoints == 5 and s.checkpoint_size == 22 and s.uncovered == 2
        assert s.log_keys == [exported.founding.log_key.public_hex]
    last = _cp(exported.lines[exported.checkpoint_indices()[-1]])
    assert exported.checkpoint_sizes() == [6, 10, 14, 18, 22]
    assert last.size == 22


async def test_the_replay_ends_in_the_servers_state(exported_on: Exported) -> None:
    """The in-memory ledger keeps the same facts as the server's tables."""
    exported = exported_on
    genesis, _size = verify.read_header(exported.lines[0].rstrip(b"\n"), exported.pin)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = replay.Ledger(genesis, Path(tmp))
        steps = verify._Replay(ledger)
        position = 0
        for line in exported.lines[1:]:
            line = line.rstrip(b"\n")
            if line.startswith(b'{"checkpoint"'):
                steps.checkpoint_line(verify._prepare_checkpoint(line, position, genesis.origin))
            else:
                position += 1
                steps.entry(verify._prepare_entry(line, position, genesis))
        objects = sorted((o.root, o.kind, o.author, o.head, o.depth)
                         for o in ledger._objects.values())
        votes = sorted((a, t, r) for (a, t), r in ledger._votes.items())
        ledger.close()
    assert objects == sorted(tuple(r) for r in exported.server_objects)
    assert votes == sorted(tuple(r) for r in exported.server_votes)


async def test_a_postgresql_library_exports_the_same_log(
    exported: Exported, request: pytest.FixtureRequest
) -> None:
    """The same admissions on PostgreSQL: ``export --db URL`` gives the SQLite library's export
    byte for byte, it verifies, and its replay ends in the PostgreSQL tables' state."""
    on_pg = await _built("postgresql", request)
    assert on_pg.lines == exported.lines
    assert verify_export(on_pg.lines, on_pg.pin).size == len(exported.lines) - 1 - 5
    assert sorted(on_pg.server_objects) == sorted(exported.server_objects)
    assert sorted(on_pg.server_votes) == sorted(exported.server_votes)


# --- tampering -------------------------------------------------------------------------------


async def test_a_flipped_byte_in_any_leaf_is_named_by_its_sequence(exported: Exported) -> None:
    rng = random.Random(6962)
    for sequence in range(1, 25):
        i = exported.entry_index(sequence)
        line = exported.lines[i]
        leaf_start, leaf_end = len(ENTRY), line.rindex(b',"sequence":')
        for _ in range(3):
            at = rng.randrange(leaf_start, leaf_end)
            bad = bytearray(line)
            bad[at] ^= 1 << rng.randrange(8)
            lines = list(exported.lines)
            lines[i] = bytes(bad)
            err = fails(lines, exported.pin)
            assert err.sequence == sequence, (sequence, at, err.message)


async def test_a_flipped_byte_outside_the_leaf_is_named_too(exported: Exported) -> None:
    i = exported.entry_index(9)
    line = exported.lines[i]
    for at in (20, len(line) - 6, line.rindex(b',"sequence":') + 12):
        bad = bytearray(line)
        bad[at] ^= 1
        lines = list(exported.lines)
        lines[i] = bytes(bad)
        assert fails(lines, exported.pin).sequence == 9


@pytest.mark.parametrize("sequence", [1, 2, 5, 12, 17, 23])
async def test_a_dropped_entry_is_named(exported: Exported, sequence: int) -> None:
    lines = list(exported.lines)
    del lines[exported.entry_index(sequence)]
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (sequence, "SEQUENCE_MISMATCH")
    # renumbered to hide the gap: caught by a rule or by the next checkpoint; after the last
    # checkpoint nothing signed says the entry existed, and the summary says so
    hidden = renumbered(lines, -1)
    after = [s for s in exported.checkpoint_sizes() if s >= sequence]
    if not after:
        assert verify_export(hidden, exported.pin).uncovered == 24 - 1 - after_last(exported)
        return
    err = fails(hidden, exported.pin)
    assert sequence <= err.sequence <= after[0], err.message


def after_last(exported: Exported) -> int:
    return exported.checkpoint_sizes()[-1]


async def test_a_dropped_last_entry_is_named(exported: Exported) -> None:
    lines = exported.lines[:-1]
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (24, "EXPORT_TRUNCATED")


@pytest.mark.parametrize("sequence", [1, 3, 11, 19, 20])
async def test_a_duplicated_entry_is_named(exported: Exported, sequence: int) -> None:
    lines = list(exported.lines)
    i = exported.entry_index(sequence)
    lines.insert(i + 1, lines[i])
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (sequence + 1, "SEQUENCE_MISMATCH")
    err = fails(renumbered(lines, 1), exported.pin)
    assert (err.sequence, err.code) == (sequence + 1, "DUPLICATE_ENTRY")


@pytest.mark.parametrize("sequence", [2, 4, 15, 21])
async def test_reordered_entries_are_named(exported: Exported, sequence: int) -> None:
    lines = list(exported.lines)
    i, j = exported.entry_index(sequence), exported.entry_index(sequence + 1)
    lines[i], lines[j] = lines[j], lines[i]
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (sequence, "SEQUENCE_MISMATCH")
    err = fails(renumbered(lines), exported.pin)
    assert err.sequence in (sequence, sequence + 1), err.message


def _insert(exported: Exported, after: int, envelope: dict[str, Any]) -> list[bytes]:
    """``envelope`` inserted as entry ``after + 1`` (validly signed, admitted at the same
    time as the entry before it), the rest renumbered."""
    lines = list(exported.lines)
    i = exported.entry_index(after)
    before = entry(lines[i])
    new = {"leaf": {"admitted_at": before["leaf"]["admitted_at"], "document": envelope},
           "sequence": after + 1, "type": "contribution"}
    lines.insert(i + 1, line_of(new))
    return renumbered(lines, 1)


async def test_an_inserted_validly_signed_entry_that_breaks_a_state_rule_is_named(
    exported: Exported,
) -> None:
    f, names = exported.founding, exported.names
    vote_at = exported.entry_index(17)
    assert entry(exported.lines[vote_at])["leaf"]["document"]["record"]["kind"] == "vote"
    at = entry(exported.lines[vote_at])["leaf"]["admitted_at"]

    def env(who: str, content: dict[str, Any]) -> dict[str, Any]:
        return f.participants[who].envelope(f.genesis, content, at)

    cases = [
        # a second vote by the same actor on the same target
        (17, env("peer", {"kind": "vote", "title": "Again", "body": "1", "previous": "",
                          "links": [{"relation": "votes_on", "target": names["claim"]}]}),
         "DUPLICATE_VOTE"),
        # a revision of a claim whose head has moved on (the merge)
        (17, env("owner", {"kind": "claim", "title": "Stale", "previous": names["claim"],
                           "body": {"statement": "s", "scope": "s", "assumptions": []},
                           "links": [{"relation": "contained_in",
                                      "target": names["subspace"]}]}),
         "HEAD_CONFLICT"),
        # a reply to nothing
        (9, env("owner", {"kind": "reply", "title": "Nothing", "body": "x", "previous": "",
                          "links": [{"relation": "replies_to", "target": "ab" * 32}]}),
         "LINK_TARGET_MISSING"),
        # a contribution by a worker whose key the authority revoked (sequence 21)
        (21, env("third", {"kind": "discussion", "title": "After", "body": {"text": "x"},
                           "links": [], "previous": ""}),
         "WORKER_REVOKED"),
    ]
    for after, envelope, code in cases:
        err = fails(_insert(exported, after, envelope), exported.pin)
        assert (err.sequence, err.code) == (after + 1, code), err.message
    # an inserted entry that breaks no rule is caught by the next checkpoint's root
    fine = env("peer", {"kind": "discussion", "title": "Fine", "body": {"text": "x"},
                        "links": [], "previous": ""})
    err = fails(_insert(exported, 17, fine), exported.pin)
    assert err.code in ("CHECKPOINT_ROOT", "CHECKPOINT_PLACE") and 18 <= err.sequence <= 19


async def test_swapped_checkpoints_are_named(exported: Exported) -> None:
    lines = list(exported.lines)
    a, b = exported.checkpoint_indices()[1:3]
    lines[a], lines[b] = lines[b], lines[a]
    err = fails(lines, exported.pin)  # the checkpoint of 14 right after leaf 10
    assert (err.sequence, err.code) == (11, "CHECKPOINT_PLACE")


def _with_checkpoint(exported: Exported, index: int, note: str) -> list[bytes]:
    lines = list(exported.lines)
    lines[exported.checkpoint_indices()[index]] = line_of({"checkpoint": note})
    return lines


async def test_a_checkpoint_of_a_forked_log_is_named(exported: Exported) -> None:
    """Validly signed by the log key, right size, another tree: the log forked."""
    f = exported.founding
    fork = sign_checkpoint(Checkpoint(f.genesis.origin, 14, bytes(range(32))), f.log_key)
    err = fails(_with_checkpoint(exported, 2, fork), exported.pin)
    assert (err.sequence, err.code) == (14, "CHECKPOINT_ROOT")


async def test_checkpoints_signed_by_the_wrong_key_or_badly_are_named(exported: Exported) -> None:
    f = exported.founding
    original = orjson.loads(exported.lines[exported.checkpoint_indices()[1]])["checkpoint"]
    cp = parse_checkpoint(original)[0]
    by_authority = sign_checkpoint(cp, f.authority)  # not a log key
    err = fails(_with_checkpoint(exported, 1, by_authority), exported.pin)
    assert (err.sequence, err.code) == (10, "CHECKPOINT_KEY_UNKNOWN")
    body, sig = original.rsplit(" ", 1)  # base64(key id[4] || signature[64]) and a newline
    forged = body + " " + sig[:20] + ("A" if sig[20] != "A" else "B") + sig[21:]
    err = fails(_with_checkpoint(exported, 1, forged), exported.pin)
    assert (err.sequence, err.code) == (10, "CHECKPOINT_SIGNATURE")
    other = sign_checkpoint(Checkpoint("elsewhere.example/log", cp.size, cp.root), f.log_key)
    err = fails(_with_checkpoint(exported, 1, other), exported.pin)
    assert (err.sequence, err.code) == (10, "CHECKPOINT_ORIGIN")


async def test_a_checkpoint_signed_before_the_log_certificate_was_admitted_is_named(
    exported: Exported,
) -> None:
    """Leaf 1 is the authority's certificate, leaf 2 the log key's: a checkpoint of size 1
    is signed by a key with no log certificate in the tree it covers."""
    f = exported.founding
    lines = list(exported.lines)
    root = merkle.leaf_hash(canonical(entry(lines[1])["leaf"]))
    early = sign_checkpoint(Checkpoint(f.genesis.origin, 1, root), f.log_key)
    lines.insert(2, line_of({"checkpoint": early}))
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (1, "CHECKPOINT_KEY_UNKNOWN")


async def test_the_header_is_checked(exported: Exported) -> None:
    err = fails(exported.lines, "00" * 32)
    assert (err.sequence, err.code) == (0, "GENESIS_PIN_MISMATCH")
    head = entry(exported.lines[0])
    longer = [line_of({**head, "size": 25}), *exported.lines[1:]]
    assert (fails(longer, exported.pin).code, fails(longer, exported.pin).sequence) == (
        "EXPORT_TRUNCATED", 25)
    shorter = [line_of({**head, "size": 23}), *exported.lines[1:]]
    assert fails(shorter, exported.pin).code == "EXPORT_TOO_LONG"
    assert fails([], exported.pin).code == "EXPORT_HEADER"
    assert fails([b"{}\n"], exported.pin).code == "EXPORT_HEADER"


async def test_a_line_that_is_not_canonical_is_named(exported: Exported) -> None:
    lines = list(exported.lines)
    i = exported.entry_index(7)
    value = entry(lines[i])
    lines[i] = orjson.dumps({"sequence": 7, **value}) + b"\n"  # keys in another order
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (7, "EXPORT_LINE")
    lines = list(exported.lines)
    lines[i] = lines[i].replace(b'"document":{"record":{', b'"document":{ "record":{')
    err = fails(lines, exported.pin)
    assert (err.sequence, err.code) == (7, "LEAF_NOT_CANONICAL")
    lines = list(exported.lines)
    lines[i] = line_of({**value, "type": "certificate"})
    err = fails(lines, exported.pin)
    assert err.sequence == 7


async def test_the_export_of_a_database_streams_the_same_lines_the_api_serves(
    exported_on: Exported,
) -> None:
    """``GET /api/log/entries`` objects are exactly the export's entry lines."""
    exported = exported_on
    storage = storage_for(exported.db, exported.founding.genesis)
    app = create_app(Library(exported.founding.genesis, storage, None))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.get("/api/log/entries", params={"start": 0, "end": 24})
    served = [canonical(e) + b"\n" for e in r.json()["entries"]]
    ours = [line for line in exported.lines if line.startswith(ENTRY)]
    assert served == ours[: len(served)]


# --- admission times -------------------------------------------------------------------------

DIGITS = [i for i, c in enumerate("2026-06-01T00:00:00.000Z") if c.isdigit()]


def _edited_times(exported: Exported, sequences: list[int],
                  rng: random.Random) -> list[tuple[int, str]]:
    """For each sequence, its ``admitted_at`` with one digit changed, still a timestamp."""
    out = []
    for sequence in sequences:
        original = entry(exported.lines[exported.entry_index(sequence)])["leaf"]["admitted_at"]
        while True:
            at = rng.choice(DIGITS)
            edited = original[:at] + rng.choice("0123456789") + original[at + 1:]
            if edited != original and parse_ms(edited) is not None:
                out.append((sequence, edited))
                break
    return out


def _with_time(lines: list[bytes], index: int, admitted_at: str) -> list[bytes]:
    value = entry(lines[index])
    value["leaf"]["admitted_at"] = admitted_at
    out = list(lines)
    out[index] = line_of(value)
    return out


def _checkpointed_after_every_entry(exported: Exported) -> list[bytes]:
    """The export as a log that signed a checkpoint after every entry from the log
    certificate's (sequence 2) on: each checkpoint signed by the log key over the root of the
    exported leaves so far."""
    f = exported.founding
    hashes: list[bytes] = []
    out = [exported.lines[0]]
    for line in exported.lines[1:]:
        if line.startswith(b'{"checkpoint"'):
            continue
        out.append(line)
        hashes.append(merkle.leaf_hash(canonical(entry(line)["leaf"])))
        if len(hashes) >= 2:
            root = merkle.root_from_leaves(hashes)
            out.append(line_of({"checkpoint": sign_checkpoint(
                Checkpoint(f.genesis.origin, len(hashes), root), f.log_key)}))
    return out


async def test_every_one_digit_edit_of_an_admission_time_is_named_by_its_sequence(
    exported: Exported,
) -> None:
    """Issue 19: the leaf commits to ``admitted_at``.  Twenty one-digit edits, each leaving a
    valid timestamp: with a checkpoint after every entry each is named by exactly its own
    sequence — by a rule the edited clock breaks, or else by the checkpoint's root (with a
    leaf of ``JCS(document)`` alone, those passed)."""
    lines = _checkpointed_after_every_entry(exported)
    assert verify_export(lines, exported.pin, covered=True).checkpoints == 23
    sequences = random.Random(19).sample(range(2, 25), 20)
    codes = []
    for sequence, edited in _edited_times(exported, sequences, random.Random(1919)):
        index = next(i for i, line in enumerate(lines)
                     if line.startswith(ENTRY) and _seq(line) == sequence)
        err = fails(_with_time(lines, index, edited), exported.pin)
        assert err.sequence == sequence, (sequence, edited, err.code, err.message)
        codes.append(err.code)
    assert codes.count("CHECKPOINT_ROOT") >= 5, codes  # caught by the tree, not by a rule


async def test_an_edited_admission_time_fails_the_checkpoint_that_covers_it(
    exported: Exported,
) -> None:
    """With checkpoints every few entries (the export as the server wrote it), an edit no rule
    catches is refused at the first checkpoint that covers it."""
    sizes = exported.checkpoint_sizes()
    for sequence, edited in _edited_times(exported, list(range(1, 23)), random.Random(6)):
        err = fails(_with_time(exported.lines, exported.entry_index(sequence), edited),
                    exported.pin)
        covering = min(s for s in sizes if s >= sequence)
        assert sequence <= err.sequence <= covering, (sequence, edited, err.message)
        if err.code == "CHECKPOINT_ROOT":
            assert err.sequence == covering
