"""Offline verification of a log export: entries per second, beside the raw Ed25519 rate.

    .venv/bin/python -m bench.verify_export [--entries 100000] [--dir DIR] [--workers 1 2]

Builds (once, cached in ``--dir``) a library of ``--entries`` admitted entries through the real
admission code: spaces, nested spaces, claims, documents, discussions about claims, replies,
evidence, assessments, claim revisions and votes (changed by revising them), from 8
participants, with a checkpoint signed every 1,000 entries.  It exports the database to JSON
Lines (``alexandria export --db``) and runs the whole verifier (``alexandria verify``) on that
file for each ``--workers`` value.

The raw rate is the package's own Ed25519 check (``core.keys.verify_raw``: libsodium's, for a
valid signature) of the export's own proofs over their records: one signature per contribution
is the floor of any verifier.
Figures on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from alexandria.audit import verify
from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.keys import SigningKey, verify_raw
from alexandria.core.log_wire import ENTRY_HEAD
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.files import write_json
from alexandria.reads import export as db_export
from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import Founding, Participant, found_library
from alexandria.service.checkpoint_signer import sign_checkpoint_now
from alexandria.service.library import load_genesis
from alexandria.store.sqlite import sqlite_storage

SEED = b"bench-verify-export"
T0 = "2026-01-01T00:00:00.000Z"
CHECKPOINT_EVERY = 1000
WORDS = [
    "evidence", "measure", "theorem", "sample", "archive", "method", "source", "claim",
    "result", "model", "prime", "field", "record", "curve", "theory", "review", "error",
    "signal", "protocol", "ledger", "library", "proof", "vector", "bound",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


class Generator:
    """Rule-valid contributions, with enough state to keep revisions and votes valid."""

    def __init__(self, founding: Founding, rng: random.Random) -> None:
        self.f = founding
        self.rng = rng
        self.people = [founding.enroll(f"p{i}") for i in range(8)]
        self.spaces: list[str] = []
        self.claims: list[tuple[str, Participant]] = []  # (root, author)
        self.heads: dict[str, str] = {}  # root -> head
        self.discussions: list[str] = []
        self.replies: list[str] = []
        self.evidence: dict[str, list[str]] = {}  # claim head -> evidence ids
        self.votes: dict[tuple[str, str], tuple[str, int]] = {}  # (actor, target) -> (head, v)
        self.targets: list[str] = []
        self.parent_of: dict[str, str] = {}  # claim root -> its space

    def next(self, authored_at: str) -> tuple[dict[str, Any], str, str]:
        """An envelope, and the name of the object it creates or revises and its root."""
        rng, people = self.rng, self.people
        body: dict[str, Any]
        p = rng.choice(people)
        if len(self.spaces) < 4 or rng.random() < 0.01:
            links = []
            if self.spaces and rng.random() < 0.5:
                links = [{"relation": "contained_in", "target": rng.choice(self.spaces)}]
            return self._new(p, "space", {"summary": _text(rng, 30)}, links, authored_at)
        r = rng.random()
        space = rng.choice(self.spaces)
        if r < 0.18 or not self.claims:
            body = {"statement": _text(rng, 40), "scope": _text(rng, 12),
                    "assumptions": [_text(rng, 6) for _ in range(rng.randint(0, 3))]}
            return self._new(p, "claim", body,
                             [{"relation": "contained_in", "target": space}], authored_at)
        if r < 0.26:
            return self._new(p, "document", {"text": _text(rng, 150)},
                             [{"relation": "contained_in", "target": space}], authored_at)
        if r < 0.36:
            claim = rng.choice(self.claims)[0]
            return self._new(p, "discussion", {"text": _text(rng, 60)},
                             [{"relation": "about", "target": self.heads[claim]}], authored_at)
        if r < 0.56 and self.discussions:
            parent = rng.choice(self.discussions + self.replies[-50:])
            return self._new(p, "reply", _text(rng, 50),
                             [{"relation": "replies_to", "target": parent}], authored_at)
        if r < 0.64:
            claim = self.heads[rng.choice(self.claims)[0]]
            body = {
                "method": rng.choice(["proof", "example", "observation", "source"]),
                "content": _text(rng, 50), "claim": claim, "sources": []}
            if body["method"] == "source":
                body["sources"] = [{"label": _text(rng, 4),
                                    "url": f"https://example.org/{rng.randrange(10**6)}"}]
            return self._new(p, "evidence", body,
                             [{"relation": "evidence_for", "target": claim}], authored_at)
        if r < 0.68:
            claim = self.heads[rng.choice(self.claims)[0]]
            ev = self.evidence.get(claim, [])[:3]
            body = {"claim": claim, "verdict": "supported" if ev else "open",
                    "evidence": ev, "rationale": _text(rng, 30)}
            return self._new(p, "assessment", body,
                             [{"relation": "assesses", "target": claim}], authored_at)
        if r < 0.74:
            root, author = rng.choice(self.claims)
            body = {"statement": _text(rng, 40), "scope": _text(rng, 12), "assumptions": []}
            env = author.envelope(self.f.genesis, {
                "kind": "claim", "title": _text(rng, 5), "body": body,
                "links": [{"relation": "contained_in", "target": self.parent_of[root]}],
                "previous": self.heads[root]}, authored_at)
            rid = sha256_hex(canonical(env["record"]))
            self.heads[root] = rid
            return env, "claim-revision", root
        target = rng.choice(self.targets)
        key = (p.actor, target)
        previous, value = self.votes.get(key, ("", 0))
        value = rng.choice([v for v in (-1, 0, 1) if v != value]) if previous else 1
        env = p.envelope(self.f.genesis, {
            "kind": "vote", "title": "Vote", "body": str(value),
            "links": [{"relation": "votes_on", "target": target}], "previous": previous,
        }, authored_at)
        self.votes[key] = (sha256_hex(canonical(env["record"])), value)
        return env, "vote", target

    def _new(self, p: Participant, kind: str, body: Any, links: list[dict[str, str]],
             authored_at: str) -> tuple[dict[str, Any], str, str]:
        env = p.envelope(self.f.genesis, {"kind": kind, "title": _text(self.rng, 6),
                                          "body": body, "links": links, "previous": ""},
                         authored_at)
        rid = sha256_hex(canonical(env["record"]))
        self.heads[rid] = rid
        if kind == "space":
            self.spaces.append(rid)
            self.targets.append(rid)
        elif kind == "claim":
            self.claims.append((rid, p))
            self.parent_of[rid] = links[0]["target"]
            self.targets.append(rid)
        elif kind == "discussion":
            self.discussions.append(rid)
            self.targets.append(rid)
        elif kind == "reply":
            self.replies.append(rid)
        elif kind == "evidence":
            self.evidence.setdefault(body["claim"], []).append(rid)
        return env, kind, rid


async def _build(directory: Path, entries: int) -> None:
    founding = found_library(seed=SEED, created_at=T0)
    gen = Generator(founding, random.Random(7))
    storage = sqlite_storage(directory / "library.db", founding.genesis)
    clock = [parse_ms("2026-02-01T00:00:00.000Z") or 0]
    storage.clock = lambda: clock[0]
    await storage.open()
    try:
        for doc in founding.authority_documents():
            await storage.admit_authority(doc)
        done = 2
        while done < entries:
            # admitted together in one group commit, in order: later envelopes of a batch may
            # refer to earlier ones, which the writer has stored by the time it reaches them
            batch = []
            for _ in range(min(250, entries - done, CHECKPOINT_EVERY - done % CHECKPOINT_EVERY)):
                clock[0] += 20
                batch.append(prepare(orjson.dumps(gen.next(format_ms(clock[0] - 5))[0]),
                                     founding.genesis))
            await asyncio.gather(*(storage.admit(c) for c in batch))
            done += len(batch)
            if done % CHECKPOINT_EVERY == 0:
                await storage.write(
                    lambda conn: sign_checkpoint_now(conn, storage, founding.log_key)
                )
            print(f"\rbuilding {done:,}/{entries:,}", end="", file=sys.stderr, flush=True)
        await storage.write(lambda conn: sign_checkpoint_now(conn, storage, founding.log_key))
        print(file=sys.stderr)
    finally:
        await storage.close()
    write_json(directory / "genesis.json", founding.genesis_document)


def build(directory: Path, entries: int) -> Path:
    """The export file of a library of ``entries`` entries from this module's generator."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"export-{entries}.jsonl"
    if out.exists():
        return out
    for stale in directory.glob("library.db*"):
        stale.unlink()
    t = time.perf_counter()
    asyncio.run(_build(directory, entries))
    print(f"built {entries:,} entries in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return _export(directory / "library.db", out)


def build_with_loader(directory: Path, entries: int, seed: int) -> Path:
    """The export of ``bench.loader``'s library (its richer mix, 200 actors), with one
    checkpoint signed by its log key over the whole log."""
    out = directory / f"export-loader-{entries}-{seed}.jsonl"
    if out.exists():
        return out
    db = directory / "library.db"
    if not (directory / "loader.json").exists():
        subprocess.run([sys.executable, "-m", "bench.loader", "--dir", str(directory),
                        "--entries", str(entries), "--seed", str(seed)], check=True)
    asyncio.run(_sign_final(directory))
    return _export(db, out)


async def _sign_final(directory: Path) -> None:
    storage = sqlite_storage(directory / "library.db", load_genesis(directory / "genesis.json"))
    key = SigningKey.load(directory / "log.key")
    await storage.open()
    try:
        await storage.write(lambda conn: sign_checkpoint_now(conn, storage, key))
    finally:
        await storage.close()


def _export(db: Path, out: Path) -> Path:
    tmp = out.with_suffix(".part")
    with tmp.open("wb") as fh:
        for line in db_export.iter_db(db):
            fh.write(line)
    os.replace(tmp, out)
    return out


@dataclass(frozen=True)
class Rate:
    """Operations per second of wall time, and per second of this process's CPU time (the
    fair single-core figure on a machine shared with other work)."""

    wall: float
    cpu: float


def measure(n: int, fn: Callable[[], object]) -> Rate:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return Rate(n / (time.perf_counter() - wall), n / max(time.process_time() - cpu, 1e-9))


def proofs(path: Path, limit: int = 20_000) -> list[tuple[str, bytes, bytes]]:
    """(key, signature, record) of the export's first contributions."""
    triples = []
    with path.open("rb") as fh:
        next(fh)
        for line in fh:
            if not line.startswith(ENTRY_HEAD) or b'"type":"contribution"' not in line:
                continue
            env = orjson.loads(line)["leaf"]["document"]
            key = env["signature"]["certificate"]["certificate"]["worker"]
            triples.append((key, bytes.fromhex(env["signature"]["proof"]),
                            canonical(env["record"])))
            if len(triples) >= limit:
                break
    return triples


def raw_rate(triples: list[tuple[str, bytes, bytes]]) -> Rate:
    """The package's Ed25519 check on one thread."""

    def run() -> None:
        for key, sig, data in triples:
            assert verify_raw(key, sig, data)

    return measure(len(triples), run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--dir", default="bench/out/verify-export")
    ap.add_argument("--source", choices=("loader", "own"),
                    default="loader" if (Path(__file__).parent / "loader.py").exists() else "own",
                    help="bench.loader's library (default when present) or this module's")
    ap.add_argument("--seed", type=int, default=1, help="bench.loader's seed")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2],
                    help="0: one thread on one core; N: N threads for the stateless checks")
    args = ap.parse_args()
    directory = Path(args.dir) / f"{args.source}-{args.entries}"
    directory.mkdir(parents=True, exist_ok=True)
    if args.source == "loader":
        path = build_with_loader(directory, args.entries, args.seed)
    else:
        path = build(directory, args.entries)
    pin = orjson.loads(path.open("rb").readline())["genesis"]
    pin_hex = sha256_hex(canonical(pin["genesis"]))
    print(f"export: {path} ({path.stat().st_size / 1e6:.0f} MB), {os.cpu_count()} cores,"
          f" load average {os.getloadavg()[0]:.1f}")
    triples = proofs(path)
    for workers in args.workers:
        # the raw rate right before and after each run, averaged: the machine drifts
        before = raw_rate(triples)
        summaries: list[verify.Summary] = []

        def run(w: int = workers, out: list[verify.Summary] = summaries) -> None:
            with path.open("rb", buffering=1 << 20) as fh:
                out.append(verify.verify_export(fh, pin_hex, workers=w))

        size = int(orjson.loads(path.open("rb").readline())["size"])
        got = measure(size, run)
        after = raw_rate(triples)
        raw = Rate((before.wall + after.wall) / 2, (before.cpu + after.cpu) / 2)
        print(f"raw Ed25519 verification, one thread: {raw.wall:,.0f}/s wall,"
              f" {raw.cpu:,.0f} per CPU-second")
        line = (f"verify --workers {workers}: {size:,} entries,"
                f" {summaries[0].checkpoints} checkpoints: {got.wall:,.0f} entries/s wall"
                f" = {100 * got.wall / raw.wall:.0f}% of the raw rate")
        if workers == 0:
            line += (f"; {got.cpu:,.0f} per CPU-second"
                     f" = {100 * got.cpu / raw.cpu:.0f}% of the raw rate per CPU-second")
        print(line, flush=True)


if __name__ == "__main__":
    main()
