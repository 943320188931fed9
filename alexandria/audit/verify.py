"""Offline verification of a log export, and of one entry against a checkpoint (PROTOCOL §7).

A verifier holds nothing but the pinned genesis.  ``verify_export`` checks, in order, and stops
at the first failure, a typed :class:`VerificationFailed` naming the sequence and the reason:

1. header: the export format, a genesis document whose pin is the pinned one and that is
   signed by ``threshold`` of its root keys;
2. every entry, in order (expected sequence ``p = 1, 2, ...``):
   a. the line is the canonical form of ``{leaf, sequence, type}`` with ``sequence == p`` and a
      known type (a dropped, duplicated or reordered line fails here), and the leaf is
      ``{"admitted_at": TIMESTAMP, "document": DOCUMENT}`` (``core.leaf``);
   b. the leaf's ``admitted_at`` is not before the previous entry's;
   c. signatures and certificate chain, stateless (run ahead on worker threads): for a
      contribution ``admission.prepare`` — envelope and record shape, the worker certificate
      signed by its authority, the proof over ``JCS(record)``, scope, content schema; the
      document must be the canonical form of what was parsed (a flipped byte fails here);
   d. replay: the server's admission rules (``rules.admission.decide`` for contributions,
      ``rules.authority.check_authority_document`` for authority documents: the very
      functions the server runs) against a ledger replayed from empty (``replay.Ledger``),
      with the recorded ``admitted_at`` as the clock: authority certificates and revocations
      against the pinned genesis, the authority chain of every contribution (admitted
      native-application authority, validity windows, revocations), every state rule, the
      timestamp rules; the entry must be new (not a duplicate) and of the recorded type;
   e. its leaf hash extends the recomputed RFC 6962 tree (the same nodes the server stores):
      the leaf commits to ``admitted_at``, so an edited admission time fails the next
      checkpoint's root if no rule caught it first;
3. every checkpoint, where it stands (right after leaf ``S``):
   a. the line is canonical, the note parses, its origin is the genesis origin, its size is
      ``S`` (else the first leaf they disagree about is named: a missing leaf or a misplaced
      checkpoint) and larger than the previous checkpoint's;
   b. it is signed by a key that holds a ``log`` certificate admitted in the first ``S``
      leaves, valid when leaf ``S`` was admitted, and not revoked
      (``authority.check_log_key``, as the server before it signs);
   c. its root is the recomputed root of the first ``S`` leaves;
   d. an RFC 9162 consistency proof from the previous checkpoint, computed from the
      recomputed tree, verifies against both signed roots;
4. the end: exactly the number of leaves the header announces;
5. with a witness policy (``--witness NAME=VKEY``, ``--witness-quorum N``): every cosignature
   line that claims a trusted witness key verifies, and the last checkpoint carries at least
   ``N`` of them (``CHECKPOINT_NOT_WITNESSED``, naming the checkpoint by its size).

``verify_entry`` checks one revision on a live server: its signatures and certificate chain
against the genesis, a signed checkpoint (with a policy: cosigned by the quorum), and an
inclusion proof of its leaf (and of the authority certificates involved) in that checkpoint's
tree.
"""

from __future__ import annotations

import gc
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from alexandria.audit.export import Fetch
from alexandria.audit.replay import Ledger
from alexandria.core import merkle
from alexandria.core.canonical import canonical, parse_json
from alexandria.core.checkpoint import CheckpointError, key_id, parse_checkpoint, verify_checkpoint
from alexandria.core.leaf import LeafMalformed, leaf_bytes, split_leaf
from alexandria.core.log_wire import ENTRY_HEAD, EXPORT_FORMAT
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import AuthorityCertificate, Genesis, parse_revocation
from alexandria.core.witness_policy import NotWitnessed, WitnessPolicy
from alexandria.errors import AlexandriaError, Refused
from alexandria.rules.admission import Candidate, prepare
from alexandria.rules.authority import LOG_ROLE, check_log_key
from alexandria.rules.signed import check_signed_record

