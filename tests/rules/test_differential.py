"""The server and the offline replay reach the same verdict on every input.

Hypothesis writes a program of steps — publishing objects of every kind, revising them (also
stale or by the wrong author), voting (also twice), proposing and merging, and mutated
envelopes: bad proofs, unknown links, the wrong author, a future timestamp, retries of earlier
inputs, revocations of a worker key or of the authority key, new authority certificates.  Each
input goes to the server's storage (in-process, its real write path, on each backend: a SQLite
file, a fresh database of the session's PostgreSQL cluster for each example) and to
the offline replay (``audit.replay.Ledger``, what ``alexandria verify`` runs) at the same
admission time, and both must answer the same status and code.  An exact retry, which the
server answers with 200 and the replay refuses as a duplicate log entry, counts as 200.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alexandria.api.status import status_of
from alexandria.audit.replay import AlreadyAdmitted, Ledger
from alexandria.core.canonical import canonical
from alexandria.core.leaf import leaf_bytes
from alexandria.core.records import revision_id
from alexandria.core.timestamps import format_ms
from alexandria.core.trust import make_authority_certificate, make_revocation
from alexandria.errors import AlexandriaError
from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import Founding, found_library
from alexandria.store.backends import storage_for
from alexandria.store.interface import Admitted
from alexandria.store.ledger_storage import LedgerStorage
from tests.support.admission import (
    assessment,
    claim,
    discussion,
    evidence,
    link,
    proposal,
    reply,
    space,
    vote,
)
from tests.support.library import SEED, T0, Clock

ACTIONS = (
    "space", "claim", "discussion", "reply", "evidence", "assessment", "vote", "revise",
    "proposal", "merge", "unknown_link", "bad_proof", "wrong_author", "future", "retry",
    "revoke_worker", "revoke_authority", "new_authority_certificate",
)
WHO = ("owner", "peer")
Verdict = tuple[int, str | None]


def _founding() -> Founding:
    f = found_library(seed=SEED, created_at=T0)
    f.enroll("owner")
    f.enroll("peer")
    return f


FOUNDING = _founding()


@dataclass
class Obj:
    root: str
    kind: str
    author: str
    content: dict[str, Any]
    revisions: list[str]


@dataclass
class World:
    """What the program knows of the ledger, learnt from the server's verdicts."""

    objects: list[Obj] = field(default_factory=list)
    proposals: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (object root, body)
    sent: list[tuple[str, Any]] = field(default_factory=list)

    def of_kind(self, *kinds: str) -> list[Obj]:
        return [o for o in self.objects if o.kind in kinds]


def _pick(items: list[Any], n: int) -> Any:
    return items[n % len(items)] if items else None


def _envelope(who: str, content: dict[str, Any], at: str) -> bytes:
    p = FOUNDING.participants[who]
    return canonical(p.envelope(FOUNDING.genesis, content, at))


def _mutated(data: bytes, change: Any) -> bytes:
    env = json.loads(data)
    change(env)
    return canonical(env)


