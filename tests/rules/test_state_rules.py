"""Every sentence of the contract's ``write_contract.state_rules`` and the timestamp rules of
PROTOCOL §4, through the real HTTP app: for each, an accepted and a refused case, asserting the
status, the error code, the same verdict on ``?dry_run=true`` and that nothing was stored."""

from __future__ import annotations

import json
from typing import Any

from alexandria.core.timestamps import format_ms
from alexandria.rules.state import MAX_DEPTH
from tests.support.admission import (
    accept,
    admitted,
    assessment,
    claim,
    discussion,
    document,
    evidence,
    link,
    proposal,
    refused,
    reject,
    relationship,
    reply,
    revise,
    space,
    vote,
)
from tests.support.library import CONTRACT, Api

RULES = CONTRACT["write_contract"]["state_rules"]


def rule(start: str) -> str:
    """The contract's sentence group that a test proves (fails loudly if the contract changes)."""
    found = [r for r in RULES if r.startswith(start)]
    assert len(found) == 1, start
    return str(found[0])


async def head_of(api: Api, rev: str) -> str:
    r = await api.client.get(f"/api/entries/{rev}/head")
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


# --- "All link targets must already exist. A reply uses one replies_to or answers link; a
# --- discussion may use one branches_from link ... and one about link ... Preserve kind and
# --- discussion parent on revisions."


async def test_link_targets_must_exist(api: Api) -> None:
    rule("All link targets must already exist.")
    root = await accept(api, "owner", space())
    missing = "f" * 64
    for content in (space("Sub", missing), claim(None, link("cites", missing)),
                    discussion(link("about", missing)), vote(missing),
                    evidence(missing)):
        body = await reject(api, "owner", content, 422, "LINK_TARGET_MISSING")
        assert body["details"]["target"] == missing
    await accept(api, "owner", claim(root, link("cites", root)), dry_run=True)


async def test_a_reply_uses_exactly_one_replies_to_or_answers_link(api: Api) -> None:
    c = await accept(api, "owner", claim())
    d = await accept(api, "peer", discussion(link("about", c)))
    r1 = await accept(api, "owner", reply(link("replies_to", d)), dry_run=True)
    await accept(api, "peer", reply(link("answers", r1)), dry_run=True)
    await reject(api, "owner", reply(), 422, "REPLY_PARENT")
    await reject(api, "owner", reply(link("cites", d)), 422, "REPLY_PARENT")
    await reject(api, "owner", reply(link("replies_to", d), link("answers", r1)), 422,
                 "REPLY_PARENT")
    await reject(api, "owner", reply(link("replies_to", d), link("replies_to", r1)), 422,
                 "REPLY_PARENT")
    body = await reject(api, "owner", reply(link("replies_to", c)), 422, "LINK_TARGET_KIND")
    assert body["details"] == {"pointer": "/record/links/0/target",
                               "allowed": ["discussion", "reply"], "actual": "claim"}
    for kind_content in (discussion(link("replies_to", d)), claim(None, link("answers", d))):
        await reject(api, "owner", kind_content, 422, "RELATION_NOT_ALLOWED")


async def test_a_discussion_branches_from_one_discussion_or_reply(api: Api) -> None:
    c = await accept(api, "owner", claim())
    d = await accept(api, "peer", discussion())
    r = await accept(api, "owner", reply(link("replies_to", d)))
    await accept(api, "peer", discussion(link("branches_from", d)), dry_run=True)
    await accept(api, "peer", discussion(link("branches_from", r), link("about", c)))
    await reject(api, "peer", discussion(link("branches_from", c)), 422, "LINK_TARGET_KIND")
    body = await reject(api, "peer", discussion(link("branches_from", d),
                                                link("branches_from", r)), 422, "TOO_MANY_LINKS")
    assert body["details"]["relation"] == "branches_from"
    await reject(api, "peer", claim(None, link("branches_from", d)), 422,
                 "RELATION_NOT_ALLOWED")