AHEAD = 2048  # lines checked ahead of the replay
CHUNK = 128  # lines per task of the worker threads
_TAIL = re.compile(
    rb',"sequence":(0|[1-9][0-9]{0,15}),"type":"(contribution|certificate|revocation)"}'
)
_TAIL_MAX = len(b',"sequence":,"type":"contribution"}') + 16

Progress = Callable[[int, int], None]
"""``progress(leaves_done, leaves_total)``."""


# --- failures --------------------------------------------------------------------------------


class VerificationFailed(Refused):
    """The first thing that does not hold.  ``sequence`` names the entry (or, for a
    checkpoint, the leaf it stands after); 0 for the header."""

    default_code = "VERIFICATION_FAILED"

    def __init__(self, sequence: int, step: str, reason: str, code: str | None = None,
                 **details: Any) -> None:
        where = f"sequence {sequence}" if sequence else "header"
        super().__init__(f"{where}: {reason}", code, sequence=sequence, step=step,
                         reason=reason, **details)
        self.sequence = sequence
        self.step = step
        self.reason = reason


class HeaderInvalid(VerificationFailed):
    default_code = "EXPORT_HEADER"


class EntryMalformed(VerificationFailed):
    default_code = "EXPORT_LINE"


class EntryOutOfOrder(VerificationFailed):
    default_code = "SEQUENCE_MISMATCH"


class EntryRefused(VerificationFailed):
    """The entry fails a signature, certificate chain or state rule check; ``code`` is the
    code the server's admission gives it."""

    default_code = "ENTRY_REFUSED"


class CheckpointFailed(VerificationFailed):
    default_code = "CHECKPOINT_INVALID"


class ExportIncomplete(VerificationFailed):
    default_code = "EXPORT_TRUNCATED"


def _refused(sequence: int, step: str, exc: AlexandriaError) -> EntryRefused:
    return EntryRefused(sequence, step, f"{exc.message} [{exc.code}]", exc.code,
                        error=exc.details)


# --- lines -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    """One entry line after its stateless checks (2a–2c); ``error`` is raised in order."""

    sequence: int
    kind: str
    admitted_at: str
    admitted_ms: int
    leaf: bytes
    document_bytes: bytes
    candidate: Candidate | None = None
    document: Any = None
    error: VerificationFailed | None = None


@dataclass(slots=True)
class _CheckpointLine:
    note: str
    size: int = -1
    root: bytes = b""
    error: VerificationFailed | None = None


def _split_entry(line: bytes, position: int) -> _Entry:
    """2a: the one canonical form of an entry line, read without a JSON parser (the
    document's own canonical form is checked in 2c)."""
    head = len(ENTRY_HEAD)
    m = _TAIL.search(line, max(head, len(line) - _TAIL_MAX))
    if m is None or m.end() != len(line) or not line.startswith(ENTRY_HEAD):
        raise EntryMalformed(position, "2a", "the line is not a canonical entry object")
    leaf = line[head : m.start()]
    try:
        admitted_at, document = split_leaf(leaf)
    except LeafMalformed as exc:
        raise EntryMalformed(position, "2a", exc.message, "LEAF_MALFORMED") from exc
    ms = parse_ms(admitted_at)
    assert ms is not None  # split_leaf checked it
    return _Entry(int(m.group(1)), m.group(2).decode(), admitted_at, ms, leaf, document)


def _prepare_entry(line: bytes, position: int, genesis: Genesis) -> _Entry:
    """Steps 2a and 2c for one line (thread-safe, no state)."""
    entry = _split_entry(line, position)
    seq = position
    try:
        if entry.kind == "contribution":
            entry.candidate = prepare(entry.document_bytes, genesis)
            if entry.candidate.document != entry.document_bytes:
                raise EntryMalformed(seq, "2c", "the leaf is not in canonical form",
                                     "LEAF_NOT_CANONICAL")
        else:
            entry.document = parse_json(entry.document_bytes)
            if canonical(entry.document) != entry.document_bytes:
                raise EntryMalformed(seq, "2c", "the leaf is not in canonical form",
                                     "LEAF_NOT_CANONICAL")
    except VerificationFailed as exc:
        entry.error = exc
    except AlexandriaError as exc:
        entry.error = _refused(seq, "2c", exc)
    return entry


