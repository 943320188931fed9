"""Getting the log's checkpoints cosigned by witnesses (C2SP ``tlog-witness``, client side).

One task per configured witness, for as long as the server runs:

1. wait until a checkpoint newer than the last one this witness cosigned exists (the signer
   wakes the tasks when it signs one; they also look every ``POLL_SECONDS``); once at start
   the latest checkpoint is sent even when it was cosigned, to learn the size the witness
   holds;
2. send ``add-checkpoint`` with the old size this witness last cosigned (from the database: its
   newest stored cosignature; 0 when it never cosigned) and the consistency proof from that
   size, computed from the stored tree;
3. ``200``: keep the answer's lines that verify as this witness's ``cosignature/v1`` of the
   checkpoint text (others are ignored, a bad one refuses the answer), store them with the
   checkpoint (``checkpoint_cosignatures``);
   ``409``: the witness knows another size: remember it and retry at once (the proof changes);
   the same size twice means it holds a different tree of that size (a fork), so back off;
   either a fork or a size above this log's newest checkpoint is remembered (``Cosigning.seen``)
   and the library admits nothing on this log meanwhile (``Library.log_problem``: it was
   restored behind what the witness cosigned, or is another history);
   anything else (``422``, ``403``, ``404``, a timeout, a refused connection): back off
   exponentially from ``RETRY_MIN`` to ``RETRY_MAX`` seconds and retry.

Each task only awaits its own witness, with a ``TIMEOUT`` per request: an unreachable witness
delays nothing else, neither admissions nor the other witnesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

from alexandria.core import merkle, note
from alexandria.core.tlog_witness import format_add_checkpoint, parse_size_body
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.reads.log import StoredCheckpoint, latest_checkpoint
from alexandria.store import cosignatures
from alexandria.store.interface import Storage
from alexandria.store.merkle_nodes import node_reader

_log = logging.getLogger("alexandria.witnesses")

TIMEOUT = 10.0
POLL_SECONDS = 1.0
RETRY_MIN = 0.5
RETRY_MAX = 60.0
MAX_RESPONSE_BYTES = 8192


@dataclass(frozen=True)
class WitnessEndpoint:
    """A witness the library asks: its submission URL prefix and its cosigning key."""

    url: str
    verifier: note.Verifier

    @property
    def name(self) -> str:
        return self.verifier.name


@dataclass(frozen=True)
class WitnessSaw:
    """A witness holds a checkpoint of this log of ``size`` that the log does not extend:
    either larger than any checkpoint the database holds (it was restored behind what was
    published), or of a size it already holds another root for (``forked``)."""

    size: int
    forked: bool


class CosigningLibrary(Protocol):
    storage: Storage


class WitnessRefused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WitnessTask:
    """The loop of one witness (steps 1-3 of the module docstring)."""

    def __init__(self, storage: Storage, witness: WitnessEndpoint,
                 client: httpx.AsyncClient, wake: asyncio.Event,
                 seen: dict[str, WitnessSaw] | None = None) -> None:
        self.storage = storage
        self.witness = witness
        self.client = client
        self.wake = wake
        #: what each witness said of this log that it must not extend (``Cosigning.seen``)
        self.seen: dict[str, WitnessSaw] = seen if seen is not None else {}
        self.known: int | None = None  # the size the witness said it holds (from a 409)
        self.delay = 0.0
        self.probed = False  # the latest checkpoint was sent once since the server started

    async def run(self) -> None:
        reported = ""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.delay or POLL_SECONDS)
            self.wake.clear()
            try:
                retry_now = await self.step()
                self.delay = 0.0
                if retry_now:
                    self.wake.set()
                reported = ""
            except Exception as exc:  # keep trying later: the cause may be transient
                reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
                if reason != reported:  # say it once, not at every retry
                    _log.warning("witness %s (%s): %s; retrying with backoff",
                                 self.witness.name, self.witness.url, reason)
                    reported = reason
                self.delay = min(RETRY_MAX, max(RETRY_MIN, self.delay * 2))

    async def step(self) -> bool | None:
        """One attempt.  None: nothing to send; True: retry at once; False: done."""
        name = self.witness.verifier.vkey
        latest, cosigned = await self.storage.read(
            lambda conn: (latest_checkpoint(conn), cosignatures.last_cosigned(conn, name)))
        if latest is None:
            return None
        if cosigned >= latest.size:
            if self.probed:
                return None
            # once at start, even when cosigned: the witness answers with the size it holds,
            # which tells a database restored behind what it cosigned (a 409 above it)
            self.probed = True
            return await self.send(latest, latest.size)
        self.probed = True
        old = cosigned if self.known is None else self.known
        if old > latest.size:
            self.seen[self.witness.name] = WitnessSaw(old, forked=False)
            raise WitnessRefused(f"it holds size {old}, above this log's newest checkpoint"
                                 f" {latest.size}")
        return await self.send(latest, old)

    async def send(self, cp: StoredCheckpoint, old: int) -> bool:
        proof: list[bytes] = []
        if 0 < old < cp.size:
            proof = await self.storage.read(
                lambda conn: merkle.consistency_proof(old, cp.size, node_reader(conn)))
        body = format_add_checkpoint(old, proof, cp.note)
        status, content = await self.post(body)
        if status == 409:
            size = parse_size_body(content)
            if size is None:
                raise WitnessRefused("409 without a size")
            if size == old:
                self.known = None
                self.seen[self.witness.name] = WitnessSaw(size, forked=True)
                raise WitnessRefused(f"it cosigned a different checkpoint of size {size}: the"
                                     " log has forked or its database was replaced")
            self.known = size
            if size > cp.size:
                self.seen[self.witness.name] = WitnessSaw(size, forked=False)
            return True
        if status != 200:
            raise WitnessRefused(f"{status} {content[:200].decode('utf-8', 'replace')}")
        line = self.cosignature(cp, content)
        await self.storage.write(
            lambda conn: cosignatures.store(conn, cp.size, self.witness.verifier.vkey, line))
        self.known = cp.size
        self.seen.pop(self.witness.name, None)
        return False

    async def post(self, body: bytes) -> tuple[int, bytes]:
        """POST ``add-checkpoint``; the status and at most ``MAX_RESPONSE_BYTES`` of body (a
        witness that sends more is refused, not buffered)."""
        url = f"{self.witness.url}/add-checkpoint"
        async with self.client.stream("POST", url, content=body) as answer:
            content = b""
            async for chunk in answer.aiter_bytes():
                content += chunk
                if len(content) > MAX_RESPONSE_BYTES:
                    raise WitnessRefused(f"its answer is over {MAX_RESPONSE_BYTES} bytes")
            return answer.status_code, content

    def cosignature(self, cp: StoredCheckpoint, content: bytes) -> str:
        """This witness's verified cosignature line in a ``200`` answer."""
        try:
            text = content.decode("utf-8")
            lines = [note.parse_signature_line(x) for x in text.split("\n")[:-1]]
            if not text.endswith("\n") or not lines:
                raise note.NoteError("not signature lines")
            parsed = note.parse_note(cp.note)
            good = note.verified(note.Note(parsed.text, tuple(lines)), [self.witness.verifier])
        except (UnicodeDecodeError, note.NoteError) as exc:
            raise WitnessRefused(f"its answer is not a valid cosignature: {exc}") from None
        if not good:
            raise WitnessRefused("its answer holds no cosignature by its key")
        mine = next(s for s in lines if self.witness.verifier.claims(s))
        return mine.line()


