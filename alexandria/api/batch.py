"""``POST /api/entries/batch`` (PROTOCOL §4.1): many envelopes in one request, each admitted
exactly as ``POST /api/entries`` would admit it alone, in line order, answered once every
admitted line is durable.

The request is NDJSON, bounded while it streams in (at most ``MAX_LINES`` lines,
``MAX_BATCH_BYTES`` in all, ``MAX_LINE_BYTES`` a line: ``413`` for the whole request as soon
as a bound is passed, before any line is looked at).  The work a single admission pays per
request is paid here once per chunk of ``CHUNK_LINES`` lines or once per batch: one body read,
one hand-off of each chunk to the writer (``Library.admit_chunks``: a job each, sharing the
group commit), one answer.  Each line is prepared (parsed, its proof verified, its content
checked: ``admission.prepare``) in this HTTP worker, off the event loop, on a thread per core
(``_preparers``); the writer admits a chunk while the next ones are being prepared.  A line
that cannot be prepared — not JSON, not UTF-8, nested too deep, blank — fails alone with the
single route's answer; so does a line the rules refuse, and the lines after it are admitted as
if it had not been sent.

The bytes of the batches in progress are bounded in each HTTP process, in all
(``BATCH_BUDGET_BYTES``: ``503 BATCH_BUDGET``) and per client address
(``BATCH_CLIENT_BYTES``: ``429 CLIENT_BUSY``), counted from the declared length as soon as
the head arrives: a client that announces large bodies and sends them slowly holds at most its
own share, and the other clients' batches go on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.client_address import client_address
from alexandria.api.http import bool_param, library_of, query_params
from alexandria.api.metrics import WRITER_QUEUE, count_admission
from alexandria.api.status import status_of
from alexandria.core.records import MAX_BATCH_BYTES, MAX_BATCH_LINES, MAX_ENVELOPE_BYTES, NDJSON
from alexandria.core.trust import Genesis
from alexandria.errors import (
    AlexandriaError,
    ClientBusy,
    ClientGone,
    Failed,
    Internal,
    TooLarge,
    TooSlow,
    WrongContentType,
)
from alexandria.rules.admission import Candidate, prepare
from alexandria.service.library import Library
from alexandria.store.interface import Admitted, DryRun

log = logging.getLogger(__name__)

MAX_LINES = MAX_BATCH_LINES
MAX_LINE_BYTES = MAX_ENVELOPE_BYTES
#: 8 MiB at a slow link's 200 kB/s takes 40 s
BATCH_BODY_TIMEOUT_S = 60.0
#: request bytes all the batches one HTTP process is reading or admitting may hold together
#: (their prepared lines take a few times more): beyond it a batch is 503 ``BATCH_BUDGET``,
#: at once, before its body is read, so that concurrent strangers cannot exhaust memory
BATCH_BUDGET_BYTES = 32 * 1024 * 1024
#: of those, what the batches of one client address may hold (``api/client_address.py``):
#: beyond it that client's batch is 429 ``CLIENT_BUSY``, so one client alone never takes the
#: whole budget from the others (one batch of the largest size, or several smaller ones)
BATCH_CLIENT_BYTES = MAX_BATCH_BYTES
#: seconds a client refused by either budget is told to wait (``Retry-After``)
BUDGET_RETRY_S = 1

#: lines prepared and handed to the writer together: the writer admits one chunk while the
#: next ones are being prepared
CHUNK_LINES = 64

Outcome = Admitted | DryRun | BaseException


@cache
def _preparers() -> ThreadPoolExecutor:
    """The threads that prepare batch lines, one per core this process may run on: a proof's
    Ed25519 verification releases the GIL, so one batch's checks use every core."""
    return ThreadPoolExecutor(len(os.sched_getaffinity(0)), "alexandria-prepare")


def check_media_type(request: Request) -> None:
    raw = request.headers.get("content-type")
    media = (raw or "").split(";", 1)[0].strip().lower()
    if media != NDJSON:
        raise WrongContentType(
            f"a batch is {NDJSON} (one envelope a line), not {raw or 'a body of no type'}",
            "UNSUPPORTED_MEDIA_TYPE", expected=NDJSON, actual=raw,
        )