async def test_a_discussion_is_about_one_claim_or_space(api: Api) -> None:
    s = await accept(api, "owner", space())
    c = await accept(api, "owner", claim(s))
    doc = await accept(api, "owner", document(s))
    await accept(api, "peer", discussion(link("about", c)), dry_run=True)
    await accept(api, "peer", discussion(link("about", s), link("contained_in", s)))
    await reject(api, "peer", discussion(link("about", doc)), 422, "LINK_TARGET_KIND")
    await reject(api, "peer", discussion(link("about", c), link("about", s)), 422,
                 "TOO_MANY_LINKS")
    await reject(api, "peer", document(None, link("about", c)), 422, "RELATION_NOT_ALLOWED")


async def test_revisions_preserve_kind_and_discussion_parent(api: Api) -> None:
    c1 = await accept(api, "owner", claim())
    c2 = await accept(api, "owner", claim(title="Other"))
    first = discussion(link("about", c1))
    d = await accept(api, "peer", first)
    body = await reject(api, "peer", revise(first, d, kind="document", body={"text": "t"},
                                            links=[]), 422, "KIND_CHANGED")
    assert body["details"]["expected"] == "discussion"
    for links in ([link("about", c2)], [], [link("about", c1), link("branches_from", d)]):
        body = await reject(api, "peer", revise(first, d, links=links), 422, "PARENTAGE_CHANGED")
        assert body["details"]["expected"] == [link("about", c1)]
    # citations are not parentage: they may change
    d2 = await accept(api, "peer", revise(first, d, links=[link("about", c1), link("cites", c2)]),
                      dry_run=True)
    assert await head_of(api, d) == d2
    r = await accept(api, "owner", reply(link("replies_to", d)))
    await reject(api, "owner", revise(reply(link("replies_to", d)), r,
                                      links=[link("replies_to", d2)]), 422, "PARENTAGE_CHANGED")
    await reject(api, "owner", revise(reply(link("replies_to", d)), r,
                                      links=[link("answers", d)]), 422, "PARENTAGE_CHANGED")
    await accept(api, "owner", revise(reply(link("replies_to", d)), r, body="Edited."))


# --- "previous is empty for new roots; revisions require the original author and current head.
# --- Votes target a non-vote root; one vote per identity and target, changed by revising..."


async def test_revisions_require_the_original_author_and_the_current_head(api: Api) -> None:
    rule("previous is empty for new roots;")
    first = claim()
    c = await accept(api, "owner", first)
    body = await reject(api, "peer", revise(first, c, title="Mine now"), 422,
                        "NOT_ORIGINAL_AUTHOR")
    assert body["details"]["author"] == api.founding.participants["owner"].actor
    await reject(api, "owner", revise(first, "e" * 64), 422, "PREVIOUS_MISSING")
    c2 = await accept(api, "owner", revise(first, c, title="Second"), dry_run=True)
    body = await reject(api, "owner", revise(first, c, title="Stale"), 409, "HEAD_CONFLICT")
    assert body["details"] == {"head": c2, "root": c}
    c3 = await accept(api, "owner", revise(first, c2, title="Third"))
    assert await head_of(api, c) == c3
    assert (await api.client.get(f"/api/entries/{c2}")).json()["root"] == c


async def test_votes_target_a_non_vote_root(api: Api) -> None:
    c = await accept(api, "owner", claim())
    c2 = await accept(api, "owner", revise(claim(), c, title="Revised"))
    v = await accept(api, "peer", vote(c, "1"), dry_run=True)
    await reject(api, "owner", vote(v, "1"), 422, "LINK_TARGET_KIND")
    body = await reject(api, "owner", vote(c2, "1"), 422, "LINK_TARGET_KIND")
    assert body["details"]["root"] == c
    await reject(api, "owner", vote(c, "1", link("cites", c)), 422, "RELATION_NOT_ALLOWED")
    await reject(api, "owner", vote(c, "1", link("votes_on", c)), 422, "LINKS_NOT_EXACT")
    await reject(api, "owner", {**vote(c), "links": []}, 422, "LINKS_NOT_EXACT")
    await reject(api, "owner", claim(None, link("votes_on", c)), 422, "RELATION_NOT_ALLOWED")
    for value in ("2", "+1", "", "up"):
        await reject(api, "owner", vote(c, value), 422, "SCHEMA_VIOLATION")
    for value in ("-1", "0"):
        await accept(api, "owner", vote(await accept(api, "owner", space(value)), value))