class Cosigning:
    """The witnesses of one library and the event that wakes their tasks."""

    def __init__(self, witnesses: Sequence[WitnessEndpoint] = (), quorum: int = 0) -> None:
        self.witnesses = tuple(witnesses)
        self.quorum = quorum
        self._wakes: list[asyncio.Event] = []
        #: witness name → what it holds that this log does not extend (cleared when it
        #: cosigns again); the library admits nothing meanwhile (``Library.log_problem``)
        self.seen: dict[str, WitnessSaw] = {}

    @property
    def vkeys(self) -> list[str]:
        return [w.verifier.vkey for w in self.witnesses]

    def policy(self) -> WitnessPolicy | None:
        """What this library's own readers (``/mcp``) require of a checkpoint: its witnesses'
        cosignatures, ``quorum`` of them; None without witnesses."""
        if not self.witnesses:
            return None
        return WitnessPolicy(tuple(w.verifier for w in self.witnesses), self.quorum)

    def signed(self, _checkpoint: StoredCheckpoint) -> None:
        """The signer made a new checkpoint: every witness task looks now."""
        for wake in self._wakes:
            wake.set()

    @contextlib.asynccontextmanager
    async def running(self, storage: Storage) -> AsyncIterator[None]:
        if not self.witnesses:
            yield
            return
        async with httpx.AsyncClient(timeout=TIMEOUT, trust_env=False) as client:
            tasks = []
            for w in self.witnesses:
                wake = asyncio.Event()
                wake.set()
                self._wakes.append(wake)
                task = WitnessTask(storage, w, client, wake, self.seen)
                tasks.append(asyncio.get_running_loop().create_task(task.run()))
            try:
                yield
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
                self._wakes.clear()