class _Budget:
    """Bytes reserved by the batches in progress in this process (``BATCH_BUDGET_BYTES``), and
    by those of each client (``BATCH_CLIENT_BYTES``).  One event loop takes and gives them
    back, so plain counters suffice; a client is remembered only while it holds bytes."""

    def __init__(self, limit: int, per_client: int) -> None:
        self.limit = limit
        self.per_client = per_client
        self.used = 0
        self.clients: dict[str, int] = {}

    def take(self, client: str, n: int) -> None:
        held = self.clients.get(client, 0)
        if held + n > self.per_client:
            raise ClientBusy(
                f"this client's batches in progress on this server already hold as many bytes"
                f" as one client's may ({self.per_client}): retry once one is answered",
                limit=self.per_client, retry_after=BUDGET_RETRY_S,
            )
        if self.used + n > self.limit:
            raise Failed(
                "too many batches in progress on this server: retry shortly",
                "BATCH_BUDGET", limit=self.limit, retry_after=BUDGET_RETRY_S,
            )
        self.used += n
        self.clients[client] = held + n

    def give(self, client: str, n: int) -> None:
        if not n:
            return
        self.used -= n
        left = self.clients[client] - n
        if left:
            self.clients[client] = left
        else:
            del self.clients[client]


BUDGET = _Budget(BATCH_BUDGET_BYTES, BATCH_CLIENT_BYTES)


def _too_many_lines() -> TooLarge:
    return TooLarge(f"a batch holds at most {MAX_LINES} lines", "TOO_MANY_LINES",
                    limit=MAX_LINES)


def _line_too_large(line: int) -> TooLarge:
    return TooLarge(f"line {line} exceeds {MAX_LINE_BYTES} bytes", "LINE_TOO_LARGE",
                    limit=MAX_LINE_BYTES, line=line)


async def read_lines(request: Request, client: str, reserved: list[int]) -> list[bytes]:
    """The request's lines (a final newline optional), refused with 413 as soon as the body
    passes a bound, and with 408 when it has not all arrived in ``BATCH_BODY_TIMEOUT_S``.
    The bytes read are reserved from ``BUDGET`` for ``client`` as they arrive (their sum in
    ``reserved``: the caller gives them back)."""
    try:
        async with asyncio.timeout(BATCH_BODY_TIMEOUT_S):
            data = await _stream_lines(request, client, reserved)
    except TimeoutError:
        raise TooSlow(
            f"the request body did not arrive within {BATCH_BODY_TIMEOUT_S:g} s",
            "BODY_TIMEOUT", limit_seconds=BATCH_BODY_TIMEOUT_S,
        ) from None
    except ClientDisconnect:
        log.warning("client disconnected before sending the whole batch")
        raise ClientGone("the client disconnected before sending the whole body") from None
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


async def _stream_lines(request: Request, client: str, reserved: list[int]) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BATCH_BYTES:
        raise TooLarge(
            f"request body is {declared} bytes; at most {MAX_BATCH_BYTES}", "BODY_TOO_LARGE",
            limit=MAX_BATCH_BYTES, actual=int(declared),
        )
    if declared is not None and declared.isdigit():
        BUDGET.take(client, int(declared))
        reserved[0] += int(declared)
    buf = bytearray()
    lines = 0  # complete lines so far
    start = 0  # where the current line starts
    async for chunk in request.stream():
        if len(buf) + len(chunk) > MAX_BATCH_BYTES:
            raise TooLarge(f"request body exceeds {MAX_BATCH_BYTES} bytes",
                           "BODY_TOO_LARGE", limit=MAX_BATCH_BYTES)
        at = len(buf)
        buf += chunk
        if len(buf) > reserved[0]:
            BUDGET.take(client, len(buf) - reserved[0])
            reserved[0] = len(buf)
        while (end := buf.find(b"\n", at)) >= 0:
            if end - start > MAX_LINE_BYTES:
                raise _line_too_large(lines + 1)
            lines += 1
            if lines > MAX_LINES:
                raise _too_many_lines()
            start = at = end + 1
        if len(buf) - start > MAX_LINE_BYTES:
            raise _line_too_large(lines + 1)
        if len(buf) > start and lines >= MAX_LINES:
            raise _too_many_lines()
    return bytes(buf)


