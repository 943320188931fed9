"""Canonical form: the orjson fast paths of ``canonical`` and ``canonical_parsed`` produce exactly
the bytes of the reference RFC 8785 encoder (``rfc8785``) on a generated corpus — including
non-ASCII and non-BMP keys (JCS sorts keys by UTF-16 code units, not by code points), control
characters and the integer bounds — and strict parsing refuses what has no canonical form."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from alexandria.core.canonical import (
    MAX_SAFE_INTEGER,
    canonical,
    canonical_parsed,
    find_float,
    nesting_exceeds,
    parse_json,
    reference_canonical,
)
from alexandria.errors import AlexandriaError, NotCanonical, UnsafeNumber
from tests.support.strategies import JSON, KEYS, SCALARS


def reference(value: Any) -> bytes:
    return bytes(rfc8785.dumps(value))


@settings(max_examples=400, deadline=None)
@given(JSON)
@example({"\U00010000": 1, "\uffff": 2})  # UTF-16 order puts the astral key first
@example({"\ufb33": 1, "\U0001f600": 2, "a": 3})
@example({"b": [1, {"\u00e9": None, "E": True}], "a": "\x7f\u2028\x00"})
@example([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, "\U0010ffff"])
def test_canonical_equals_the_reference_encoder(value: Any) -> None:
    expected = reference(value)
    assert canonical(value) == expected
    assert reference_canonical(value) == expected
    # the parsed-value fast path, on the value as the server parses it from any spelling
    assert canonical_parsed(parse_json(expected)) == expected
    assert parse_json(expected) == value
    assert find_float(parse_json(expected)) is None


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, SCALARS, min_size=2, max_size=8))
def test_keys_sort_by_utf16_code_units(value: dict[str, Any]) -> None:
    data = canonical(value)
    order = [k for k in parse_json(data)]
    assert order == sorted(value, key=lambda k: k.encode("utf-16-be"))


@pytest.mark.parametrize("value", [1.5, [0.0], {"a": -2.5}, MAX_SAFE_INTEGER + 1,
                                   {"a": [-MAX_SAFE_INTEGER - 1]}, 10**30])
def test_floats_and_unsafe_integers_have_no_canonical_form(value: Any) -> None:
    for encode in (canonical, reference_canonical):
        with pytest.raises(UnsafeNumber):
            encode(value)
    # ``canonical_parsed`` takes values from ``parse_json``, where a float is a marker
    if isinstance(value, int):
        with pytest.raises(UnsafeNumber):
            canonical_parsed(value)


@pytest.mark.parametrize(
    "text",
    [b'{"a":1,"a":2}', b"NaN", b"[Infinity]", b"-Infinity", b"{", b"", b"[1,]", b"'a'",
     b'{"a":1}x', b"\xff", '["\u00e9"]'.encode("utf-16"), "[1]".encode("utf-32"),
     b'\xef\xbb\xbf{"a":1}', '["\u00e9"]'.encode("latin-1")],
)
def test_strict_parsing_refuses_non_json(text: bytes) -> None:
    with pytest.raises(NotCanonical):
        parse_json(text)


@pytest.mark.parametrize("text", [b"1.5", b"[1e3]", b'{"a":{"b":[0,-0.0]}}'])
def test_parsed_floats_are_found_not_rounded(text: bytes) -> None:
    value = parse_json(text)
    assert find_float(value) is not None
    with pytest.raises(AlexandriaError):
        canonical_parsed(value)


def test_lone_surrogates_have_no_canonical_form() -> None:
    value = parse_json(b'{"a":"\\ud800"}')
    for encode in (canonical, canonical_parsed):
        with pytest.raises(NotCanonical):
            encode(value)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON.map(lambda v: [[v]]) | JSON, st.integers(0, 6))
def test_nesting_exceeds_exactly_when_deeper(value: Any, limit: int) -> None:
    """``parse_json``'s depth cap: the early-stopping walk agrees with the recursive depth."""
    assert nesting_exceeds(value, limit) == (_depth(value) > limit)
    if _depth(value) > limit == 4:  # never reached through parse_json's cap of 64: check both
        assert nesting_exceeds(json.loads(json.dumps(value)), limit)