async def test_one_vote_per_identity_and_target_changed_by_revising_it(api: Api) -> None:
    c = await accept(api, "owner", claim())
    d = await accept(api, "owner", claim(title="Another"))
    first = vote(c, "1")
    v = await accept(api, "peer", first)
    body = await reject(api, "peer", vote(c, "-1"), 409, "DUPLICATE_VOTE")
    assert body["details"] == {"head": v, "root": v}
    await accept(api, "owner", vote(c, "1"), dry_run=True)  # another identity
    await accept(api, "peer", vote(d, "1"))  # another target
    v2 = await accept(api, "peer", revise(first, v, body="-1"), dry_run=True)
    body = await reject(api, "peer", vote(c, "0"), 409, "DUPLICATE_VOTE")
    assert body["details"] == {"head": v2, "root": v}
    await reject(api, "peer", revise(first, v2, links=[link("votes_on", d)]), 422,
                 "VOTE_TARGET_CHANGED")
    await reject(api, "owner", revise(first, v2, body="0"), 422, "NOT_ORIGINAL_AUTHOR")
    await accept(api, "peer", revise(first, v2, body="0"))


# --- "Evidence, assessments, relationships and proposals are immutable ... Their links must be
# --- exactly evidence_for(claim), assesses(claim), relates_from(from) plus relates_to(to), or
# --- proposes_for(base), respectively."


async def test_evidence_assessment_relationship_and_proposal_are_immutable(api: Api) -> None:
    rule("Evidence, assessments, relationships and proposals are immutable;")
    s = await accept(api, "owner", space())
    c = await accept(api, "owner", claim(s))
    doc = await accept(api, "owner", document(s))
    contents = {
        "evidence": evidence(c),
        "relationship": relationship(c, doc),
        "proposal": proposal(c, "Better", {"statement": "s", "scope": "t", "assumptions": []},
                             [link("contained_in", s)]),
    }
    ids = {kind: await accept(api, "peer", content) for kind, content in contents.items()}
    contents["assessment"] = assessment(c, [ids["evidence"]])
    ids["assessment"] = await accept(api, "peer", contents["assessment"])
    for kind, content in contents.items():
        body = await reject(api, "peer", revise(content, ids[kind], title="Edited"), 422,
                            "IMMUTABLE")
        assert body["details"]["pointer"] == "/record/previous", kind
    # publishing a new one instead is how they change
    await accept(api, "peer", {**contents["evidence"], "title": "New evidence"}, dry_run=True)


async def test_evidence_links_exactly_evidence_for_its_claim(api: Api) -> None:
    c = await accept(api, "owner", claim())
    c2 = await accept(api, "owner", claim(title="Second"))
    doc = await accept(api, "owner", document())
    await accept(api, "peer", evidence(c), dry_run=True)
    twice = [link("evidence_for", c), link("evidence_for", c)]
    for links in ([], [link("evidence_for", c2)], twice):
        body = await reject(api, "peer", evidence(c, links=links), 422, "LINKS_NOT_EXACT")
        assert body["details"]["expected"] == [link("evidence_for", c)]
    await reject(api, "peer", evidence(c, links=[link("evidence_for", c), link("cites", c2)]),
                 422, "RELATION_NOT_ALLOWED")
    await reject(api, "peer", evidence(doc), 422, "LINK_TARGET_KIND")
    await reject(api, "peer", evidence(c, links=[link("contained_in", c)]), 422,
                 "RELATION_NOT_ALLOWED")


async def test_assessment_links_exactly_assesses_its_claim(api: Api) -> None:
    c = await accept(api, "owner", claim())
    doc = await accept(api, "owner", document())
    await accept(api, "peer", assessment(c, [], "open"), dry_run=True)
    for links in ([], [link("assesses", doc)], [link("assesses", c), link("assesses", c)]):
        await reject(api, "peer", assessment(c, [], "open", links=links), 422, "LINKS_NOT_EXACT")
    await reject(api, "peer", assessment(c, [], "open", links=[link("assesses", c),
                                                                link("cites", doc)]),
                 422, "RELATION_NOT_ALLOWED")
    await reject(api, "peer", assessment(doc, [], "open"), 422, "LINK_TARGET_KIND")


