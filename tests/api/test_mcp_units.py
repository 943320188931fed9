"""The MCP server's pure parts: the element cap, argument checks, budget fitting and the
``changes`` cursor.  (End to end over stdio and HTTP: ``tests/api/test_mcp.py``.)"""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from alexandria.api.mcp import http as mcp_http
from alexandria.api.mcp import untrusted
from alexandria.api.mcp.answers import fit, hint_view, shrink, size, unverified_view
from alexandria.api.mcp.cursor import ChangesCursor
from alexandria.api.mcp.inputs import MAX_ELEMENTS, ArgumentChecker, count_elements
from alexandria.api.mcp.schemas import route_schema
from alexandria.api.served_contract import read_contract
from alexandria.api.status import status_of
from alexandria.client import rejection
from alexandria.errors import ClientBusy, Malformed, ServerBusy

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=6),
    max_leaves=60,
)


def _reference_count(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_reference_count(v) for v in value.values())
    if isinstance(value, list):
        return len(value) + sum(_reference_count(v) for v in value)
    return 0


@given(json_values)
def test_count_elements_counts_members_and_elements_at_every_depth(value: Any) -> None:
    assert count_elements(value, limit=10**9) == _reference_count(value)


def test_count_elements_survives_deep_nesting_and_stops_early() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert count_elements(deep, limit=10**9) == 100_000
    assert count_elements(list(range(10**6))) > MAX_ELEMENTS


def test_argument_checker_order_and_codes() -> None:
    checker = ArgumentChecker("search", route_schema("/api/catalogue"))
    with pytest.raises(Malformed) as exc:
        checker.check({"q": ["x"] * MAX_ELEMENTS, "kind": "claim"})
    assert exc.value.code == "TOO_MANY_ELEMENTS"  # before the schema, before unknown names
    with pytest.raises(Malformed) as exc:
        checker.check({"q": "x", "sortt": "new"})
    assert exc.value.code == "UNKNOWN_ARGUMENT" and exc.value.details["unknown"] == ["sortt"]
    with pytest.raises(Malformed) as exc:
        checker.check({"offset": -1})
    assert exc.value.code == "BAD_ARGUMENT" and exc.value.details["pointer"] == "/offset"
    assert checker.check({"q": "x", "sort": "top"}) == {"q": "x", "sort": "top"}


def test_read_tool_parameters_are_the_read_contract_query_names() -> None:
    routes = {r["path"]: r for r in read_contract()["routes"]}
    for path in ("/api/catalogue", "/api/entries/{revision}/connections",
                 "/api/entries/{revision}/discussion", "/api/objects/{revision}"):
        schema = route_schema(path)
        assert set(schema["properties"]) - {"revision"} == set(routes[path]["query"]), path
        assert schema["additionalProperties"] is False
    changes = route_schema("/api/changes")
    assert set(changes["properties"]) == set(routes["/api/changes"]["query"])
    assert route_schema("/api/objects/{revision}")["properties"]["exact"]["type"] == "boolean"


@given(st.lists(st.dictionaries(st.sampled_from(["id", "root", "kind", "x"]),
                                st.text(max_size=300), min_size=1), max_size=30),
       st.integers(0, 4000), st.integers(0, 300))
def test_fit_keeps_a_prefix_within_room(items: list[dict[str, Any]], room: int,
                                        overhead: int) -> None:
    kept = fit(items, room, overhead, shrink_first=None)
    assert kept == items[:len(kept)]
    assert sum(size(i) + overhead + 1 for i in kept) <= room
    if len(kept) < len(items):
        nxt = items[len(kept)]
        assert sum(size(i) + overhead + 1 for i in kept) + size(nxt) + overhead + 1 > room


def test_fit_shrinks_a_first_record_too_large_rather_than_stall() -> None:
    big = {"id": "a" * 64, "root": "b" * 64, "entry": 4, "leaf_index": 3, "kind": "reply",
           "untrusted": {"body": "x" * 10_000}}
    kept = fit([big, big], 400)
    assert kept == [shrink(big)] and kept[0]["shrunk"] is True and "untrusted" not in kept[0]


@given(st.one_of(st.none(), st.text(min_size=1, max_size=200)), st.integers(0, 50))
def test_changes_cursor_round_trips(cursor: str | None, skip: int) -> None:
    root = "c" * 64
    c = ChangesCursor(root, cursor, skip)
    assert ChangesCursor.parse(c.encode(), root) == c


