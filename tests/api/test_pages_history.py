"""The pages' links, history and authors through the real app: links shown as kind and title
(an older exact revision marked superseded), no section listing what another lists, history
newest first with size changes, cur/prev and a compare page, relative times with the exact
time on hover, the names approved at enrolment, readable snippets, the author page leading with
contributions and an empty library's welcome.  In a browser: ``tests/api/test_browser.py``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from alexandria.api.web.present import ago
from alexandria.service.enrolment import TTL_MS, signed_bytes
from tests.support.library import Api
from tests.support.objects import publish_example
from tests.support.pages import Page, get_page


@pytest.fixture
async def example(api: Api) -> dict[str, str]:
    return await publish_example(api)


async def test_links_show_kind_and_title_and_mark_superseded_revisions(
    api: Api, example: dict[str, str]
) -> None:
    # the evidence names the claim's first revision; the claim has two since the merge
    page = await get_page(api, f"/objects/{example['evidence']}")
    text = page.plain.replace(" )", ")")
    assert ("For claim claim Claim (superseded: revision 1 of 2 · current: One plus one"
            " equals two)") in text
    assert f"/revisions/{example['claim']}" in page.hrefs()  # the exact revision it names
    assert f"/objects/{example['claim']}" in page.hrefs()  # and the object, at its current
    assert example["claim"][:12] not in text  # no bare hex for what the page could name
    # a link to the current revision is not marked
    claim = await get_page(api, f"/objects/{example['claim']}")
    assert "merges proposal Proposal" in claim.plain
    assert "merges proposal Proposal (superseded" not in claim.plain
    rev = await get_page(api, f"/revisions/{example['claim']}")
    assert "Revision 1 of 2" in rev.plain and "superseded" in rev.plain
    assert f"/objects/{example['claim']}/compare?from={example['claim']}&to={example['merge']}" \
        in rev.hrefs()


async def test_a_claim_page_lists_each_item_once(api: Api, example: dict[str, str]) -> None:
    r = await api.client.get(f"/objects/{example['claim']}")
    for name in ("proposal", "relationship", "evidence", "assessment", "discussion"):
        assert r.text.count(f'href="/objects/{example[name]}"') == 1, name
    headings = [h for h in Page(r.text).all("h2") if h.get("id")]
    ids = [h["id"] for h in headings]
    assert len(ids) == len(set(ids))


async def test_history_is_newest_first_with_sizes_cur_prev_and_a_compare_form(
    api: Api, example: dict[str, str]
) -> None:
    root, merge = example["claim"], example["merge"]
    r = await api.client.get(f"/objects/{root}")
    page = Page(r.text)
    assert r.text.index('id="rev-2"') < r.text.index('id="rev-1"')
    first = orjson.loads((await api.client.get(f"/api/entries/{root}")).content)
    second = orjson.loads((await api.client.get(f"/api/entries/{merge}")).content)

    def size(signed: dict[str, Any]) -> int:
        return len(signed["record"]["title"]) + len(signed["record"]["body"])

    delta = size(second) - size(first)
    assert delta != 0
    assert (f"+{delta:,}" if delta > 0 else f"−{-delta:,}") in page.plain
    assert f"{size(first):,} characters" in page.plain  # the first revision: its size
    prev = f"/objects/{root}/compare?from={root}&to={merge}"
    assert prev in page.hrefs()  # prev of revision 2, cur of revision 1
    assert page.hrefs().count(prev) == 2
    form = next(f for f in page.all("form") if f.get("class") == "compare")
    assert form["action"] == f"/objects/{root}/compare" and form["method"] == "get"
    radios = [i for i in page.all("input") if i.get("type") == "radio"]
    assert {(i["name"], i["value"]) for i in radios} == {
        ("from", root), ("to", root), ("from", merge), ("to", merge)}
    # the compare page: the bounded diff of the two, both sides named and linked
    cmp = await get_page(api, prev)
    assert "Revision 1 of 2" in cmp.plain and "Revision 2 of 2" in cmp.plain
    assert "- scope: Natural numbers with standard addition" in cmp.plain
    assert "+ scope: Natural numbers under Peano axioms" in cmp.plain
    assert f"/revisions/{root}" in cmp.hrefs() and f"/revisions/{merge}" in cmp.hrefs()
    backwards = await get_page(api, f"/objects/{root}/compare?from={merge}&to={root}")
    assert "+ scope: Natural numbers with standard addition" in backwards.plain
    same = await get_page(api, f"/objects/{root}/compare?from={root}&to={root}")
    assert "No change" in same.plain
    # a later revision's id addresses the object too
    assert (await api.client.get(f"/objects/{merge}/compare?from={root}&to={merge}")
            ).status_code == 200


async def test_compare_refuses_what_is_not_two_revisions_of_the_object(
    api: Api, example: dict[str, str]
) -> None:
    root = example["claim"]
    for query, code in (("", "BAD_REVISION"), (f"from={root}", "BAD_REVISION"),
                        (f"from={root}&to=xyz", "BAD_REVISION"),
                        (f"from={root}&to={root}&x=1", "UNKNOWN_PARAMETER"),
                        (f"from={root}&to={example['evidence']}", "NOT_A_REVISION_OF_OBJECT"),
                        (f"from={'0' * 64}&to={root}", "NOT_A_REVISION_OF_OBJECT")):
        page = await get_page(api, f"/objects/{root}/compare?{query}", 400)
        assert code in page.plain, query
    page = await get_page(api, f"/objects/{'0' * 64}/compare?from={root}&to={root}", 404)
    assert "UNKNOWN_REVISION" in page.plain


def test_relative_times() -> None:
    now = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
    assert ago("2026-06-01T09:00:00.000Z", now) == "3 hours ago"
    assert ago("2026-06-01T11:59:30.000Z", now) == "just now"
    assert ago("2026-06-01T11:59:00.000Z", now) == "1 minute ago"
    assert ago("2026-05-30T12:00:00.000Z", now) == "2 days ago"
    assert ago("2025-06-01T12:00:00.000Z", now) == "1 year ago"
    assert ago("2026-06-03T12:00:00.000Z", now) == "in 2 days"  # an author's clock ahead
    assert ago("not a time", now) == "not a time"


async def test_times_are_relative_with_the_exact_time_on_hover(
    api: Api, example: dict[str, str]
) -> None:
    page = await get_page(api, f"/objects/{example['claim']}")
    times = page.all("time")
    assert times and all(t["title"] == t["datetime"] for t in times)
    assert "ago" in page.plain or "in " in page.plain
    signed = (await api.client.get(f"/api/entries/{example['claim']}")).json()
    assert signed["record"]["authored_at"] not in page.plain  # in the title, not the text


async def test_authors_show_the_name_approved_at_enrolment(
    api: Api, example: dict[str, str]
) -> None:
    owner = api.founding.participants["owner"]
    before = await get_page(api, f"/authors/{owner.actor}")
    assert "approved at enrolment" not in before.plain
    pin = api.founding.genesis.pin
    scopes = ["library.comment"]
    body = orjson.dumps({"worker": owner.worker.public_hex, "name": "alice", "scopes": scopes,
                         "proof": owner.worker.sign(signed_bytes(pin, owner.worker.public_hex,
                                                                 "alice", scopes))})
    code = (await api.client.post("/api/enrolments", content=body)).json()["code"]
    ok = await api.client.post(f"/api/enrolments/{code}/certificate",
                               content=orjson.dumps(owner.certificate))
    assert ok.status_code == 200, ok.text
    # kept after its code expires, and after the next request purges expired ones
    api.clock.tick(TTL_MS + 1)
    other = orjson.dumps({"worker": "ab" * 32, "name": "x", "scopes": scopes, "proof": "00"})
    await api.client.post("/api/enrolments", content=other)
    author = await get_page(api, f"/authors/{owner.actor}")
    assert "Author alice (name approved at enrolment)" in author.plain
    claim = await get_page(api, f"/objects/{example['claim']}")
    assert "By alice (name approved at enrolment)" in claim.plain
    rev = await get_page(api, f"/revisions/{example['claim']}")
    assert "alice (name approved at enrolment)" in rev.plain
    home = await get_page(api, "/?kind=claim")  # lists name them too
    assert "by alice (name approved at enrolment)" in home.plain
    # the owner's reply in the discussion's thread (the discussion itself is the peer's)
    disc = (await api.client.get(f"/objects/{example['discussion']}")).text
    thread = disc[disc.index('id="h-thread"'):disc.index('id="h-history"')]
    assert thread.count("name approved at enrolment") == 1
    # another author, never enrolled by login, stays hex
    peer = api.founding.participants["peer"].actor
    assert "approved at enrolment" not in (await get_page(api, f"/authors/{peer}")).plain


async def test_author_page_leads_with_contributions(api: Api, example: dict[str, str]) -> None:
    owner = api.founding.participants["owner"].actor
    r = await api.client.get(f"/authors/{owner}")
    assert r.text.index('id="h-contrib"') < r.text.index('id="h-scores"')
    assert "No votes cast or received yet." in Page(r.text).plain
    nobody = await get_page(api, f"/authors/{'ab' * 32}")
    assert "No contributions yet." in nobody.plain


async def test_snippets_keep_fields_apart(api: Api, example: dict[str, str]) -> None:
    page = await get_page(api, "/?kind=claim")
    assert ("One plus one equals two · Natural numbers under Peano axioms · Successor"
            " definition of addition") in page.plain


async def test_an_empty_library_says_how_to_contribute(api: Api) -> None:
    page = await get_page(api, "/")
    text = page.plain
    pin = api.founding.genesis.pin
    assert f"alexandria login http://testserver --name YOUR-NAME --genesis {pin}" in text
    assert "alexandria publish" in text and "alexandria authority approve CODE" in text
    assert pin in text
    searched = await get_page(api, "/?q=nothing")
    assert "alexandria login" not in searched.plain  # a search that finds nothing is not that
