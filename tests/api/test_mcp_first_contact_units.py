"""The pure parts of first contact: readable snippets, the link rules quoted from the contract,
identical contributions in a home, and the bounded store of idempotency keys.  (Through the
SDK's client over stdio: ``tests/api/test_mcp_readme.py``.)"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from alexandria.api.mcp.answers import plural, readable_hint, readable_snippet
from alexandria.api.mcp.server import INSTRUCTIONS
from alexandria.cli import idempotency
from alexandria.cli.agent import content_property, link_rules
from alexandria.cli.config import Home
from alexandria.cli.duplicates import find_duplicate
from alexandria.cli.idempotency import Keys, content_digest
from alexandria.core.canonical import canonical
from alexandria.core.contract import write_contract
from alexandria.core.search_text import SNIPPET_CHARACTERS

CLAIM_BODY = canonical({"statement": "One plus one equals two " * 20, "scope": "naturals",
                        "assumptions": ["Peano"]}).decode()


def test_a_snippet_is_readable_text_cut_at_a_word() -> None:
    text = readable_snippet("claim", CLAIM_BODY)
    assert len(text) <= SNIPPET_CHARACTERS and text.endswith("…")
    assert "{" not in text and '"' not in text and "statement" not in text
    assert text.startswith("Peano naturals One plus one") or text.startswith("Peano")
    assert text[:-1].split()[-1] in {"One", "plus", "one", "equals", "two"}
    assert readable_snippet("reply", "short  reply\n text") == "short reply text"
    assert readable_snippet("claim", "not json at all") == "not json at all"


@given(st.text(min_size=1, max_size=2_000))
def test_a_snippet_never_exceeds_its_length(body: str) -> None:
    assert len(readable_snippet("reply", body)) <= SNIPPET_CHARACTERS


def test_a_catalogue_hint_is_read_as_text() -> None:
    cut = CLAIM_BODY[:SNIPPET_CHARACTERS]
    text = readable_hint(cut)
    assert "{" not in text and "statement" not in text and text.endswith("…")
    assert text.startswith("Peano naturals One plus")
    whole = canonical({"text": "A whole \"quoted\" body"}).decode()
    assert readable_hint(whole) == 'A whole "quoted" body'
    assert readable_hint("a plain reply") == "a plain reply"


def test_plurals_and_spacing() -> None:
    assert [plural(n, "item") for n in (0, 1, 2)] == ["items", "item", "items"]
    assert "  " not in INSTRUCTIONS and "whoami" in INSTRUCTIONS


def test_the_link_rules_are_the_contracts_own_sentences() -> None:
    rules = link_rules()
    contract = " ".join(write_contract()["state_rules"])
    sentences = [s.strip() for s in rules.replace(". ", ".\n").splitlines()]
    assert len(sentences) >= 6
    assert all(s in contract for s in sentences)
    assert "evidence_for(claim)" in rules and "contained_in" in rules and "merges" in rules
    assert "  " not in rules


def test_the_content_argument_leaves_the_rules_per_kind_to_the_resource() -> None:
    content = content_property()
    assert "allOf" not in orjson.dumps(content).decode()
    assert content["required"] == ["kind", "title", "body", "links", "previous"]
    assert content["properties"]["kind"] == write_contract()["content_schema"]["properties"][
        "kind"]


def _record(title: str, links: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {"format": "alexandria.contribution/3", "genesis": "a" * 64, "kind": "discussion",
            "title": title, "body": '{"text":"x"}', "links": links or [], "previous": "",
            "author": "b" * 64, "authored_at": "2026-01-01T00:00:00.000Z"}


def test_find_duplicate_looks_in_pending_and_published(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    assert find_duplicate(home, _record("x")) is None  # no folders yet
    home.pending_dir.mkdir(parents=True)
    home.published_dir.mkdir(parents=True)
    links = [{"relation": "about", "target": "c" * 64},
             {"relation": "contained_in", "target": "d" * 64}]
    (home.published_dir / f"{'1' * 64}.json").write_bytes(orjson.dumps(
        {"id": "1" * 64, "record": _record("Published", links)}))
    (home.pending_dir / f"{'2' * 64}.json").write_bytes(orjson.dumps(
        {"record": _record("Pending")}))
    (home.pending_dir / "notes.json").write_text("{}")  # not a revision: ignored
    (home.pending_dir / f"{'3' * 64}.json").write_text("not json")  # unreadable: ignored
    later = {**_record("Published", links), "authored_at": "2026-02-02T00:00:00Z"}
    assert find_duplicate(home, later) == "1" * 64  # time and author aside
    # links in another order are another contribution (a merge's links are ordered)
    assert find_duplicate(home, _record("Published", list(reversed(links)))) is None
    assert find_duplicate(home, _record("Pending")) == "2" * 64
    assert find_duplicate(home, _record("Other")) is None
    assert find_duplicate(home, {**_record("Pending"), "genesis": "e" * 64}) is None
    assert find_duplicate(home, {**_record("Pending"), "previous": "f" * 64}) is None


def test_idempotency_keys_are_bounded_and_survive_a_bad_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Home(tmp_path / "home")
    home.root.mkdir()
    keys = Keys(home)
    assert keys.get("k") is None
    monkeypatch.setattr(idempotency, "MAX_KEYS", 3)
    for i in range(5):
        keys.put(f"k{i}", {"digest": content_digest({"n": i}), "id": str(i)})
    assert keys.get("k0") is None and keys.get("k1") is None
    entry = keys.get("k4")
    assert entry is not None and entry["id"] == "4"
    assert content_digest({"a": 1, "b": 2}) == content_digest({"b": 2, "a": 1})
    keys.path.write_text("{broken")
    assert keys.get("k4") is None  # a damaged file forgets; it never fails a publish
