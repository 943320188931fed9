"""The content schema: the formats the contract means (``uri`` = HTTPS with a host and no
credentials, ``date-time`` = RFC 3339 ending in ``Z``), ECMA-262 pattern semantics, and a parity
property test — ``validate_content`` (jsonschema-rs, the admission path) and
``reference_errors`` (Python jsonschema) give the same verdict on a generated corpus of valid
and invalid contents, built by mutating the contract's worked example."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from alexandria.api.status import status_of
from alexandria.core.schema import (
    SchemaViolation,
    content_schema,
    ecma_regex,
    is_https_url,
    is_utc_datetime,
    is_valid_fast,
    reference_errors,
    rs_pattern,
    validate_content,
)
from alexandria.errors import AlexandriaError
from alexandria.service.bootstrap import resolve_refs
from tests.support.library import CONTRACT

# --- formats -------------------------------------------------------------------------------------

GOOD_URLS = [
    "https://example.org", "https://example.org/", "https://example.org/a/b?c=d&e=f#g",
    "https://example.org:8443/x", "https://[2001:db8::1]/", "https://192.0.2.1/x",
    "https://xn--caf-dma.example/", "https://example.org/%C3%A9",
]
BAD_URLS = [
    "http://example.org/", "https://user:pass@example.org/", "https://user@example.org/",
    "https://:pw@example.org/", "https://", "https:///path", "https://example.org/a b",
    "https://example.org/\n", "\nhttps://example.org/", "https://example.org/\t",
    "https://é.example/", "https://example.org/é", "https://example.org:99999/",
    "https://example.org:port/", "HTTPS://example.org/", "ftp://example.org/",
    "//example.org/", "example.org", "https://exa mple.org/", "https://[::1/",
]


@pytest.mark.parametrize("url", GOOD_URLS)
def test_https_urls_with_a_host(url: str) -> None:
    assert is_https_url(url)


@pytest.mark.parametrize("url", BAD_URLS)
def test_urls_that_are_not_https_with_a_host_and_no_credentials(url: str) -> None:
    assert not is_https_url(url)


@pytest.mark.parametrize("stamp", ["2026-05-01T12:00:00Z", "2026-05-01T12:00:00.5Z",
                                   "2026-05-01T12:00:00.123456Z", "2024-02-29T23:59:59Z"])
def test_utc_date_times(stamp: str) -> None:
    assert is_utc_datetime(stamp)


@pytest.mark.parametrize("stamp", [
    "2026-05-01T12:00:00+00:00", "2026-05-01T12:00:00-01:00", "2026-05-01T12:00:00",
    "2026-05-01", "2026-05-01T12:00:00z", "2026-05-01t12:00:00Z", "2026-05-01 12:00:00Z",
    "2026-02-30T12:00:00Z", "2025-02-29T12:00:00Z", "2026-05-01T25:00:00Z",
    "2026-05-01T12:00:00Z\n", "２０２６-05-01T12:00:00Z", "",
])
def test_date_times_that_are_not_utc_rfc3339(stamp: str) -> None:
    assert not is_utc_datetime(stamp)


def test_formats_only_constrain_strings() -> None:
    assert is_https_url(5) and is_utc_datetime(None)


# --- ECMA-262 patterns ---------------------------------------------------------------------------


def _patterns(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "pattern" and isinstance(v, str):
                found.add(v)
            else:
                found |= _patterns(v)
    elif isinstance(node, list):
        for v in node:
            found |= _patterns(v)
    return found


PATTERNS = sorted(_patterns(content_schema()))
PROBES = ["", "a", "ab", " ", "a\n", "\n", "\r", "T1Z", "T1Z\n", "T\nZ", "T\rZ", "T\u2028Z",
          "https://x", "https://x\n", "http://x", "a" * 64, "a" * 64 + "\n", "A" * 64,
          "a" * 63, "a-b_c9", "a" * 41, "9a", "a\u0661", "\x1c", "\x85", "\ufeff", "\xa0",
          "\u3000", " x ", "\t\n\x0b\x0c\r"]


def test_the_contract_uses_only_translated_patterns() -> None:
    used = ["\\S", "^[a-z][a-z0-9_-]{0,39}$", "^[0-9a-f]{64}$", "^https://", "T.*Z$"]
    assert sorted(used) == PATTERNS


@pytest.mark.parametrize("pattern", PATTERNS)
def test_ecma_regex_agrees_with_jsonschema_rs(pattern: str) -> None:
    rs = jsonschema_rs.validator_for({"type": "string", "pattern": rs_pattern(pattern)})
    for probe in PROBES:
        assert rs.is_valid(probe) == bool(ecma_regex(pattern).search(probe)), (pattern, probe)


def test_ecma_white_space_on_every_code_point() -> None:
    rs = jsonschema_rs.validator_for({"type": "string", "pattern": "\\S"})
    py = ecma_regex("\\S")
    for cp in range(0x30000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        assert rs.is_valid(chr(cp)) == bool(py.search(chr(cp))), hex(cp)


@pytest.mark.parametrize(("pattern", "text", "matches"), [
    ("^a$", "a\n", False), ("^a$", "a", True), ("a.c", "a\rc", False), ("a.c", "a\u2028c", False),
    ("a.c", "a\u0085c", True), ("^\\d$", "\u0661", False), ("^\\d$", "7", True),
    ("^\\w+$", "é", False), ("^[\\s]$", "\ufeff", True), ("^\\s$", "\x1c", False),
    ("^\\S$", "\x85", True), ("^[[a]$", "[", True), ("^\\D$", "x", True), ("^\\W$", "-", True),
])
def test_ecma_regex_semantics(pattern: str, text: str, matches: bool) -> None:
    assert bool(ecma_regex(pattern).search(text)) is matches


@pytest.mark.parametrize(
    "pattern", ["\\bword", "(a)\\1", "(?<name>a)", "[^]", "[]", "[\\S]", "a\\"]
)
def test_ecma_regex_refuses_what_it_does_not_translate(pattern: str) -> None:
    with pytest.raises(ValueError):
        ecma_regex(pattern)


# --- validate_content ------------------------------------------------------------------------


def test_violations_name_the_failing_pointer() -> None:
    with pytest.raises(SchemaViolation) as err:
        validate_content({"kind": "space", "title": "S", "body": {"summary": " "}, "links": [],
                          "previous": ""})
    assert status_of(err.value) == 422 and err.value.code == "SCHEMA_VIOLATION"
    assert err.value.details["pointer"] == "/body/summary"


# --- parity: jsonschema-rs vs Python jsonschema on mutated worked examples ---------------------

STEPS = CONTRACT["object_examples"]["steps"]
IDS = {step["name"]: f"{i:x}" * 64 for i, step in enumerate(STEPS, start=1)}  # 1…c, one digit
EXAMPLES: list[dict[str, Any]] = [
    resolve_refs(step["content"], IDS) for step in STEPS
]
EXAMPLES += [
    {"kind": "vote", "title": "Vote", "body": "-1", "links": [{"relation": "votes_on",
                                                               "target": "a" * 64}],
     "previous": "b" * 64},
    {"kind": "evidence", "title": "Evidence", "previous": "",
     "links": [{"relation": "evidence_for", "target": "c" * 64}],
     "body": {"claim": "c" * 64, "method": "experiment", "content": "Measured.",
              "sources": [{"label": "Paper", "url": "https://example.org/p", "excerpt": "quote",
                           "locator": "p. 2", "retrieved_at": "2026-05-01T12:00:00Z",
                           "digest": "d" * 64, "archive_url": "https://archive.example.org/p"}],
              "reproducibility": {"status": "reproduced", "environment": "Linux", "inputs": "i",
                                  "outputs": "o", "artifacts": [{"label": "data",
                                                                 "url": "https://example.org/d",
                                                                 "digest": "e" * 64}]}}},
]

INTERESTING = [
    "", " ", "x", "\x1c", "\x85", "\ufeff", "\u3000", "\xa0 ", " x ", "\n", "T", "Z",
    "a" * 64, "a" * 64 + "\n", "A" * 64, "a" * 63, "0" * 65, "contained_in", "includes",
    "Cites", "cites\n", "a" * 40, "a" * 41, "https://example.org/", "http://example.org/",
    "https://u:p@example.org/", "https:///x", "https://example.org/\n",
    "2026-05-01T12:00:00Z", "2026-05-01T12:00:00+00:00", "2026-05-01T12:00:00Z\n",
    "-1", "0", "1", "2", "open", "supported", "refuted", "proof", "counterexample",
    "claimed", "reproduced", "supports", "depends_on", "space", "claim", "vote", "reply",
    "proposal", "x" * 200, "x" * 201, "x" * 1000, "x" * 1001, "x" * 4001, "x" * 8001,
    "x" * 16001, "x" * 40001, "x" * 48001, "é" * 201,
]
LEAVES = st.one_of(
    st.sampled_from(INTERESTING),
    st.text(max_size=6),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.builds(list),  # fresh objects: mutations must not leak between examples
    st.builds(dict),
    st.lists(st.sampled_from(["a" * 64, "b" * 64, "x", 1]), max_size=4),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


@st.composite
def contents(draw: st.DrawFn) -> dict[str, Any]:
    content: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(content)))
        op = draw(st.sampled_from(["replace", "delete", "add", "append", "kind", "duplicate"]))
        if op == "kind":
            content["kind"] = draw(st.sampled_from(
                ["space", "discussion", "claim", "document", "evidence", "assessment",
                 "relationship", "proposal", "reply", "vote", "poem"]))
            continue
        if not path:
            continue
        parent, last = _get(content, path[:-1]), path[-1]
        target = parent[last]
        if op == "replace":
            parent[last] = draw(LEAVES)
        elif op == "delete":
            del parent[last]
        elif op == "add" and isinstance(target, dict):
            target[draw(st.sampled_from(["extra", "url", "summary", "text", "claim"]))] = \
                draw(LEAVES)
        elif op == "append" and isinstance(target, list):
            target.append(draw(LEAVES))
        elif op == "duplicate" and isinstance(target, list) and target:
            target.append(copy.deepcopy(target[0]))
    return content


def test_the_corpus_seeds_are_valid() -> None:
    for content in EXAMPLES:
        assert is_valid_fast(content), content
        assert reference_errors(content) == [], content


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contents())
@example({**EXAMPLES[0], "title": "\x1c"})  # not ECMA white space
@example({**EXAMPLES[0], "title": "\ufeff"})  # ECMA white space
@example({**EXAMPLES[0], "previous": "a" * 64 + "\n"})  # "$" is the end of the string
@example({**EXAMPLES[0], "links": [{"relation": "cites\n", "target": "a" * 64}]})
def test_fast_and_reference_validators_agree(content: dict[str, Any]) -> None:
    reference = reference_errors(content)
    assert is_valid_fast(content) == (reference == []), (json.dumps(content)[:400], reference)
    if reference:
        with pytest.raises(SchemaViolation) as err:
            validate_content(content)
        assert err.value.details["pointer"] in reference, (err.value.details, reference)
    else:
        try:
            validate_content(content)
        except AlexandriaError as exc:  # pragma: no cover - a parity failure
            raise AssertionError(exc.to_json()) from exc
