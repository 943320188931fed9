"""The HTML pages through the real app: what each page shows for the worked example, typed
errors as pages, the security headers, and contributor text rendered inert (XSS)."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import quote

import pytest

from alexandria.api.web.diffs import MAX_DIFF_LINES
from alexandria.reads.pages import HISTORY_PAGE_SIZE
from tests.support.library import Api
from tests.support.objects import publish_example
from tests.support.pages import Page, check_headers, get_page


def check_no_inline_script(page: Page) -> None:
    for attrs in page.all("script"):
        assert attrs.get("src", "").startswith("/static/"), attrs  # type: ignore[union-attr]
    for _tag, attrs in page.tags:
        assert not any(k.startswith("on") for k in attrs), attrs
        assert "style" not in attrs, attrs


@pytest.fixture
async def example(api: Api) -> dict[str, str]:
    return await publish_example(api)


async def test_catalogue_lists_searches_and_links_by_root(
    api: Api, example: dict[str, str]
) -> None:
    page = await get_page(api, "/")
    check_no_inline_script(page)
    assert "Catalogue" in page.plain
    assert f"/objects/{example['claim']}" in page.hrefs()  # the merged claim, by its root
    assert f"/objects/{example['merge']}" not in page.hrefs()
    assert any(a.get("id") == "q" for a in page.all("input"))
    found = await get_page(api, "/?q=peano&kind=claim&view=all&sort=")
    assert "1–1 of 1" in found.plain
    assert f"/objects/{example['claim']}" in found.hrefs()
    claims = await get_page(api, "/?kind=evidence")
    assert f"/objects/{example['evidence']}" in claims.hrefs()
    assert f"/objects/{example['claim']}" not in claims.hrefs()


async def test_catalogue_pages_through_results(api: Api, example: dict[str, str]) -> None:
    page = await get_page(api, "/?offset=5")
    assert "6–" in page.plain and "Previous page" in page.plain
    assert "/?offset=0" not in page.hrefs() and "/" in page.hrefs()
    past = await get_page(api, "/?offset=500")
    assert "Nothing on this page: 11 in all" in past.plain


@pytest.mark.parametrize(("path", "status", "code"), [
    ("/?kind=vote", 400, "BAD_PARAMETER"),
    ("/?sort=sideways", 400, "BAD_PARAMETER"),
    ("/?offset=-1", 400, "BAD_PARAMETER"),
    ("/?q=" + "a" * 501, 400, "QUERY_TOO_LONG"),
    ("/?colour=red", 400, "UNKNOWN_PARAMETER"),
    ("/?q=a&q=b", 400, "REPEATED_PARAMETER"),
    ("/objects/XYZ", 400, "BAD_REVISION"),
    ("/objects/" + "0" * 64, 404, "UNKNOWN_REVISION"),
    ("/revisions/" + "0" * 64, 404, "UNKNOWN_REVISION"),
    ("/authors/nobody", 400, "BAD_ACTOR"),
    ("/log?x=1", 400, "UNKNOWN_PARAMETER"),
])
async def test_bad_input_is_a_typed_error_page(api: Api, path: str, status: int, code: str) -> None:
    page = await get_page(api, path, status)
    assert code in page.plain
    assert f"Error {status}" in page.plain


async def test_object_section_parameter_is_checked(api: Api, example: dict[str, str]) -> None:
    page = await get_page(api, f"/objects/{example['claim']}?section=nope", 400)
    assert "BAD_PARAMETER" in page.plain


async def test_api_is_not_shadowed(api: Api, example: dict[str, str]) -> None:
    r = await api.client.get("/api/catalogue")
    assert r.headers["content-type"] == "application/json"
    r = await api.client.get("/api/nothing")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


async def test_claim_page_shows_sections_history_and_diff(
    api: Api, example: dict[str, str]
) -> None:
    page = await get_page(api, f"/objects/{example['claim']}")
    check_no_inline_script(page)
    text = page.plain
    for heading in ("Evidence", "Assessments", "Discussions", "Proposals", "Relationships",
                    "History"):
        assert any(a.get("id") for a in page.all("h2")), heading
        assert heading in text, heading
    assert "Natural numbers under Peano axioms" in text  # the merged head
    assert "Successor definition of addition" in text
    assert "The successor of one is two." in text  # the evidence, in full
    assert "supported" in text and "The calculation follows the stated definition." in text
    assert f"/objects/{example['discussion']}" in page.hrefs()
    assert f"/objects/{example['proposal']}" in page.hrefs()
    assert f"/objects/{example['relationship']}" in page.hrefs()
    # history: both revisions, with author and admission time, and the diff between them
    assert f"/revisions/{example['claim']}" in page.hrefs()
    assert f"/revisions/{example['merge']}" in page.hrefs()
    assert "admitted" in text and "as entry" in text
    r = await api.client.get(f"/objects/{example['claim']}")
    assert re.search(r'class="d-removed">- scope: Natural numbers with standard addition</span>',
                     r.text)
    assert re.search(r'class="d-added">\+ scope: Natural numbers under Peano axioms</span>',
                     r.text)
    # links in diffs by kind and title, beside the start of the exact id
    assert (f'link: merges proposal "Proposal" ({example["proposal"][:12]})'
            in html.unescape(r.text))


async def test_object_page_of_a_later_revision_redirects_to_its_root(
    api: Api, example: dict[str, str]
) -> None:
    r = await api.client.get(f"/objects/{example['merge']}")
    assert r.status_code == 302
    assert r.headers["location"] == f"/objects/{example['claim']}"
    r = await api.client.get(f"/objects/{example['merge']}?section=history")
    assert r.headers["location"] == f"/objects/{example['claim']}?section=history"


async def test_space_discussion_and_document_pages(api: Api, example: dict[str, str]) -> None:
    space = await get_page(api, f"/objects/{example['space']}")
    for heading in ("Children", "Included knowledge", "Relationships", "Discussions"):
        assert heading in space.plain
    assert f"/objects/{example['subspace']}" in space.hrefs()
    assert f"/objects/{example['document']}" in space.hrefs()
    sub = await get_page(api, f"/objects/{example['subspace']}")
    assert f"/objects/{example['space']}" in sub.hrefs()  # breadcrumb
    assert f"/objects/{example['discussion']}" in sub.hrefs()

    disc = await get_page(api, f"/objects/{example['discussion']}")
    text = disc.plain
    assert "Does this depend on the domain?" in text
    assert "Yes: state which addition operation is meant." in text
    assert "Branch" in text and f"/objects/{example['branch']}" in disc.hrefs()
    r = await api.client.get(f"/objects/{example['discussion']}")
    # the branch hangs below the reply it branches from
    reply_at = r.text.index("Yes: state which addition")
    branch_at = r.text.index(f'href="/objects/{example["branch"]}"')
    assert reply_at < branch_at
    assert r.text.count("<ol>", reply_at, branch_at) == 1

    doc = await get_page(api, f"/objects/{example['document']}")
    assert "A synthesis of the domain and definitions." in doc.plain
    for name in ("evidence", "assessment", "relationship", "proposal", "reply"):
        page = await get_page(api, f"/objects/{example[name]}")
        assert "History" in page.plain


async def test_revision_page_shows_record_chain_and_badge_hooks(
    api: Api, example: dict[str, str]
) -> None:
    rev = example["merge"]
    page = await get_page(api, f"/revisions/{rev}")
    check_no_inline_script(page)
    assert page.all("script") == [{"src": "/static/trust.js", "defer": None},
                                  {"src": "/static/verify.js", "defer": None}]
    box = next(a for a in page.all("section") if a.get("id") == "verification")
    signed = (await api.client.get(f"/api/entries/{rev}")).json()
    assert box["data-revision"] == rev
    assert box["data-sequence"] == str(signed["admission"]["sequence"])
    assert box["data-pin"] == api.founding.genesis.pin
    text = page.plain
    assert signed["signature"]["certificate"]["certificate"]["worker"] in text
    assert signed["admission"]["authority"]["certificate"]["key"] in text
    assert api.founding.genesis.pin in text
    assert f"/api/entries/{rev}" in page.hrefs()
    assert f"/authors/{signed['record']['author']}" in page.hrefs()
    assert signed["signature"]["proof"] in text


async def test_author_and_log_pages(api: Api, example: dict[str, str]) -> None:
    owner = api.founding.participants["owner"].actor
    page = await get_page(api, f"/authors/{owner}")
    assert "Scores" in page.plain and "Contributions" in page.plain
    assert f"/objects/{example['claim']}" in page.hrefs()
    assert f"/objects/{example['evidence']}" not in page.hrefs()  # the peer's
    await api.client.get("/api/log/checkpoint")
    log = await get_page(api, "/log")
    size = await api.library.storage.log_size()
    assert f"Entries {size}" in log.plain
    assert f"/revisions/{example['merge']}" in log.hrefs()
    assert "— " in log.plain  # the signed note's signature line


async def test_every_page_states_the_librarys_pin_and_links_to_the_readers(
    api: Api, example: dict[str, str]
) -> None:
    """The pin is in every page's footer, error pages included, with the script that compares
    it with the reader's and a link to ``/trust``, where the reader sets theirs."""
    pin = api.founding.genesis.pin
    author = (await api.client.get(f"/api/entries/{example['claim']}")).json()["record"]["author"]
    for path in ("/", "/?q=Peano", f"/objects/{example['claim']}",
                 f"/revisions/{example['merge']}", f"/authors/{author}", "/log", "/trust",
                 "/objects/" + "f" * 64, "/trust?pin=" + pin):
        r = await api.client.get(path)
        page = await get_page(api, path, status=r.status_code)
        check_no_inline_script(page)
        assert f"This library's genesis pin: {pin}" in page.plain, path
        assert "/trust" in page.hrefs(), path
        assert {"src": "/static/trust.js", "defer": None} in page.all("script"), path
    trust = await get_page(api, "/trust")
    form = next(f for f in trust.all("form") if f.get("id") == "trust-form")
    assert "hidden" in form  # shown by its script, which keeps what it saves in the browser
    assert "method" not in form and "action" not in form
    assert {a.get("id") for a in trust.all("input")} >= {"trust-pin", "trust-quorum"}
    assert [a.get("id") for a in trust.all("textarea")] == ["trust-witnesses"]
    assert "Setting a pin needs JavaScript" in trust.plain
    refused = await api.client.get("/trust?pin=" + pin)
    assert refused.status_code == 400 and "UNKNOWN_PARAMETER" in refused.text


