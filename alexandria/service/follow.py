"""Following another copy of a library's log: a mirror's origin, or a restore's catch-up source.

Every entry is checked with the code of ``alexandria verify`` and stored with the code of an
admission, so a follower ends with exactly the database the origin has, or stops at the first
thing that does not hold, keeping everything it verified before it:

- an entry line: its canonical form, order and admission time (verify steps 2a, 2b), its
  signatures, certificate chain, content schema and canonical leaf (2c,
  ``verify._prepare_entry`` → ``admission.prepare``), then the admission rules at its recorded
  ``admitted_at`` (2d: ``admission.decide``, inside the storage's write transaction, via
  ``LedgerStorage.replay``, which appends the leaf, its Merkle nodes and every projection as
  the origin did);
- a checkpoint: its note, origin and size (3a), its signer certified among the first ``size``
  leaves (3b, ``verify.checkpoint_signer``), its root the root of the stored tree (3c); against
  the last checkpoint the follower verified, the origin's consistency proof (3d) — a fork is
  refused before a single entry of it is fetched, and the first leaf that differs is named.

The follower never signs: it stores the origin's signed notes as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from alexandria.audit.export import Fetch, HttpSource, http_fetcher
from alexandria.audit.verify import (
    CheckpointFailed,
    EntryOutOfOrder,
    HeaderInvalid,
    KeyFacts,
    VerificationFailed,
    _Entry,
    _prepare_entry,
    _refused,
    checkpoint_signer,
    read_header,
)
from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.checkpoint import CheckpointError, parse_checkpoint
from alexandria.core.log_wire import PAGE_CHECKPOINTS, PAGE_ENTRIES
from alexandria.core.timestamps import format_ms, now_ms, parse_ms
from alexandria.errors import Failed, Malformed, Refused
from alexandria.reads import log
from alexandria.reads.log import latest_checkpoint
from alexandria.store.interface import Replayed, Storage

BATCH = 1024  # entries verified and stored per call of ``Follower.entries``
BATCH_BYTES = 8 * 1024 * 1024  # or fewer, when they hold this many bytes
CHUNK = 128  # entries per write transaction, checked while the previous chunk is stored

Progress = Callable[["Follower"], None]


class Forked(VerificationFailed):
    """The source serves a log that is not an extension of what this copy verified."""

    default_code = "LOG_FORKED"


@dataclass
class Verified:
    size: int = 0
    root: bytes = b""


class Follower:
    """Verifies and stores the entries and checkpoints of another copy of ``storage``'s log."""

    def __init__(self, storage: Storage, progress: Progress | None = None) -> None:
        self.storage = storage
        self.genesis = storage.genesis
        self.size = 0
        self.last_ms = 0
        self.checkpoint = Verified()
        self.source_size = 0  # the largest tree size the source claimed (signed)
        self.stored = 0  # entries stored by this follower
        self.started = time.perf_counter()
        self.progress = progress

    async def load(self) -> None:
        """Resume from what the database holds."""
        size, admitted_at = await self.storage.tail()
        self.size, self.last_ms = size, (parse_ms(admitted_at) or 0) if admitted_at else 0
        latest = await self.storage.read(_latest)
        if latest is not None:
            self.checkpoint = Verified(*latest)

    # --- entries ---------------------------------------------------------------------------

    async def entries(self, lines: list[bytes]) -> None:
        """Verify and store the next entry lines (each ``JCS({admitted_at, leaf, sequence,
        type})``); at a failure, store those before it and raise.  The stateless checks of
        one chunk (on a thread: Ed25519 releases the GIL) run while the previous chunk is
        replayed and stored (on the storage's writer thread)."""
        genesis = self.genesis

        def prepare(start: int, chunk: list[bytes]) -> list[_Entry]:
            return [_prepare_entry(line, start + i + 1, genesis) for i, line in enumerate(chunk)]

        chunks = [(self.size + i, lines[i:i + CHUNK]) for i in range(0, len(lines), CHUNK)]
        ahead: asyncio.Future[list[_Entry]] | None = None
        try:
            for k, (start, chunk) in enumerate(chunks):
                prepared = await (ahead or asyncio.to_thread(prepare, start, chunk))
                ahead = (asyncio.ensure_future(asyncio.to_thread(prepare, *chunks[k + 1]))
                         if k + 1 < len(chunks) else None)
                await self._store(prepared)
        finally:
            if ahead is not None:
                with contextlib.suppress(BaseException):
                    await ahead
        if self.progress is not None:
            self.progress(self)

    async def _store(self, prepared: list[_Entry]) -> None:
        """Steps 2a, 2b, 2c (raised in order), then 2d and the store for what held."""
        batch: list[Replayed] = []
        last_ms = self.last_ms
        failure: VerificationFailed | None = None
        for e in prepared:
            expected = self.size + len(batch) + 1
            if e.sequence != expected:  # 2a
                failure = EntryOutOfOrder(expected, "2a", f"expected sequence {expected}, the"
                                          f" line says {e.sequence}", found=e.sequence)
            elif e.admitted_ms < last_ms:  # 2b
                failure = EntryOutOfOrder(expected, "2b", "admitted_at is before the previous"
                                          " entry's", "ADMITTED_AT_ORDER")
            elif e.error is not None:  # 2c
                failure = e.error
            if failure is not None:
                break
            batch.append(Replayed(e.sequence, e.kind, e.leaf, e.admitted_ms, e.candidate,
                                  e.document))
            last_ms = e.admitted_ms
        if batch:
            done, exc = await self.storage.replay(batch)
            if done:
                self.size = batch[done - 1].sequence
                self.last_ms = batch[done - 1].admitted_ms
                self.stored += done
            if exc is not None:
                seq = batch[done].sequence
                if isinstance(exc, Refused):
                    raise _refused(seq, "2d", exc) from exc  # 2d: the rules refuse it
                # not the entry's fault (the disk, another writer): typed, not a verdict
                raise Failed(f"could not store entry {seq}: {exc}", "STORAGE_FAILED",
                             sequence=seq) from exc
        if failure is not None:
            raise failure

    # --- checkpoints -----------------------------------------------------------------------

    def parse(self, note: str, at: int) -> tuple[int, bytes]:
        """3a (stateless): a checkpoint note of this library's origin."""
        try:
            cp, _sigs = parse_checkpoint(note)
        except CheckpointError as exc:
            raise CheckpointFailed(at, "3a", exc.message, exc.code) from exc
        if cp.origin != self.genesis.origin:
            raise CheckpointFailed(at, "3a", f"the checkpoint is for origin {cp.origin!r}, not"
                                   f" {self.genesis.origin!r}", "CHECKPOINT_ORIGIN")
        return cp.size, cp.root

    async def check_consistent(self, size: int, root: bytes, proof: list[bytes] | None) -> None:
        """3d against the last checkpoint verified: ``proof`` is the source's consistency proof
        from it to ``size`` (None when ``size`` is not larger)."""
        prev = self.checkpoint
        if not prev.size:
            return
        if size < prev.size:
            raise Forked(size + 1, "3d", f"the source's checkpoint has size {size}, smaller than"
                         f" the checkpoint of size {prev.size} already verified: its log lost"
                         " leaves", "SOURCE_SHRANK", size=size, verified=prev.size)
        if size == prev.size:
            if root != prev.root:
                raise Forked(size, "3d", f"the source signed another root for size {size}",
                             "CHECKPOINT_INCONSISTENT")
            return
        try:
            merkle.verify_consistency(prev.size, size, prev.root, root, proof or [])
        except merkle.MerkleError as exc:
            raise Forked(prev.size, "3d", f"the source's checkpoint of size {size} is not"
                         f" consistent with the checkpoint of size {prev.size} already"
                         f" verified: {exc.reason}", "CHECKPOINT_INCONSISTENT") from exc

    async def accept_checkpoint(self, note: str) -> None:
        """3a–3c for a checkpoint of a tree this copy holds (the whole stored tree, or a
        prefix of it), then keep it."""
        size, root = self.parse(note, self.size)
        if size <= self.checkpoint.size:
            return
        if size > self.size:
            raise CheckpointFailed(self.size + 1, "3a", f"a checkpoint of size {size} stands"
                                   f" after leaf {self.size}", "CHECKPOINT_PLACE")
        keys: KeyFacts = {}
        for key in await self.storage.authority_keys(size):
            keys[key] = await self.storage.key_authorities(key, size)
        last_ms = self.last_ms if size == self.size else await self.storage.admitted_ms(size)
        signer = checkpoint_signer(note, size, self.genesis.origin, keys, last_ms)  # 3b
        computed = await self.storage.root_at(size)  # 3c
        if computed != root:
            raise CheckpointFailed(size, "3c", f"the signed root of size {size} is not the root"
                                   f" of the verified leaves 1..{size}", "CHECKPOINT_ROOT",
                                   signed=root.hex(), computed=computed.hex())
        await self.storage.store_checkpoint(size, root, note, signer, format_ms(now_ms()))
        self.checkpoint = Verified(size, root)

    # --- naming the first leaf that differs ------------------------------------------------

    async def first_difference(self, theirs: Iterable[tuple[int, bytes]]) -> int | None:
        """The first sequence whose entry differs from the stored one, given the source's
        ``(sequence, canonical entry line)`` in order; None when every one agrees.  Entry
        lines, not leaf hashes, are compared: both sides make them with the same code
        (``core.log_wire.entry_bytes``), whatever the leaf format."""
        mine: dict[int, bytes] = {}
        for seq, line in theirs:
            if seq > self.size:
                return None
            if seq not in mine:
                start, end = seq - 1, min(seq + 999, self.size)

                def read(conn: sqlite3.Connection, a: int = start, b: int = end) -> list[bytes]:
                    return _entry_lines(conn, a, b)

                mine = dict(enumerate(await self.storage.read(read), start=seq))
            if mine.get(seq) != line:
                return seq
        return None