def _prepare_checkpoint(line: bytes, position: int, origin: str) -> _CheckpointLine:
    """Step 3a, stateless part."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        value = None
    if (
        not isinstance(value, dict)
        or set(value) != {"checkpoint"}
        or not isinstance(value["checkpoint"], str)
        or canonical(value) != line
    ):
        return _CheckpointLine("", error=EntryMalformed(
            position, "3a", "the line is not a canonical checkpoint object"))
    out = _CheckpointLine(value["checkpoint"])
    try:
        cp, _sigs = parse_checkpoint(out.note)
    except CheckpointError as exc:
        out.error = CheckpointFailed(position, "3a", exc.message, exc.code)
        return out
    if cp.origin != origin:
        out.error = CheckpointFailed(position, "3a", f"the checkpoint is for origin"
                                     f" {cp.origin!r}, not {origin!r}", "CHECKPOINT_ORIGIN")
    out.size, out.root = cp.size, cp.root
    return out


def read_header(line: bytes, pin: str) -> tuple[Genesis, int]:
    """Step 1."""
    try:
        value = parse_json(line)
    except AlexandriaError:
        value = None
    if (
        not isinstance(value, dict)
        or set(value) != {"format", "genesis", "size"}
        or value["format"] != EXPORT_FORMAT
        or not isinstance(value["size"], int)
        or isinstance(value["size"], bool)
        or value["size"] < 0
    ):
        raise HeaderInvalid(0, "1", f"the first line is not an {EXPORT_FORMAT} header")
    try:
        genesis = Genesis.from_document(value["genesis"], pin)
    except AlexandriaError as exc:
        raise HeaderInvalid(0, "1", f"genesis: {exc.message}", exc.code) from exc
    return genesis, int(value["size"])


# --- the replay ------------------------------------------------------------------------------


@dataclass
class _CheckpointState:
    size: int = 0
    root: bytes = b""
    note: str = ""
    count: int = 0
    keys: set[str] = field(default_factory=set)


@dataclass
class Summary:
    size: int = 0
    root: str = ""
    contributions: int = 0
    certificates: int = 0
    revocations: int = 0
    checkpoints: int = 0
    checkpoint_size: int = 0
    log_keys: list[str] = field(default_factory=list)
    cosigners: list[str] = field(default_factory=list)  # of the last checkpoint, by policy
    seconds: float = 0.0

    @property
    def uncovered(self) -> int:
        """Leaves after the last checkpoint: verified, but their completeness is not signed."""
        return self.size - self.checkpoint_size

    def to_json(self) -> dict[str, Any]:
        return {
            "verified": True, "size": self.size, "root": self.root,
            "contributions": self.contributions, "certificates": self.certificates,
            "revocations": self.revocations, "checkpoints": self.checkpoints,
            "checkpoint_size": self.checkpoint_size, "uncovered": self.uncovered,
            "log_keys": self.log_keys, "cosigners": self.cosigners,
            "seconds": round(self.seconds, 3),
            "entries_per_second": round(self.size / self.seconds) if self.seconds else None,
        }


class _Replay:
    """Steps 2a (order), 2b, 2d, 2e and 3 on the replayed ledger, in log order."""

    def __init__(self, ledger: Ledger, witnesses: WitnessPolicy | None = None) -> None:
        self.ledger = ledger
        self.witnesses = witnesses
        self.checkpoint = _CheckpointState()
        self.summary = Summary()

    def entry(self, e: _Entry) -> None:
        ledger = self.ledger
        expected = ledger.size + 1
        # 2a
        if e.sequence != expected:
            raise EntryOutOfOrder(
                expected, "2a", f"expected sequence {expected}, the line says {e.sequence}",
                found=e.sequence,
            )
        # 2b
        if e.admitted_ms < ledger.last_ms:
            raise EntryOutOfOrder(expected, "2b", "admitted_at is before the previous entry's",
                                  "ADMITTED_AT_ORDER")
        # 2c
        if e.error is not None:
            raise e.error
        # 2d, 2e
        try:
            if e.candidate is not None:
                ledger.admit_contribution(e.candidate, e.leaf, e.admitted_ms)
                self.summary.contributions += 1
            else:
                name = ledger.admit_authority(e.document, e.leaf, e.admitted_ms)
                if name != e.kind:
                    raise EntryMalformed(expected, "2d", f"a {name} recorded as a {e.kind}",
                                         "TYPE_MISMATCH")
                if name == "certificate":
                    self.summary.certificates += 1
                else:
                    self.summary.revocations += 1
        except VerificationFailed:
            raise
        except AlexandriaError as exc:
            raise _refused(expected, "2d", exc) from exc

    def checkpoint_line(self, c: _CheckpointLine) -> None:
        ledger = self.ledger
        at = ledger.size
        if c.error is not None:
            raise c.error
        prev = self.checkpoint
        # 3a
        if c.size != at:  # named by the first leaf the two disagree about
            raise CheckpointFailed(min(c.size, at) + 1, "3a", f"a checkpoint of size {c.size}"
                                   f" stands after leaf {at}", "CHECKPOINT_PLACE", size=c.size)
        if c.size <= prev.size:
            raise CheckpointFailed(at, "3a", f"a second checkpoint of size {c.size}",
                                   "CHECKPOINT_DUPLICATE")
        # 3b
        signer = self._signer(c)
        # 3c
        get = ledger.nodes()
        root = merkle.root_hash(at, get)
        if root != c.root:
            raise CheckpointFailed(
                at, "3c", f"the signed root of size {at} is not the root of the exported leaves"
                f" 1..{at}", "CHECKPOINT_ROOT", signed=c.root.hex(), computed=root.hex(),
            )
        # 3d
        if prev.size:
            try:
                proof = merkle.consistency_proof(prev.size, at, get)
                merkle.verify_consistency(prev.size, at, prev.root, c.root, proof)
            except merkle.MerkleError as exc:
                raise CheckpointFailed(at, "3d", f"not consistent with checkpoint {prev.size}:"
                                       f" {exc.reason}", "CHECKPOINT_INCONSISTENT") from exc
        # 5 (every checkpoint: no forged cosignature of a trusted witness)
        if self.witnesses is not None:
            try:
                self.witnesses.cosigners(c.note)
            except AlexandriaError as exc:
                raise CheckpointFailed(at, "5", f"checkpoint {at}: {exc.message}",
                                       "CHECKPOINT_NOT_WITNESSED") from exc
        prev.size, prev.root, prev.note = at, c.root, c.note
        prev.count += 1
        prev.keys.add(signer)

    def _signer(self, c: _CheckpointLine) -> str:
        """3b: the log key that signed ``c``, certified as of leaf ``c.size``."""
        ledger = self.ledger
        return checkpoint_signer(
            c.note, ledger.size, ledger.genesis.origin,
            {key: (ledger.authorities(key), ledger.revoked(key, None))
             for key in ledger.log_keys()},
            ledger.last_ms,
        )


KeyFacts = dict[str, tuple[Sequence[tuple[int, AuthorityCertificate]], bool]]
"""``key -> (its admitted authority certificates, oldest first; revoked by root)`` as of a
checkpoint's last leaf."""