@pytest.mark.parametrize("text", [
    "", "mcp1.", "mcp1.!!!", "nope", "mcp1." + "A" * 8,
    "mcp1." + orjson.dumps({"c": None, "r": "c" * 64, "s": 51}).hex(),
])
def test_changes_cursor_refuses_what_it_did_not_make(text: str) -> None:
    with pytest.raises(Malformed) as exc:
        ChangesCursor.parse(text, "c" * 64)
    assert exc.value.code == "BAD_CURSOR"


def test_changes_cursor_of_another_root_is_refused() -> None:
    encoded = ChangesCursor("d" * 64, None, 0).encode()
    with pytest.raises(Malformed) as exc:
        ChangesCursor.parse(encoded, "c" * 64)
    assert exc.value.code == "BAD_CURSOR" and exc.value.details["cursor_root"] == "d" * 64
    skip_too_far = ChangesCursor("c" * 64, "x", 51).encode()
    with pytest.raises(Malformed):
        ChangesCursor.parse(skip_too_far, "c" * 64)


# --- what the server may say as its own (api/mcp/untrusted.py) ------------------------------

@given(st.one_of(st.text(max_size=80), st.integers(), st.none(), st.booleans(),
                 st.lists(st.integers(), max_size=2)))
def test_codes_the_server_repeats_are_upper_snake_or_a_fallback(value: Any) -> None:
    out = untrusted.code(value)
    assert out == value or out == "UNKNOWN"
    assert re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", out)


@pytest.mark.parametrize("value", ["7", 7.0, True, None, -1, 2**53, "IMPORTANT SYSTEM NOTICE"])
def test_a_count_that_is_not_an_integer_is_a_malformed_answer(value: Any) -> None:
    with pytest.raises(untrusted.MalformedAnswer) as caught:
        untrusted.count(value, "total")
    assert caught.value.to_json()["details"] == {"field": "total"}
    assert caught.value.message == ("the library's answer is malformed: total is not an"
                                    " integer of at least 0")


def test_a_hint_that_fails_its_formats_is_only_untrusted() -> None:
    good = {"id": "a" * 64, "root": "b" * 64, "kind": "claim", "author": "c" * 64,
            "authored_at": "2026-01-01T00:00:00.000Z", "title": "T", "snippet": "S"}
    assert hint_view(good, "summary")["untrusted"] == {"title": "T", "snippet": "S"}
    bad = {**good, "kind": "IMPORTANT SYSTEM NOTICE"}
    view = hint_view(bad, "summary")
    assert set(view) == {"signed", "entry", "leaf_index", "failure", "untrusted"}
    assert view["untrusted"]["kind"] == "IMPORTANT SYSTEM NOTICE"


def test_a_record_that_fails_verification_is_only_untrusted() -> None:
    view = unverified_view({"id": "x", "root": "y", "record": {"title": "T", "kind": "k"},
                            "admission": {"sequence": "z"}}, "summary")
    assert list(view) == ["untrusted"]
    assert view["untrusted"]["id"] == "x" and view["untrusted"]["sequence"] == "z"
    assert unverified_view("not a record", "full") == {"untrusted": {}}


def test_a_librarys_refusal_keeps_its_words_under_untrusted() -> None:
    refusal = rejection(404, {"error": "IMPORTANT SYSTEM NOTICE", "code": "no such code",
                              "details": {"x": 1}})
    doc = untrusted.from_library(refusal).to_json()
    assert doc["code"] == "LIBRARY_ERROR" and doc["details"]["status"] == 404
    assert "IMPORTANT" not in doc["error"]
    assert doc["details"]["untrusted"] == {"error": "IMPORTANT SYSTEM NOTICE",
                                           "details": {"x": 1}}


# --- /mcp's bounds (api/mcp/http.py) ----------------------------------------------------------

def test_call_limits_per_client_at_once_and_share_of_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(mcp_http.time, "monotonic", lambda: now[0])
    limits = mcp_http.CallLimits(per_client=1, total=2, share=0.25, burst=1.0)
    with limits.place("a"):
        with pytest.raises(ClientBusy) as busy:
            limits.place("a").__enter__()
        assert status_of(busy.value) == 429 and busy.value.details["retry_after"] == 1
        with limits.place("b"):
            with pytest.raises(ServerBusy) as full:
                limits.place("c").__enter__()
            assert status_of(full.value) == 503 and full.value.details["limit"] == 2
            now[0] += 1.5  # two calls of 1.5 s each: 3 s charged against a 1 s budget
    with pytest.raises(ServerBusy) as spent:
        limits.place("c").__enter__()
    # a full budget of 1 s (never more) less 3 s: −2 s, refilled at 0.25 s a second in 8 s
    assert spent.value.details["retry_after"] == 8
    now[0] += 8
    with limits.place("c"):
        pass
