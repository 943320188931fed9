"""Enrolment requests: how a participant asks for a worker certificate without passing files.

``alexandria login URL`` creates the worker key and sends a request (public key, the actor name
asked for, scopes, and the key's signature over them, so nobody can ask on behalf of a key they
do not hold); the library keeps it aside and answers a short one-time code.  The operator lists
open requests (``alexandria authority requests``) and approves one by its code
(``alexandria authority approve CODE``): the worker certificate is signed on the operator's
machine with the authority key, which never leaves it, and handed to the library, which checks
it (it chains to the genesis, its authority is certified and unrevoked, it is for the requesting
key) before giving it to ``login``.

Nothing here reaches the log: requests live in their own table (``store/enrolments.py``) and
are deleted once expired.  Every resource a stranger can use is bounded: a request is at most
``MAX_REQUEST_BYTES`` and lives ``TTL_MS`` (15 minutes: ``expires_at`` in the answer); each
client address may make ``PER_ADDRESS`` requests and each worker key ``PER_KEY`` per
``WINDOW_MS`` (the address is the peer's, or with ``serve --trust-proxy-headers`` the one the
reverse proxy forwarded: ``api/client_address.py``); at most ``MAX_OPEN`` are open at once, and
a server process keeps at most ``KEPT_PER_SECOND`` a second (bursts of ``KEPT_BURST``), so a
flood from many addresses costs the writer a bounded share (a refusal says to retry in 1 s).
What only an authority may do (list, look up, approve) is refused to an address that was
refused ``AUTHORITY_REFUSALS`` times in ``WINDOW_MS``, before any signature is checked: an
operator's own questions never count against it.  A code approves once, and the operator
finds a request by its code (an indexed lookup), however many others wait.

Every refusal (a malformed or unsigned request, a limit, a key that is not an authority, an
unknown or used code) is decided before the single writer is involved: signatures and limits in
memory, the ledger's authorities and the open requests through a read connection.  Only a
request that will be kept, and an approval that will be recorded, takes a write transaction
(which checks again: two racing requests may both pass the read).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from alexandria.core.canonical import canonical, parse_json
from alexandria.core.keys import HEX64, verify
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.core.trust import SCOPES
from alexandria.errors import Malformed, NotPermitted, RateLimited
from alexandria.files import NAME

PURPOSE = "alexandria.enrolment/1"
MAX_REQUEST_BYTES = 2048
TTL_MS = 15 * 60 * 1000
PER_ADDRESS = 10
PER_KEY = 5
#: refused authority questions (a listing, a lookup, a certificate) per client address
AUTHORITY_REFUSALS = 20
#: requests kept per second by one server process, in bursts of at most KEPT_BURST: the
#: writer's work for logins, whatever number of addresses asks
KEPT_PER_SECOND = 10
KEPT_BURST = 100
WINDOW_MS = 10 * 60 * 1000
MAX_OPEN = 10_000
#: the operator's listing is signed by an authority key: ``KEY AT SIGNATURE`` in this header
LIST_HEADER = "x-alexandria-authority"
LIST_PURPOSE = "alexandria.enrolment-list/1"
LIST_SKEW_MS = 5 * 60 * 1000
#: codes: 8 characters of Crockford's base 32 (no I, L, O, U), shown as XXXX-XXXX (40 bits)
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@dataclass(frozen=True)
class EnrolmentRequest:
    worker: str
    name: str
    scopes: tuple[str, ...]
    proof: str

    def signed_bytes(self, genesis_pin: str) -> bytes:
        return signed_bytes(genesis_pin, self.worker, self.name, list(self.scopes))


def signed_bytes(genesis_pin: str, worker: str, name: str, scopes: list[str]) -> bytes:
    """What the worker key signs: ``JCS({purpose, genesis, worker, name, scopes})``."""
    return canonical({"purpose": PURPOSE, "genesis": genesis_pin, "worker": worker,
                      "name": name, "scopes": sorted(scopes)})


def new_code() -> str:
    raw = "".join(secrets.choice(ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def normalize_code(text: str) -> str:
    """What a person types: any case, with or without the dash, O for 0 and I/L for 1."""
    flat = text.strip().upper().replace("-", "").replace(" ", "")
    flat = flat.replace("O", "0").replace("I", "1").replace("L", "1")
    if len(flat) != 8 or any(c not in ALPHABET for c in flat):
        raise Malformed("an enrolment code is 8 characters, like K7QF-2XMB", "BAD_CODE")
    return f"{flat[:4]}-{flat[4:]}"


def parse_request(body: bytes, genesis_pin: str) -> EnrolmentRequest:
    if len(body) > MAX_REQUEST_BYTES:
        raise Malformed(f"an enrolment request is at most {MAX_REQUEST_BYTES} bytes",
                        "BODY_TOO_LARGE", limit=MAX_REQUEST_BYTES)
    value = parse_json(body)
    fields = {"worker", "name", "scopes", "proof"}
    if not isinstance(value, dict) or set(value) != fields:
        raise Malformed(f"an enrolment request has exactly the fields {sorted(fields)}",
                        "ENROLMENT_SHAPE", allowed=sorted(fields))
    worker, name, scopes, proof = (value[k] for k in ("worker", "name", "scopes", "proof"))
    if not isinstance(worker, str) or not HEX64.match(worker):
        raise Malformed("worker is the 64-hex public key", "BAD_KEY", pointer="/worker")
    if not isinstance(name, str) or not NAME.match(name):
        raise Malformed("name: letters, digits, _ . - (at most 64)", "BAD_NAME",
                        pointer="/name")
    if not isinstance(scopes, list) or not scopes or len(scopes) > len(SCOPES) \
            or len(set(map(str, scopes))) != len(scopes) \
            or any(s not in SCOPES for s in scopes):
        raise Malformed("scopes: a non-empty list of distinct scopes", "BAD_SCOPE",
                        pointer="/scopes", allowed=list(SCOPES))
    if not isinstance(proof, str) or not verify(worker, proof,
                                                signed_bytes(genesis_pin, worker, name, scopes)):
        raise Malformed("proof is not the worker key's signature of the request",
                        "PROOF_INVALID", pointer="/proof")
    return EnrolmentRequest(worker, name, tuple(sorted(scopes)), proof)


def list_signed_bytes(genesis_pin: str, key: str, at: str) -> bytes:
    """What an authority key signs to list open requests: ``JCS({purpose, genesis, key, at})``.
    Who waits for approval (names, keys, codes) is the operator's business, not the world's."""
    return canonical({"purpose": LIST_PURPOSE, "genesis": genesis_pin, "key": key, "at": at})


def list_header(genesis_pin: str, key: Any, at: str) -> str:
    """The header value the operator's CLI sends (``key`` is a ``SigningKey``)."""
    return f"{key.public_hex} {at} {key.sign(list_signed_bytes(genesis_pin, key.public_hex, at))}"


