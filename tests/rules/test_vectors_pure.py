"""The signed test vectors through the pure rules alone: every step of
``tests/vectors/index.json`` runs through ``admission.prepare`` + ``admission.decide`` (or, for
``/api/authority``, ``authority.check_authority_document``) on an in-memory ledger
(``rules.memory.MemoryLedger``) — no HTTP, no SQLite — and gets the index's status and code,
exactly as the real app does in ``tests/rules/test_vectors.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alexandria.api.status import status_of
from alexandria.core.canonical import parse_json
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import Genesis
from alexandria.errors import AlexandriaError
from alexandria.rules import admission
from alexandria.rules.authority import check_authority_document
from alexandria.rules.memory import MemoryLedger
from alexandria.rules.view import Retry
from tests.vectors import generate

VECTORS = Path(generate.__file__).resolve().parent
INDEX: dict[str, Any] = json.loads((VECTORS / "index.json").read_text(encoding="utf-8"))
STEPS: list[dict[str, Any]] = INDEX["steps"]


class PureLibrary:
    """The server's admission without its storage: verdicts applied to a ``MemoryLedger``,
    sequences counted here.  ``submit`` answers ``(status, code)`` as the HTTP app would."""

    def __init__(self, genesis: Genesis, now_ms: int) -> None:
        self.genesis = genesis
        self.now = now_ms
        self.ledger = MemoryLedger()
        self.size = 0

    def _next(self) -> int:
        self.size += 1
        return self.size

    def submit(self, route: str, body: bytes) -> tuple[int, str | None]:
        try:
            if route == "/api/entries":
                cand = admission.prepare(body, self.genesis)
                verdict = admission.decide(self.ledger, cand, self.now)
                if isinstance(verdict, Retry):
                    return 200, None
                self.ledger.store_contribution(verdict, cand.record, self._next())
                return 201, None
            assert route == "/api/authority", route
            v = check_authority_document(self.ledger, parse_json(body), self.genesis, self.now)
            if v.retry_of is not None:
                return 200, None
            self.ledger.store_authority(v, self._next())
            return 201, None
        except AlexandriaError as exc:
            return status_of(exc), exc.code


def _library() -> PureLibrary:
    genesis = Genesis.from_document(
        json.loads((VECTORS / INDEX["genesis"]).read_bytes()), pin=INDEX["pin"]
    )
    now = parse_ms(INDEX["server_time"])
    assert now is not None
    return PureLibrary(genesis, now)


def test_every_vector_gets_its_status_and_code_from_the_pure_rules() -> None:
    lib = _library()
    admitted: list[str] = []
    for step in STEPS:
        size = lib.size
        got = lib.submit(step["route"], (VECTORS / step["file"]).read_bytes())
        assert got == (step["status"], step["code"]), (step["file"], step["breaks"])
        assert lib.size == size + (step["status"] == 201), step["file"]
        if step["status"] == 201 and step["route"] == "/api/entries":
            admitted.append(step["file"])
    # every admitted envelope is an exact retry afterwards: step 0 answers it, storing nothing
    size = lib.size
    for name in admitted:
        assert lib.submit("/api/entries", (VECTORS / name).read_bytes()) == (200, None), name
    assert lib.size == size