async def test_relationship_links_exactly_relates_from_and_relates_to(api: Api) -> None:
    c = await accept(api, "owner", claim())
    doc = await accept(api, "owner", document())
    await accept(api, "peer", relationship(c, doc), dry_run=True)
    await accept(api, "peer", relationship(c, doc, links=[link("relates_to", doc),
                                                           link("relates_from", c)]))
    for links in ([link("relates_from", c)], [link("relates_from", doc), link("relates_to", c)],
                  [link("relates_from", c), link("relates_to", doc), link("relates_to", c)]):
        await reject(api, "peer", relationship(c, doc, links=links), 422, "LINKS_NOT_EXACT")
    v = await accept(api, "peer", vote(c))
    await reject(api, "peer", relationship(c, v), 422, "LINK_TARGET_KIND")
    await reject(api, "peer", claim(None, link("relates_to", doc)), 422, "RELATION_NOT_ALLOWED")


async def test_proposal_links_exactly_proposes_for_its_base(api: Api) -> None:
    s = await accept(api, "owner", space())
    c = await accept(api, "owner", claim(s))
    other = await accept(api, "owner", claim(s, title="Other"))
    d = await accept(api, "peer", discussion(link("about", c)))
    body = {"statement": "s", "scope": "t", "assumptions": []}
    keep = [link("contained_in", s)]
    await accept(api, "peer", proposal(c, "T", body, keep), dry_run=True)
    await reject(api, "peer", proposal(c, "T", body, keep, proposes_for=other), 422,
                 "LINKS_NOT_EXACT")
    await reject(api, "peer", {**proposal(c, "T", body, keep), "links": []}, 422,
                 "LINKS_NOT_EXACT")
    out = await reject(api, "peer", proposal(d, "T", {"text": "x"}, []), 422, "LINK_TARGET_KIND")
    assert out["details"]["allowed"] == ["claim", "document", "space"]


# --- "Assessment evidence must concern the same exact claim revision; non-open verdicts require
# --- evidence, with no duplicates."


async def test_assessment_evidence_concerns_the_same_claim_revision(api: Api) -> None:
    rule("Assessment evidence must concern the same exact claim revision;")
    first = claim()
    c = await accept(api, "owner", first)
    e1 = await accept(api, "peer", evidence(c))
    c2 = await accept(api, "owner", revise(first, c, title="Revised"))
    e2 = await accept(api, "peer", evidence(c2))
    await accept(api, "owner", assessment(c2, [e2]), dry_run=True)
    body = await reject(api, "owner", assessment(c2, [e2, e1]), 422, "EVIDENCE_OTHER_CLAIM")
    assert body["details"]["pointer"] == "/body/evidence/1"
    await reject(api, "owner", assessment(c2, ["d" * 64]), 422, "EVIDENCE_MISSING")
    await reject(api, "owner", assessment(c2, [c2]), 422, "EVIDENCE_MISSING")


async def test_non_open_verdicts_require_evidence_without_duplicates(api: Api) -> None:
    c = await accept(api, "owner", claim())
    e = await accept(api, "peer", evidence(c))
    e2 = await accept(api, "peer", {**evidence(c), "title": "More evidence"})
    await accept(api, "owner", assessment(c, [], "open"), dry_run=True)
    await accept(api, "owner", assessment(c, [e], "open"))
    for verdict in ("supported", "disputed", "accepted", "refuted"):
        body = await reject(api, "owner", assessment(c, [], verdict), 422, "EVIDENCE_REQUIRED")
        assert body["details"]["pointer"] == "/body/evidence"
        await accept(api, "owner", assessment(c, [e, e2], verdict))
    # duplicates: the schema's uniqueItems already refuses them
    body = await reject(api, "owner", assessment(c, [e, e], "refuted"), 422, "SCHEMA_VIOLATION")
    assert body["details"]["pointer"] == "/body/evidence"


# --- "Spaces, discussions, claims and documents may carry one contained_in link to an existing
# --- space root, nested at most 64 deep. Parentage cannot change on revision; ..."


