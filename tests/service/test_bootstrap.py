from __future__ import annotations

import pytest

from alexandria.service.bootstrap import found_library, resolve_refs


def test_seeded_founding_is_reproducible() -> None:
    a = found_library(seed=b"x", created_at="2026-01-01T00:00:00.000Z")
    b = found_library(seed=b"x", created_at="2026-01-01T00:00:00.000Z")
    assert a.genesis_document == b.genesis_document
    assert a.authority_certificate == b.authority_certificate


def test_references_are_whole_dollar_names_and_dollar_dollar_escapes() -> None:
    names = {"claim": "c" * 64}
    content = {"body": "$5 is too much", "links": [{"target": "$claim"}], "title": "$$claim"}
    assert resolve_refs(content, names) == {
        "body": "$5 is too much",
        "links": [{"target": "c" * 64}],
        "title": "$claim",
    }
    with pytest.raises(KeyError):
        resolve_refs({"target": "$missing"}, names)
