r"""The write contract's content schema (``write_contract`` of the contract), compiled once.

Validation runs on ``{kind, title, body: decoded, links, previous}`` (PROTOCOL §3).  The fast
path is ``jsonschema-rs``; the reference is Python ``jsonschema`` (Draft 2020-12).  Both use the
same format functions from this module, so ``uri`` really means an HTTPS URL with a hostname and
no credentials and ``date-time`` really means an RFC 3339 time ending in ``Z`` — neither library
enforces that on its own.  ``tests/core/test_content_schema.py`` runs both on a corpus and requires
the same verdicts.

JSON Schema patterns are ECMA-262 regular expressions, and ``jsonschema-rs`` follows ECMA-262:
``$`` is the end of the string, ``\s`` is ECMA white space (it includes U+FEFF but not U+001C–
U+001F or U+0085).  Python ``jsonschema`` hands patterns to ``re``, where ``$`` also matches
before a final newline and ``\s`` is ``str.isspace``; the reference validator therefore
translates patterns with ``ecma_regex`` so that both validators mean the same thing.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import jsonschema_rs

from alexandria.core.canonical import pointer
from alexandria.core.contract import write_contract
from alexandria.errors import Invalid


class SchemaViolation(Invalid):
    default_code = "SCHEMA_VIOLATION"


def is_https_url(value: object) -> bool:
    """HTTPS, a hostname, no username or password, and RFC 3986 syntax."""
    if not isinstance(value, str):
        return True  # formats only constrain strings
    if not value.startswith("https://") or not _URI_CHARACTERS.match(value):
        return False  # a URI is printable ASCII without spaces (RFC 3986 §2)
    # imported on first use: it compiles its RFC 3986 grammar at import, which would cost every
    # CLI command that checks content (most have no URL) more than the check itself
    from rfc3986_validator import validate_rfc3986

    if not validate_rfc3986(value, rule="URI"):
        return False
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return False
    return bool(parts.hostname) and parts.username is None and parts.password is None and (
        "@" not in parts.netloc
    )


def is_utc_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    from rfc3339_validator import validate_rfc3339  # on first use, as rfc3986 above

    return value.endswith("Z") and bool(validate_rfc3339(value))


FORMATS = {"uri": is_https_url, "date-time": is_utc_datetime}
_URI_CHARACTERS = re.compile(r"[\x21-\x7e]*\Z")

# ECMA-262 WhiteSpace and LineTerminator, the meaning of \s in a JSON Schema pattern
_ECMA_SPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_ECMA_CLASSES = {"s": _ECMA_SPACE, "d": "0-9", "w": "A-Za-z0-9_"}


@cache
def ecma_regex(pattern: str) -> re.Pattern[str]:
    r"""A Python regex with the ECMA-262 meaning of ``pattern`` (for the reference validator).

    Translates what differs: ``$`` (end of input only), ``.`` (any character but a line
    terminator) and the classes ``\s \S \d \D \w \W``.  Constructs whose meaning differs
    in ways not translated here are refused rather than silently misread.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 >= len(pattern):
                raise ValueError(f"pattern {pattern!r} ends with a backslash")
            e = pattern[i + 1]
            i += 2
            if e.lower() in _ECMA_CLASSES:
                chars = _ECMA_CLASSES[e.lower()]
                if not in_class:
                    out.append(f"[{'^' if e.isupper() else ''}{chars}]")
                elif e.islower():
                    out.append(chars)
                else:
                    raise ValueError(f"pattern {pattern!r}: \\{e} inside a class")
            elif e.isalnum() and e not in "nrtfvux":
                raise ValueError(f"pattern {pattern!r}: \\{e} is not translated")
            else:
                out.append("\\" + e)
            continue
        if in_class:
            if c == "]":
                in_class = False
            elif c == "[":
                out.append("\\")  # a literal "[" inside a class in ECMA-262
            out.append(c)
        elif c == "[":
            if pattern[i + 1 : i + 2] == "]" or pattern[i + 1 : i + 3] == "^]":
                raise ValueError(f"pattern {pattern!r}: empty classes are not translated")
            in_class = True
            out.append(c)
        elif c == "$":
            out.append(r"\Z")
        elif c == ".":
            out.append("[^\n\r\u2028\u2029]")
        elif c == "(" and pattern[i + 1 : i + 3] == "?<" and pattern[i + 3 : i + 4] not in "=!":
            raise ValueError(f"pattern {pattern!r}: named groups are not translated")
        else:
            out.append(c)
        i += 1
    return re.compile("".join(out))


def _ecma_pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Any:
    import jsonschema

    if validator.is_type(instance, "string") and not ecma_regex(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def content_schema() -> dict[str, Any]:
    schema: dict[str, Any] = write_contract()["content_schema"]
    return schema


def rs_pattern(pattern: str) -> str:
    r"""``pattern`` with the ECMA-262 meaning under ``jsonschema-rs``.

    ``jsonschema-rs`` (0.60 and later) lets ``.`` match ``\r``, U+2028 and U+2029, which
    ECMA-262 excludes (``"T\rZ"`` matched ``T.*Z$``); a ``.`` outside a class becomes the
    class ECMA-262 means.  Everything else is passed through unchanged."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == ".":
            c = _ECMA_DOT
        out.append(c)
        i += 1
    return "".join(out)


_ECMA_DOT = "[^\n\r\u2028\u2029]"


def _with_rs_patterns(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: rs_pattern(v) if k == "pattern" and isinstance(v, str) else _with_rs_patterns(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_with_rs_patterns(v) for v in node]
    return node


@cache
def _fast() -> Any:
    return jsonschema_rs.validator_for(
        _with_rs_patterns(content_schema()), formats=FORMATS, validate_formats=True,
        ignore_unknown_formats=False,
    )


@cache
def _reference() -> Any:
    # imported here: jsonschema's format extras build grammars at import (~1.5 s of CPU),
    # which every server and CLI start would pay for a validator only the tests use
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    for name, fn in FORMATS.items():
        checker.checks(name)(fn)
    jsonschema.Draft202012Validator.check_schema(content_schema())
    cls = jsonschema.validators.extend(
        jsonschema.Draft202012Validator, {"pattern": _ecma_pattern}
    )
    return cls(content_schema(), format_checker=checker)


def validate_content(content: dict[str, Any]) -> None:
    """Raise ``SchemaViolation`` (422) naming the failing JSON pointer of the content."""
    validator = _fast()
    if validator.is_valid(content):
        return
    err = next(iter(validator.iter_errors(content)))
    where = pointer(*err.instance_path)
    raise SchemaViolation(
        f"content does not match the write contract at {where or '/'}: {err.message}",
        pointer=where,
        schema_path=pointer(*err.schema_path),
    )


def reference_errors(content: dict[str, Any]) -> list[str]:
    """Pointers of the reference validator's errors (empty when valid)."""
    return [pointer(*e.absolute_path) for e in _reference().iter_errors(content)]


def is_valid_fast(content: dict[str, Any]) -> bool:
    return bool(_fast().is_valid(content))
