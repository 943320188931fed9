"""The admission pipeline: bytes → candidate (no state) → verdict (state, in the write
transaction).  The rules themselves, and their order, are in ``rules/state.py``.

``prepare`` does the CPU-heavy, state-free work (parsing, JCS, SHA-256, Ed25519, schema) outside
the write transaction, so it can run concurrently; failures of the proof, scope and schema steps
are *deferred* and raised by ``decide`` after the authority chain, keeping PROTOCOL §4's order.
"""

from __future__ import annotations

from dataclasses import dataclass

from alexandria.core.keys import verify
from alexandria.core.records import (
    PUBLIC_KINDS,
    Record,
    envelope_document,
    parse_envelope_bytes,
    parse_record,
    proof_is_hex,
)
from alexandria.core.schema import validate_content
from alexandria.core.search_text import IndexText
from alexandria.core.search_text import index_text as catalogue_text
from alexandria.core.trust import Genesis, WorkerCertificate, parse_worker_certificate
from alexandria.errors import AlexandriaError, Forbidden
from alexandria.rules.state import (
    StateView,
    Verdict,
    check_authority,
    check_scope,
    check_state,
    check_timestamps,
)


@dataclass(frozen=True)
class Candidate:
    """An envelope after the state-free checks.  ``document`` is ``JCS(envelope)``: what its
    log leaf will hold once the write transaction fixes the admission time
    (``leaf.leaf_bytes``)."""

    record: Record
    certificate: WorkerCertificate
    document: bytes
    deferred: AlexandriaError | None
    index_text: IndexText | None = None  # precomputed for the catalogue

    @property
    def record_length(self) -> int:
        return len(self.record.canonical)


def prepare(
    body: bytes, genesis: Genesis, kinds: tuple[str, ...] = PUBLIC_KINDS,
    index_text: bool = False,
) -> Candidate:
    """Steps 1–3 of the rules, plus 5–7 deferred.  ``index_text``: also compute what the
    catalogue's full-text indexes will hold (for admissions: the writer then need not)."""
    env = parse_envelope_bytes(body)
    record = parse_record(env.record_value, genesis.pin, kinds)
    cert = parse_worker_certificate(env.certificate, genesis)
    document = envelope_document(env)
    deferred: AlexandriaError | None = None
    if not proof_is_hex(env.proof) or not verify(cert.worker, env.proof, record.canonical):
        deferred = Forbidden(
            "proof is not the worker key's signature over JCS(record)", "PROOF_INVALID",
            worker=cert.worker,
        )
    else:
        try:
            check_scope(record, cert)
            if record.kind in PUBLIC_KINDS:
                validate_content(record.content)
        except AlexandriaError as exc:
            deferred = exc
    text = catalogue_text(record) if index_text and deferred is None else None
    return Candidate(record, cert, document, deferred, text)


def decide(state: StateView, cand: Candidate, now_ms: int) -> Verdict:
    """Steps 4–9, against the state inside the write transaction."""
    authority = check_authority(state, cand.record, cand.certificate, now_ms)
    if cand.deferred is not None:
        raise cand.deferred
    verdict = check_state(state, cand.record, authority)
    check_timestamps(state, cand.record, cand.certificate, now_ms)
    return verdict
