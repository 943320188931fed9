"""The admission pipeline: bytes → candidate (no state) → verdict (state, in the write
transaction).  ``decide`` holds the order of PROTOCOL §4's steps (listed in ``state.py``); the
steps themselves are in ``authority.py`` (4, 6) and ``state.py`` (8, 9).

``prepare`` does the CPU-heavy, state-free work (parsing, JCS, SHA-256, Ed25519, schema) outside
the write transaction, so it can run concurrently; failures of the proof, scope and schema steps
are *deferred*: kept in ``Candidate.deferred`` and raised by ``decide`` after the authority
chain (step 4), which needs the state, keeping PROTOCOL §4's order.
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
from alexandria.core.search_text import index_text as text_for_index
from alexandria.core.trust import Genesis, WorkerCertificate, parse_worker_certificate
from alexandria.errors import AlexandriaError, NotPermitted
from alexandria.rules.authority import check_authority, check_scope
from alexandria.rules.state import check_state, check_timestamps
from alexandria.rules.view import Retry, StateView, Verdict


@dataclass(frozen=True)
class Candidate:
    """A record after the stateless steps 1–3; ``deferred``: the first failure of steps 5–7,
    raised by ``decide`` in its turn (after step 4).  ``document`` is ``JCS(envelope)``: what
    its log leaf will hold once the write transaction fixes the admission time
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
        deferred = NotPermitted(
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
    text = text_for_index(record) if index_text and deferred is None else None
    return Candidate(record, cert, document, deferred, text)


def decide(state: StateView, cand: Candidate, now_ms: int) -> Verdict | Retry:
    """Steps 0 and 4–9 against the state inside the write transaction, in PROTOCOL §4's order
    (1–3 ran in ``prepare``).  Returns the verdict storage stores, or ``Retry`` for an exact
    retry of an admitted record."""
    rec = cand.record
    # 0. exact retry: answered with the stored record, but only while its proof, scope and
    #    content still check (a retry never turns a refusal of 5–7 into a 200)
    sequence = state.admitted(rec.id)
    if sequence is not None:
        if cand.deferred is not None:
            raise cand.deferred
        known = state.revision(rec.id)
        assert known is not None
        return Retry(rec.id, known.root, sequence)
    # 1–3 ran in prepare: envelope and record shape, worker certificate and its signature
    # 4. the authority chain, at admission time
    authority = check_authority(state, rec, cand.certificate, now_ms)
    # 5–7 ran in prepare (proof, scope, content schema); the first failure was kept for now
    if cand.deferred is not None:
        raise cand.deferred
    # 8. the state rules of the write contract
    verdict = check_state(state, rec, authority)
    # 9. timestamps
    check_timestamps(state, rec, cand.certificate, now_ms)
    return verdict