def prepare_lines(lines: list[bytes], genesis: Genesis) -> list[Candidate | BaseException]:
    """Each line as ``POST /api/entries`` prepares its body; a failure is that line's."""
    out: list[Candidate | BaseException] = []
    for line in lines:
        try:
            out.append(prepare(line, genesis, index_text=True))
        except Exception as exc:  # a hostile line fails itself, never the batch
            out.append(exc)
    return out


def result_line(outcome: Outcome) -> bytes:
    """``{"status": S, "body": B}`` with what the single route answers: the signed record's
    stored bytes as they are, a dry run's document, or the typed error."""
    if isinstance(outcome, Admitted):
        status = b"201" if outcome.created else b"200"
        return b'{"status":' + status + b',"body":' + outcome.signed + b"}\n"
    if isinstance(outcome, DryRun):
        body = {"dry_run": True, "id": outcome.id, "root": outcome.root,
                "already_admitted": outcome.admitted}
        return orjson.dumps({"status": 200, "body": body}) + b"\n"
    if not isinstance(outcome, AlexandriaError):
        log.error("a batch line failed unexpectedly", exc_info=outcome)
        outcome = Internal("internal error")
    return orjson.dumps({"status": status_of(outcome), "body": outcome.to_json()}) + b"\n"


def _counted(outcome: Outcome) -> str:
    if isinstance(outcome, Admitted):
        return "created" if outcome.created else "retry"
    if isinstance(outcome, DryRun):
        return "dry_run"
    return outcome.code if isinstance(outcome, AlexandriaError) else "INTERNAL"


async def post_batch(request: Request) -> Response:
    lib = library_of(request)
    dry_run = bool_param(query_params(request, ("dry_run",)), "dry_run")
    check_media_type(request)
    client, _shown = client_address(request, request.app.state.origin.trust_proxy_headers)
    reserved = [0]
    try:
        return await _admit_lines(lib, await read_lines(request, client, reserved), dry_run)
    finally:
        BUDGET.give(client, reserved[0])


async def _admit_lines(lib: Library, lines: list[bytes], dry_run: bool) -> Response:
    loop = asyncio.get_running_loop()
    pool = _preparers()
    # every chunk is queued for preparation at once (the pool takes them in order); each goes
    # to the writer as soon as it and those before it are prepared
    pending = [loop.run_in_executor(pool, prepare_lines, lines[i:i + CHUNK_LINES], lib.genesis)
               for i in range(0, len(lines), CHUNK_LINES)]

    async def candidates() -> AsyncIterator[list[Candidate]]:
        for fut in pending:
            yield [p for p in await fut if isinstance(p, Candidate)]

    outcomes: list[list[Admitted | DryRun | Exception] | AlexandriaError]
    try:
        with WRITER_QUEUE.track_inprogress():
            outcomes = await lib.admit_chunks(candidates(), dry_run)
    except AlexandriaError as exc:  # a mirror, a library catching up: every line
        outcomes = [exc] * len(pending)
    out: list[bytes] = []
    for fut, chunk_outcomes in zip(pending, outcomes, strict=True):
        prepared = await fut
        admitted = iter(chunk_outcomes if isinstance(chunk_outcomes, list)
                        else [chunk_outcomes] * len(prepared))
        for p in prepared:
            outcome: Outcome = next(admitted) if isinstance(p, Candidate) else p
            count_admission(_counted(outcome))
            out.append(result_line(outcome))
    return Response(b"".join(out), 200, media_type=NDJSON)


async def other_method(request: Request) -> Response:
    """``GET`` of the batch route is 405 (``Allow: POST``), as any other method is; without
    this route it would reach ``GET /api/entries/{revision}``."""
    raise HTTPException(405, headers={"Allow": "POST"})


routes = [
    Route("/api/entries/batch", post_batch, methods=["POST"]),
    Route("/api/entries/batch", other_method, methods=["GET"], include_in_schema=False),
]
