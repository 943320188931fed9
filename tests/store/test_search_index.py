"""The catalogue's indexes: normalisation, human text, maintenance inside admission, rebuild."""

from __future__ import annotations

import functools
import random
import re
import sqlite3
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alexandria.core import search_text
from alexandria.core.search_text import human_text, normalise, snippet, words
from alexandria.reads import catalogue
from alexandria.reads.catalogue import CatalogueQuery
from alexandria.store import search_index
from alexandria.store.postgresql import is_postgresql
from tests.support.catalogue import catalogue as get_catalogue
from tests.support.catalogue import content, document, publish_example, vote
from tests.support.library import Api


def test_normalise_and_words() -> None:
    assert normalise("Straße ＡＢＣ ﬁ Ⅸ") == "strasse abc fi ix"
    assert words("One-plus-one = TWO; e.g. café_au_lait") == [
        "one", "plus", "one", "two", "e", "g", "café", "au", "lait"]
    assert words("cafe\u0301") == ["café"]  # NFKC composes the mark
    assert words("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # combining vowel signs stay in the word
    assert words("日本語、テキスト") == ["日本語", "テキスト"]
    assert words("x" * 100) == ["x" * 64]
    assert words("-- !! ...") == []


def test_human_text_of_each_kind() -> None:
    claim = {"assumptions": ["A1", "A2"], "scope": "S", "statement": "St"}
    assert human_text("claim", "", claim) == "St\nS\nA1\nA2"
    evidence = {"claim": "ab" * 32, "content": "C", "method": "proof", "sources": [
        {"label": "L", "url": "https://x.org/p", "digest": "cd" * 32, "excerpt": "E"}]}
    assert human_text("evidence", "", evidence) == "C\nE\nL\nhttps://x.org/p"
    assessment = {"claim": "ab" * 32, "evidence": [], "rationale": "R", "verdict": "open"}
    assert human_text("assessment", "", assessment) == "R"
    relationship = {"from": "ab" * 32, "to": "cd" * 32, "relation": "supports", "rationale": "R"}
    assert human_text("relationship", "", relationship) == "R"
    proposal = {"base": "ab" * 32, "title": "T", "rationale": "Why", "links": [],
                "body": {"text": "Body"}}
    assert human_text("proposal", "", proposal) == "T\nWhy\nBody"
    assert human_text("reply", "plain reply") == "plain reply"
    assert human_text("space", '{"summary":"Sum"}') == "Sum"
    body = '{"text":"' + "y" * 400 + '"}'
    assert snippet(body) == body[:280]


async def _tables(api: Api) -> dict[str, Any]:
    def read(conn: sqlite3.Connection) -> dict[str, Any]:
        out: dict[str, Any] = {}
        text = ((("catalogue_levels", "seq"),) if is_postgresql(conn) else
                (("catalogue_terms", "term, doc, col, offset"), ("catalogue_level_terms", "term"),
                 ("catalogue_words", "seq")))
        for table, order in (("catalogue", "seq"), ("catalogue_counts", "kind, facet, author_id"),
                             ("vote_values", "vote_root"), ("vote_totals", "author_id"),
                             ("object_scores", "created_sequence"),
                             ("catalogue_actors", "id"), *text):
            out[table] = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
        return out

    return await api.library.storage.read(read)


async def _publish_mix(api: Api) -> dict[str, str]:
    names = await publish_example(api)
    d = await api.publish("owner", document("Old words", "alpha beta"))
    d2 = await api.publish("owner", document("New words", "gamma", previous=d["id"]))
    v = await api.publish("peer", vote(d["id"], "1"))
    await api.publish("peer", vote(d["id"], "-1", previous=v["id"]))
    e = await api.publish("owner", vote(names["evidence"], "1"))
    # votes that change no score: the same value again, a neutral vote and its revision
    await api.publish("owner", vote(names["evidence"], "1", previous=e["id"]))
    n = await api.publish("peer", vote(names["claim"], "0"))
    await api.publish("peer", vote(names["claim"], "0", previous=n["id"]))
    await api.publish("owner", content("reply", "Re", "a reply to the branch",
                                       [("replies_to", names["branch"])]))
    names["doc"], names["doc2"] = d["id"], d2["id"]
    return names


async def test_revision_replaces_the_head_everywhere(api: Api) -> None:
    names = await _publish_mix(api)
    assert (await get_catalogue(api, q="alpha"))["total"] == 0  # the old head left the index
    found = await get_catalogue(api, q="gamma")
    assert [i["id"] for i in found["items"]] == [names["doc2"]]
    assert (await get_catalogue(api, q="words"))["total"] == 1
    tables = await _tables(api)
    docs = [row for row in tables["catalogue_counts"] if row[0] == "document" and row[2] == 0]
    assert docs == [("document", "", 0, 2)]
    assert len(tables["catalogue"]) == 13  # 11 example objects, the document and a reply


@pytest.mark.parametrize("page", [search_index.REBUILD_PAGE, 3])
async def test_incremental_index_equals_a_rebuild(
        api: Api, page: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild (a page of revisions at a time, remembering actors, votes and their targets
    instead of asking) writes the tables the admissions wrote."""
    await _publish_mix(api)
    live = await _tables(api)
    monkeypatch.setattr(search_index, "REBUILD_PAGE", page)
    await api.library.storage.write(search_index.rebuild)
    assert await _tables(api) == live
    # each voted object's score (the scores page's) is its head's catalogue score (sort=top's)
    pairs = await api.library.storage.read(lambda conn: conn.execute(
        "SELECT s.score, c.score FROM object_scores s JOIN objects o"
        " ON o.created_sequence = s.created_sequence JOIN catalogue c ON c.seq = o.head_sequence"
    ).fetchall())
    # the revised document, the evidence, the claim (voted neutral)
    assert len(pairs) == len(live["object_scores"]) == 3
    assert all(mine == theirs for mine, theirs in pairs)
    assert sorted(pairs) == [(-1, -1), (0, 0), (1, 1)]


async def test_a_stale_index_version_is_rebuilt_on_open(api: Api) -> None:
    await _publish_mix(api)
    live = await _tables(api)
    storage = api.library.storage

    def tamper(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE meta SET value = 'catalogue/0' WHERE key = 'catalogue_index'")
        conn.execute("DELETE FROM catalogue")
        if is_postgresql(conn):
            conn.execute("DELETE FROM catalogue_levels")
        else:
            conn.execute("INSERT INTO catalogue_text(catalogue_text) VALUES ('delete-all')")

    await storage.write(tamper)
    await storage.close()
    await storage.open()
    assert await _tables(api) == live
    version = await storage.meta("catalogue_index")
    assert version == search_index.INDEX_VERSION


@pytest.mark.sqlite_only("SQLite's query plans (PostgreSQL plans from its statistics)")
@pytest.mark.parametrize("sort", ["new", "top"])
@pytest.mark.parametrize(
    "query",
    [{}, {"kind": "claim"}, {"method": "example"}, {"verdict": "supported"}, {"view": "feed"},
     {"view": "current", "kind": "space"}, {"author": "OWNER"},
     {"author": "OWNER", "kind": "claim"}],
)
async def test_pages_without_q_read_an_index_in_order(
    api: Api, sort: str, query: dict[str, str]
) -> None:
    """No temporary sort and no full-table count: the page is an ordered index range."""
    await publish_example(api)
    if query.get("author") == "OWNER":
        query = {**query, "author": api.founding.participants["owner"].actor}
    captured: list[str] = []

    def read(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(captured.append)
        try:
            catalogue.find(conn, CatalogueQuery(sort=sort, **query))  # type: ignore[arg-type]
        finally:
            conn.set_trace_callback(None)
        for sql in captured:
            if "FROM catalogue " in sql:
                plan = " ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
                assert "TEMP B-TREE" not in plan, plan
            assert "count(" not in sql

    await api.library.storage.read(read)
    assert any("FROM catalogue " in sql for sql in captured)


async def test_relevance_both_ways_equals_a_reference(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting from term instances, counting in the candidates' words (read ahead or not),
    reading one word's score levels and summing several words' levels give the same pages, and
    all equal a brute-force reference: every word present, 3 × title + body, ties newest."""
    rng = random.Random(5)
    vocab = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]
    docs: list[tuple[int, str, str]] = []
    for i in range(70):
        title = " ".join(rng.choices(vocab, k=rng.randint(1, 3)))
        body = " ".join(rng.choices(vocab, k=rng.randint(1, 12)))
        signed = await api.publish("owner" if i % 2 else "peer", document(title.title(), body))
        docs.append((signed["admission"]["sequence"], title, body))

    def reference(ws: list[str]) -> list[int]:
        scored = []
        for seq, title, body in docs:
            t, b = title.split(), body.split()
            if all(w in t or w in b for w in ws):
                scored.append((sum(3 * t.count(w) + b.count(w) for w in ws), seq))
        return [seq for _score, seq in sorted(scored, reverse=True)]

    queries = [[w] for w in vocab] + [[a, b] for a in vocab for b in vocab if a < b]
    queries += [["alpha", "beta", "gamma"], ["missing"], ["alpha", "missing"]]
    storage = api.library.storage
    # (CANDIDATE_COST, LEVELS, LEVEL_ANCHOR_MAX, warm): several words are summed from their
    # score levels when their rarest is held by at most LEVEL_ANCHOR_MAX heads (0: never; 5:
    # only for some of the queries, the others counted by the candidate cost)
    ways: list[tuple[int, bool, int, catalogue.Warm | None]] = [
        (0, False, 0, None), (10**9, False, 0, None), (0, True, 0, None),
        (10**9, False, 0, storage.read_ahead), (0, True, 10**9, None), (10**9, True, 5, None),
    ]
    for cost, levels, anchor_max, warm in ways:
        monkeypatch.setattr(catalogue, "CANDIDATE_COST", cost)
        monkeypatch.setattr(catalogue, "LEVELS", levels)
        monkeypatch.setattr(catalogue, "LEVEL_ANCHOR_MAX", anchor_max)
        for ws in queries:
            expected = reference(ws)
            for offset in (0, 3, 50):
                query = CatalogueQuery(q=" ".join(ws).upper(), sort="relevance", offset=offset)
                page = await storage.read(functools.partial(catalogue.find, query=query,
                                                            warm=warm))
                assert page.total == len(expected), (cost, anchor_max, ws)
                assert page.sequences == expected[offset : offset + 50], (cost, anchor_max, ws,
                                                                           offset)


@given(st.lists(st.sampled_from(["a", "b", "cc", "déjà", "x" * 70]), max_size=12),
       st.lists(st.sampled_from(["a", "b", "cc", "d", "x" * 70]), max_size=40))
def test_levels_score_each_distinct_word_once_in_order_of_first_occurrence(
    title: list[str], body: list[str]
) -> None:
    expected: dict[str, int] = {}
    for word in title:
        expected[word] = expected.get(word, 0) + 3
    for word in body:
        expected[word] = expected.get(word, 0) + 1
    assert search_text.levels(" ".join(title), " ".join(body)) == " ".join(
        f"{w}{search_text.LEVEL_MARK}{n}" for w, n in expected.items()
    )


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=200))
def test_ascii_words_are_the_runs_of_letters_and_digits(text: str) -> None:
    # the ASCII path (``bytes.translate``) against the definition and the general path
    definition = re.findall(r"[a-z0-9]+", text.lower())
    assert words(text) == [w[:64] for w in definition]
    assert search_text._word_pattern().findall(text.lower().replace("_", " ")) == definition


@given(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=100), max_size=20))
def test_words_are_cut_at_64_characters(ws: list[str]) -> None:
    assert words(" ".join(ws)) == [w[:64] for w in ws]