async def test_contained_in_targets_one_existing_space_root(api: Api) -> None:
    rule("Spaces, discussions, claims and documents may carry one contained_in link")
    first = space()
    s = await accept(api, "owner", first)
    s_rev = await accept(api, "owner", revise(first, s, title="Renamed"))
    other = await accept(api, "owner", space("Other"))
    c = await accept(api, "owner", claim(s))
    for content in (space("Sub", s), discussion(link("contained_in", s)), claim(s), document(s)):
        await accept(api, "peer", content, dry_run=True)
    body = await reject(api, "peer", claim(s_rev), 422, "LINK_TARGET_NOT_ROOT")
    assert body["details"]["root"] == s
    await reject(api, "peer", claim(c), 422, "LINK_TARGET_KIND")
    await reject(api, "peer", claim(s, link("contained_in", other)), 422, "TOO_MANY_LINKS")
    d = await accept(api, "peer", discussion())
    for content in (reply(link("replies_to", d), link("contained_in", s)),
                    evidence(c, links=[link("evidence_for", c), link("contained_in", s)]),
                    vote(c, "1", link("contained_in", s))):
        await reject(api, "peer", content, 422, "RELATION_NOT_ALLOWED")


async def test_containment_is_nested_at_most_64_deep(api: Api) -> None:
    parent = await accept(api, "owner", space("Level 0"))
    for depth in range(1, MAX_DEPTH + 1):
        parent = str((await api.publish("owner", space(f"Level {depth}", parent)))["id"])
    # ``parent`` is nested 64 deep: a claim inside it would be the 65th level
    body = await reject(api, "owner", claim(parent), 422, "TOO_DEEP")
    assert body["details"]["limit"] == MAX_DEPTH == 64
    await reject(api, "owner", space("Level 65", parent), 422, "TOO_DEEP")
    grandparent = json.loads((await api.client.get(f"/api/entries/{parent}")).content)
    up = grandparent["record"]["links"][0]["target"]
    await accept(api, "owner", claim(up), dry_run=True)  # the 64th level is fine


async def test_parentage_cannot_change_on_revision(api: Api) -> None:
    s = await accept(api, "owner", space())
    t = await accept(api, "owner", space("T"))
    for first in (space("Child", s), claim(s), document(s)):
        rev = await accept(api, "owner", first)
        for links in ([], [link("contained_in", t)]):
            await reject(api, "owner", revise(first, rev, links=links), 422, "PARENTAGE_CHANGED")
        await accept(api, "owner", revise(first, rev, title="Same parent"), dry_run=True)
    orphan = claim()
    o = await accept(api, "owner", orphan)
    await reject(api, "owner", revise(orphan, o, links=[link("contained_in", s)]), 422,
                 "PARENTAGE_CHANGED")


# --- "Only spaces use includes links, each to a unique claim or document, without copying it."


async def test_only_spaces_include_unique_claims_or_documents(api: Api) -> None:
    rule("Only spaces use includes links")
    first = claim()
    c = await accept(api, "owner", first)
    c2 = await accept(api, "owner", revise(first, c, title="Revised"))
    doc = await accept(api, "peer", document())
    d = await accept(api, "peer", discussion())
    s = await accept(api, "owner", space("Shelf", None, link("includes", c), link("includes", doc)),
                     dry_run=True)
    included = json.loads((await api.client.get(f"/api/entries/{s}")).content)
    assert included["record"]["links"] == [link("includes", c), link("includes", doc)]
    body = await reject(api, "owner", space("Twice", None, link("includes", c),
                                            link("includes", c)), 422, "DUPLICATE_INCLUDE")
    assert body["details"]["pointer"] == "/record/links"
    # two revisions of one claim are still one claim
    await reject(api, "owner", space("Twice", None, link("includes", c), link("includes", c2)),
                 422, "DUPLICATE_INCLUDE")
    await reject(api, "owner", space("Bad", None, link("includes", d)), 422, "LINK_TARGET_KIND")
    for kind_content in (claim(None, link("includes", doc)), document(None, link("includes", c)),
                         discussion(link("includes", c))):
        await reject(api, "owner", kind_content, 422, "RELATION_NOT_ALLOWED")
    # includes are not parentage: a revision may change them
    await accept(api, "owner", revise(space("Shelf", None, link("includes", c2)), s))