def _entry_lines(conn: sqlite3.Connection, start: int, end: int) -> list[bytes]:
    """The stored entry lines ``start+1 .. end`` (the pages of ``GET /api/log/entries``)."""
    out: list[bytes] = []
    while start < end:
        page = orjson.loads(log.entries_page(conn, start, end))
        out.extend(canonical(e) for e in page["entries"])
        start += len(page["entries"])
    return out


def _latest(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
    found = latest_checkpoint(conn)
    return None if found is None else (found.size, found.root)


# --- a running server as the source --------------------------------------------------------


class BadPage(VerificationFailed):
    """The source answered a page that breaks PROTOCOL §7's paging: not the page's JSON, no
    item, more items than a page holds, items outside the range asked for, or a ``next`` that
    does not advance (a source that would keep a follower asking forever)."""

    default_code = "BAD_PAGE"


async def _get(fetch: Fetch, path: str) -> bytes:
    """One answer, fetched on a thread; cancelled, an HTTP source's request is aborted, so the
    thread returns at once however slowly the source answers."""
    try:
        return await asyncio.to_thread(fetch, path)
    except asyncio.CancelledError:
        if isinstance(fetch, HttpSource):
            fetch.abort()
        raise


async def _page(fetch: Fetch, path: str, items: str, at: int) -> tuple[list[Any], Any]:
    """``(page[items], page["next"])`` of the JSON page at ``path``; ``at``: the sequence a
    failure is reported at."""
    raw = await _get(fetch, path)
    try:
        page = orjson.loads(raw)
    except orjson.JSONDecodeError:
        page = None
    if not isinstance(page, dict) or not isinstance(page.get(items), list) or "next" not in page:
        raise BadPage(at, "2a", f"{path}: the source's answer is not a page of {items}",
                      path=path)
    return page[items], page["next"]


async def _entries_page(fetch: Fetch, start: int, end: int) -> list[dict[str, Any]]:
    """The entries ``start+1 ..`` of ``GET /api/log/entries?start=&end=``: at least one, at
    most a page, none beyond ``end``, and a ``next`` that says where the rest starts."""
    path = f"/api/log/entries?start={start}&end={end}"
    entries, following = await _page(fetch, path, "entries", start + 1)
    n = len(entries)
    expected = None if start + n >= end else start + n
    if not 0 < n <= min(PAGE_ENTRIES, end - start) or following != expected \
            or not all(isinstance(e, dict) for e in entries):
        raise BadPage(start + 1, "2a", f"the source's page of entries {start}..{end} holds"
                      f" {n} entries and names next {str(following)[:40]} (a page holds 1 to"
                      f" {PAGE_ENTRIES} of the range asked for, and next is where the rest"
                      " starts)", path=path, entries=n)
    return entries


async def _checkpoints_page(fetch: Fetch, after: int, at: int,
                            ) -> tuple[list[tuple[int, str]], int | None]:
    """``([(size, note)...], next)`` of ``GET /api/log/checkpoints?after=``: sizes larger than
    ``after`` and increasing, at most a page of them, and a ``next`` (the last size) only
    when the page holds one."""
    path = f"/api/log/checkpoints?after={after}"
    items, following = await _page(fetch, path, "checkpoints", at)
    out: list[tuple[int, str]] = []
    last = after
    for c in items if len(items) <= PAGE_CHECKPOINTS else ():
        size = c.get("size") if isinstance(c, dict) else None
        note = c.get("note") if isinstance(c, dict) else None
        if type(size) is not int or size <= last or not isinstance(note, str):
            break
        out.append((size, note))
        last = size
    if len(out) != len(items) or not (following is None or (out and following == last)):
        raise BadPage(at, "3a", f"the source's page of checkpoints after {after} is not"
                      " increasing sizes above it, or names a next"
                      f" ({str(following)[:40]}) that does not advance", path=path, after=after)
    return out, following


async def _first_difference(follower: Follower, fetch: Fetch, size: int) -> int | None:
    """The first stored leaf the source's differs from, its pages compared one at a time."""
    start, end = 0, min(follower.size, size)
    while start < end:
        entries = await _entries_page(fetch, start, end)
        lines = [(start + i + 1, canonical(e)) for i, e in enumerate(entries)]
        differs = await follower.first_difference(lines)
        if differs is not None:
            return differs
        start += len(entries)
    return None


async def sync_from_server(follower: Follower, fetch: Fetch) -> int:
    """One round: verify and store the source's log up to the checkpoint it serves now, and
    every persisted checkpoint of the source on the way.  Returns the source's size."""
    raw = await _get(fetch, "/api/log/checkpoint")
    try:
        note = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointFailed(follower.size, "3a", "the checkpoint is not UTF-8",
                               "CHECKPOINT_INVALID") from exc
    size, root = follower.parse(note, follower.size)
    follower.source_size = max(follower.source_size, size)
    prev = follower.checkpoint
    proof = None
    if prev.size and size > prev.size:
        path = f"/api/log/proof/consistency?old={prev.size}&new={size}"
        try:
            hashes = orjson.loads(await _get(fetch, path))["proof"]
            proof = [bytes.fromhex(h) for h in hashes]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise BadPage(prev.size, "3d", f"{path}: the source's answer is not a consistency"
                          " proof", path=path) from exc
    try:
        await follower.check_consistent(size, root, proof)
    except Forked as exc:
        first = await _first_difference(follower, fetch, size)
        if first is not None:
            raise Forked(first, "3d", f"the source's leaf differs from the one verified and"
                         f" stored here: a fork ({exc.reason})", "LOG_FORKED",
                         checkpoint_size=size, verified=prev.size) from exc
        raise
    # the source's own checkpoints between, so that this copy holds the same ones: one page
    # of them at a time, each reached by copying the entries up to it
    after: int | None = prev.size
    while after is not None:
        found, after = await _checkpoints_page(fetch, after, follower.size)
        for target, cp_note in found:
            if target >= size:
                after = None
                break
            await _reach(follower, fetch, target, cp_note)
    await _reach(follower, fetch, size, note)
    return size


async def _reach(follower: Follower, fetch: Fetch, target: int, note: str) -> None:
    """Copy the entries up to ``target`` and check the checkpoint ``note`` of that size."""
    if follower.size < target:
        await _copy_range(follower, fetch, target)
    if follower.size >= target:
        await follower.accept_checkpoint(note)


async def _copy_range(follower: Follower, fetch: Fetch, target: int) -> None:
    """Entries ``follower.size + 1 .. target``: the next page is fetched while the current
    ones are verified and stored, and up to ``BATCH`` entries (or ``BATCH_BYTES``) are
    verified and stored per call of ``Follower.entries``."""

    async def page(start: int) -> list[bytes]:
        return [canonical(e) for e in await _entries_page(fetch, start, target)]

    fetched = follower.size
    pending: asyncio.Task[list[bytes]] | None = asyncio.ensure_future(page(fetched))
    buffer: list[bytes] = []
    held = 0
    try:
        while pending is not None:
            lines = await pending
            pending = None
            fetched += len(lines)
            if fetched < target:
                pending = asyncio.ensure_future(page(fetched))
            buffer.extend(lines)
            held += sum(map(len, lines))
            if len(buffer) >= BATCH or held >= BATCH_BYTES or pending is None:
                await follower.entries(buffer)
                buffer, held = [], 0
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


# --- an export as the source -----------------------------------------------------------------


async def sync_from_export(follower: Follower, lines: Iterable[bytes]) -> int:
    """Verify and store the entries of an export (``alexandria export``) beyond the stored
    tree, and its checkpoints; the entries already stored must be the same leaves."""
    it = iter(lines)
    first = next(it, None)
    if first is None:
        raise HeaderInvalid(0, "1", "the export is empty")
    _genesis, size = read_header(first.rstrip(b"\n"), follower.genesis.pin)
    follower.source_size = max(follower.source_size, size)
    pending: list[bytes] = []
    known: list[tuple[int, bytes]] = []
    position = 0

    async def flush() -> None:
        if known:
            differs = await follower.first_difference(known)
            if differs is not None:
                raise Forked(differs, "2a", "the export's leaf differs from the one stored here",
                             "LOG_FORKED")
            known.clear()
        if pending:
            await follower.entries(list(pending))
            pending.clear()

    for raw in it:
        line = raw.rstrip(b"\n")
        if line.startswith(b'{"checkpoint"'):
            await flush()
            value = orjson.loads(line)
            note = value["checkpoint"] if isinstance(value, dict) else None
            if not isinstance(note, str):
                raise CheckpointFailed(position, "3a", "not a checkpoint line", "EXPORT_LINE")
            cp_size, cp_root = follower.parse(note, position)
            if cp_size > follower.checkpoint.size:
                await follower.accept_checkpoint(note)
            elif cp_size == follower.checkpoint.size:
                await follower.check_consistent(cp_size, cp_root, None)
            continue
        position += 1
        if position <= follower.size:
            known.append((position, line))
            if len(known) >= 1000:
                await flush()
            continue
        pending.append(line)
        if len(pending) >= BATCH:
            await flush()
    await flush()
    return size


# --- a restore's catch-up --------------------------------------------------------------------


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


async def catch_up(storage: Storage, source: str,
                   progress: Progress | None = None) -> Follower:
    """Verify and store what ``source`` (the URL of a mirror or of the origin, or an export
    file) holds beyond ``storage``'s log; ``storage`` is open.  Returns the follower, whose
    ``size`` is the log's size afterwards."""
    follower = Follower(storage, progress)
    await follower.load()
    if is_url(source):
        fetch, close = http_fetcher(source)
        try:
            await sync_from_server(follower, fetch)
        finally:
            close()
        return follower
    path = Path(source)
    if not path.is_file():
        raise Malformed(f"{source}: neither a URL nor an export file", "NO_SOURCE",
                        source=source)
    with path.open("rb") as lines:
        await sync_from_export(follower, lines)
    return follower