def parse_list_header(value: str | None, genesis_pin: str, now_ms: int) -> str:
    """The authority key that signed ``value``, made within ``LIST_SKEW_MS`` of now.  Whether
    that key is a certified, unrevoked authority is the ledger's question (the store asks)."""
    if not value:
        raise NotPermitted(f"listing enrolment requests needs an authority's signature"
                           f" ({LIST_HEADER}: KEY AT SIGNATURE): `alexandria authority requests`",
                           "AUTHORITY_REQUIRED")
    parts = value.split(" ")
    at_ms = parse_ms(parts[1]) if len(parts) == 3 else None
    if len(parts) != 3 or not HEX64.match(parts[0]) or at_ms is None:
        raise NotPermitted(f"{LIST_HEADER} is KEY AT SIGNATURE", "BAD_AUTHORITY_HEADER")
    key, at, signature = parts
    if abs(now_ms - at_ms) > LIST_SKEW_MS:
        raise NotPermitted("the listing signature is more than 5 minutes from the server's clock",
                           "STALE_SIGNATURE", at=at)
    if not verify(key, signature, list_signed_bytes(genesis_pin, key, at)):
        raise NotPermitted("the listing signature is not the key's", "PROOF_INVALID")
    return key


class WindowLimiter:
    """``per`` events per ``window_ms`` for each key (a sliding window; at most ``MAX_KEYS``
    keys remembered, the least recently used forgotten first).  ``what`` names the key in the
    refusal (``address``, ``key``)."""

    MAX_KEYS = 10_000

    def __init__(self, per: int, window_ms: int = WINDOW_MS, what: str = "address",
                 events: str = "enrolment requests") -> None:
        self.per = per
        self.window_ms = window_ms
        self.what = what
        self.events = events
        self._seen: dict[str, deque[int]] = {}
        self._lock = threading.Lock()

    def check(self, key: str, now_ms: int | None = None, shown: str | None = None,
              count: bool = True) -> None:
        """Count one event of ``key`` (unless ``count`` is false: only ask), or raise
        ``RateLimited`` (429 with ``Retry-After``) without counting it.  ``shown``: how the
        refusal names the key (default ``key``)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            times = self._seen.pop(key, deque())
            while times and times[0] <= now - self.window_ms:
                times.popleft()
            if len(times) >= self.per:
                self._seen[key] = times
                retry = (times[0] + self.window_ms - now) // 1000 + 1
                raise RateLimited(
                    f"too many {self.events} from this {self.what} ({shown or key}):"
                    f" try again in {retry} s", retry_after=retry, limit=self.per,
                    window_seconds=self.window_ms // 1000, per=self.what)
            if count:
                times.append(now)
            if times:  # re-inserted: the dict's order is by last use; nothing kept for none
                self._seen[key] = times
            while len(self._seen) > self.MAX_KEYS:
                del self._seen[next(iter(self._seen))]


    def refund(self, key: str) -> None:
        """Take back the newest event counted for ``key``: a request refused after it was
        counted for a reason that is not the client's (the process's rate) costs it nothing."""
        with self._lock:
            times = self._seen.get(key)
            if times:
                times.pop()


class AddressLimiter(WindowLimiter):
    """``PER_ADDRESS`` requests per ``WINDOW_MS`` for each client address."""

    def __init__(self, per_address: int = PER_ADDRESS, window_ms: int = WINDOW_MS) -> None:
        super().__init__(per_address, window_ms, "address")


class RefusalLimiter(WindowLimiter):
    """``AUTHORITY_REFUSALS`` refused authority questions per ``WINDOW_MS`` for each client
    address: ``check(..., count=False)`` before the question, ``check`` once it was refused."""

    def __init__(self, per_address: int = AUTHORITY_REFUSALS, window_ms: int = WINDOW_MS
                 ) -> None:
        super().__init__(per_address, window_ms, "address",
                         "refused questions only an authority may ask")


class KeptRate:
    """A token bucket: ``per_second`` requests kept a second, ``burst`` at once."""

    def __init__(self, per_second: float = KEPT_PER_SECOND, burst: int = KEPT_BURST) -> None:
        self.per_second = per_second
        self.burst = burst
        self._tokens = float(burst)
        self._at: int | None = None
        self._lock = threading.Lock()

    def take(self, now_ms: int) -> None:
        with self._lock:
            if self._at is not None and now_ms > self._at:
                self._tokens = min(self.burst, self._tokens
                                   + (now_ms - self._at) * self.per_second / 1000)
            self._at = now_ms if self._at is None else max(self._at, now_ms)
            if self._tokens < 1:
                retry = int((1 - self._tokens) / self.per_second) + 1
                raise RateLimited(f"the library is taking many enrolment requests: try again"
                                  f" in {retry} s", "ENROLMENTS_BUSY", retry_after=retry,
                                  limit=self.per_second, per="library")
            self._tokens -= 1


class KeyLimiter(WindowLimiter):
    """``PER_KEY`` requests per ``WINDOW_MS`` for each requesting worker key (asking again
    replaces the key's open request: this bounds how often)."""

    def __init__(self, per_key: int = PER_KEY, window_ms: int = WINDOW_MS) -> None:
        super().__init__(per_key, window_ms, "key")


def public_view(row: dict[str, Any]) -> dict[str, Any]:
    """A request as the operator sees it (``GET /api/enrolments``, and one by its code)."""
    return {"code": row["code"], "name": row["name"], "worker": row["worker"],
            "scopes": list(row["scopes"]), "requested_at": format_ms(row["requested_ms"]),
            "expires_at": format_ms(row["expires_ms"])}
