"""Pending files: the last state rule of the write contract, made durable.

"On timeout or uncertain failure retain pending and retry that exact envelope.  Do not re-sign.
On a definitive validation rejection correct content and use a new pending file."

1. ``write``: the signed envelope's exact bytes (``JCS(envelope)``) go to ``pending/ID.json``
   *before* anything is sent; ``ID`` is the revision id, known before sending.  What ``publish``
   needs afterwards (the name to record, when there is one) goes to ``pending/ID.meta.json``.
2. ``deliver`` sends those bytes — the same bytes on every retry, never re-signed.  Then:
   - admitted (201, or 200 for an envelope the library already holds): the signed record the
     library returned goes to ``published/ID.json``, the name (if any) is appended to the names
     file, and only then the pending files go;
   - ``Unreachable`` (connection error, timeout, 5xx): nothing changes; ``retry`` resends;
   - a definitive rejection: the envelope moves to ``rejected/ID.json`` with the library's
     typed error beside it in ``rejected/ID.error.json``; it is never sent again.
A crash between any two of these steps is harmless: resending an admitted envelope returns 200
with the same signed record.

``publish FILE…``, ``publish --jsonl`` and the MCP ``publish`` of several contents follow the
same rule per envelope, a chunk at a time: ``write_many`` makes a chunk durable in one file,
``pending/chunk-ID.jsonl`` (``ID``: its first envelope's), one line per envelope —
``ID<TAB>META<TAB>JCS(envelope)``, ``META`` the ``.meta.json`` it would have (``{}`` when it
has none) — the envelopes are sent in order, and ``settle`` records what was admitted
(published/, names), writes those still pending to files of their own, and only then removes
the chunk file.  One file a chunk instead of one created and one removed per envelope: on
Linux's file systems creating and removing files was about a fifth of the CPU a batch cost
this client.  A chunk file left behind (a crash, a batch stopped before sending a chunk) is
turned into files of their own (``explode``: each envelope the home has not published or
rejected, in the chunk's order) by the next ``Outbox`` and by ``pending``, so every other
reader of pending/ sees ``ID.json`` files only.  A ``.meta.json`` is written only when there is
a name to record.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from alexandria.cli import duplicates
from alexandria.cli.config import Home
from alexandria.cli.terminal import note
from alexandria.client import Client, Unreachable, answer_of, is_definitive
from alexandria.core.keys import HEX64
from alexandria.core.records import MAX_BATCH_BYTES, MAX_BATCH_LINES
from alexandria.core.timestamps import now
from alexandria.errors import AlexandriaError
from alexandria.files import (
    FILE_MODE,
    atomic_write,
    read_json,
    remove_abandoned,
    temporary_at,
    write_json,
)


class KeptPending(Unreachable):
    """The library could not be reached: the signed envelope stays in ``pending/``."""


@dataclass(frozen=True)
class Pending:
    id: str
    envelope: bytes = field(repr=False)
    meta: dict[str, Any]
    #: the chunk file that holds the envelope (``write_many``), or None: ``pending/ID.json``
    chunk: str | None = field(default=None, compare=False)

    @property
    def record(self) -> dict[str, Any]:
        value: dict[str, Any] = orjson.loads(self.envelope)["record"]
        return value


@dataclass(frozen=True)
class Outcome:
    """``status``: ``admitted`` (created or not), ``kept`` (still pending) or ``rejected``."""

    pending: Pending
    status: str
    created: bool = False
    signed: bytes = b""
    error: AlexandriaError | None = None


CHUNK_PREFIX = "chunk-"
CHUNK_SUFFIX = ".jsonl"
#: a temporary file of pending/ (``files.temporary_at``) not renamed after this many seconds
#: was left by a command killed while writing it; it holds no envelope that was sent, nor
#: any that a pending file or a chunk file does not also hold
ABANDONED_TEMPORARY = 24 * 3600.0


class Outbox:
    def __init__(self, home: Home) -> None:
        self.home = home
        #: chunk files this outbox wrote and has not settled: not exploded under it; and
        #: files named like chunks that are not (said once, left as they are)
        self._chunks: set[str] = set()
        self._odd: set[str] = set()
        self.explode()

    def _path(self, folder: Path, rev: str, suffix: str = ".json") -> Path:
        return folder / f"{rev}{suffix}"

    def write(self, rev: str, envelope: bytes, meta: dict[str, Any]) -> Pending:
        """The envelope, durable before it is sent; its ``.meta.json`` only when there is a
        name to record (everything else is in the envelope): one wait for the disk less."""
        if "name" in meta:
            meta = {**meta, "written_at": now()}
            write_json(self._path(self.home.pending_dir, rev, ".meta.json"), meta)
        atomic_write(self._path(self.home.pending_dir, rev), envelope)
        pending = Pending(rev, envelope, meta)
        duplicates.record(self.home, [(rev, pending.record)])
        return pending

    def write_many(self, items: Sequence[tuple[str, bytes, dict[str, Any]]]) -> list[Pending]:
        """``write`` for a chunk of envelopes, durable together in one chunk file before any
        is sent."""
        if not items:
            return []
        chunk = f"{CHUNK_PREFIX}{items[0][0]}{CHUNK_SUFFIX}"
        lines: list[bytes] = []
        out = []
        written_at = now()
        for rev, envelope, meta in items:
            if "name" in meta:
                meta = {**meta, "written_at": written_at}
            kept = meta if "name" in meta else {}
            lines.append(b"%s\t%s\t%s\n" % (rev.encode(), orjson.dumps(kept), envelope))
            out.append(Pending(rev, envelope, meta, chunk))
        durable_write(self.home.pending_dir, [(chunk, b"".join(lines))])
        self._chunks.add(chunk)
        duplicates.record(self.home, [(p.id, p.record) for p in out])
        return out

    def explode(self) -> list[str]:
        """Each chunk file of pending/ this outbox is not using, turned into files of their
        own (the module docstring): every envelope the home has not published or rejected,
        durable, their modification times in the chunk's order (``pending`` sends the oldest
        first), then the chunk file removed.  The ids written.  A temporary file a killed
        command left in pending/ goes once it is ``ABANDONED_TEMPORARY`` old."""
        folder = self.home.pending_dir
        try:
            listed = os.listdir(folder)
        except FileNotFoundError:
            return []
        remove_abandoned(folder, listed, ABANDONED_TEMPORARY)
        names = [n for n in listed if n.startswith(CHUNK_PREFIX) and n.endswith(CHUNK_SUFFIX)
                 and n not in self._chunks and n not in self._odd]
        found: list[tuple[int, str]] = []
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # settled by its batch meanwhile
                found.append(((folder / name).stat().st_mtime_ns, name))
        written: list[str] = []
        for _since, name in sorted(found):
            written += self._explode(folder, name)
        return written

    def keep(self, pendings: Sequence[Pending] | None = None) -> None:
        """The chunk files of ``pendings`` whose answers are not all known (a failure while
        sending): turned into files of their own now, as ``explode`` does; by default every
        chunk file this outbox wrote and has not released (once nothing is in flight)."""
        chunks = set(self._chunks) if pendings is None else {
            p.chunk for p in pendings if p.chunk is not None}
        for chunk in sorted(chunks):
            self._chunks.discard(chunk)
            self._explode(self.home.pending_dir, chunk)

    def _explode(self, folder: Path, name: str) -> list[str]:
        try:
            data = (folder / name).read_bytes()
            since = (folder / name).stat().st_mtime_ns
        except FileNotFoundError:  # another process exploded or settled it meanwhile
            return []
        entries: list[tuple[str, dict[str, Any], bytes]] = []
        try:
            for line in data.splitlines():
                rev_b, meta, envelope = line.split(b"\t", 2)
                rev = rev_b.decode("ascii")
                if not HEX64.match(rev):
                    raise ValueError(f"{rev!r} is not a revision id")
                if not (self.home.published_dir / f"{rev}.json").exists() \
                        and not (self.home.rejected_dir / f"{rev}.json").exists():
                    entries.append((rev, dict(orjson.loads(meta)), envelope))
        except (ValueError, TypeError) as exc:  # not ours: left as it is, every command goes on
            self._odd.add(name)
            note(f"{folder / name} is not a chunk of pending envelopes ({exc}); it is left as"
                 " it is and not sent")
            return []
        _write_in_order(folder, entries, since)
        (folder / name).unlink(missing_ok=True)
        return [rev for rev, _meta, _envelope in entries]

    def load(self, rev: str) -> Pending:
        path = self._path(self.home.pending_dir, rev)
        meta_path = self._path(self.home.pending_dir, rev, ".meta.json")
        meta = read_json(meta_path) if meta_path.exists() else {}
        return Pending(rev, path.read_bytes(), meta)

    def _ids(self, folder: Path) -> list[str]:
        if not folder.is_dir():
            return []
        ids = [p.name[:-5] for p in folder.iterdir()
               if p.name.endswith(".json") and HEX64.match(p.name[:-5])]
        return sorted(ids, key=lambda i: (self._path(folder, i).stat().st_mtime_ns, i))

    def pending(self) -> list[Pending]:
        """Every pending envelope, oldest first: retries keep the order of publication."""
        self.explode()
        return [self.load(i) for i in self._ids(self.home.pending_dir)]

    def rejected(self) -> list[dict[str, Any]]:
        out = []
        for rev in self._ids(self.home.rejected_dir):
            error_path = self._path(self.home.rejected_dir, rev, ".error.json")
            out.append({"id": rev, "error": read_json(error_path) if error_path.exists() else None,
                        "path": str(self._path(self.home.rejected_dir, rev))})
        return out

    def clear_rejected(self) -> list[str]:
        """Delete every rejected envelope and its error; the ids deleted."""
        ids = self._ids(self.home.rejected_dir)
        for rev in ids:
            self._path(self.home.rejected_dir, rev, ".error.json").unlink(missing_ok=True)
            self._path(self.home.rejected_dir, rev).unlink(missing_ok=True)
        return ids

    def drop(self, rev: str) -> None:
        """Delete pending envelope ``rev`` (and its ``.meta.json``): it is never sent."""
        self._remove(rev)

    def published(self, rev: str) -> bytes | None:
        path = self._path(self.home.published_dir, rev)
        return path.read_bytes() if path.exists() else None

    def deliver(self, pending: Pending, client: Client,
                admitted: list[tuple[Pending, bytes, dict[str, Any]]] | None = None) -> Outcome:
        """Send one envelope; with ``admitted``, an admission is recorded there for ``settle``
        instead of at once."""
        try:
            answer = client.publish(pending.envelope)
        except Unreachable as exc:
            return Outcome(pending, "kept", error=exc)
        except AlexandriaError as exc:
            if not is_definitive(exc):
                raise
            self._reject(pending, exc, getattr(exc, "http_status", 0))
            return Outcome(pending, "rejected", error=exc)
        signed = self._check_answer(pending, answer.content, client)
        if admitted is None:
            self._admit(pending, answer.content, signed)
        else:
            admitted.append((pending, answer.content, signed))
        return Outcome(pending, "admitted", created=answer.status == 201, signed=answer.content)

    def deliver_many(self, pendings: Sequence[Pending], client: Client,
                     admitted: list[tuple[Pending, bytes, dict[str, Any]]]) -> list[Outcome]:
        """``deliver`` for envelopes sent together in one ``POST /api/entries/batch``: each
        line's answer is what ``deliver`` would have heard for its envelope alone, and is
        recorded the same way (admissions in ``admitted`` for ``settle``).  No answer, or a
        refusal of the whole request: every envelope stays pending, none is rejected.  A
        library without the batch route (404, 405, 415) gets them one at a time."""
        envelopes = [p.envelope for p in pendings]
        try:
            for wait in BUSY_WAITS:  # a library busy with other batches: the same bytes again
                try:
                    answers = client.publish_batch(envelopes)
                    break
                except Unreachable as exc:
                    if exc.details.get("status") not in (429, 503) or wait is None:
                        raise
                    time.sleep(max(wait, _retry_after(exc)))
        except Unreachable as exc:
            return [Outcome(p, "kept", error=exc) for p in pendings]
        except AlexandriaError as exc:
            if getattr(exc, "http_status", 0) in (404, 405, 415):
                return self._deliver_each(pendings, client, admitted)
            if not is_definitive(exc):
                raise
            return [Outcome(p, "kept", error=exc) for p in pendings]
        out = []
        for p, (status, body, content) in zip(pendings, answers, strict=True):
            if status in (200, 201):
                signed = self._check_answer(p, content, client)
                admitted.append((p, content, signed))
                out.append(Outcome(p, "admitted", created=status == 201, signed=content))
                continue
            try:
                answer_of(status, "", orjson.dumps(body), f"POST {client.base_url}/api/entries")
                raise Unreachable(f"{client.base_url} answered {status} for {p.id}",
                                  "BAD_RESPONSE", pending=p.id)
            except Unreachable as exc:
                out.append(Outcome(p, "kept", error=exc))
            except AlexandriaError as exc:
                self._reject(p, exc, status)
                out.append(Outcome(p, "rejected", error=exc))
        return out

    def _deliver_each(self, pendings: Sequence[Pending], client: Client,
                      admitted: list[tuple[Pending, bytes, dict[str, Any]]]) -> list[Outcome]:
        out: list[Outcome] = []
        for p in pendings:
            if out and out[-1].status == "kept":
                out.append(Outcome(p, "kept", error=out[-1].error))
                continue
            try:
                out.append(self.deliver(p, client, admitted))
            except AlexandriaError as exc:  # an answer that is not the library's: keep it
                out.append(Outcome(p, "kept", error=exc))
        return out

    def _check_answer(self, pending: Pending, content: bytes, client: Client) -> dict[str, Any]:
        try:
            signed: dict[str, Any] = orjson.loads(content)
            ok = signed["id"] == pending.id and signed["record"] == pending.record
        except (orjson.JSONDecodeError, KeyError, TypeError):
            ok = False
        if not ok:
            raise Unreachable(
                f"{client.base_url} answered with a record that is not {pending.id}; the"
                " envelope stays pending", "BAD_RESPONSE", pending=pending.id,
            )
        return signed

    def _admit(self, pending: Pending, content: bytes, signed: dict[str, Any]) -> None:
        atomic_write(self._path(self.home.published_dir, pending.id), content)
        name, names_file = pending.meta.get("name"), pending.meta.get("names_file")
        if isinstance(name, str):
            path = Path(names_file) if isinstance(names_file, str) else None
            self.home.append_name(name, signed["id"], path)
        self._remove(pending.id)

    def settle(self, admitted: Sequence[tuple[Pending, bytes, dict[str, Any]]],
               answered: Sequence[Outcome] | None = None) -> None:
        """``_admit`` for a chunk: the signed records durable together, then the names (one
        append per names file), then the pending files go.  ``answered``: the outcome of
        every envelope of the chunk files involved (their chunks are then released: the
        envelopes still pending written to files of their own, the chunk files removed);
        without it they stay for ``explode``."""
        if admitted:
            durable_write(self.home.published_dir,
                          [(f"{p.id}.json", content) for p, content, _signed in admitted])
        lines: dict[str | None, list[tuple[str, str]]] = {}
        for p, _content, signed in admitted:
            name, names_file = p.meta.get("name"), p.meta.get("names_file")
            if isinstance(name, str):
                key = names_file if isinstance(names_file, str) else None
                lines.setdefault(key, []).append((name, signed["id"]))
        for names_file, pairs in lines.items():
            self.home.append_names(pairs, Path(names_file) if names_file else None)
        remove_all(self.home.pending_dir, (
            name for p, _content, _signed in admitted if p.chunk is None
            for name in _pending_names(p.id, meta="written_at" in p.meta)
        ))
        if answered is not None:
            self._release(answered)

    def _release(self, answered: Sequence[Outcome]) -> None:
        """The chunk files of ``answered`` (every envelope of each answered): those still
        pending written to files of their own (in order), then the chunk files removed — or,
        where ``explode`` in another process took a chunk file first, the files it made of
        the envelopes no longer pending removed."""
        folder = self.home.pending_dir
        held = [o for o in answered if o.pending.chunk is not None]
        _write_in_order(folder, [(o.pending.id, o.pending.meta if "written_at" in o.pending.meta
                                  else {}, o.pending.envelope)
                                 for o in held if o.status == "kept"], time.time_ns())
        for chunk in sorted({o.pending.chunk for o in held if o.pending.chunk is not None}):
            self._chunks.discard(chunk)
            try:
                os.unlink(folder / chunk)
            except FileNotFoundError:
                remove_all(folder, (name for o in held
                                    if o.pending.chunk == chunk and o.status != "kept"
                                    for name in _pending_names(o.pending.id, meta=True)))

    def _reject(self, pending: Pending, exc: AlexandriaError, status: int) -> None:
        folder = self.home.rejected_dir
        error = {"status": status, **exc.to_json(), "rejected_at": now(), "meta": pending.meta}
        write_json(self._path(folder, pending.id, ".error.json"), error)
        if pending.chunk is not None:  # its chunk file goes once every line is answered
            atomic_write(self._path(folder, pending.id), pending.envelope)
            return
        os.replace(self._path(self.home.pending_dir, pending.id), self._path(folder, pending.id))
        self._path(self.home.pending_dir, pending.id, ".meta.json").unlink(missing_ok=True)

    def _remove(self, rev: str) -> None:
        remove_all(self.home.pending_dir, _pending_names(rev, meta=True))


#: seconds between the attempts of a batch the library refused as a whole because it, or this
#: client's address, had too many batches in progress (503 ``BATCH_BUDGET``, 429
#: ``CLIENT_BUSY``), or the ``Retry-After`` it gave if longer (at most ``MAX_BUSY_WAIT_S``);
#: ``None``: give up, the envelopes stay pending
BUSY_WAITS = (0.25, 0.5, 1.0, 2.0, None)
MAX_BUSY_WAIT_S = 2.0


def _retry_after(exc: Unreachable) -> float:
    """The wait a refusal asked for (``details.retry_after``), bounded; 0 if none."""
    asked = exc.details.get("retry_after")
    if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
        return min(float(asked), MAX_BUSY_WAIT_S)
    return 0.0


#: PROTOCOL §4.1: lines and bytes of one ``POST /api/entries/batch``
BATCH_LINES = MAX_BATCH_LINES
BATCH_BYTES = MAX_BATCH_BYTES


def batch_chunks(pendings: Sequence[Pending]) -> list[list[Pending]]:
    """``pendings`` in order, cut into runs that each fit one batch request."""
    chunks: list[list[Pending]] = []
    size = BATCH_BYTES
    for p in pendings:
        if not chunks or len(chunks[-1]) >= BATCH_LINES or size + len(p.envelope) + 1 > BATCH_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(p)
        size += len(p.envelope) + 1
    return chunks


def sync_all(fds: Sequence[int]) -> None:
    """Every file durable: one ``syncfs`` of their file system on Linux when there are several
    (each ``fsync`` is a wait for the disk; one ``syncfs`` is one wait for all), else
    ``fsync`` each."""
    if len(fds) > 2:
        syncfs = _syncfs()
        if syncfs is not None and syncfs(fds[0]) == 0:
            return
    for fd in fds:
        os.fsync(fd)


_SYNCFS: list[Any] = []


def _syncfs() -> Any:
    if not _SYNCFS:
        fn = None
        if sys.platform.startswith("linux"):
            import ctypes
            import ctypes.util

            with contextlib.suppress(OSError, AttributeError):
                fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6",
                                 use_errno=True).syncfs
        _SYNCFS.append(fn)
    return _SYNCFS[0]


def durable_write(folder: Path, files: Sequence[tuple[str, bytes]]) -> None:
    """Replace each named file of ``folder`` atomically (a temporary file, renamed), with one
    wait for the disk for all: every file is written, then all synced, then every one renamed
    into place and the renames synced.  The calls go one after the other on one thread, by
    names relative to the folder's descriptor: a chunk's files are many small calls, and
    threads would contend for the folder's lock and for the GIL (docs/decisions/0010)."""
    folder.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    temps: list[tuple[int, str, str]] = []
    try:
        for name, data in files:
            fd, tmp = temporary_at(name, FILE_MODE, dir_fd)
            temps.append((fd, tmp, name))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        sync_all([fd for fd, _tmp, _name in temps])
        for fd, _tmp, _name in temps:
            os.close(fd)
        closed, temps = temps, []
        try:
            for _fd, tmp, name in closed:
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            for _fd, tmp, _name in closed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)  # the renames themselves
    finally:
        for fd, tmp, _name in temps:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
        os.close(dir_fd)


