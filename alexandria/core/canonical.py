"""The one place that turns JSON values into bytes that get hashed or signed.

Canonical form is RFC 8785 (JCS).  Signed payloads hold no floats and no integers beyond
±(2**53 - 1) (PROTOCOL §1), so both are refused here rather than silently rounded.

``canonical`` has a fast path: orjson with sorted keys produces the same bytes as JCS when
every object key is ASCII and every number is a safe integer (no floats reach this far).  Keys
outside ASCII may sort differently (JCS sorts by UTF-16 code units), so any such value falls
back to the reference ``rfc8785`` encoder.  ``tests/core/test_canonical.py`` checks the two agree on
a generated corpus.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson
import rfc8785

from alexandria.errors import NotCanonical, UnsafeNumber

MAX_SAFE_INTEGER = 2**53 - 1
# The deepest nesting ``parse_json`` accepts.  The contract's deepest value (an envelope holding
# a proposal's links) is 6 levels deep; 64 leaves room for any future field while keeping every
# recursive consumer (the schema validator, JCS, the state rules) far from Python's and
# jsonschema-rs's recursion limits, whose errors are not typed (docs/protocol.md).
MAX_JSON_DEPTH = 64


def _check(value: Any, ascii_keys: bool = True) -> bool:
    """Refuse floats and unsafe integers; return whether every key is ASCII."""
    if isinstance(value, str):
        return ascii_keys
    if isinstance(value, bool) or value is None:
        return ascii_keys
    if isinstance(value, int):
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return ascii_keys
        raise UnsafeNumber(f"integer {value} is outside ±(2^53-1)")
    if isinstance(value, float):
        raise UnsafeNumber("floats are not allowed in signed data")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotCanonical("object keys must be strings")
            if ascii_keys and not k.isascii():
                ascii_keys = False
            ascii_keys = _check(v, ascii_keys)
        return ascii_keys
    if isinstance(value, (list, tuple)):
        for v in value:
            ascii_keys = _check(v, ascii_keys)
        return ascii_keys
    raise NotCanonical(f"{type(value).__name__} is not a JSON value")


def canonical(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``."""
    if _check(value):
        try:
            return orjson.dumps(value, option=_ORJSON_OPTIONS)
        except orjson.JSONEncodeError:
            pass  # e.g. lone surrogates: let the reference encoder decide
    return reference_canonical(value)


_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def canonical_parsed(value: Any) -> bytes:
    """RFC 8785 bytes of a value that came out of ``parse_json``.

    Such a value holds no Python floats (the parser turns them into markers, which orjson
    refuses), and ``OPT_STRICT_INTEGER`` refuses integers beyond 53 bits, so the only remaining
    difference between orjson and JCS is the order of non-ASCII keys: when the output is pure
    ASCII there are none and the fast bytes are canonical; otherwise the full path decides.
    """
    try:
        data = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return reference_canonical(value)
    if data.isascii():
        return data
    return canonical(value)


def reference_canonical(value: Any) -> bytes:
    """The reference encoder, without the fast path (used by parity tests)."""
    _check(value)
    try:
        return bytes(rfc8785.dumps(value))
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        raise NotCanonical(f"value has no canonical form: {exc}") from exc


def canonical_text(value: Any) -> str:
    return canonical(value).decode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """SHA-256 (lowercase hex) of the canonical bytes of ``value``."""
    return sha256_hex(canonical(value))


class _Float:
    """Stands in for a float found while parsing, so the caller can refuse it with context."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _v in pairs:
            if k in seen:
                raise NotCanonical(f"duplicate object key {k!r}")
            seen.add(k)
    return out


def _no_constants(name: str) -> Any:
    raise NotCanonical(f"{name} is not JSON")


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether parsed JSON ``value`` nests arrays and objects deeper than ``limit``: a walk
    level by level that stops at level ``limit + 1`` (a 20,000-level chain costs 65 steps) and
    otherwise looks at each node once, in the order of the parse's own cost."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        deeper: list[Any] = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, (dict, list)):
                    deeper.append(child)
        level = deeper
        depth += 1
    return False


def _too_deep(limit: int) -> NotCanonical:
    return NotCanonical(f"JSON nests more than {limit} levels deep", "JSON_TOO_DEEP", limit=limit)


def parse_json(data: bytes | str) -> Any:
    """Strict JSON parsing: duplicate keys and NaN/Infinity are errors; floats are kept as
    ``_Float`` markers (``contains_float`` finds them) so the caller decides how to refuse them.
    Bytes must be UTF-8 (RFC 8259 §8.1): ``json.loads`` would otherwise guess UTF-16 or UTF-32
    and skip a byte order mark.  Nesting deeper than ``MAX_JSON_DEPTH`` is refused
    (``JSON_TOO_DEEP``), so no recursive consumer downstream (JCS, the schema validator, the
    rules) ever meets it; the parser itself stops at Python's recursion limit, quickly.
    """
    try:
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        value = json.loads(
            data,
            object_pairs_hook=_no_duplicates,
            parse_float=_Float,
            parse_constant=_no_constants,
        )
    except RecursionError:
        raise _too_deep(MAX_JSON_DEPTH) from None
    except ValueError as exc:
        if isinstance(exc, NotCanonical):
            raise
        raise NotCanonical(f"not valid JSON: {exc}") from exc
    # as many opening brackets as the limit cannot nest deeper than it (counted in C): an
    # envelope has about a dozen, so the walk is for bodies built to be deep
    if data.count("[") + data.count("{") > MAX_JSON_DEPTH and nesting_exceeds(
        value, MAX_JSON_DEPTH
    ):
        raise _too_deep(MAX_JSON_DEPTH)
    return value


def find_float(value: Any, pointer: str = "") -> str | None:
    """JSON pointer of the first float marker or unsafe integer in ``value``, else None."""
    return _locate(value, pointer) if _unsafe(value) else None


def _unsafe(value: Any) -> bool:
    """Whether ``value`` holds a float marker or an unsafe integer (no pointers built: this is
    the common, negative case on every admission)."""
    if isinstance(value, str):
        return False
    if isinstance(value, (dict, list)):
        for v in value.values() if isinstance(value, dict) else value:
            if not isinstance(v, str) and _unsafe(v):
                return True
        return False
    if isinstance(value, (_Float, float)):
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        return not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    return False


def _locate(value: Any, pointer: str) -> str | None:
    if isinstance(value, (_Float, float)):
        return pointer
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else pointer
    if isinstance(value, dict):
        for k, v in value.items():
            found = _locate(v, f"{pointer}/{_escape(k)}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _locate(v, f"{pointer}/{i}")
            if found is not None:
                return found
    return None


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """An RFC 6901 JSON pointer built from path tokens."""
    return "".join(f"/{_escape(str(t))}" for t in tokens)