def checkpoint_signer(note: str, at: int, origin: str, keys: KeyFacts, last_ms: int) -> str:
    """Step 3b for a checkpoint of size ``at`` whose last leaf was admitted at ``last_ms``:
    the key among ``keys`` that signed it, holding a ``log`` certificate valid then and not
    revoked (``authority.check_log_key``, as the server checks before signing).  Shared by
    ``verify_export`` and a mirror's follower (``service/follow.py``)."""
    _cp, sigs = parse_checkpoint(note)
    ids = {kid for kid, _sig in sigs}
    for key, (certificates, revoked) in keys.items():
        if not any(LOG_ROLE in c.roles for _s, c in certificates):
            continue
        if key_id(origin, bytes.fromhex(key)) not in ids:
            continue
        try:
            verify_checkpoint(note, origin, key)
        except CheckpointError as exc:
            raise CheckpointFailed(at, "3b", exc.message, "CHECKPOINT_SIGNATURE") from exc
        try:
            check_log_key(certificates, revoked, key, last_ms)
        except AlexandriaError as exc:
            raise CheckpointFailed(at, "3b", exc.message, exc.code, key=key) from exc
        return key
    raise CheckpointFailed(at, "3b", "signed by no key that holds a log certificate among"
                           f" the first {at} leaves", "CHECKPOINT_KEY_UNKNOWN")