# --- "A proposal pins the current head of a space, claim or document. Only the target author
# --- accepts it: same kind, previous=base, exactly the proposed title, body and links, plus one
# --- merges link to the proposal. Stale bases require a new proposal."


async def _proposed(api: Api) -> tuple[dict[str, Any], str, str, str, dict[str, Any]]:
    s = await accept(api, "owner", space())
    base_content = claim(s)
    c = await accept(api, "owner", base_content)
    body = {"statement": "One plus one equals two", "scope": "Peano", "assumptions": ["succ"]}
    p_content = proposal(c, "Proposed", body, [link("contained_in", s), link("cites", s)])
    p = await accept(api, "peer", p_content)
    merge = {"kind": "claim", "title": "Proposed", "body": body,
             "links": [link("contained_in", s), link("cites", s), link("merges", p)],
             "previous": c}
    return base_content, s, c, p, merge


async def test_a_proposal_pins_the_current_head(api: Api) -> None:
    rule("A proposal pins the current head of a space, claim or document.")
    base_content, s, c, _p, _merge = await _proposed(api)
    c2 = await accept(api, "owner", revise(base_content, c, title="Moved on"))
    stale = proposal(c, "T", {"statement": "s", "scope": "t", "assumptions": []},
                     [link("contained_in", s)])
    body = await reject(api, "peer", stale, 409, "STALE_BASE")
    assert body["details"] == {"head": c2, "root": c}
    fresh = proposal(c2, "T", {"statement": "s", "scope": "t", "assumptions": []},
                     [link("contained_in", s)])
    await accept(api, "peer", fresh, dry_run=True)
    sp = await accept(api, "owner", space("Other"))
    await accept(api, "peer", proposal(sp, "Space", {"summary": "New"}, []))


async def test_proposed_content_must_be_valid_for_the_base(api: Api) -> None:
    _base, s, c, _p, _merge = await _proposed(api)
    keep = [link("contained_in", s)]
    body = await reject(api, "peer", proposal(c, "T", {"statement": "s"}, keep), 422,
                        "PROPOSAL_INVALID")
    assert body["details"]["pointer"].startswith("/body")
    await reject(api, "peer", proposal(c, "T", {"text": "a document body"}, keep), 422,
                 "PROPOSAL_INVALID")
    good = {"statement": "s", "scope": "t", "assumptions": []}
    await reject(api, "peer", proposal(c, "T", good, []), 422, "PARENTAGE_CHANGED")
    await reject(api, "peer", proposal(c, "T", good, [*keep, link("merges", c)]), 422,
                 "RELATION_NOT_ALLOWED")
    await reject(api, "peer", proposal(c, "   ", good, keep), 422, "SCHEMA_VIOLATION")
    body = await reject(api, "peer", proposal(c, "T", good, [*keep, link("cites", "9" * 64)]),
                        422, "LINK_TARGET_MISSING")
    assert body["details"]["pointer"] == "/body/links/1/target"
    # links the base's kind may not carry would make a proposal nobody could merge
    body = await reject(api, "peer", proposal(c, "T", good, [*keep, link("includes", c)]), 422,
                        "RELATION_NOT_ALLOWED")
    assert body["details"]["pointer"] == "/body/links/1/relation"
    d = await accept(api, "owner", {"kind": "discussion", "title": "Talk",
                                    "body": {"text": "About it"}, "links": [], "previous": ""})
    body = await reject(api, "peer", proposal(s, "S", {"summary": "s"}, [link("includes", d)]),
                        422, "LINK_TARGET_KIND")
    assert body["details"]["pointer"] == "/body/links/0/target"
    await reject(api, "peer", proposal(s, "S", {"summary": "s"},
                                       [link("includes", c), link("includes", c)]),
                 422, "DUPLICATE_INCLUDE")
    await accept(api, "peer", proposal(s, "S", {"summary": "s"}, [link("includes", c)]),
                 dry_run=True)