def _write_in_order(folder: Path, entries: Sequence[tuple[str, dict[str, Any], bytes]],
                    since: int) -> None:
    """Pending envelopes ``(id, meta, envelope)`` in files of their own (a ``.meta.json``
    where ``meta`` is not empty), durable, modified at ``since``, ``since`` + 1 ns, …: in
    their order for ``pending`` (file times are otherwise only as fine as the kernel's
    clock tick, and many files share one)."""
    if not entries:
        return
    durable_write(folder, [
        file for rev, meta, envelope in entries for file in (
            ([(f"{rev}.meta.json", orjson.dumps(meta, option=orjson.OPT_INDENT_2) + b"\n")]
             if meta else []) + [(f"{rev}.json", envelope)])])
    for i, (rev, _meta, _envelope) in enumerate(entries):
        os.utime(folder / f"{rev}.json", ns=(since + i, since + i))


def _pending_names(rev: str, meta: bool) -> tuple[str, ...]:
    """A pending envelope's files: the envelope, and its ``.meta.json`` when ``meta`` (only
    ``write`` and named ``write_many`` entries have one)."""
    return (f"{rev}.json", f"{rev}.meta.json") if meta else (f"{rev}.json",)


def remove_all(folder: Path, names: Iterable[str]) -> None:
    """Remove the named files of ``folder`` (those already gone, or the folder, are no
    error)."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return
    try:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
