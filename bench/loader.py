"""Build a library of N validly signed contributions of mixed kinds, for the read benchmarks.

    .venv/bin/python -m bench.loader --dir DIR --entries N [--seed S] [--workers 2]
        [--follow-members M] [--batch 2000]
    .venv/bin/python -m bench.loader --dir DIR --extend K [--from LIB] [--cache-mib 512]
        [--drop-caches]

Writes ``DIR/genesis.json``, ``DIR/log.key``, ``DIR/library.db`` and ``DIR/loader.json``
(``{"genesis_pin", "follow_root", "follow_members", "entries", "milestones", ...}``) and
prints the follow root's id.  Every 25 batches it prints the load's rate so far; a load past
100,000 entries ends with its rate against that of its first 100,000 (the target: at least
80% at 1,000,000), of the whole load and of the writer's admitting time alone
(``against_first_100k``).  Serve the result with
``alexandria serve --genesis DIR/genesis.json --db DIR/library.db --log-key DIR/log.key``.

Every contribution goes through the same rules as ``POST /api/entries``: worker processes sign
each record and run ``admission.prepare`` on the envelope's bytes (JSON parsing, JCS, SHA-256,
Ed25519, the content schema); the main process admits the candidates in order with
``LedgerStorage.admit_many`` — ``decide`` with every state rule, the log leaf and Merkle nodes,
the feed, the catalogue indexes — in large group-commit transactions.  Any refusal stops the
load with the typed error.

The mix: nested spaces, discussions (some about a claim, some branching), claims, documents,
evidence, assessments, relationships, proposals, replies to discussions and replies, votes and
vote changes, and revisions of spaces, claims, documents, discussions and replies.  One space,
the *follow root*, gathers ``--follow-members`` member revisions (contained objects, their
replies, evidence and assessments) spread over the whole load, for the changes-feed benchmark.
Text is drawn from a Zipf-distributed vocabulary, so search words range from rare to common.

``--extend K`` measures the *marginal* ingest rate of a library the loader built: it replays the
planner (same seed, no signing) up to the library's last entry, checks that entry is the
library's, and admits K more of the same mix, linking anywhere in the library as the load did.
It prints admissions/s, the writer thread's CPU seconds per entry, and the bytes the process
read and wrote per entry (``/proc/self/io``), per step and in total.  Wall rates on a shared
machine follow its load; CPU and bytes per entry follow the library's size.  It changes the
library: run it on a copy, once (a second run refuses).  ``--from LIB`` makes that copy: DIR
(new) gets LIB's files, the database written a page at a time, so its pages sit in the page
cache as a running server's do (read and written by SQLite a page at a time).  A copy made by
``cp``, or a file read once through ``cat`` to warm it, sits there in large folios instead, and
a 4 KiB write into a large folio costs several times one into a page of its own: the checkpoints
of admissions into such a copy are slower, the more so the more of its file the page cache
holds.  ``--drop-caches`` (root) empties the page cache first, so a library larger than the
memory left for it starts from disk.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import multiprocessing
import os
import random
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path
from typing import Any

import orjson

from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.records import make_envelope, make_record
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.files import write_json
from alexandria.rules.admission import Candidate, prepare
from alexandria.service.bootstrap import Founding, Participant, found_library
from alexandria.store.interface import Admitted
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.schema import revision_id
from alexandria.store.sqlite import sqlite_storage

CREATED_AT = "2026-01-01T00:00:00.000Z"
START = "2026-01-02T00:00:00.000Z"  # first authored_at; then 10 ms apart
ACTORS = 200
VOCABULARY = 20_000
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "da", "gor", "lin", "mar",
             "sel", "tor", "qua", "zen", "bri", "fal", "dun", "e", "a", "o", "i", "u")
MUTABLE = ("space", "claim", "document", "discussion", "reply")

# (kind, weight) of each planned step
MIX = (
    ("space", 2), ("discussion", 9), ("claim", 13), ("document", 9), ("evidence", 7),
    ("assessment", 4), ("relationship", 3), ("proposal", 1), ("reply", 20), ("vote", 21),
    ("vote-change", 3), ("revision", 8),
)


def zipf_weights(words: int) -> list[float]:
    """Cumulative weights of Zipf's law over ``words`` words, the k-th about 1/k as frequent as
    the first (``random.choices(..., cum_weights=...)``)."""
    return list(itertools.accumulate(1.0 / k for k in range(1, words + 1)))


def vocabulary(rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


@dataclass(slots=True)
class Obj:
    root: str
    kind: str
    author: int
    head: str
    links: list[tuple[str, str]]
    member: bool
    title: str


class _Joined:
    """Two lists seen as one, without copying them (``random.choice`` needs only ``len`` and
    indexing, and draws the same numbers as it would from the concatenation): a copy per reply
    made the plan quadratic in the number of discussions and replies."""

    def __init__(self, first: list[Obj], second: list[Obj]) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def __getitem__(self, i: int) -> Obj:
        n = len(self.first)
        return self.first[i] if i < n else self.second[i - n]


@dataclass
class Planner:
    """The stream of records, in admission order, with the ids the later ones link to."""

    founding: Founding
    entries: int
    follow_members: int
    rng: random.Random
    words: list[str] = field(default_factory=list)
    cum: list[float] = field(default_factory=list)
    objects: list[Obj] = field(default_factory=list)
    by_kind: dict[str, list[Obj]] = field(default_factory=dict)
    follow_spaces: list[Obj] = field(default_factory=list)
    votes: set[tuple[int, str]] = field(default_factory=set)
    vote_list: list[Obj] = field(default_factory=list)
    targets: list[Obj] = field(default_factory=list)
    evidence_of: dict[str, list[str]] = field(default_factory=dict)
    members: int = 0
    made: int = 0
    clock: int = 0
    follow_root: str = ""

    def __post_init__(self) -> None:
        self.words = vocabulary(self.rng)
        self.cum = zipf_weights(len(self.words))
        ms = parse_ms(START)
        assert ms is not None
        self.clock = ms
        self.kinds = [k for k, _ in MIX]
        self.weights = [w for _, w in MIX]

    def text(self, n: int) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self.cum, k=n))

    def title(self) -> str:
        return self.text(self.rng.randint(2, 7)).capitalize()

    def pick(self, kind: str) -> Obj | None:
        found = self.by_kind.get(kind)
        return self.pick_from(found) if found else None

    def pick_from(self, pool: list[Obj] | _Joined) -> Obj:
        """A random object, a member of the follow root only when one more member is wanted
        (links to a member make a member), so the root gets about ``follow_members``."""
        want = self.wants_member()
        obj = self.rng.choice(pool)
        for _ in range(8):
            if obj.member == want:
                break
            obj = self.rng.choice(pool)
        return obj

    def wants_member(self) -> bool:
        remaining = self.entries - self.made
        if self.members >= self.follow_members or remaining <= 0:
            return False
        return self.rng.random() < min(1.0, 3.0 * (self.follow_members - self.members) / remaining)

    def record(self, author: int, kind: str, title: str, body: Any, links: list[tuple[str, str]],
               previous: str = "") -> tuple[int, dict[str, Any]]:
        self.clock += 10
        p = self.participant(author)
        rec = make_record(self.founding.genesis.pin, p.actor, format_ms(self.clock), {
            "kind": kind, "title": title, "body": body, "previous": previous,
            "links": [{"relation": r, "target": t} for r, t in links]})
        return author, rec

    def participant(self, i: int) -> Participant:
        return self.founding.participants[f"actor{i}"]

    def add(self, author: int, kind: str, title: str, body: Any, links: list[tuple[str, str]],
            member: bool) -> tuple[int, dict[str, Any]]:
        out = self.record(author, kind, title, body, links)
        rid = sha256_hex(canonical(out[1]))
        obj = Obj(rid, kind, author, rid, links, member, title)
        self.objects.append(obj)
        self.by_kind.setdefault(kind, []).append(obj)
        if kind != "vote":
            self.targets.append(obj)
        if member:
            self.members += 1
        return out

    def space_for(self, member: bool) -> Obj | None:
        if member and self.follow_spaces:
            return self.rng.choice(self.follow_spaces)
        spaces = self.by_kind["space"]
        obj = self.rng.choice(spaces)
        for _ in range(8):
            if not obj.member:
                break
            obj = self.rng.choice(spaces)
        return obj

    def steps(self) -> Iterator[tuple[int, dict[str, Any]]]:
        # the follow root first, then a few spaces to hold everything else
        yield self.add(0, "space", "Follow root", {"summary": "The followed space"}, [], True)
        self.follow_root = self.objects[0].root
        self.follow_spaces.append(self.objects[0])
        self.made = 1
        while self.made < self.entries:
            kind = self.rng.choices(self.kinds, self.weights)[0]
            step = self.step(kind) if self.objects else None
            if step is None:
                step = self.step("space")
            assert step is not None
            self.made += 1
            yield step

    def step(self, kind: str) -> tuple[int, dict[str, Any]] | None:
        rng = self.rng
        author = rng.randrange(ACTORS)
        if kind == "space":
            wanted = self.wants_member()
            parent = self.space_for(wanted)
            links = []
            if parent is not None and (wanted or rng.random() < 0.8):
                links = [("contained_in", parent.root)]
            member = bool(links) and parent is not None and parent.member
            out = self.add(author, "space", self.title(), self.body("space"), links, member)
            if member:
                self.follow_spaces.append(self.objects[-1])
            return out
        if kind in ("claim", "document", "discussion"):
            parent = self.space_for(self.wants_member())
            links = [("contained_in", parent.root)] if parent else []
            member = parent is not None and parent.member
            body = self.body(kind)
            if kind == "discussion":
                target = self.pick("claim")
                if target is not None and rng.random() < 0.3:
                    links.append(("about", target.head))
                    member = member or target.member
                elif rng.random() < 0.1 and self.by_kind.get("reply"):
                    origin = self.pick("reply")
                    assert origin is not None
                    links.append(("branches_from", origin.head))
                    member = member or origin.member
            return self.add(author, kind, self.title(), body, links, member)
        if kind == "reply":
            pool = _Joined(self.by_kind.get("discussion") or [], self.by_kind.get("reply") or [])
            if not pool:
                return None
            to = self.pick_from(pool)
            return self.add(author, "reply", self.title(), self.text(rng.randint(5, 50)),
                            [("replies_to", to.head)], to.member)
        if kind == "evidence":
            claim = self.pick("claim")
            if claim is None:
                return None
            method = rng.choice(("proof", "example", "experiment", "observation", "source",
                                 "counterexample"))
            body = {"claim": claim.head, "method": method, "content": self.text(30),
                    "sources": [{"label": self.text(3), "url": f"https://example.org/{self.made}"}]
                    if method == "source" else []}
            out = self.add(author, "evidence", self.title(), body,
                           [("evidence_for", claim.head)], claim.member)
            self.evidence_of.setdefault(claim.head, []).append(self.objects[-1].root)
            return out
        if kind == "assessment":
            claim = self.pick("claim")
            if claim is None:
                return None
            evidence = self.evidence_of.get(claim.head, [])[:3]
            verdict = rng.choice(("supported", "disputed", "accepted", "refuted")) if evidence \
                else "open"
            body = {"claim": claim.head, "verdict": verdict, "rationale": self.text(20),
                    "evidence": evidence}
            return self.add(author, "assessment", self.title(), body,
                            [("assesses", claim.head)], claim.member)
        if kind == "relationship":
            a, b = self.pick("claim"), self.pick("document")
            if a is None or b is None:
                return None
            body = {"from": a.head, "to": b.head, "relation": rng.choice(
                ("supports", "contradicts", "depends_on", "answers", "related_to")),
                    "rationale": self.text(15)}
            return self.add(author, "relationship", self.title(), body,
                            [("relates_from", a.head), ("relates_to", b.head)], False)
        if kind == "proposal":
            base = self.pick("claim")
            if base is None:
                return None
            proposed = {"statement": self.text(12), "scope": self.text(5), "assumptions": []}
            body = {"base": base.head, "title": self.title(), "body": proposed,
                    "links": [{"relation": r, "target": t} for r, t in base.links],
                    "rationale": self.text(10)}
            return self.add(author, "proposal", self.title(), body,
                            [("proposes_for", base.head)], base.member)
        if kind == "vote":
            target = rng.choice(self.targets)
            if (author, target.root) in self.votes:
                return None
            self.votes.add((author, target.root))
            out = self.add(author, "vote", "vote", rng.choice(("1", "1", "1", "-1", "0")),
                           [("votes_on", target.root)], False)
            self.vote_list.append(self.objects[-1])
            return out
        if kind == "vote-change":
            if not self.vote_list:
                return None
            return self.revise(rng.choice(self.vote_list), rng.choice(("1", "-1", "0")))
        if kind == "revision":
            obj = self.pick(rng.choice(MUTABLE))
            if obj is None:
                return None
            return self.revise(obj, self.body(obj.kind))
        raise AssertionError(kind)

    def body(self, kind: str) -> Any:
        rng = self.rng
        if kind == "claim":
            return {"statement": self.text(rng.randint(8, 30)), "scope": self.text(6),
                    "assumptions": [self.text(5) for _ in range(rng.randint(0, 2))]}
        if kind == "document":
            return {"text": self.text(rng.randint(40, 160))}
        if kind == "discussion":
            return {"text": self.text(rng.randint(10, 60))}
        if kind == "space":
            return {"summary": self.text(20)}
        return self.text(rng.randint(5, 50))  # reply

    def revise(self, obj: Obj, body: Any) -> tuple[int, dict[str, Any]]:
        out = self.record(obj.author, obj.kind, obj.title, body, obj.links, obj.head)
        obj.head = sha256_hex(canonical(out[1]))
        if obj.member:
            self.members += 1
        return out


# --- worker processes: sign and prepare ------------------------------------------------------

_FOUNDING: Founding | None = None


def _founding(seed: bytes) -> Founding:
    f = found_library(library="alexandria-bench", seed=seed, created_at=CREATED_AT)
    for i in range(ACTORS):
        f.enroll(f"actor{i}")
    return f


def _init_worker(seed: bytes) -> None:
    global _FOUNDING
    _FOUNDING = _founding(seed)


def sign_and_prepare(batch: list[tuple[int, dict[str, Any]]]) -> list[Candidate]:
    f = _FOUNDING
    assert f is not None
    out = []
    for author, record in batch:
        p = f.participants[f"actor{author}"]
        body = orjson.dumps(make_envelope(record, p.certificate, p.worker))
        out.append(prepare(body, f.genesis))
    return out


async def _signed(pool: Pool, batches: Iterator[list[tuple[int, dict[str, Any]]]],
                  workers: int) -> AsyncIterator[list[Candidate]]:
    """Each batch signed and prepared by the pool's workers, in order, at most ``2 * workers``
    batches ahead of the one the caller admits (a bounded read-ahead)."""
    pending: deque[AsyncResult[list[Candidate]]] = deque()
    while True:
        while len(pending) < 2 * workers:
            nxt = next(batches, None)
            if nxt is None:
                break
            pending.append(pool.apply_async(sign_and_prepare, (nxt,)))
        if not pending:
            return
        yield await asyncio.get_running_loop().run_in_executor(None, pending.popleft().get)


async def _admit_all(storage: LedgerStorage, cands: list[Candidate]) -> None:
    """Admit a batch; any candidate not newly admitted stops the load."""
    results = await storage.admit_many(cands)
    for cand, res in zip(cands, results, strict=True):
        if not isinstance(res, Admitted) or not res.created:
            raise SystemExit(f"refused {cand.record.kind} {cand.record.id}: {res!r}")


def _batches(planner: Planner, size: int) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    return _batches_of(planner.steps(), size)


async def load(directory: Path, entries: int, seed: int, workers: int, follow_members: int,
               batch: int) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "library.db"
    if db.exists():
        raise SystemExit(f"{db} exists: load into an empty directory")
    seed_bytes = f"bench-loader/{seed}".encode()
    founding = _founding(seed_bytes)
    write_json(directory / "genesis.json", founding.genesis_document)
    founding.log_key.save(directory / "log.key")
    planner = Planner(founding, entries, follow_members, random.Random(seed))
    admitted = last_admitted = 0
    waited = writing = last_writing = 0.0
    milestones: list[dict[str, Any]] = []  # the whole load so far, every 25 batches
    # the pool forks before the storage starts its threads
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_init_worker, initargs=(seed_bytes,)) as pool:
        storage = sqlite_storage(db, founding.genesis)
        await storage.open()
        # a bulk load touches every index page: give the writer a large page cache
        await storage.write(lambda conn: conn.execute("PRAGMA cache_size = -524288"))
        started = time.perf_counter()
        try:
            for doc in founding.authority_documents():
                await storage.admit_authority(doc)
            t0 = time.perf_counter()
            async for cands in _signed(pool, _batches(planner, batch), workers):
                t1 = time.perf_counter()
                await _admit_all(storage, cands)
                waited += t1 - t0
                t0 = time.perf_counter()
                writing += t0 - t1
                admitted += len(cands)
                if admitted % (batch * 25) < batch:
                    rate = admitted / (time.perf_counter() - started)
                    # the writer's own time per step: what grows with the library's size
                    step = writing - last_writing
                    size = db.stat().st_size / admitted
                    milestones.append({
                        "entries": admitted, "per_second": round(rate, 1),
                        "admitting_per_second": round(admitted / max(writing, 1e-9), 1),
                        "seconds_waiting_for_signers": round(waited, 1),
                        "database_bytes_per_entry": round(size)})
                    print(f"  {admitted:,} admitted, {rate:,.0f}/s (waiting for signers"
                          f" {waited:.0f} s, admitting {writing:.0f} s; this step"
                          f" {admitted - last_admitted:,} in {step:.0f} s of admitting,"
                          f" {(admitted - last_admitted) / max(step, 1e-9):,.0f}/s;"
                          f" {size:,.0f} bytes/entry)",
                          file=sys.stderr, flush=True)
                    last_writing, last_admitted = writing, admitted
        finally:
            await storage.close()
    elapsed = time.perf_counter() - started
    summary = {
        "genesis_pin": founding.genesis.pin,
        "follow_root": planner.follow_root,
        "follow_members": planner.members,
        "entries": admitted,
        "seed": seed,
        "seconds": round(elapsed, 1),
        "per_second": round(admitted / elapsed, 1),
        "seconds_waiting_for_signers": round(waited, 1),
        "seconds_admitting": round(writing, 1),
        "milestones": milestones,
        "against_first_100k": against_first(milestones, FIRST),
        "actors": [founding.participants[f"actor{i}"].actor for i in range(ACTORS)],
        "words": planner.words[:: max(1, VOCABULARY // 200)],
    }
    write_json(directory / "loader.json", summary)
    return summary


FIRST = 100_000  # the ingest target: the rate at 1,000,000 entries against the rate at this size


def against_first(milestones: list[dict[str, Any]], first: int) -> dict[str, Any] | None:
    """The whole load's rates against those of its first ``first`` entries (the first
    milestone at or past it): admissions per second of the load, and per second the writer
    spent admitting (without the waits for the signers).  None if the load is not larger."""
    base = next((m for m in milestones if m["entries"] >= first), None)
    if base is None or milestones[-1] is base:
        return None
    end = milestones[-1]
    return {
        "entries": end["entries"], "first": base["entries"],
        "per_second": round(100 * end["per_second"] / base["per_second"], 1),
        "admitting_per_second": round(
            100 * end["admitting_per_second"] / base["admitting_per_second"], 1),
    }


def _io(path: str = "/proc/self/io") -> dict[str, int]:
    """I/O counters from ``path``: by default this process's, every thread's (the
    checkpointer's too); ``/proc/self/task/TID/io`` for one thread."""
    out = {}
    for line in Path(path).read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = int(value)
    return out


def _writer_usage(conn: Any) -> tuple[float, dict[str, int]]:
    """Run on the writer thread: its own CPU seconds so far, and its own counters.  From
    ``/proc/self/task/TID/io``: ``wchar``, the bytes it handed to ``write`` (the WAL frames of
    its commits, and the checkpoints it finishes itself), and ``rchar``, the bytes it read (the
    pages its cache lacked, from the page cache or the disk) -- exact counts of the writer's own
    work, where the process's ``write_bytes`` also holds the checkpointer's writes and what the
    filesystem charges for them.  From ``/proc/self/task/TID/schedstat``: ``queued_ns``, the
    time it was ready to run but waited for a core (the signers and the checkpointer share the
    machine's)."""
    tid = threading.get_native_id()
    counters = _io(f"/proc/self/task/{tid}/io")
    counters["queued_ns"] = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1])
    return time.thread_time(), counters