async def test_only_the_target_author_merges_exactly_the_proposal(api: Api) -> None:
    _base, s, c, p, merge = await _proposed(api)
    await reject(api, "peer", merge, 422, "NOT_ORIGINAL_AUTHOR")
    for changed in ({"title": "Other title"},
                    {"body": {**merge["body"], "scope": "Other"}},
                    {"links": [link("contained_in", s), link("merges", p)]},
                    {"links": [link("cites", s), link("contained_in", s), link("merges", p)]}):
        body = await reject(api, "owner", {**merge, **changed}, 422, "MERGE_MISMATCH")
        assert body["details"]["pointer"] == "/record"
    await reject(api, "owner", {**merge, "links": [link("contained_in", s), link("merges", p),
                                                   link("cites", s)]}, 422, "MERGE_LINKS")
    await reject(api, "owner", {**merge, "links": [*merge["links"], link("merges", p)]}, 422,
                 "TOO_MANY_LINKS")
    await reject(api, "owner", {**merge, "links": [*merge["links"][:2], link("merges", c)]}, 422,
                 "LINK_TARGET_KIND")
    await reject(api, "owner", {**merge, "previous": ""}, 422, "RELATION_NOT_ALLOWED")
    merged = await accept(api, "owner", merge, dry_run=True)
    assert await head_of(api, c) == merged
    # the same proposal cannot be merged again: its base is no longer the head
    body = await reject(api, "owner", merge, 409, "STALE_BASE")
    assert body["details"]["head"] == merged


async def test_a_merge_revises_the_proposals_base(api: Api) -> None:
    base_content, s, c, p, merge = await _proposed(api)
    c2 = await accept(api, "owner", revise(base_content, c, title="Moved on"))
    # previous = the current head, but the proposal was for the older base
    body = await reject(api, "owner", {**merge, "previous": c2}, 422, "MERGE_BASE")
    assert body["details"]["expected"] == c
    # previous = the proposal's base, which is no longer the head: stale
    body = await reject(api, "owner", merge, 409, "STALE_BASE")
    assert body["details"]["head"] == c2
    other = await accept(api, "owner", claim(s, title="Other"))
    await reject(api, "owner", {**merge, "previous": other}, 422, "MERGE_BASE")
    doc = await accept(api, "owner", document(s))
    await reject(api, "owner", {"kind": "document", "title": "Proposed",
                                "body": {"text": "t"}, "previous": doc,
                                "links": [link("contained_in", s), link("merges", p)]}, 422,
                 "MERGE_BASE")


# --- "Sources require HTTPS without credentials; times and digests are author assertions ..."


def source(**fields: Any) -> dict[str, Any]:
    return {"label": "Source", "url": "https://example.org/paper", **fields}


async def test_sources_require_https_without_credentials(api: Api) -> None:
    rule("Sources require HTTPS without credentials;")
    c = await accept(api, "owner", claim())
    full = source(excerpt="quoted", locator="p. 3", retrieved_at="2026-05-01T12:00:00Z",
                  digest="0" * 64, archive_url="https://archive.example.org/x")
    reproducibility: dict[str, Any] = {
        "status": "claimed", "environment": "e", "inputs": "i", "outputs": "o",
        "artifacts": [{"label": "a", "url": "https://example.org/a", "digest": "1" * 64}],
    }
    await accept(api, "peer", evidence(c, sources=[full], reproducibility=reproducibility),
                 dry_run=True)
    await accept(api, "peer", evidence(c, sources=[source(url="https://[2001:db8::1]:8443/x")]))
    bad_urls = ["http://example.org/", "https://user:pass@example.org/", "https://user@example.org/",
                "https:///nohost", "https://", "https://example.org/a b", "https://example.org/\n",
                "ftp://example.org/", "HTTPS://example.org/", "https://exa mple.org/",
                "https://example.org:99999/", "//example.org/", "https://é.example/"]
    for url in bad_urls:
        body = await reject(api, "peer", evidence(c, sources=[source(url=url)]), 422,
                            "SCHEMA_VIOLATION")
        assert body["details"]["pointer"] == "/body/sources/0/url", url
        body = await reject(api, "peer", evidence(c, sources=[source(archive_url=url)]), 422,
                            "SCHEMA_VIOLATION")
        assert body["details"]["pointer"] == "/body/sources/0/archive_url", url
    artifact = reproducibility["artifacts"][0]
    body = await reject(api, "peer", evidence(c, reproducibility={
        **reproducibility, "artifacts": [{**artifact, "url": "https://u:p@example.org/"}]}), 422,
        "SCHEMA_VIOLATION")
    assert body["details"]["pointer"] == "/body/reproducibility/artifacts/0/url"


