"""What the MCP server may say as its own, and what stays the library's.

A library — or anything between it and the server — can answer anything.  The server's own
words (the first text block of every answer, the fields outside ``untrusted``, an error's
sentence; the second text block is the structured content serialised)
are composed only from values checked here: integers parsed as integers within bounds,
booleans as booleans, ids as 64 lowercase hex digits, timestamps in the protocol's one format,
kinds and relations from the known sets, error codes as UPPER_SNAKE.  A field of an answer that
fails its check makes the answer ``MALFORMED_ANSWER`` (named by the server's field name, never
by the value); everything free-form the library or an author supplied — titles, bodies, the
library's name, checkpoint notes, a refusal's sentence and details — is handed on only inside
an object named ``untrusted``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from alexandria.client import ServerError, Unreachable
from alexandria.core.records import PUBLIC_KINDS
from alexandria.core.timestamps import parse_ms
from alexandria.errors import AlexandriaError, Failed, Refused
from alexandria.rules.state import RULE_RELATIONS

MAX_COUNT = 2**53 - 1
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
MAX_UNTRUSTED_ERROR_BYTES = 1_000
"""A refusal's sentence and details, as the library phrased them: bounded, so that a hostile
library cannot blow an answer's budget through them."""


class MalformedAnswer(Failed):
    """The library's answer is not what its routes answer: a field of the wrong type, range or
    format.  The sentence names the field, never the value."""

    default_code = "MALFORMED_ANSWER"


def malformed(where: str, what: str) -> MalformedAnswer:
    return MalformedAnswer(f"the library's answer is malformed: {where} is not {what}",
                           field=where)


def count(value: Any, where: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_COUNT:
        raise malformed(where, f"an integer of at least {minimum}")
    return value


def integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_COUNT:
        raise malformed(where, "an integer")
    return value


def next_offset(value: Any, where: str = "next_offset") -> int | None:
    return None if value is None else count(value, where)


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise malformed(where, "a boolean")
    return value


def is_hex64(value: Any) -> bool:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def hex64(value: Any, where: str) -> str:
    if not is_hex64(value):
        raise malformed(where, "a revision id (64 hex digits)")
    assert isinstance(value, str)
    return value


def one_of(value: Any, allowed: Iterable[Any], where: str) -> Any:
    if isinstance(value, bool) or value not in allowed:
        raise malformed(where, "one of the known values")
    return value


def is_timestamp(value: Any) -> bool:
    return isinstance(value, str) and parse_ms(value) is not None


def is_kind(value: Any) -> bool:
    return isinstance(value, str) and value in PUBLIC_KINDS


def is_link(value: Any) -> bool:
    return (isinstance(value, Mapping) and set(value) == {"relation", "target"}
            and value["relation"] in RULE_RELATIONS and is_hex64(value["target"]))


def items(value: Any, where: str, limit: int = 1_000) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise malformed(where, f"a list of at most {limit} items")
    return value


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise malformed(where, "an object")
    return value


def clipped(value: Any, limit: int = 256) -> Any:
    """A short free-form string of the library's (for ``untrusted``), cut to ``limit``."""
    return value[:limit] if isinstance(value, str) else None


def code(value: Any, fallback: str = "UNKNOWN") -> str:
    """An error code fit for the server's own words: UPPER_SNAKE, at most 64 characters."""
    return value if isinstance(value, str) and _CODE.fullmatch(value) else fallback


def bounded(document: Mapping[str, Any]) -> dict[str, Any]:
    """``{"error", "details"}`` as the library phrased them, cut to a bounded size."""
    out = {"error": document.get("error"), "details": document.get("details")}
    if len(orjson.dumps(out, default=str)) > MAX_UNTRUSTED_ERROR_BYTES:
        error = out["error"]
        out = {"error": error[:300] if isinstance(error, str) else None,
               "details": {"truncated": True}}
    return out


def failure(exc: BaseException) -> dict[str, Any]:
    """A verification step's failure for a record's ``failure`` field: its code, and what it
    said — which may quote the library's answer — under ``untrusted``."""
    if isinstance(exc, AlexandriaError):
        return {"code": code(exc.code), "untrusted": bounded(exc.to_json())}
    return {"code": "MALFORMED_ANSWER", "untrusted": bounded(
        {"error": f"{type(exc).__name__}: {exc}", "details": {}})}


class LibraryRefusal(Refused):
    """A refusal that came from the library, as the MCP server passes it on: the code
    checked, the HTTP status, and the library's own sentence and details under
    ``details.untrusted``."""

    default_code = "LIBRARY_ERROR"


class LibraryFailure(Failed):
    """No definitive answer from the library (or its network path), passed on as a refusal
    is: the code checked, the HTTP status when there was one, the library's own words under
    ``details.untrusted``."""

    default_code = "LIBRARY_ERROR"


def is_from_library(exc: AlexandriaError) -> bool:
    return isinstance(exc, (ServerError, Unreachable))


def library_parts(exc: AlexandriaError) -> tuple[str, int | None, dict[str, Any]]:
    """``(code, status, untrusted)`` of an error from the library."""
    status: Any = exc.http_status if isinstance(exc, ServerError) else exc.details.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        status = None
    document = exc.to_json()
    return code(document.get("code"), "LIBRARY_ERROR"), status, bounded(document)


def from_library(exc: AlexandriaError) -> LibraryRefusal | LibraryFailure:
    what, status, said = library_parts(exc)
    at = f" (HTTP {status})" if status is not None else ""
    refused = isinstance(exc, ServerError)
    verb = "refused the request" if refused else "gave no definitive answer"
    details: dict[str, Any] = {"status": status, "untrusted": said}
    return (LibraryRefusal if refused else LibraryFailure)(
        f"the library {verb}: {what}{at}; its own words are in details.untrusted", what,
        **details)