LIBRARY_FILES = ("genesis.json", "log.key", "loader.json")


def copy_library(source: Path, directory: Path) -> None:
    """Copy a closed library built by this loader into ``directory`` (new), the database one
    page at a time (see the module's docstring)."""
    wal = source / "library.db-wal"
    if wal.exists() and wal.stat().st_size:
        raise SystemExit(f"{source} is open or was not closed: its -wal file holds commits")
    if directory.exists():
        raise SystemExit(f"{directory} exists: --from copies into a new directory")
    directory.mkdir(parents=True)
    for name in LIBRARY_FILES:
        shutil.copy2(source / name, directory / name)
    fd = os.open(directory / "library.db", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(source / "library.db", "rb", buffering=0) as src:
            while page := src.read(4096):
                os.write(fd, page)
        os.fsync(fd)
    finally:
        os.close(fd)


async def extend(directory: Path, more: int, batch: int, workers: int, cache_mib: int,
                 drop_caches: bool) -> dict[str, Any]:
    info = orjson.loads((directory / "loader.json").read_bytes())
    if "extended_by" in info:
        raise SystemExit(f"{directory} was already extended: extend a fresh copy of the load")
    seed, entries = int(info["seed"]), int(info["entries"])
    seed_bytes = f"bench-loader/{seed}".encode()
    founding = _founding(seed_bytes)
    if founding.genesis.pin != info["genesis_pin"]:
        raise SystemExit(f"{directory} was not built by this loader with seed {seed}")
    # the same planner, replayed without signing, knows every object the load made (heads,
    # votes, members), so the new entries link anywhere in the library as the load's did
    planner = Planner(founding, entries, int(info["follow_members"]), random.Random(seed))
    t0 = time.perf_counter()
    steps = planner.steps()
    last: dict[str, Any] = {}
    for _ in range(entries):
        _, last = next(steps)
    replay = time.perf_counter() - t0
    # the plan of the whole library (an object per entry) lives on in this process, as no
    # server's heap would: out of the collector's sight, a full collection does not walk it
    gc.freeze()
    planner.entries = entries + more  # from here the planner goes on where the load stopped
    print(f"  replayed {entries:,} planned entries in {replay:.0f} s", file=sys.stderr,
          flush=True)
    db = directory / "library.db"
    if drop_caches:
        from bench.read_latency import drop_page_cache
        drop_page_cache()
    ctx = multiprocessing.get_context("fork")
    steps_out: list[dict[str, Any]] = []
    with ctx.Pool(workers, initializer=_init_worker, initargs=(seed_bytes,)) as pool:
        storage = sqlite_storage(db, founding.genesis)
        await storage.open()
        try:
            last_id = sha256_hex(canonical(last))
            found = await storage.read(lambda conn: conn.execute(
                "SELECT count(*) FROM revisions").fetchone()[0])
            known = await storage.read(lambda conn: conn.execute(
                f"SELECT 1 FROM revisions WHERE {revision_id('?')}", (last_id, last_id)).fetchone())
            if known is None:
                raise SystemExit(f"the replayed plan's last entry {last_id} is not in {db}")
            pragma = f"PRAGMA cache_size = -{cache_mib * 1024}"
            await storage.write(lambda conn: conn.execute(pragma))

            def gen() -> Iterator[tuple[int, dict[str, Any]]]:
                for _ in range(more):
                    yield next(steps)

            batches = _batches_of(gen(), batch)
            admitted = 0
            cpu0, wio0 = await storage.write(_writer_usage)
            cpu_last, wio_last = cpu0, wio0
            io0 = io_last = _io()
            started = t_last = time.perf_counter()
            admitted_last = 0
            report_every = max(batch, more // 10)
            admitting = admitting_last = 0.0
            async for cands in _signed(pool, batches, workers):
                t1 = time.perf_counter()
                await _admit_all(storage, cands)
                admitting += time.perf_counter() - t1
                admitted += len(cands)
                if admitted - admitted_last >= report_every or admitted == more:
                    (cpu, wio), io, now = (await storage.write(_writer_usage), _io(),
                                           time.perf_counter())
                    step = _figures(admitted - admitted_last, now - t_last, cpu - cpu_last,
                                    io, io_last, wio, wio_last, admitting - admitting_last)
                    step["upto"] = found + admitted
                    steps_out.append(step)
                    print(f"  {found + admitted:,}: {step['per_second']:,.0f}/s,"
                          f" writer {step['writer_cpu_ms_per_entry']:.2f} ms CPU/entry,"
                          f" {step['written_bytes_per_entry']:,.0f} B written/entry,"
                          f" {step['read_bytes_per_entry']:,.0f} B read/entry;"
                          f" the writer thread wrote {step['writer_wrote_bytes_per_entry']:,.0f}"
                          f" B/entry, read {step['writer_read_bytes_per_entry']:,.0f} B/entry;"
                          f" admitting {step['admitting_ms_per_entry']:.2f} ms/entry of which"
                          f" waiting for a core {step['writer_queued_ms_per_entry']:.2f},"
                          f" blocked {step['writer_blocked_ms_per_entry']:.2f}",
                          file=sys.stderr, flush=True)
                    cpu_last, wio_last, io_last, t_last, admitted_last, admitting_last = (
                        cpu, wio, io, now, admitted, admitting)
            (cpu_end, wio_end), io_end, end = (await storage.write(_writer_usage), _io(),
                                               time.perf_counter())
        finally:
            await storage.close()
    total = _figures(admitted, end - started, cpu_end - cpu0, io_end, io0, wio_end, wio0,
                     admitting)
    # the second half: past the first batches' cold start, the steady state
    half = steps_out[len(steps_out) // 2:]
    n = sum(s["entries"] for s in half)
    steady = {
        "entries": n,
        "per_second": round(n / sum(s["entries"] / s["per_second"] for s in half), 1),
        # each a mean weighted by entries: times to the µs, bytes whole
        **{key: round(sum(s[key] * s["entries"] for s in half) / n,
                      3 if key.endswith("ms_per_entry") else None) for key in (
            "writer_cpu_ms_per_entry", "written_bytes_per_entry", "read_bytes_per_entry",
            "writer_wrote_bytes_per_entry", "writer_read_bytes_per_entry",
            "admitting_ms_per_entry", "writer_queued_ms_per_entry",
            "writer_blocked_ms_per_entry")},
    }
    summary = {"library_entries": found, "extended_by": admitted, "cache_mib": cache_mib,
               "drop_caches": drop_caches, "replay_seconds": round(replay, 1),
               "load_average": os.getloadavg()[0], "total": total, "steady": steady,
               "steps": steps_out}
    info["extended_by"] = summary
    write_json(directory / "loader.json", info)
    return summary


def _figures(n: int, wall: float, cpu: float, io: dict[str, int], before: dict[str, int],
             wio: dict[str, int], wbefore: dict[str, int], admitting: float) -> dict[str, Any]:
    """One step's figures per entry.  Of the time spent admitting (the writer's batches, from
    the event loop's side), what the writer thread did not spend on a core nor waiting for one
    is ``writer_blocked``: reads from disk, the commit's ``fsync``, a checkpoint it waited for."""
    queued = (wio["queued_ns"] - wbefore["queued_ns"]) / 1e9
    return {
        "entries": n,
        "per_second": round(n / max(wall, 1e-9), 1),
        "writer_cpu_ms_per_entry": round(1000 * cpu / n, 3),
        "written_bytes_per_entry": round((io["write_bytes"] - before["write_bytes"]) / n),
        "read_bytes_per_entry": round((io["read_bytes"] - before["read_bytes"]) / n),
        "writer_wrote_bytes_per_entry": round((wio["wchar"] - wbefore["wchar"]) / n),
        "writer_read_bytes_per_entry": round((wio["rchar"] - wbefore["rchar"]) / n),
        "admitting_ms_per_entry": round(1000 * admitting / n, 3),
        "writer_queued_ms_per_entry": round(1000 * queued / n, 3),
        "writer_blocked_ms_per_entry": round(1000 * max(0.0, admitting - cpu - queued) / n, 3),
    }


def _batches_of(steps: Iterator[tuple[int, dict[str, Any]]],
                size: int) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch = []
    for step in steps:
        batch.append(step)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.loader", description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--entries", type=int, help="entries of a new load")
    ap.add_argument("--extend", type=int, metavar="K",
                    help="admit K more entries into a library this loader built (a copy)")
    ap.add_argument("--from", dest="source", type=Path, metavar="LIB",
                    help="--extend: first copy the library LIB into DIR (new), a page at a time")
    ap.add_argument("--cache-mib", type=int, default=512,
                    help="--extend: the writer's page cache (the load's is 512 MiB)")
    ap.add_argument("--drop-caches", action="store_true",
                    help="--extend: drop the page cache first (root)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--follow-members", type=int, default=None,
                    help="member revisions of the follow root (default min(10000, entries/10))")
    ap.add_argument("--batch", type=int, default=2000, help="admissions per transaction")
    args = ap.parse_args(argv)
    if (args.entries is None) == (args.extend is None):
        ap.error("give one of --entries (a new load) and --extend (more into a load)")
    if args.source is not None and args.extend is None:
        ap.error("--from goes with --extend")
    if args.extend is not None:
        if args.source is not None:
            copy_library(args.source, args.dir)
        ext = asyncio.run(extend(args.dir, args.extend, args.batch, args.workers,
                                 args.cache_mib, args.drop_caches))
        print(orjson.dumps({k: v for k, v in ext.items() if k != "steps"},
                           option=orjson.OPT_INDENT_2).decode())
        return 0
    follow = args.follow_members
    if follow is None:
        follow = min(10_000, args.entries // 10)
    summary = asyncio.run(load(args.dir, args.entries, args.seed, args.workers, follow,
                               args.batch))
    print(f"{summary['entries']:,} entries in {summary['seconds']} s"
          f" ({summary['per_second']:,.0f}/s), {summary['follow_members']:,} follow-root members")
    ratio = summary["against_first_100k"]
    if ratio is not None:
        print(f"{ratio['entries']:,} entries at {ratio['per_second']}% of the rate of the first"
              f" {ratio['first']:,} ({ratio['admitting_per_second']}% of the writer's)")
    print(f"genesis pin {summary['genesis_pin']}")
    print(f"follow root {summary['follow_root']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