async def test_source_times_are_utc_ending_in_z(api: Api) -> None:
    c = await accept(api, "owner", claim())
    for stamp in ("2026-05-01T12:00:00Z", "2026-05-01T12:00:00.123456Z"):
        await accept(api, "peer", evidence(c, sources=[source(retrieved_at=stamp)]), dry_run=True)
    for stamp in ("2026-05-01T12:00:00+00:00", "2026-05-01T12:00:00", "2026-05-01",
                  "2026-05-01T12:00:00z", "2026-02-30T12:00:00Z", "2026-05-01T12:00:00Z\n"):
        body = await reject(api, "peer", evidence(c, sources=[source(retrieved_at=stamp)]), 422,
                            "SCHEMA_VIOLATION")
        assert body["details"]["pointer"] == "/body/sources/0/retrieved_at", stamp
    await reject(api, "peer", evidence(c, sources=[source(digest="A" * 64)]), 422,
                 "SCHEMA_VIOLATION")


# --- free citations (PROTOCOL §3) --------------------------------------------------------------


async def test_free_citations_on_the_kinds_that_may_cite(api: Api) -> None:
    s = await accept(api, "owner", space())
    c = await accept(api, "owner", claim(s))
    d = await accept(api, "peer", discussion(link("about", c)))
    cite = link("see-also_2", c)
    for content in (space("S", None, cite), discussion(cite), claim(None, cite),
                    document(None, cite), reply(link("replies_to", d), cite)):
        await accept(api, "peer", content, dry_run=True)
    await reject(api, "peer", evidence(c, links=[link("evidence_for", c), cite]), 422,
                 "RELATION_NOT_ALLOWED")
    await reject(api, "peer", vote(c, "1", cite), 422, "RELATION_NOT_ALLOWED")
    await reject(api, "peer", claim(None, link("Cites", c)), 422, "SCHEMA_VIOLATION")


# --- timestamp rules (PROTOCOL §4) --------------------------------------------------------------


async def test_authored_at_at_most_60_seconds_ahead(api: Api) -> None:
    now = api.clock.ms
    body = await reject(api, "owner", space("Early"), 422, "TIMESTAMP_IN_FUTURE",
                        authored_at=format_ms(now + 60_001))
    assert body["details"]["pointer"] == "/record/authored_at"
    env = api.envelope("owner", space("Just in time"), format_ms(now + 60_000))
    await admitted(api, env)


async def test_authored_at_inside_the_worker_certificate_window(api: Api) -> None:
    f = api.founding
    late = f.enroll("late", not_before="2026-05-01T00:00:00.000Z",
                    not_after="2027-01-01T00:00:00.000Z")
    before = late.envelope(f.genesis, space(), "2026-04-30T23:59:59.999Z")
    await refused(api, before, 422, "TIMESTAMP_OUTSIDE_CERTIFICATE")
    await admitted(api, late.envelope(f.genesis, space(), "2026-05-01T00:00:00.000Z"))


async def test_authored_at_not_before_the_previous_revision(api: Api) -> None:
    first = claim()
    t = api.clock.tick()
    c = str((await admitted(api, api.envelope("owner", first, t)))["id"])
    earlier = format_ms(api.clock.ms - 1)
    body = await reject(api, "owner", revise(first, c, title="Earlier"), 422,
                        "TIMESTAMP_BEFORE_PREVIOUS", authored_at=earlier)
    assert body["details"]["pointer"] == "/record/authored_at"
    await admitted(api, api.envelope("owner", revise(first, c, title="Same ms"), t))


# --- order of the checks (PROTOCOL §4) ----------------------------------------------------------


async def test_state_rules_come_before_timestamp_rules(api: Api) -> None:
    future = format_ms(api.clock.ms + 3_600_000)
    await reject(api, "owner", space("S", "f" * 64), 422, "LINK_TARGET_MISSING",
                 authored_at=future)
    c = await accept(api, "owner", claim())
    await reject(api, "owner", vote(c, "7"), 422, "SCHEMA_VIOLATION", authored_at=future)
