"""The admission rules on an in-memory ledger, for rule tests without HTTP or a database:
envelopes signed by the seeded founding's participants go through ``admission.prepare`` and
``admission.decide`` exactly as the writer runs them, and an admitted verdict is stored in a
``rules.memory.MemoryLedger`` (the offline replay's ledger) at the next sequence.  A refusal is
the typed error the HTTP app would answer, as ``(status, code, details)``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alexandria.api.status import status_of
from alexandria.core.records import revision_id
from alexandria.errors import AlexandriaError
from alexandria.rules import admission
from alexandria.rules.authority import check_authority_document
from alexandria.rules.memory import MemoryLedger
from alexandria.rules.view import Retry, Verdict
from alexandria.service.bootstrap import Founding
from tests.support.library import Clock


class RulesLedger:
    """A library's admission without its storage: the founding's authority documents admitted
    first, then contributions decided against the facts in memory at ``clock``'s time."""

    def __init__(self, founding: Founding, clock: Clock) -> None:
        self.founding = founding
        self.clock = clock
        self.ledger = MemoryLedger()
        self.size = 0
        for doc in founding.authority_documents():
            verdict = check_authority_document(self.ledger, doc, founding.genesis, clock())
            self.size += 1
            self.ledger.store_authority(verdict, self.size)

    def envelope(self, who: str, content: dict[str, Any],
                 authored_at: str | None = None) -> dict[str, Any]:
        p = self.founding.participants[who]
        return p.envelope(self.founding.genesis, content, authored_at or self.clock.tick())

    def decide(self, envelope: dict[str, Any]) -> Verdict | Retry:
        """The writer's verdict on ``envelope`` (raises the refusal); nothing is stored."""
        cand = admission.prepare(json.dumps(envelope).encode(), self.founding.genesis)
        return admission.decide(self.ledger, cand, self.clock())

    def admitted(self, envelope: dict[str, Any], dry_run: bool = True) -> dict[str, Any]:
        """Admit ``envelope``: a new record (a dry run first decides without storing), stored
        at the next sequence; its id and root."""
        rid = revision_id(envelope["record"])
        if dry_run:
            dry = self.decide(envelope)
            assert isinstance(dry, Verdict) and dry.id == rid
            assert self.ledger.admitted(rid) is None
        cand = admission.prepare(json.dumps(envelope).encode(), self.founding.genesis)
        verdict = admission.decide(self.ledger, cand, self.clock())
        assert isinstance(verdict, Verdict), f"{rid} is already admitted"
        assert verdict.id == rid
        self.size += 1
        self.ledger.store_contribution(verdict, cand.record, self.size)
        return {"id": verdict.id, "root": verdict.root}

    def refused(self, envelope: dict[str, Any], status: int, code: str) -> dict[str, Any]:
        """Expect ``envelope`` refused with ``status`` and ``code``, nothing stored; the error
        body the HTTP app would answer."""
        size, rid = self.size, revision_id(envelope["record"])
        known = self.ledger.admitted(rid)
        with pytest.raises(AlexandriaError) as caught:
            self.decide(envelope)
        exc = caught.value
        assert (status_of(exc), exc.code) == (status, code), (status, code, exc.to_json())
        assert isinstance(exc.message, str) and exc.message
        assert self.size == size and self.ledger.admitted(rid) == known
        return exc.to_json()

    def accept(self, who: str, content: dict[str, Any], dry_run: bool = False) -> str:
        """Publish ``content`` as ``who`` (``dry_run``: decided without storing first, the
        same verdict); its revision id."""
        return str(self.admitted(self.envelope(who, content), dry_run)["id"])

    def reject(self, who: str, content: dict[str, Any], status: int, code: str,
               authored_at: str | None = None) -> dict[str, Any]:
        return self.refused(self.envelope(who, content, authored_at), status, code)

    def head_of(self, rev: str) -> str:
        facts = self.ledger.revision(rev)
        assert facts is not None, rev
        obj = self.ledger.object(facts.root)
        assert obj is not None
        return obj.head

    def record(self, rev: str) -> dict[str, Any]:
        """The admitted record ``rev`` as its signed record carries it: id, root, record."""
        facts = self.ledger.revision(rev)
        seq = self.ledger.admitted(rev)
        assert facts is not None and seq is not None, rev
        record = json.loads(self.ledger.record_bytes(seq))
        return {"id": rev, "root": facts.root, "record": record}