async def test_static_files_are_served(api: Api) -> None:
    for name, kind in (("style.css", "text/css"), ("verify.js", "javascript"),
                       ("search.js", "javascript"), ("trust.js", "javascript")):
        r = await api.client.get(f"/static/{name}")
        assert r.status_code == 200 and kind in r.headers["content-type"]
    assert (await api.client.get("/static/nothing.js")).status_code == 404


# --- XSS: contributor text is inert everywhere ----------------------------------------------

PAYLOADS = (
    '<script>alert("x")</script>',
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(1)>",
    "</pre><script>alert(2)</script>",
    "{{ 7*7 }}",
)


def _evidence(claim: str, payload: str) -> dict[str, Any]:
    return {
        "kind": "evidence", "title": "E " + payload,
        "body": {
            "claim": claim, "method": "source", "content": payload,
            "sources": [
                {"label": payload, "url": "https://example.org/?q=" + quote(payload, safe=""),
                 "excerpt": payload, "locator": payload},
                {"label": "quote", "url": "https://example.org/a'onmouseover=alert(1)'"},
            ],
        },
        "links": [{"relation": "evidence_for", "target": claim}], "previous": "",
    }


async def test_script_payloads_render_inert(api: Api) -> None:
    ids: list[str] = []
    for payload in PAYLOADS:
        space = await api.publish("owner", {
            "kind": "space", "title": payload, "body": {"summary": payload}, "links": [],
            "previous": "",
        })
        claim = await api.publish("owner", {
            "kind": "claim", "title": payload,
            "body": {"statement": payload, "scope": payload, "assumptions": [payload]},
            "links": [{"relation": "contained_in", "target": space["id"]}], "previous": "",
        })
        evidence = await api.publish("peer", _evidence(claim["id"], payload))
        revised = await api.publish("owner", {
            "kind": "claim", "title": payload + " v2",
            "body": {"statement": payload + payload, "scope": payload, "assumptions": []},
            "links": [{"relation": "contained_in", "target": space["id"]}],
            "previous": claim["id"],
        })
        disc = await api.publish("peer", {
            "kind": "discussion", "title": payload, "body": {"text": payload},
            "links": [{"relation": "about", "target": claim["id"]}], "previous": "",
        })
        reply = await api.publish("owner", {
            "kind": "reply", "title": payload, "body": payload,
            "links": [{"relation": "replies_to", "target": disc["id"]}], "previous": "",
        })
        ids += [space["id"], claim["id"], evidence["id"], revised["id"], disc["id"], reply["id"]]
    owner = api.founding.participants["owner"].actor
    paths = ["/", "/?q=alert", f"/authors/{owner}", "/log"]
    paths += [f"/objects/{i}" for i in ids] + [f"/revisions/{i}" for i in ids]
    # the compare page: titles in its header and in its diff's link labels
    paths += [f"/objects/{ids[k + 1]}/compare?from={ids[k + 1]}&to={ids[k + 3]}"
              for k in range(0, len(ids), 6)]
    for path in paths:
        r = await api.client.get(path, follow_redirects=True)
        assert r.status_code == 200, path
        check_headers(r)
        page = Page(r.text)
        check_no_inline_script(page)
        assert not any(t in ("img", "svg") for t, _ in page.tags), path
        lowered = r.text.lower()
        assert "<script>" not in lowered and "<svg" not in lowered and "<img" not in lowered
    page = Page((await api.client.get(f"/objects/{ids[1]}")).text)
    assert '<script>alert("x")</script>' in page.plain  # shown as text, not run
    assert "{{ 7*7 }}" in Page((await api.client.get(f"/objects/{ids[-5]}")).text).plain
    evidence = Page((await api.client.get(f"/objects/{ids[2]}")).text)
    hrefs = evidence.hrefs()
    assert "https://example.org/a'onmouseover=alert(1)'" in hrefs  # one intact attribute
    assert "https://example.org/?q=" + quote(PAYLOADS[0], safe="") in hrefs