# --- driving ---------------------------------------------------------------------------------


def _lines(source: Iterable[bytes]) -> Iterator[bytes]:
    for line in source:
        yield line[:-1] if line.endswith(b"\n") else line


def verify_export(
    source: Iterable[bytes], pin: str, *, workers: int = 0, progress: Progress | None = None,
    workdir: str | None = None, covered: bool = False, witnesses: WitnessPolicy | None = None,
) -> Summary:
    """Verify an export (an iterable of its lines); raise ``VerificationFailed`` at the first
    failure, return a summary when everything holds.  ``workers`` threads run the stateless
    checks ahead of the replay (Ed25519 verification releases the GIL); 0 runs everything on
    the calling thread, which measured fastest (docs/log.md, "Benchmark").  ``covered``: also
    require the last checkpoint to cover every leaf (``NOT_COVERED``): without it, leaves
    dropped from the end, with the checkpoints that covered them, leave no trace."""
    started = time.perf_counter()
    lines = _lines(source)
    first = next(lines, None)
    if first is None:
        raise HeaderInvalid(0, "1", "the export is empty")
    genesis, size = read_header(first, pin)
    ledger = Ledger(genesis, Path(workdir) if workdir else None)
    replay = _Replay(ledger, witnesses)
    collecting = gc.isenabled()
    gc.disable()  # millions of live facts, no cycles: full collections only cost time
    try:
        if workers:
            with ThreadPoolExecutor(workers, thread_name_prefix="verify") as pool:
                _drive(lines, genesis, size, pool, replay, progress)
        else:
            _drive(lines, genesis, size, None, replay, progress)
        summary = replay.summary
        summary.size = ledger.size
        summary.root = merkle.root_hash(ledger.size, ledger.nodes()).hex()
    finally:
        ledger.close()
        if collecting:
            gc.enable()
    summary.checkpoints = replay.checkpoint.count
    summary.checkpoint_size = replay.checkpoint.size
    summary.log_keys = sorted(replay.checkpoint.keys)
    summary.seconds = time.perf_counter() - started
    if covered and summary.uncovered:
        raise ExportIncomplete(
            summary.checkpoint_size + 1, "4",
            f"the last {summary.uncovered} of {summary.size} entries are covered by no"
            " checkpoint, so nothing signed says the export is complete (export from the"
            " server with --url, which covers every leaf; or verify with --allow-uncovered)",
            "NOT_COVERED", size=summary.size, checkpoint_size=summary.checkpoint_size,
            uncovered=summary.uncovered,
        )
    if witnesses is not None:  # 5
        summary.cosigners = _witnessed(witnesses, replay.checkpoint.note, summary.checkpoint_size,
                                       "5")
    return summary


def _witnessed(policy: WitnessPolicy, note: str, size: int, step: str) -> list[str]:
    """Step 5 / E2: the names of the trusted witnesses that cosigned ``note``; typed failure
    naming the checkpoint when fewer than the quorum did."""
    if not note:
        raise CheckpointFailed(size, step, "no checkpoint to check the witness policy on",
                               "CHECKPOINT_NOT_WITNESSED")
    try:
        return [c.verifier.name for c in policy.check(note, size)]
    except NotWitnessed as exc:
        raise CheckpointFailed(size, step, exc.message, exc.code, **exc.details) from exc


