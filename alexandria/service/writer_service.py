"""One admission writer process for several HTTP worker processes (``serve --workers N``).

Within one Python process the HTTP work and the writer take turns on the GIL, so a single
process never uses much more than one core.  Several processes on one database would each
group-commit their own admissions and spend their time waiting for SQLite's write lock and
re-reading pages the other one changed.  So with ``--workers N`` (N ≥ 2) the server runs:

- N HTTP worker processes: they parse, verify and schema-check each envelope
  (``admission.prepare``: the state-free stage, which parallelises) and serve every read;
- one writer process: it owns the admission writer — every state check, the insert and the
  group commit — exactly as a single-process server does (``LedgerStorage.admit``).

A worker hands a prepared ``Candidate`` to the writer over a Unix socket in a private
directory and answers its HTTP request with whatever the writer answers, once the writer has
committed.  Frames: request id (4 bytes), payload length (4 bytes), then a pickle of plain
tuples (the wire encoding below: the package's value types know nothing of it) — both ends are
this package, started together by the operator, talking through a socket only its user can
open.  A record travels as its canonical bytes, from which orjson rebuilds the parsed values
(a fraction of a field-by-field pickle's cost); a worker certificate as its document's bytes,
rebuilt once per distinct certificate; a typed error as its class, message, code and details.
Writes other than admissions (authority documents, personal lists) are rare and stay on the
worker's own connection: SQLite's write lock serialises them with the writer's.

A new admission's answer does not carry its signed record back: the worker holds the
envelope, so the writer sends the admission object alone and the worker splices the signed
record from the same pieces the writer would have used (``records.signed_record_bytes``) — a
few hundred bytes a request instead of the whole record.

If the writer process dies, every waiting request and every later one is answered 503
``WRITER_UNAVAILABLE``; nothing is acknowledged that was not committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import orjson

from alexandria.core.cache import Bounded
from alexandria.core.records import Link, Record, body_is_json, signed_record_bytes
from alexandria.core.search_text import IndexText
from alexandria.core.trust import WorkerCertificate
from alexandria.errors import AlexandriaError, Failed, Internal
from alexandria.rules.admission import Candidate
from alexandria.store.interface import Admitted, DryRun

_HEADER = struct.Struct(">II")


log = logging.getLogger(__name__)


class WriterUnavailable(Failed):
    default_code = "WRITER_UNAVAILABLE"


# --- the wire encoding -----------------------------------------------------------------------

ErrorWire = tuple[type[AlexandriaError], str, str, dict[str, Any]]
WIRE_CERTIFICATES = 4096  # distinct worker certificates the writer keeps rebuilt


def encode_error(exc: AlexandriaError) -> ErrorWire:
    """A typed error whole: its class (pickled by reference), message, code and details."""
    return type(exc), exc.message, exc.code, exc.details


def decode_error(wire: ErrorWire) -> AlexandriaError:
    """The error ``encode_error`` encoded, of the same class, without calling that class's own
    ``__init__`` (whose signature may differ from the root's)."""
    cls, message, code, details = wire
    exc = cls.__new__(cls)
    AlexandriaError.__init__(exc, message, code, **details)
    return exc


def encode_request(cand: Candidate, dry_run: bool) -> tuple[Any, ...]:
    """A worker's admission request: the candidate's record and certificate as bytes plus the
    fields the sender already read from them, the document, the deferred error, the index text."""
    rec, cert, text = cand.record, cand.certificate, cand.index_text
    return (
        rec.canonical, rec.id, rec.authored_ms,
        orjson.dumps(cert.document), cert.actor, cert.worker, cert.scopes, cert.authority,
        cert.not_before, cert.not_after,
        cand.document, None if cand.deferred is None else encode_error(cand.deferred),
        None if text is None else (text.title, text.text, text.levels),
        dry_run,
    )


def _record(data: bytes, rid: str, authored_ms: int) -> Record:
    value = orjson.loads(data)
    kind, body = value["kind"], value["body"]
    return Record(
        raw=value, id=rid, canonical=data, author=value["author"],
        authored_at=value["authored_at"], authored_ms=authored_ms, kind=kind,
        title=value["title"], body=body,
        decoded_body=orjson.loads(body) if body_is_json(kind) else body,
        links=tuple(Link(lk["relation"], lk["target"]) for lk in value["links"]),
        previous=value["previous"],
    )


class RequestDecoder:
    """The writer's side of ``encode_request``.  Most requests carry a worker certificate seen
    before: each distinct one is rebuilt once and then reused (the fields are the document's,
    read by the sender)."""

    def __init__(self) -> None:
        self.certificates: Bounded[bytes, WorkerCertificate] = Bounded(WIRE_CERTIFICATES)

    def __call__(self, wire: tuple[Any, ...]) -> tuple[Candidate, bool]:
        (data, rid, authored_ms, document, actor, worker, scopes, authority, not_before,
         not_after, envelope, deferred, text, dry_run) = wire
        cert = self.certificates.get(document)
        if cert is None:
            cert = self.certificates[document] = WorkerCertificate(
                actor, worker, scopes, authority, not_before, not_after, orjson.loads(document)
            )
        cand = Candidate(
            _record(data, rid, authored_ms), cert, envelope,
            None if deferred is None else decode_error(deferred),
            None if text is None else IndexText(*text),
        )
        return cand, dry_run


def encode_answer(answer: Admitted | DryRun | AlexandriaError) -> tuple[Any, ...]:
    """The writer's answer.  A new admission does not carry its signed record back (the worker
    splices it, see the module docstring)."""
    if isinstance(answer, AlexandriaError):
        return ("error", encode_error(answer))
    if isinstance(answer, DryRun):
        return ("dry_run", answer.id, answer.root, answer.admitted)
    if answer.created:
        return ("created", answer.id, answer.root, answer.sequence, answer.admission)
    return ("retry", answer.id, answer.root, answer.sequence, answer.signed)


def decode_answer(wire: tuple[Any, ...], cand: Candidate) -> Admitted | DryRun:
    """The worker's side of ``encode_answer`` for its request ``cand``: raises a refusal."""
    what = wire[0]
    if what == "error":
        raise decode_error(wire[1])
    if what == "dry_run":
        return DryRun(wire[1], wire[2], wire[3])
    if what == "created":
        _what, rid, root, sequence, admission = wire
        signed = signed_record_bytes(cand.document, cand.record_length, rid, root, admission)
        return Admitted(True, rid, root, sequence, signed, admission)
    _what, rid, root, sequence, signed = wire
    return Admitted(False, rid, root, sequence, signed)


def _frame(request: int, value: Any) -> bytes:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(request, len(payload)) + payload


class _Frames(asyncio.Protocol):
    """One end of the socket.  Incoming bytes are cut into frames as they arrive (a burst of
    them in one call, no coroutine per frame); frames sent in one event-loop iteration leave in
    one write — a batch's answers, or the requests of the HTTP requests parsed together, cost
    one system call instead of one each."""

    def __init__(self, on_frame: Callable[[int, Any], None],
                 on_lost: Callable[[Exception | None], None]) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._buffer = bytearray()
        self._outgoing: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start, end = 0, len(buffer)
        while end - start >= _HEADER.size:
            request, length = _HEADER.unpack_from(buffer, start)
            if end - start - _HEADER.size < length:
                break
            payload = bytes(buffer[start + _HEADER.size : start + _HEADER.size + length])
            start += _HEADER.size + length
            self._on_frame(request, pickle.loads(payload))
        del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(exc)

    def send(self, request: int, value: Any) -> None:
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing.append(_frame(request, value))

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self._outgoing))
        self._outgoing.clear()