async def test_unsafe_source_urls_are_not_links(api: Api) -> None:
    from alexandria.api.web.present import safe_url

    assert safe_url("https://example.org/a") == "https://example.org/a"
    for bad in ("javascript:alert(1)", "data:text/html,x", "//evil.example/", "/local",
                "https://user:pw@example.org/", "https://exa mple.org/", "vbscript:x", "",
                "JaVaScRiPt:alert(1)", None, 5):
        assert safe_url(bad) is None, bad


async def test_history_pages_keep_the_diff_across_the_page_boundary(api: Api) -> None:
    content: dict[str, Any] = {
        "kind": "document", "title": "Notes", "body": {"text": "version 0"}, "links": [],
        "previous": "",
    }
    first = await api.publish("owner", content)
    head = first["id"]
    for i in range(1, 62):  # 62 revisions: revision k says "version k-1"
        head = (await api.publish("owner", {**content, "body": {"text": f"version {i}"},
                                            "previous": head}))["id"]
    root = first["id"]
    size = HISTORY_PAGE_SIZE
    # newest first: the first page holds revisions 62 to 53, 53 diffed against 52, which is
    # past the JSON API's first page of 50
    r = await api.client.get(f"/objects/{root}")
    page = Page(r.text)
    older = f"/objects/{root}?section=history&offset={size}"
    assert older in page.hrefs() and "Revision 62" in page.plain and "Revision 53" in page.plain
    assert "Revision 52 " not in page.plain and "Newer revisions" not in page.plain
    assert r.text.index("Revision 62") < r.text.index("Revision 53")
    assert '<span class="d-removed">- text: version 51</span>' in r.text
    assert '<span class="d-added">+ text: version 52</span>' in r.text
    r = await api.client.get(older)
    assert "Revision 52" in r.text and "Revision 43" in r.text and "Revision 53" not in r.text
    assert '<span class="d-removed">- text: version 41</span>' in r.text  # 43 against 42
    assert f'href="/objects/{root}?section=history"' in r.text  # back to the newest
    r = await api.client.get(f"/objects/{root}?section=history&offset=60")
    assert "Revision 2" in r.text and "Revision 1" in r.text and "Revision 3" not in r.text
    assert "Older revisions" not in r.text
    assert f'href="/objects/{root}?section=history&amp;offset={60 - size}"' in r.text