Item = _Entry | _CheckpointLine | VerificationFailed
"""A line after its stateless checks, or a failure to raise when its turn comes."""


class _Pending(Protocol):
    def result(self) -> list[Item]: ...

    def cancel(self) -> bool: ...


@dataclass(frozen=True)
class _Ready:
    """A chunk checked on the calling thread (``workers=0``)."""

    items: list[Item]

    def result(self) -> list[Item]:
        return self.items

    def cancel(self) -> bool:
        return False


def _prepare_chunk(chunk: list[tuple[bytes, int]], genesis: Genesis) -> list[Item]:
    """Steps 2a, 2c and 3a (stateless) for ``(line, position)`` pairs; a checkpoint's
    position is the number of entry lines before it."""
    return [
        _prepare_checkpoint(line, position, genesis.origin)
        if line.startswith(b'{"checkpoint"') else _prepare_entry(line, position, genesis)
        for line, position in chunk
    ]


def _drive(
    lines: Iterator[bytes], genesis: Genesis, size: int, pool: ThreadPoolExecutor | None,
    replay: _Replay, progress: Progress | None,
) -> None:
    """Check chunks of lines ahead (on the pool, or here), replay them in order; at most
    ``AHEAD`` lines in flight, so memory stays bounded."""
    ahead: deque[_Pending] = deque()
    position = 0  # entry lines read so far
    chunk: list[tuple[bytes, int]] = []
    tail: list[Item] = []  # a failure found while reading, raised in its turn
    ledger = replay.ledger

    def submit() -> None:
        if pool is None:
            ahead.append(_Ready(_prepare_chunk(chunk, genesis)))
        else:
            ahead.append(pool.submit(_prepare_chunk, list(chunk), genesis))
        chunk.clear()

    try:
        for line in lines:
            if not line.startswith(b'{"checkpoint"'):
                position += 1
                if position > size:
                    tail.append(ExportIncomplete(
                        position, "4", f"more entries than the {size} the header announces",
                        "EXPORT_TOO_LONG"))
                    break
            chunk.append((line, position))
            if len(chunk) >= CHUNK:
                submit()
                if len(ahead) * CHUNK >= AHEAD:
                    _consume(replay, ahead, len(ahead) // 2)
                    if progress is not None:
                        progress(ledger.size, size)
        submit()
        ahead.append(_Ready(tail))
        _consume(replay, ahead, 0)
    finally:
        for pending in ahead:
            pending.cancel()
    if progress is not None:
        progress(ledger.size, size)
    # 4
    if ledger.size != size:
        raise ExportIncomplete(ledger.size + 1, "4", f"the export ends after {ledger.size} of"
                               f" the {size} entries its header announces")


def _consume(replay: _Replay, ahead: deque[_Pending], keep: int) -> None:
    while len(ahead) > keep:
        for item in ahead.popleft().result():
            if isinstance(item, _Entry):
                replay.entry(item)
            elif isinstance(item, _CheckpointLine):
                replay.checkpoint_line(item)
            else:
                raise item
    replay.ledger.flush()


# --- one entry against a checkpoint ----------------------------------------------------------


@dataclass(frozen=True)
class EntryVerified:
    id: str
    sequence: int
    checkpoint_size: int
    root: str
    log_key: str
    cosigners: tuple[str, ...] = ()
    inclusion: tuple[str, ...] = ()  # the entry's audit path, leaf to root (hex)

    def to_json(self) -> dict[str, Any]:
        return {"verified": True, "id": self.id, "sequence": self.sequence,
                "checkpoint_size": self.checkpoint_size, "root": self.root,
                "log_key": self.log_key, "cosigners": list(self.cosigners)}


def _included(fetch: Fetch, index: int, size: int, leaf: bytes, root: bytes, what: str
              ) -> tuple[str, ...]:
    answer = orjson.loads(fetch(f"/api/log/proof/inclusion?index={index}&size={size}"))
    try:
        proof = [bytes.fromhex(h) for h in answer["proof"]]
        merkle.verify_inclusion(index, size, merkle.leaf_hash(leaf), proof, root)
    except (ValueError, KeyError, TypeError, merkle.MerkleError) as exc:
        raise EntryRefused(index + 1, "E4", f"{what} is not included in the checkpoint: {exc}",
                           "INCLUSION_FAILED") from exc
    return tuple(p.hex() for p in proof)


def _authority_leaf(item: Any, sequence: int, step: str) -> bytes:
    """The leaf of an item of ``GET /api/authority`` (``{sequence, type, admitted_at,
    document}``), recomputed from its admission time and document."""
    try:
        return leaf_bytes(item["admitted_at"], canonical(item["document"]))
    except (AlexandriaError, KeyError, TypeError) as exc:
        raise EntryRefused(sequence, step, f"authority document {sequence} is malformed",
                           "AUTHORITY_MALFORMED") from exc


def verify_entry(fetch: Fetch, pin: str, revision: str, note: str | None = None,
                 witnesses: WitnessPolicy | None = None) -> EntryVerified:
    """Check one revision on a server against a signed checkpoint (the server's current one,
    or ``note``):

    E1. genesis: the server's genesis document has the pinned hash and its threshold signatures;
    E2. checkpoint: signed by a key whose ``log`` certificate (root-signed, not revoked by
        root, valid when the checkpoint's last leaf was admitted — that leaf, and so its
        admission time, proven included) is itself included in it; with a witness policy,
        cosigned by a quorum of its witnesses;
    E3. entry: the signed record is the revision asked for and passes
        ``signed.check_signed_record`` (the server's steps 1–7 at its admission time, with
        the server's codes): its id is its record's hash, its worker certificate, proof,
        scope and content verify, its author is the certified actor, and its admission's
        authority certificate is root-signed, issued the worker certificate with role
        native-application, and both were valid at admission;
    E4. inclusion: the entry's leaf — recomputed from the signed record alone: ``record``,
        ``signature`` and ``admission.admitted_at`` — (and its authority certificate's) is in
        the checkpoint's tree, so the admission time the server states is the one it logged.
    """
    checkpoint = verify_checkpoint_note(fetch, pin, note, witnesses)
    signed = orjson.loads(fetch(f"/api/entries/{revision}"))
    return verify_signed_entry(fetch, checkpoint, revision, signed)


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint whose note signature verified against a log key certified in the log
    (steps E1 and E2), with what E3 and E4 need to check entries under it."""

    genesis: Genesis
    note: str
    size: int
    root: bytes
    log_key: str
    authority: dict[bytes, dict[str, Any]] = field(repr=False)
    cosigners: tuple[str, ...] = ()


def verify_checkpoint_note(fetch: Fetch, pin: str, note: str | None = None,
                           witnesses: WitnessPolicy | None = None) -> VerifiedCheckpoint:
    """Steps E1 and E2 of :func:`verify_entry`: the genesis, then the checkpoint ``note`` (or
    the server's current one)."""
    # E1
    genesis = Genesis.from_document(orjson.loads(fetch("/api/genesis"))["document"], pin)
    origin = genesis.origin
    # E2
    text = note if note is not None else fetch("/api/log/checkpoint").decode("utf-8")
    cp, sigs = parse_checkpoint(text)
    if cp.origin != origin:
        raise CheckpointFailed(cp.size, "E2", f"the checkpoint is for origin {cp.origin!r}",
                               "CHECKPOINT_ORIGIN")
    authority = orjson.loads(fetch("/api/authority"))["items"]
    docs = {canonical(item["document"]): item for item in authority}
    certs: dict[str, list[tuple[int, AuthorityCertificate]]] = {}
    root_revoked: set[str] = set()
    for item in authority:
        if item["sequence"] > cp.size:
            continue
        if item["type"] == "certificate":
            c = AuthorityCertificate.from_document(item["document"], genesis)
            certs.setdefault(c.key, []).append((item["sequence"], c))
        elif item["type"] == "revocation":
            try:
                r = parse_revocation(item["document"], genesis, lambda _k: False,
                                     lambda k: k in certs)
            except AlexandriaError:
                continue  # not a root revocation of a certified key: never a log key's
            root_revoked.add(r.key)
    ids = {kid for kid, _sig in sigs}
    signer = next(
        (k for k in certs if key_id(origin, bytes.fromhex(k)) in ids
         and any("log" in c.roles for _s, c in certs[k])), None,
    )
    if signer is None:
        raise CheckpointFailed(cp.size, "E2", "signed by no key with a log certificate in the"
                               " log", "CHECKPOINT_KEY_UNKNOWN")
    verify_checkpoint(text, origin, signer)
    cosigners = _witnessed(witnesses, text, cp.size, "E2") if witnesses is not None else []
    last = orjson.loads(fetch(f"/api/log/entries?start={cp.size - 1}&end={cp.size}"))
    try:
        last_leaf = canonical(last["entries"][0]["leaf"])
        last_ms = parse_ms(split_leaf(last_leaf)[0]) or 0
    except (AlexandriaError, KeyError, IndexError, TypeError) as exc:
        raise EntryRefused(cp.size, "E2", "the checkpoint's last entry is malformed",
                           "LOG_ENTRY_MALFORMED") from exc
    _included(fetch, cp.size - 1, cp.size, last_leaf, cp.root, "the checkpoint's last entry")
    cert_seq = check_log_key(certs[signer], signer in root_revoked, signer, last_ms)
    by_sequence = {item["sequence"]: item for item in authority}
    _included(fetch, cert_seq - 1, cp.size, _authority_leaf(by_sequence[cert_seq], cert_seq, "E2"),
              cp.root, "the log certificate")
    return VerifiedCheckpoint(genesis, text, cp.size, cp.root, signer, docs, tuple(cosigners))


def verify_signed_entry(fetch: Fetch, checkpoint: VerifiedCheckpoint, revision: str,
                        signed: Any) -> EntryVerified:
    """Steps E3 and E4 of :func:`verify_entry` for the signed record ``signed`` the server
    answered for ``revision``, under a checkpoint that passed E1 and E2."""
    cp_size, cp_root = checkpoint.size, checkpoint.root
    # E3
    if not isinstance(signed, dict) or signed.get("id") != revision:
        raise EntryRefused(0, "E3", "the library answered with another revision than the one"
                           " asked for", "REVISION_MISMATCH")
    try:
        checked = check_signed_record(signed, checkpoint.genesis)
    except AlexandriaError as exc:
        claimed = signed.get("admission")
        at = claimed.get("sequence") if isinstance(claimed, dict) else None
        raise _refused(at if isinstance(at, int) and at > 0 else 0, "E3", exc) from exc
    sequence, leaf, auth = checked.sequence, checked.leaf, checked.authority
    if sequence > cp_size:
        raise EntryRefused(sequence, "E4", f"the entry is not covered by the checkpoint of size"
                           f" {cp_size} yet", "NOT_YET_COVERED")
    # E4
    inclusion = _included(fetch, sequence - 1, cp_size, leaf, cp_root, "the entry")
    auth_item = checkpoint.authority.get(canonical(auth.document))
    if auth_item is None or auth_item["sequence"] >= sequence:
        raise EntryRefused(sequence, "E3", "the authority certificate was not admitted before"
                           " the entry", "AUTHORITY_CHAIN")
    _included(fetch, auth_item["sequence"] - 1, cp_size,
              _authority_leaf(auth_item, auth_item["sequence"], "E4"), cp_root,
              "the authority certificate")
    return EntryVerified(revision, sequence, cp_size, cp_root.hex(), checkpoint.log_key,
                         checkpoint.cosigners, inclusion)