def _step(world: World, action: str, a: int, b: int, clock: Clock) -> tuple[str, Any] | None:
    """The input of one step: ``("entries", envelope bytes)`` or ``("authority", document)``;
    None when the program has nothing to act on yet."""
    who = WHO[a % 2]
    at = clock.now()
    spaces = [o.root for o in world.of_kind("space")]
    claims = world.of_kind("claim")
    if action == "space":
        return "entries", _envelope(who, space(f"S{b}", _pick(spaces, b)), at)
    if action == "claim":
        return "entries", _envelope(who, claim(_pick(spaces, b), title=f"C{b}"), at)
    if action == "discussion":
        about = _pick([o.root for o in world.of_kind("claim", "space")], b)
        return "entries", _envelope(who, discussion(*([link("about", about)] if about else [])),
                                    at)
    if action == "reply":
        parent = _pick([r for o in world.of_kind("discussion", "reply") for r in o.revisions], b)
        if parent is None:
            return None
        return "entries", _envelope(who, reply(link("replies_to", parent), text=f"R{b}"), at)
    if action == "evidence":
        target = _pick([r for o in claims for r in o.revisions], b)
        if target is None:
            return None
        return "entries", _envelope(who, evidence(target, content=f"E{b}"), at)
    if action == "assessment":
        target = _pick([r for o in claims for r in o.revisions], b)
        if target is None:
            return None
        ev = [o.root for o in world.of_kind("evidence")][: b % 3]
        return "entries", _envelope(who, assessment(target, ev, ("open", "supported")[b % 2]),
                                    at)
    if action == "vote":
        target = _pick([r for o in world.objects for r in o.revisions], b)
        if target is None:
            return None
        return "entries", _envelope(who, vote(target, ("1", "-1")[a // 2 % 2]), at)
    if action == "revise":
        obj = _pick(world.objects, b)
        if obj is None:
            return None
        previous = obj.revisions[-1 - (a // 2) % len(obj.revisions)]  # the head, or older
        changed = ({"body": ("1", "-1")[b % 2]} if obj.kind == "vote"
                   else {"body": f"R{b}"} if obj.kind == "reply" else {"title": f"T{b}"})
        return "entries", _envelope(who, {**obj.content, **changed, "previous": previous}, at)
    if action == "proposal":
        obj = _pick(world.of_kind("space", "claim"), b)
        if obj is None:
            return None
        base = obj.revisions[-1 - (a // 2) % len(obj.revisions)]
        content = proposal(base, f"P{b}", obj.content["body"], obj.content["links"])
        return "entries", _envelope(who, content, at)
    if action == "merge":
        found = _pick(world.proposals, b)
        if found is None:
            return None
        pid, body = found
        obj = next(o for o in world.objects if body["base"] in o.revisions)
        content = {"kind": obj.kind, "title": body["title"], "body": body["body"],
                   "links": [*body["links"], link("merges", pid)], "previous": body["base"]}
        return "entries", _envelope(who, content, at)
    if action == "unknown_link":
        missing = f"{b:064x}"
        return "entries", _envelope(who, claim(None, link("cites", missing)), at)
    if action == "bad_proof":
        data = _envelope(who, claim(_pick(spaces, b), title=f"X{b}"), at)

        def flip(env: dict[str, Any]) -> None:
            proof = env["signature"]["proof"]
            env["signature"]["proof"] = ("0" if proof[0] != "0" else "1") + proof[1:]

        return "entries", _mutated(data, flip)
    if action == "wrong_author":
        other = FOUNDING.participants[WHO[(a + 1) % 2]].actor
        p = FOUNDING.participants[who]
        env = p.envelope(FOUNDING.genesis, claim(None, title=f"W{b}"), at)
        env["record"]["author"] = other
        env["signature"]["proof"] = p.worker.sign(canonical(env["record"]))
        return "entries", canonical(env)
    if action == "future":
        ahead = format_ms(clock.ms + 120_000)
        return "entries", _envelope(who, claim(None, title=f"F{b}"), ahead)
    if action == "retry":
        return _pick(world.sent, b)
    if action == "revoke_worker":
        key = FOUNDING.participants[who].worker.public_hex
        return "authority", make_revocation(FOUNDING.genesis, key, f"lost {b}",
                                            [FOUNDING.authority])
    if action == "revoke_authority":
        signer = FOUNDING.roots if a % 3 else [FOUNDING.authority]  # the wrong signer, at times
        return "authority", make_revocation(FOUNDING.genesis, FOUNDING.authority.public_hex,
                                            "compromised", signer)
    assert action == "new_authority_certificate"
    return "authority", make_authority_certificate(
        FOUNDING.genesis, FOUNDING.authority.public_hex, ["native-application"],
        FOUNDING.not_before, format_ms(clock.ms + 1000 * (b + 1)), FOUNDING.roots,
    )


def _learn(world: World, data: bytes) -> None:
    """An admitted envelope: remember what it created or revised."""
    record = json.loads(data)["record"]
    rid = revision_id(record)
    kind = record["kind"]
    body = json.loads(record["body"]) if kind not in ("reply", "vote") else record["body"]
    content = {"kind": kind, "title": record["title"], "body": body,
               "links": record["links"], "previous": ""}
    if record["previous"]:
        obj = next(o for o in world.objects if record["previous"] in o.revisions)
        obj.revisions.append(rid)
        obj.content = content
        return
    world.objects.append(Obj(rid, kind, record["author"], content, [rid]))
    if kind == "proposal":
        world.proposals.append((rid, body))


async def _server(storage: LedgerStorage, route: str, payload: Any) -> Verdict:
    try:
        if route == "entries":
            result = await storage.admit(prepare(payload, FOUNDING.genesis))
            assert isinstance(result, Admitted)
            return (201 if result.created else 200), None
        done = await storage.admit_authority(payload)
        return (201 if done.created else 200), None
    except AlexandriaError as exc:
        return status_of(exc), exc.code


def _replay(ledger: Ledger, route: str, payload: Any, now: int) -> Verdict:
    try:
        if route == "entries":
            cand = prepare(payload, FOUNDING.genesis)
            ledger.admit_contribution(cand, leaf_bytes(format_ms(now), cand.document), now)
        else:
            ledger.admit_authority(payload, leaf_bytes(format_ms(now), canonical(payload)), now)
        return 201, None
    except AlreadyAdmitted:
        return 200, None
    except AlexandriaError as exc:
        return status_of(exc), exc.code


async def _run(program: list[tuple[str, int, int]], db: Path | str, tmp: Path) -> list[Verdict]:
    clock = Clock()
    storage = storage_for(db, FOUNDING.genesis)
    storage.clock = clock
    ledger = Ledger(FOUNDING.genesis, tmp)
    world = World()
    inputs: list[tuple[str, Any]] = [
        ("authority", doc) for doc in FOUNDING.authority_documents()
    ]
    verdicts: list[Verdict] = []
    await storage.open()
    try:
        steps = iter(program)
        while True:
            if inputs:
                route, payload = inputs.pop(0)
            else:
                step = next(steps, None)
                if step is None:
                    break
                made = _step(world, *step, clock)
                if made is None:
                    continue
                route, payload = made
            clock.tick(1000)
            server = await _server(storage, route, payload)
            replay = _replay(ledger, route, payload, clock.ms)
            assert server == replay, (route, payload, server, replay)
            verdicts.append(server)
            world.sent.append((route, payload))
            if route == "entries" and server[0] == 201:
                _learn(world, payload)
    finally:
        await storage.close()
        ledger.close()
    return verdicts


PROGRAMS = st.lists(
    # small choices, so that steps often meet the same target (a second vote, a stale head)
    st.tuples(st.sampled_from(ACTIONS), st.integers(0, 7), st.integers(0, 7)),
    min_size=1, max_size=40,
)


# the backend (a function-scoped fixture) is the same for every example; each example makes its
# own database
@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program=PROGRAMS)
def test_server_and_replay_reach_the_same_verdict_on_every_input(
    backend: str, request: pytest.FixtureRequest, program: list[tuple[str, int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if backend == "sqlite":
            asyncio.run(_run(program, Path(tmp) / "server.db", Path(tmp)))
            return
        cluster = request.getfixturevalue("pg_cluster")
        url = cluster.database()
        try:
            asyncio.run(_run(program, url, Path(tmp)))
        finally:
            cluster.drop(url)


def test_the_programs_reach_the_refusals_they_are_meant_to_compare() -> None:
    """A fixed program through the same harness: the verdicts include the refusals the
    mutations aim at, so the differential test compares more than admissions."""
    program = [
        ("space", 0, 0), ("claim", 0, 1), ("claim", 1, 2), ("vote", 0, 1), ("vote", 0, 1),
        ("revise", 1, 1), ("revise", 0, 1), ("revise", 2, 1), ("revise", 0, 1),
        ("evidence", 0, 1), ("assessment", 0, 1), ("bad_proof", 0, 0), ("unknown_link", 0, 7),
        ("wrong_author", 0, 0), ("future", 0, 0), ("retry", 0, 3), ("proposal", 0, 1),
        ("proposal", 2, 1), ("merge", 0, 0), ("merge", 0, 0), ("revoke_worker", 1, 0),
        ("claim", 1, 0), ("revoke_authority", 0, 0), ("revoke_authority", 1, 0),
        ("claim", 0, 0), ("new_authority_certificate", 0, 0),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        verdicts = asyncio.run(_run(program, Path(tmp) / "server.db", Path(tmp)))
    codes = {code for _status, code in verdicts}
    assert {
        "DUPLICATE_VOTE", "NOT_ORIGINAL_AUTHOR", "HEAD_CONFLICT", "PROOF_INVALID",
        "LINK_TARGET_MISSING", "AUTHOR_NOT_CERTIFIED", "TIMESTAMP_IN_FUTURE", "STALE_BASE",
        "WORKER_REVOKED", "AUTHORITY_REVOKED", "REVOCATION_SIGNATURES",
    } <= codes, codes
    assert (200, None) in verdicts and (201, None) in verdicts
