"""The write contract's content schema (``contracts/write-contract.json``), compiled once.

Validation runs on ``{kind, title, body: decoded, links, previous}`` (PROTOCOL §3).  The fast
path is ``jsonschema-rs``; the reference is Python ``jsonschema`` (Draft 2020-12).  Both use the
same format functions from this module, so ``uri`` really means an HTTPS URL with a hostname and
no credentials and ``date-time`` really means an RFC 3339 time ending in ``Z`` — neither library
enforces that on its own.  ``tests/test_schema.py`` runs both on a corpus and requires the same
verdicts.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import jsonschema_rs
from rfc3339_validator import validate_rfc3339
from rfc3986_validator import validate_rfc3986

from alexandria.canonical import pointer
from alexandria.errors import Unprocessable

CONTRACTS = Path(__file__).resolve().parent.parent / "contracts"


class SchemaViolation(Unprocessable):
    default_code = "SCHEMA_VIOLATION"


def is_https_url(value: object) -> bool:
    """HTTPS, a hostname, no username or password, and RFC 3986 syntax."""
    if not isinstance(value, str):
        return True  # formats only constrain strings
    if not value.startswith("https://") or not validate_rfc3986(value, rule="URI"):
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
    return value.endswith("Z") and bool(validate_rfc3339(value))


FORMATS = {"uri": is_https_url, "date-time": is_utc_datetime}


@cache
def write_contract() -> dict[str, Any]:
    with (CONTRACTS / "write-contract.json").open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def content_schema() -> dict[str, Any]:
    schema: dict[str, Any] = write_contract()["content_schema"]
    return schema


@cache
def _fast() -> Any:
    return jsonschema_rs.validator_for(
        content_schema(), formats=FORMATS, validate_formats=True, ignore_unknown_formats=False
    )


@cache
def _reference() -> Any:
    checker = jsonschema.FormatChecker(formats=())
    for name, fn in FORMATS.items():
        checker.checks(name)(fn)
    cls = jsonschema.Draft202012Validator
    cls.check_schema(content_schema())
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
