"""One admission writer process for several HTTP worker processes (``serve --workers N``).

Within one Python process the HTTP work and the writer take turns on the GIL, so a single
process never uses much more than one core.  Several processes on one database would each
group-commit their own admissions and spend their time waiting for SQLite's write lock and
re-reading pages the other one changed.  So with ``--workers N`` (N ≥ 2) the server runs:

- N HTTP worker processes: they parse, verify and schema-check each envelope
  (``admission.prepare``: the state-free stage, which parallelises) and serve every read;
- one writer process: it owns the admission writer — every state check, the insert and the
  group commit — exactly as a single-process server does (``SqliteStorage.admit``).

A worker hands a prepared ``Candidate`` to the writer over a Unix socket in a private
directory and answers its HTTP request with whatever the writer answers, once the writer has
committed.  Frames: request id (4 bytes), payload length (4 bytes), then a pickle — both ends
are this package, started together by the operator, talking through a socket only its user can
open.  Writes other than admissions (authority documents, personal lists) are rare and stay on
the worker's own connection: SQLite's write lock serialises them with the writer's.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from alexandria.core.records import signed_record_bytes
from alexandria.errors import AlexandriaError, ServiceError
from alexandria.rules.admission import Candidate
from alexandria.store.interface import Admitted, DryRun

_HEADER = struct.Struct(">II")


@dataclass(frozen=True)
class _Created:
    """A new admission on the wire: ``Admitted`` without its signed record."""

    id: str
    root: str
    sequence: int
    admission: bytes


log = logging.getLogger(__name__)

class WriterUnavailable(ServiceError):
    default_code = "WRITER_UNAVAILABLE"


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


class WriterServer:
    """Answers admission requests with ``submit`` (``SqliteStorage.submit``)."""

    def __init__(self, submit: Submit, path: str | Path) -> None:
        self._submit = submit
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
            cand, dry_run = value
            self._submit(cand, dry_run).add_done_callback(replier(request))

        def replier(request: int) -> Callable[[asyncio.Future[Admitted | DryRun]], None]:
            def reply(fut: asyncio.Future[Admitted | DryRun]) -> None:
                if fut.cancelled():  # the storage is closing: nothing was acknowledged
                    frames.send(request, WriterUnavailable("the writer is stopping"))
                    return
                exc = fut.exception()
                if exc is not None and not isinstance(exc, AlexandriaError):
                    # the worker answers 500 as it would for its own bug; the text stays here
                    log.error("an admission failed unexpectedly", exc_info=exc)
                    exc = AlexandriaError("internal error", "INTERNAL")
                answer: Any = exc if exc is not None else fut.result()
                if isinstance(answer, Admitted) and answer.created:
                    answer = _Created(answer.id, answer.root, answer.sequence, answer.admission)
                frames.send(request, answer)

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
    """A worker's connection to the writer process: ``admit`` as ``SqliteStorage.admit``."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._frames: _Frames | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        self._lost: str | None = None

    async def connect(self, timeout: float = 30.0) -> None:
        """Connect, waiting for the writer process to start listening."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                _transport, self._frames = await loop.create_unix_connection(
                    lambda: _Frames(self._answered, self._gone), self._path
                )
                return
            except OSError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        if self._frames is not None and self._frames.transport is not None:
            self._frames.transport.close()
        self._gone(None)

    def _answered(self, request: int, value: Any) -> None:
        fut = self._pending.pop(request, None)
        if fut is None or fut.done():
            return
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
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
        fut: asyncio.Future[Admitted | DryRun | _Created] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[request] = fut
        self._frames.send(request, (cand, dry_run))
        answer = await fut
        if isinstance(answer, _Created):
            signed = signed_record_bytes(
                cand.leaf, cand.record_length, answer.id, answer.root, answer.admission
            )
            return Admitted(True, answer.id, answer.root, answer.sequence, signed,
                            answer.admission)
        return answer
