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
import os
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alexandria.admission import Candidate
from alexandria.errors import AlexandriaError, ServiceError
from alexandria.records import signed_record_bytes
from alexandria.storage import Admitted, DryRun

_HEADER = struct.Struct(">II")


@dataclass(frozen=True)
class _Created:
    """A new admission on the wire: ``Admitted`` without its signed record."""

    id: str
    root: str
    sequence: int
    admission: bytes


class WriterUnavailable(ServiceError):
    default_code = "WRITER_UNAVAILABLE"


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, Any]:
    request, length = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return request, pickle.loads(await reader.readexactly(length))


def _frame(request: int, value: Any) -> bytes:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(request, len(payload)) + payload


class _Outbox:
    """Frames written in one event-loop iteration leave in one write: a batch's answers, or the
    requests of the HTTP requests parsed together, cost one system call instead of one each."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._frames: list[bytes] = []

    def send(self, frame: bytes) -> None:
        if not self._frames:
            asyncio.get_running_loop().call_soon(self._flush)
        self._frames.append(frame)

    def _flush(self) -> None:
        if not self._writer.is_closing():
            self._writer.write(b"".join(self._frames))
        self._frames.clear()


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
        self._server = await asyncio.start_unix_server(self._serve, self._path)
        os.chmod(self._path, 0o600)

    async def close(self, drain: float = 10.0) -> None:
        """Stop listening; wait up to ``drain`` seconds for the workers to hang up (they do
        once their in-flight requests are answered)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), drain)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def replier(request: int) -> Callable[[asyncio.Future[Admitted | DryRun]], None]:
            def reply(fut: asyncio.Future[Admitted | DryRun]) -> None:
                if fut.cancelled():  # the storage is closing: nothing was acknowledged
                    outbox.send(_frame(request, WriterUnavailable("the writer is stopping")))
                    return
                exc = fut.exception()
                if exc is not None and not isinstance(exc, AlexandriaError):
                    exc = ServiceError(f"storage failed: {exc}", "STORAGE_FAILED")
                answer: Any = exc if exc is not None else fut.result()
                if isinstance(answer, Admitted) and answer.created:
                    answer = _Created(answer.id, answer.root, answer.sequence, answer.admission)
                outbox.send(_frame(request, answer))

            return reply

        outbox = _Outbox(writer)
        self._connections += 1
        self._idle.clear()
        try:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while True:
                    request, (cand, dry_run) = await _read_frame(reader)
                    self._submit(cand, dry_run).add_done_callback(replier(request))
        finally:
            writer.close()
            self._connections -= 1
            if not self._connections:
                self._idle.set()


# --- a worker's side -------------------------------------------------------------------------

class WriterClient:
    """A worker's connection to the writer process: ``admit`` as ``SqliteStorage.admit``."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._writer: asyncio.StreamWriter | None = None
        self._outbox: _Outbox | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        self._lost: str | None = None

    async def connect(self, timeout: float = 30.0) -> None:
        """Connect, waiting for the writer process to start listening."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                reader, self._writer = await asyncio.open_unix_connection(self._path)
                self._outbox = _Outbox(self._writer)
                break
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)
        self._task = asyncio.get_running_loop().create_task(self._receive(reader))

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        if self._lost is not None or self._outbox is None:
            raise WriterUnavailable(f"the writer process is gone: {self._lost}")
        self._next = (self._next + 1) & 0xFFFFFFFF
        request = self._next
        fut: asyncio.Future[Admitted | DryRun | _Created] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[request] = fut
        self._outbox.send(_frame(request, (cand, dry_run)))
        answer = await fut
        if isinstance(answer, _Created):
            signed = signed_record_bytes(
                cand.leaf, cand.record_length, answer.id, answer.root, answer.admission
            )
            return Admitted(True, answer.id, answer.root, answer.sequence, signed,
                            answer.admission)
        return answer

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                request, value = await _read_frame(reader)
                fut = self._pending.pop(request, None)
                if fut is None or fut.done():
                    continue
                if isinstance(value, BaseException):
                    fut.set_exception(value)
                else:
                    fut.set_result(value)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self._lost = f"connection lost ({type(exc).__name__})"
        finally:
            self._lost = self._lost or "connection closed"
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(WriterUnavailable(
                        f"the writer process is gone ({self._lost}); this admission may or may"
                        " not have been committed: retry it (a retry is idempotent)"
                    ))
            self._pending.clear()
