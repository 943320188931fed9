"""Personal lists (the contract's ``personal_lists``): a pure function of (state, candidate) →
decision, like ``admission.decide``.  Storage (``store/personal.py``) calls ``decide`` inside
its write transaction and persists what the decision says; nothing here does IO.

A ``personal-read`` returns the author's current signed state; a ``personal-state`` replaces it
by compare-and-set on ``previous``.  Neither is ever admitted into the public log.  The checks,
in PROTOCOL §4 order (status codes of §6):

 1. body size (413), envelope shape (400), record shape with a personal kind (422) — prepare()
 2. worker certificate, authority chain, validity now, revocations (403)
                                                        — authority.check_authority
 3. proof and scope ``library.publish`` (403)                               — prepare(), deferred
 4. personal shape (422): links [], a read's previous "", the body's exact keys (the title
    is any string: the contract names none);
    nonce 64-hex; each list at most 128 unique 64-hex ids
 5. an exact retry (record id already accepted) skips to step 8 and returns the current state:
    retries stay idempotent only while the authorization and the time window still hold
 6. state rules (422): listed ids are admitted roots of space/discussion/claim/document
    objects; a read's nonce was not used by this author for another record
 7. compare-and-set: previous is the author's current state id, or "" when none (409 with the
    current signed state in details)
 8. time window (422): authored_at at most 60 s ahead of the server clock, at most 5 minutes
    behind it, and inside the worker certificate's window
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from alexandria.core.keys import HEX64
from alexandria.core.leaf import CONTRIBUTION_HEAD
from alexandria.core.records import Record
from alexandria.core.timestamps import format_ms
from alexandria.errors import Conflict, Invalid
from alexandria.rules.admission import Candidate
from alexandria.rules.authority import check_authority
from alexandria.rules.state import CLOCK_SKEW_MS
from alexandria.rules.view import StateView

READ = "personal-read"
STATE = "personal-state"
LISTS = ("following", "saved")
MAX_ROOTS = 128
WINDOW_MS = 5 * 60 * 1000
TARGET_KINDS = ("claim", "discussion", "document", "space")


class PersonalViolation(Invalid):
    default_code = "PERSONAL_RULE"


class StateConflict(Conflict):
    default_code = "PERSONAL_STATE_CONFLICT"


@dataclass(frozen=True)
class Target:
    """What the rules need to know of a public revision a list names."""

    kind: str
    root: str


@dataclass(frozen=True)
class StoredState:
    id: str
    signed: bytes  # JCS({"id", "record", "signature"})


class PersonalView(Protocol):
    """What the personal rules may ask, answered inside the write transaction."""

    def target(self, rev: str) -> Target | None:
        """The kind and root of an admitted public revision."""
        ...

    def current(self, author: str) -> StoredState | None: ...

    def accepted(self, record_id: str) -> bool:
        """Whether this exact record was accepted before (and is still remembered)."""
        ...

    def nonce_owner(self, author: str, nonce: str) -> str | None:
        """The id of the record by ``author`` that used ``nonce``, if any."""
        ...


@dataclass(frozen=True)
class Decision:
    """``remember``: record the request (id, nonce); ``new_state``: store it as current.
    ``state`` is what the response carries."""

    created: bool
    remember: bool
    nonce: str
    new_state: StoredState | None
    state: bytes | None


def signed_state_bytes(record_id: str, document: bytes) -> bytes:
    """``JCS({"id", "record", "signature"})`` spliced from ``document = JCS({"record",
    "signature"})``: JCS sorts ``id`` first, so the result is canonical."""
    assert document.startswith(CONTRIBUTION_HEAD)
    return b'{"id":"' + record_id.encode() + b'",' + document[1:]


def response_bytes(state: bytes | None) -> bytes:
    """``JCS({"state": SIGNED_STATE | null})``."""
    return b'{"state":' + (state if state is not None else b"null") + b"}"


def _violation(message: str, code: str, **details: Any) -> PersonalViolation:
    return PersonalViolation(message, code, **details)


# --- step 4 ----------------------------------------------------------------------------------


def check_shape(rec: Record) -> None:
    # the title is not read: the contract's personal_lists names no title (the CLI sends "")
    if rec.links:
        raise _violation(f"a {rec.kind} carries no links", "PERSONAL_SHAPE",
                         pointer="/record/links", expected=[])
    body = rec.decoded_body
    keys = ("nonce",) if rec.kind == READ else LISTS
    if not isinstance(body, dict) or set(body) != set(keys):
        raise _violation(
            f"the body of a {rec.kind} is an object with exactly the keys {list(keys)}",
            "PERSONAL_SHAPE", pointer="/body", expected=list(keys),
        )
    if rec.kind == READ:
        if rec.previous:
            raise _violation('a personal-read has previous ""', "PERSONAL_SHAPE",
                             pointer="/record/previous", expected="")
        if not isinstance(body["nonce"], str) or not HEX64.match(body["nonce"]):
            raise _violation("nonce is 64 lowercase hex characters (32 random bytes)",
                             "PERSONAL_SHAPE", pointer="/body/nonce")
        return
    for name in LISTS:
        items = body[name]
        if not isinstance(items, list):
            raise _violation(f"{name} is a list of root ids", "PERSONAL_SHAPE",
                             pointer=f"/body/{name}")
        if len(items) > MAX_ROOTS:
            raise _violation(
                f"{name} holds {len(items)} roots; at most {MAX_ROOTS}", "PERSONAL_LIST_TOO_LONG",
                pointer=f"/body/{name}", limit=MAX_ROOTS, actual=len(items),
            )
        seen: set[str] = set()
        for i, item in enumerate(items):
            if not isinstance(item, str) or not HEX64.match(item):
                raise _violation("a root id is 64 lowercase hex characters", "PERSONAL_SHAPE",
                                 pointer=f"/body/{name}/{i}")
            if item in seen:
                raise _violation(f"{item} is listed twice in {name}", "PERSONAL_DUPLICATE",
                                 pointer=f"/body/{name}/{i}", root=item)
            seen.add(item)


# --- step 6 ----------------------------------------------------------------------------------


def check_targets(view: PersonalView, lists: dict[str, Sequence[str]]) -> None:
    for name in LISTS:
        for i, rev in enumerate(lists[name]):
            where = f"/body/{name}/{i}"
            t = view.target(rev)
            if t is None:
                raise _violation(f"{rev} is not an admitted revision", "PERSONAL_TARGET_MISSING",
                                 pointer=where, target=rev)
            if t.kind not in TARGET_KINDS:
                raise _violation(
                    f"lists hold space, discussion, claim and document roots, not a {t.kind}",
                    "PERSONAL_TARGET_KIND", pointer=where, allowed=list(TARGET_KINDS),
                    actual=t.kind,
                )
            if t.root != rev:
                raise _violation("lists hold root ids, not later revisions", "PERSONAL_NOT_ROOT",
                                 pointer=where, root=t.root)


def check_nonce(view: PersonalView, rec: Record, nonce: str) -> None:
    owner = view.nonce_owner(rec.author, nonce)
    if owner is not None and owner != rec.id:
        raise _violation(
            "this nonce was already used for another request: sign a new read with a fresh"
            " nonce", "NONCE_REUSED", pointer="/body/nonce",
        )


# --- step 7 ----------------------------------------------------------------------------------


def check_previous(current: StoredState | None, rec: Record) -> None:
    head = current.id if current is not None else ""
    if rec.previous != head:
        state = orjson.loads(current.signed) if current is not None else None
        raise StateConflict(
            "previous is not the current personal state: rebuild the change on details.state"
            " and sign again", head=head, state=state,
        )


# --- step 8 ----------------------------------------------------------------------------------


def check_window(rec: Record, cand: Candidate, now_ms: int) -> None:
    server_time = format_ms(now_ms)
    if rec.authored_ms > now_ms + CLOCK_SKEW_MS:
        raise _violation("authored_at is more than 60 s ahead of the server clock",
                         "TIMESTAMP_IN_FUTURE", pointer="/record/authored_at",
                         server_time=server_time, limit_ms=CLOCK_SKEW_MS)
    if rec.authored_ms < now_ms - WINDOW_MS:
        raise _violation("authored_at is more than 5 minutes behind the server clock",
                         "TIMESTAMP_TOO_OLD", pointer="/record/authored_at",
                         server_time=server_time, limit_ms=WINDOW_MS)
    if not cand.certificate.valid_at(rec.authored_ms):
        raise _violation("authored_at is outside the worker certificate's validity window",
                         "TIMESTAMP_OUTSIDE_CERTIFICATE", pointer="/record/authored_at",
                         server_time=server_time)


# --- the decision ----------------------------------------------------------------------------


def decide(public: StateView, view: PersonalView, cand: Candidate, now_ms: int) -> Decision:
    rec = cand.record
    if rec.kind not in (READ, STATE):
        raise _violation(f"{rec.kind} is not a personal kind", "UNKNOWN_KIND",
                         pointer="/record/kind", allowed=[READ, STATE])
    check_authority(public, rec, cand.certificate, now_ms)
    if cand.deferred is not None:
        raise cand.deferred
    check_shape(rec)
    body = rec.decoded_body
    nonce = body["nonce"] if rec.kind == READ else ""
    current = view.current(rec.author)
    if view.accepted(rec.id):
        check_window(rec, cand, now_ms)
        return Decision(False, False, nonce, None, current.signed if current else None)
    if rec.kind == READ:
        check_nonce(view, rec, nonce)
        check_window(rec, cand, now_ms)
        return Decision(False, True, nonce, None, current.signed if current else None)
    check_targets(view, body)
    check_previous(current, rec)
    check_window(rec, cand, now_ms)
    new = StoredState(rec.id, signed_state_bytes(rec.id, cand.document))
    return Decision(True, True, "", new, new.signed)