def test_threads_place_replies_under_their_parents() -> None:
    from alexandria.api.web.present import Link, Revision, thread

    def rev(root: str, *links: tuple[str, str]) -> Revision:
        return Revision(root, root, "reply", root, "a" * 64, "t", root, tuple(
            Link(r, t) for r, t in links), "", 1, "t", {})

    top = "d" * 64
    a = rev("a1", ("replies_to", top))
    b = rev("b1", ("replies_to", "a2"))  # an older revision of a
    c = rev("c1", ("branches_from", "b1"))
    orphan = rev("e1", ("replies_to", "x1"))  # its parent is on an earlier page
    tree = thread(top, [a, b, c, orphan], {"a2": "a1", "b1": "b1", "x1": "x1"},
                  ("replies_to", "answers", "branches_from"))
    assert [n.revision.root for n in tree] == ["a1", "e1"]
    assert tree[0].children[0].revision.root == "b1"
    assert tree[0].children[0].children[0].relation == "branches_from"
    assert tree[0].parent_elsewhere is None and tree[1].parent_elsewhere == "x1"


def test_diffs_are_bounded() -> None:
    from alexandria.api.web.present import Revision, diff

    def doc(rid: str, text: str) -> Revision:
        return Revision(rid, rid, "document", "T", "a" * 64, "t", {"text": text}, (), "", 1,
                        "t", {})

    long_a = "\n".join(f"line {i}" for i in range(5000))
    long_b = "\n".join(f"line {i}!" for i in range(5000))
    d = diff(doc("a", long_a), doc("b", long_b))
    assert d.truncated and d.too_different and d.lines == ()
    assert d.removed == d.added == MAX_DIFF_LINES - 1  # the title is the same
    wide = diff(doc("c", "a" * 40_000), doc("d", "b" * 40_000))
    assert wide.truncated and max(len(line.text) for line in wide.lines) < 2100
    same = diff(doc("e", "x"), doc("f", "x"))
    assert same.lines == () and not same.truncated and not same.changed
