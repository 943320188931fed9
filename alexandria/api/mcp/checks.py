"""What the MCP server checks itself before it says ``verified: true``.

Nothing here re-implements a rule: the signature chain is ``rules.signed.check_signed_record``
(the record hashes to its id, the worker certificate chains to an authority certificate signed
by the pinned genesis roots, the proof is the worker's signature), and inclusion is
``audit.verify.verify_checkpoint_note`` (steps E1, E2: the checkpoint's note signature verifies
against a log key whose certificate is root-signed and itself in the log) followed by
``verify_signed_entry`` (E3, E4: the entry again, its authority certificate, and RFC 9162
inclusion proofs of both under that checkpoint's root).

A record is ``verified`` only when both held; ``signature_chain`` alone says the record is
authentic but not that the log holds it.  All of it runs on a worker thread: the checks are
CPU (Ed25519) and synchronous fetches.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import orjson

from alexandria.api.mcp.source import Source
from alexandria.api.mcp.untrusted import failure
from alexandria.audit.verify import (
    EntryVerified,
    VerifiedCheckpoint,
    verify_checkpoint_note,
    verify_signed_entry,
)
from alexandria.core.cache import Bounded
from alexandria.core.trust import Genesis
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError
from alexandria.rules.signed import check_signed_record

CHECKPOINT_REUSE_S = 5.0
"""How long a verified checkpoint is used without asking for a newer one, while it covers the
records being checked: inclusion under it is as good a proof as under the newest, and the
remembered inclusions stay valid while a busy library signs a checkpoint a second."""
CACHED_RECORDS = 4_096
"""Signature-chain verdicts and inclusion proofs remembered (``core.cache.Bounded``): a
revision never changes, so neither does what checking it found."""


@dataclass(frozen=True)
class Verdict:
    signature_chain: bool
    inclusion: bool | None  # None: not asked (no with_proof)
    failure: dict[str, Any] | None = None
    entry: EntryVerified | None = None

    @property
    def verified(self) -> bool:
        return self.signature_chain and self.inclusion is True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verified": self.verified, "signature_chain": self.signature_chain,
                               "inclusion": self.inclusion}
        if self.failure is not None:
            out["failure"] = self.failure
        if self.entry is not None:
            out["proof"] = {"leaf_index": self.entry.sequence - 1,
                            "tree_size": self.entry.checkpoint_size,
                            "inclusion": list(self.entry.inclusion)}
        return out


@dataclass(frozen=True)
class Checked:
    verdicts: list[Verdict]
    checkpoint: VerifiedCheckpoint | None
    checkpoint_failure: dict[str, Any] | None = None
    witnesses: WitnessPolicy | None = None

    def checkpoint_json(self) -> dict[str, Any] | None:
        if self.checkpoint_failure is not None:
            return {"verified": False, "failure": self.checkpoint_failure}
        cp = self.checkpoint
        if cp is None:
            return None
        policy = self.witnesses
        return {"verified": True, "size": cp.size, "root": cp.root.hex(),
                "log_key": cp.log_key,
                # the note is the library's text (its origin line, its signature lines)
                "untrusted": {"note": cp.note},
                # witnesses the agent's policy trusts whose cosignatures verified;
                # without a policy none is checked and the list stays empty
                "cosigned_by": list(cp.cosigners),
                "witness_quorum": None if policy is None else policy.quorum}


def _sequence(signed: Any) -> int:
    admission = signed.get("admission") if isinstance(signed, dict) else None
    value = admission.get("sequence") if isinstance(admission, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def digest(signed: Any) -> bytes:
    """The identity of a record exactly as the library served it: every byte of it counts, so
    a remembered verdict is never applied to an answer that differs in any field."""
    return hashlib.sha256(orjson.dumps(signed, option=orjson.OPT_SORT_KEYS)).digest()


class Verifier:
    """Checks against the pinned ``genesis``; remembers the last checkpoint it verified and
    reuses it while the library serves the very same note (one note, one verification), and
    remembers per record served (``digest``) its signature-chain verdict and, per checkpoint,
    its verified inclusion: the same revision under the same checkpoint is checked once.
    ``counted(step)`` hears of every check actually run (``signature_chain``, ``inclusion``):
    ``/mcp`` counts them in ``/metrics``."""

    def __init__(self, source: Source, genesis: Genesis,
                 witnesses: WitnessPolicy | None = None, cached: int = CACHED_RECORDS,
                 counted: Callable[[str], None] | None = None) -> None:
        self.source = source
        self.genesis = genesis
        self.witnesses = witnesses
        self._checkpoint: VerifiedCheckpoint | None = None
        self._checkpoint_at = 0.0
        self._lock = threading.Lock()
        self._chains: Bounded[bytes, dict[str, Any] | None] = Bounded(cached)
        self._entries: Bounded[tuple[bytes, str], EntryVerified] = Bounded(cached)
        self._counted = counted

    def _current_checkpoint(self, records: list[Any]) -> VerifiedCheckpoint:
        """The checkpoint verified within ``CHECKPOINT_REUSE_S`` when it covers every record
        (by the sequence each claims), else the library's current one."""
        newest = max((_sequence(r) for r in records), default=0)
        with self._lock:
            cached, at = self._checkpoint, self._checkpoint_at
        now = time.monotonic()
        if cached is not None and now - at < CHECKPOINT_REUSE_S and newest <= cached.size:
            return cached
        note = self.source.fetch("/api/log/checkpoint").decode("utf-8")
        if cached is None or cached.note != note:
            cached = verify_checkpoint_note(self.source.fetch, self.genesis.pin, note,
                                            self.witnesses)
        with self._lock:
            self._checkpoint, self._checkpoint_at = cached, now
        return cached

    def _chain(self, key: bytes, signed: Any) -> dict[str, Any] | None:
        """``None`` when the signature chain held, else its failure."""
        with self._lock:
            if key in self._chains:
                return self._chains[key]
        try:
            check_signed_record(signed, self.genesis)
            result = None
        except (AlexandriaError, KeyError, TypeError, ValueError) as exc:
            result = failure(exc)
        with self._lock:
            self._chains[key] = result
        if self._counted is not None:
            self._counted("signature_chain")
        return result

    def _entry(self, key: bytes, checkpoint: VerifiedCheckpoint, signed: Any) -> EntryVerified:
        at = (key, checkpoint.note)
        with self._lock:
            known = self._entries.get(at)
        if known is not None:
            return known
        if self._counted is not None:
            self._counted("inclusion")
        entry = verify_signed_entry(self.source.fetch, checkpoint, str(signed["id"]), signed)
        with self._lock:
            self._entries[at] = entry  # only what held: a failed fetch may succeed later
        return entry

    def _check(self, records: list[Any], with_proof: bool) -> Checked:
        checkpoint: VerifiedCheckpoint | None = None
        cp_failure: dict[str, Any] | None = None
        if with_proof and records:
            try:
                checkpoint = self._current_checkpoint(records)
            except (AlexandriaError, KeyError, TypeError, ValueError, IndexError) as exc:
                cp_failure = failure(exc)
        verdicts = []
        for signed in records:
            key = digest(signed)
            broken = self._chain(key, signed)
            if broken is not None:
                verdicts.append(Verdict(False, False if with_proof else None, broken))
            elif not with_proof:
                verdicts.append(Verdict(True, None))
            elif checkpoint is None:
                verdicts.append(Verdict(True, False, cp_failure))
            else:
                try:
                    entry = self._entry(key, checkpoint, signed)
                except (AlexandriaError, KeyError, TypeError, ValueError) as exc:
                    verdicts.append(Verdict(True, False, failure(exc)))
                else:
                    verdicts.append(Verdict(True, True, entry=entry))
        return Checked(verdicts, checkpoint, cp_failure, self.witnesses)

    async def check(self, records: list[Any], with_proof: bool) -> Checked:
        return await anyio.to_thread.run_sync(self._check, records, with_proof)