# --- the writer's side -----------------------------------------------------------------------

Submit = Callable[[Candidate, bool], "asyncio.Future[Admitted | DryRun]"]
SubmitMany = Callable[[list[Candidate], bool],
                      "asyncio.Future[list[Admitted | DryRun | Exception]]"]


def _typed(exc: BaseException) -> AlexandriaError:
    """What a worker may hear of a failure: a typed error as it is, anything else as 500 (the
    text stays in the writer's log)."""
    if isinstance(exc, AlexandriaError):
        return exc
    log.error("an admission failed unexpectedly", exc_info=exc)
    return Internal("internal error")


class WriterServer:
    """Answers admission requests with ``submit`` (``LedgerStorage.submit``), and a batch of
    them (a frame holding a list of requests: ``POST /api/entries/batch``) with
    ``submit_many`` (``LedgerStorage.submit_many``: one job, one write transaction)."""

    def __init__(self, submit: Submit, path: str | Path,
                 submit_many: SubmitMany | None = None) -> None:
        self._submit = submit
        self._submit_many = submit_many
        self._decode = RequestDecoder()
        self._path = str(path)
        self._server: asyncio.Server | None = None
        self._connections = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_unix_server(
            self._connection, self._path
        )
        os.chmod(self._path, 0o600)

    async def close(self, drain: float = 10.0) -> None:
        """Stop listening; wait up to ``drain`` seconds for the workers to hang up (they do
        once their in-flight requests are answered)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), drain)

    def _connection(self) -> _Frames:
        def on_frame(request: int, value: Any) -> None:
            if isinstance(value, list):
                decoded = [self._decode(wire) for wire in value]
                cands = [cand for cand, _dry_run in decoded]
                dry_run = bool(decoded) and decoded[0][1]
                if self._submit_many is None:
                    futures = [self._submit(cand, dry_run) for cand in cands]
                    gathered = asyncio.gather(*futures, return_exceptions=True)
                    gathered.add_done_callback(many_replier(request))
                else:
                    self._submit_many(cands, dry_run).add_done_callback(many_replier(request))
                return
            cand, dry_run = self._decode(value)
            self._submit(cand, dry_run).add_done_callback(replier(request))

        def many_replier(request: int) -> Callable[[asyncio.Future[Any]], None]:
            def reply(fut: asyncio.Future[Any]) -> None:
                if fut.cancelled():
                    frames.send(request, encode_answer(WriterUnavailable("the writer is stopping")))
                    return
                exc = fut.exception()
                if exc is not None:
                    frames.send(request, encode_answer(_typed(exc)))
                    return
                frames.send(request, [
                    encode_answer(_typed(res) if isinstance(res, BaseException) else res)
                    for res in fut.result()
                ])

            return reply

        def replier(request: int) -> Callable[[asyncio.Future[Admitted | DryRun]], None]:
            def reply(fut: asyncio.Future[Admitted | DryRun]) -> None:
                if fut.cancelled():  # the storage is closing: nothing was acknowledged
                    frames.send(request, encode_answer(WriterUnavailable("the writer is stopping")))
                    return
                exc = fut.exception()
                if exc is not None and not isinstance(exc, AlexandriaError):
                    # the worker answers 500 as it would for its own bug; the text stays here
                    log.error("an admission failed unexpectedly", exc_info=exc)
                    exc = Internal("internal error")
                frames.send(request, encode_answer(exc if exc is not None else fut.result()))

            return reply

        def on_lost(_exc: Exception | None) -> None:
            self._connections -= 1
            if not self._connections:
                self._idle.set()

        frames = _Frames(on_frame, on_lost)
        self._connections += 1
        self._idle.clear()
        return frames


# --- a worker's side -------------------------------------------------------------------------

class WriterClient:
    """A worker's connection to the writer process: ``admit`` as ``LedgerStorage.admit``."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._frames: _Frames | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        self._lost: str | None = None

    async def connect(self, timeout: float = 30.0, refused_for: float = 2.0) -> None:
        """Connect, waiting for the writer process to start listening.  No socket file yet:
        the writer is starting, wait up to ``timeout``.  A socket nobody listens on: the
        writer is gone (the server is stopping), give up after ``refused_for`` (it is also
        refused for an instant between the writer's bind and listen)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        refused: float | None = None
        while True:
            try:
                _transport, self._frames = await loop.create_unix_connection(
                    lambda: _Frames(self._answered, self._gone), self._path
                )
                self._lost = None  # connected again (a library opened after a failed open)
                return
            except ConnectionRefusedError:
                refused = loop.time() if refused is None else refused
                if loop.time() > min(deadline, refused + refused_for):
                    raise
            except OSError:
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(0.05)

    @property
    def lost(self) -> str | None:
        """Why the connection to the writer is gone, or None while it is up."""
        return self._lost

    async def close(self) -> None:
        if self._frames is not None and self._frames.transport is not None:
            self._frames.transport.close()
        self._gone(None)

    def _answered(self, request: int, value: Any) -> None:
        fut = self._pending.pop(request, None)
        if fut is not None and not fut.done():
            fut.set_result(value)

    def _gone(self, exc: Exception | None) -> None:
        if self._lost is None:
            self._lost = "connection closed" if exc is None else (
                f"connection lost ({type(exc).__name__})"
            )
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(WriterUnavailable(
                    f"the writer process is gone ({self._lost}); this admission may or may"
                    " not have been committed: retry it (a retry is idempotent)"
                ))
        self._pending.clear()

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        if self._lost is not None or self._frames is None:
            raise WriterUnavailable(f"the writer process is gone: {self._lost}")
        self._next = (self._next + 1) & 0xFFFFFFFF
        request = self._next
        fut: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()
        self._pending[request] = fut
        self._frames.send(request, encode_request(cand, dry_run))
        return decode_answer(await fut, cand)

    async def admit_many(
        self, cands: Sequence[Candidate], dry_run: bool = False,
    ) -> list[Admitted | DryRun | Exception]:
        """``LedgerStorage.admit_many`` in the writer process: one frame each way."""
        if self._lost is not None or self._frames is None:
            raise WriterUnavailable(f"the writer process is gone: {self._lost}")
        self._next = (self._next + 1) & 0xFFFFFFFF
        request = self._next
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request] = fut
        self._frames.send(request, [encode_request(cand, dry_run) for cand in cands])
        answer = await fut
        if isinstance(answer, tuple):  # the whole batch failed (e.g. the writer is stopping)
            decode_answer(answer, cands[0])  # raises its typed error
            raise AssertionError("a batch is answered with a list")
        out: list[Admitted | DryRun | Exception] = []
        for wire, cand in zip(answer, cands, strict=True):
            try:
                out.append(decode_answer(wire, cand))
            except AlexandriaError as exc:
                out.append(exc)
        return out
