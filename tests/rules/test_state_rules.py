"""Every sentence of the contract's ``write_contract.state_rules`` and the timestamp rules of
PROTOCOL §4, proven on the rules alone (``admission.prepare`` + ``admission.decide`` on an
in-memory ledger, ``tests/support/rules.py``): for each, an accepted and a refused case,
asserting the status and error code the HTTP app answers, the same verdict before storing (a
dry run) and that a refusal stored nothing.  The HTTP app's answer for each status a rule can
give is ``tests/rules/test_state_rules_http.py``; the same verdicts through the real storage
on both backends are ``tests/rules/test_vectors.py`` and ``tests/rules/test_differential.py``."""

from __future__ import annotations

from typing import Any

import pytest

from alexandria.core.timestamps import format_ms
from alexandria.rules.state import MAX_DEPTH
from alexandria.service.bootstrap import Founding
from tests.support.admission import (
    assessment,
    claim,
    discussion,
    document,
    evidence,
    link,
    proposal,
    relationship,
    reply,
    revise,
    space,
    vote,
)
from tests.support.library import CONTRACT, Clock
from tests.support.rules import RulesLedger

RULES = CONTRACT["write_contract"]["state_rules"]


def rule(start: str) -> str:
    """The contract's sentence group that a test proves (fails loudly if the contract changes)."""
    found = [r for r in RULES if r.startswith(start)]
    assert len(found) == 1, start
    return str(found[0])


@pytest.fixture
def lib(founding: Founding, clock: Clock) -> RulesLedger:
    return RulesLedger(founding, clock)


# --- "All link targets must already exist. A reply uses one replies_to or answers link; a
# --- discussion may use one branches_from link ... and one about link ... Preserve kind and
# --- discussion parent on revisions."


def test_link_targets_must_exist(lib: RulesLedger) -> None:
    rule("All link targets must already exist.")
    root = lib.accept("owner", space())
    missing = "f" * 64
    for content in (space("Sub", missing), claim(None, link("cites", missing)),
                    discussion(link("about", missing)), vote(missing),
                    evidence(missing)):
        body = lib.reject("owner", content, 422, "LINK_TARGET_MISSING")
        assert body["details"]["target"] == missing
    lib.accept("owner", claim(root, link("cites", root)), dry_run=True)


def test_a_reply_uses_exactly_one_replies_to_or_answers_link(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    d = lib.accept("peer", discussion(link("about", c)))
    r1 = lib.accept("owner", reply(link("replies_to", d)), dry_run=True)
    lib.accept("peer", reply(link("answers", r1)), dry_run=True)
    lib.reject("owner", reply(), 422, "REPLY_PARENT")
    lib.reject("owner", reply(link("cites", d)), 422, "REPLY_PARENT")
    lib.reject("owner", reply(link("replies_to", d), link("answers", r1)), 422,
                 "REPLY_PARENT")
    lib.reject("owner", reply(link("replies_to", d), link("replies_to", r1)), 422,
                 "REPLY_PARENT")
    body = lib.reject("owner", reply(link("replies_to", c)), 422, "LINK_TARGET_KIND")
    assert body["details"] == {"pointer": "/record/links/0/target",
                               "allowed": ["discussion", "reply"], "actual": "claim"}
    for kind_content in (discussion(link("replies_to", d)), claim(None, link("answers", d))):
        lib.reject("owner", kind_content, 422, "RELATION_NOT_ALLOWED")


def test_a_discussion_branches_from_one_discussion_or_reply(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    d = lib.accept("peer", discussion())
    r = lib.accept("owner", reply(link("replies_to", d)))
    lib.accept("peer", discussion(link("branches_from", d)), dry_run=True)
    lib.accept("peer", discussion(link("branches_from", r), link("about", c)))
    lib.reject("peer", discussion(link("branches_from", c)), 422, "LINK_TARGET_KIND")
    body = lib.reject("peer", discussion(link("branches_from", d),
                                                link("branches_from", r)), 422, "TOO_MANY_LINKS")
    assert body["details"]["relation"] == "branches_from"
    lib.reject("peer", claim(None, link("branches_from", d)), 422,
                 "RELATION_NOT_ALLOWED")


def test_a_discussion_is_about_one_claim_or_space(lib: RulesLedger) -> None:
    s = lib.accept("owner", space())
    c = lib.accept("owner", claim(s))
    doc = lib.accept("owner", document(s))
    lib.accept("peer", discussion(link("about", c)), dry_run=True)
    lib.accept("peer", discussion(link("about", s), link("contained_in", s)))
    lib.reject("peer", discussion(link("about", doc)), 422, "LINK_TARGET_KIND")
    lib.reject("peer", discussion(link("about", c), link("about", s)), 422,
                 "TOO_MANY_LINKS")
    lib.reject("peer", document(None, link("about", c)), 422, "RELATION_NOT_ALLOWED")


def test_revisions_preserve_kind_and_discussion_parent(lib: RulesLedger) -> None:
    c1 = lib.accept("owner", claim())
    c2 = lib.accept("owner", claim(title="Other"))
    first = discussion(link("about", c1))
    d = lib.accept("peer", first)
    body = lib.reject("peer", revise(first, d, kind="document", body={"text": "t"},
                                            links=[]), 422, "KIND_CHANGED")
    assert body["details"]["expected"] == "discussion"
    for links in ([link("about", c2)], [], [link("about", c1), link("branches_from", d)]):
        body = lib.reject("peer", revise(first, d, links=links), 422, "PARENTAGE_CHANGED")
        assert body["details"]["expected"] == [link("about", c1)]
    # citations are not parentage: they may change
    d2 = lib.accept("peer", revise(first, d, links=[link("about", c1), link("cites", c2)]),
                      dry_run=True)
    assert lib.head_of(d) == d2
    r = lib.accept("owner", reply(link("replies_to", d)))
    lib.reject("owner", revise(reply(link("replies_to", d)), r,
                                      links=[link("replies_to", d2)]), 422, "PARENTAGE_CHANGED")
    lib.reject("owner", revise(reply(link("replies_to", d)), r,
                                      links=[link("answers", d)]), 422, "PARENTAGE_CHANGED")
    lib.accept("owner", revise(reply(link("replies_to", d)), r, body="Edited."))


# --- "previous is empty for new roots; revisions require the original author and current head.
# --- Votes target a non-vote root; one vote per identity and target, changed by revising..."


def test_revisions_require_the_original_author_and_the_current_head(lib: RulesLedger) -> None:
    rule("previous is empty for new roots;")
    first = claim()
    c = lib.accept("owner", first)
    body = lib.reject("peer", revise(first, c, title="Mine now"), 422,
                        "NOT_ORIGINAL_AUTHOR")
    assert body["details"]["author"] == lib.founding.participants["owner"].actor
    lib.reject("owner", revise(first, "e" * 64), 422, "PREVIOUS_MISSING")
    c2 = lib.accept("owner", revise(first, c, title="Second"), dry_run=True)
    body = lib.reject("owner", revise(first, c, title="Stale"), 409, "HEAD_CONFLICT")
    assert body["details"] == {"head": c2, "root": c}
    c3 = lib.accept("owner", revise(first, c2, title="Third"))
    assert lib.head_of(c) == c3
    assert lib.record(c2)["root"] == c


def test_votes_target_a_non_vote_root(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    c2 = lib.accept("owner", revise(claim(), c, title="Revised"))
    v = lib.accept("peer", vote(c, "1"), dry_run=True)
    lib.reject("owner", vote(v, "1"), 422, "LINK_TARGET_KIND")
    body = lib.reject("owner", vote(c2, "1"), 422, "LINK_TARGET_KIND")
    assert body["details"]["root"] == c
    lib.reject("owner", vote(c, "1", link("cites", c)), 422, "RELATION_NOT_ALLOWED")
    lib.reject("owner", vote(c, "1", link("votes_on", c)), 422, "LINKS_NOT_EXACT")
    lib.reject("owner", {**vote(c), "links": []}, 422, "LINKS_NOT_EXACT")
    lib.reject("owner", claim(None, link("votes_on", c)), 422, "RELATION_NOT_ALLOWED")
    for value in ("2", "+1", "", "up"):
        lib.reject("owner", vote(c, value), 422, "SCHEMA_VIOLATION")
    for value in ("-1", "0"):
        lib.accept("owner", vote(lib.accept("owner", space(value)), value))


def test_one_vote_per_identity_and_target_changed_by_revising_it(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    d = lib.accept("owner", claim(title="Another"))
    first = vote(c, "1")
    v = lib.accept("peer", first)
    body = lib.reject("peer", vote(c, "-1"), 409, "DUPLICATE_VOTE")
    assert body["details"] == {"head": v, "root": v}
    lib.accept("owner", vote(c, "1"), dry_run=True)  # another identity
    lib.accept("peer", vote(d, "1"))  # another target
    v2 = lib.accept("peer", revise(first, v, body="-1"), dry_run=True)
    body = lib.reject("peer", vote(c, "0"), 409, "DUPLICATE_VOTE")
    assert body["details"] == {"head": v2, "root": v}
    lib.reject("peer", revise(first, v2, links=[link("votes_on", d)]), 422,
                 "VOTE_TARGET_CHANGED")
    lib.reject("owner", revise(first, v2, body="0"), 422, "NOT_ORIGINAL_AUTHOR")
    lib.accept("peer", revise(first, v2, body="0"))


# --- "Evidence, assessments, relationships and proposals are immutable ... Their links must be
# --- exactly evidence_for(claim), assesses(claim), relates_from(from) plus relates_to(to), or
# --- proposes_for(base), respectively."


def test_evidence_assessment_relationship_and_proposal_are_immutable(lib: RulesLedger) -> None:
    rule("Evidence, assessments, relationships and proposals are immutable;")
    s = lib.accept("owner", space())
    c = lib.accept("owner", claim(s))
    doc = lib.accept("owner", document(s))
    contents = {
        "evidence": evidence(c),
        "relationship": relationship(c, doc),
        "proposal": proposal(c, "Better", {"statement": "s", "scope": "t", "assumptions": []},
                             [link("contained_in", s)]),
    }
    ids = {kind: lib.accept("peer", content) for kind, content in contents.items()}
    contents["assessment"] = assessment(c, [ids["evidence"]])
    ids["assessment"] = lib.accept("peer", contents["assessment"])
    for kind, content in contents.items():
        body = lib.reject("peer", revise(content, ids[kind], title="Edited"), 422,
                            "IMMUTABLE")
        assert body["details"]["pointer"] == "/record/previous", kind
    # publishing a new one instead is how they change
    lib.accept("peer", {**contents["evidence"], "title": "New evidence"}, dry_run=True)


def test_evidence_links_exactly_evidence_for_its_claim(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    c2 = lib.accept("owner", claim(title="Second"))
    doc = lib.accept("owner", document())
    lib.accept("peer", evidence(c), dry_run=True)
    twice = [link("evidence_for", c), link("evidence_for", c)]
    for links in ([], [link("evidence_for", c2)], twice):
        body = lib.reject("peer", evidence(c, links=links), 422, "LINKS_NOT_EXACT")
        assert body["details"]["expected"] == [link("evidence_for", c)]
    lib.reject("peer", evidence(c, links=[link("evidence_for", c), link("cites", c2)]),
                 422, "RELATION_NOT_ALLOWED")
    lib.reject("peer", evidence(doc), 422, "LINK_TARGET_KIND")
    lib.reject("peer", evidence(c, links=[link("contained_in", c)]), 422,
                 "RELATION_NOT_ALLOWED")


def test_assessment_links_exactly_assesses_its_claim(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    doc = lib.accept("owner", document())
    lib.accept("peer", assessment(c, [], "open"), dry_run=True)
    for links in ([], [link("assesses", doc)], [link("assesses", c), link("assesses", c)]):
        lib.reject("peer", assessment(c, [], "open", links=links), 422, "LINKS_NOT_EXACT")
    lib.reject("peer", assessment(c, [], "open", links=[link("assesses", c),
                                                                link("cites", doc)]),
                 422, "RELATION_NOT_ALLOWED")
    lib.reject("peer", assessment(doc, [], "open"), 422, "LINK_TARGET_KIND")


def test_relationship_links_exactly_relates_from_and_relates_to(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    doc = lib.accept("owner", document())
    lib.accept("peer", relationship(c, doc), dry_run=True)
    lib.accept("peer", relationship(c, doc, links=[link("relates_to", doc),
                                                           link("relates_from", c)]))
    for links in ([link("relates_from", c)], [link("relates_from", doc), link("relates_to", c)],
                  [link("relates_from", c), link("relates_to", doc), link("relates_to", c)]):
        lib.reject("peer", relationship(c, doc, links=links), 422, "LINKS_NOT_EXACT")
    v = lib.accept("peer", vote(c))
    lib.reject("peer", relationship(c, v), 422, "LINK_TARGET_KIND")
    lib.reject("peer", claim(None, link("relates_to", doc)), 422, "RELATION_NOT_ALLOWED")


def test_proposal_links_exactly_proposes_for_its_base(lib: RulesLedger) -> None:
    s = lib.accept("owner", space())
    c = lib.accept("owner", claim(s))
    other = lib.accept("owner", claim(s, title="Other"))
    d = lib.accept("peer", discussion(link("about", c)))
    body = {"statement": "s", "scope": "t", "assumptions": []}
    keep = [link("contained_in", s)]
    lib.accept("peer", proposal(c, "T", body, keep), dry_run=True)
    lib.reject("peer", proposal(c, "T", body, keep, proposes_for=other), 422,
                 "LINKS_NOT_EXACT")
    lib.reject("peer", {**proposal(c, "T", body, keep), "links": []}, 422,
                 "LINKS_NOT_EXACT")
    out = lib.reject("peer", proposal(d, "T", {"text": "x"}, []), 422, "LINK_TARGET_KIND")
    assert out["details"]["allowed"] == ["claim", "document", "space"]


# --- "Assessment evidence must concern the same exact claim revision; non-open verdicts require
# --- evidence, with no duplicates."


def test_assessment_evidence_concerns_the_same_claim_revision(lib: RulesLedger) -> None:
    rule("Assessment evidence must concern the same exact claim revision;")
    first = claim()
    c = lib.accept("owner", first)
    e1 = lib.accept("peer", evidence(c))
    c2 = lib.accept("owner", revise(first, c, title="Revised"))
    e2 = lib.accept("peer", evidence(c2))
    lib.accept("owner", assessment(c2, [e2]), dry_run=True)
    body = lib.reject("owner", assessment(c2, [e2, e1]), 422, "EVIDENCE_OTHER_CLAIM")
    assert body["details"]["pointer"] == "/body/evidence/1"
    lib.reject("owner", assessment(c2, ["d" * 64]), 422, "EVIDENCE_MISSING")
    lib.reject("owner", assessment(c2, [c2]), 422, "EVIDENCE_MISSING")


def test_non_open_verdicts_require_evidence_without_duplicates(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    e = lib.accept("peer", evidence(c))
    e2 = lib.accept("peer", {**evidence(c), "title": "More evidence"})
    lib.accept("owner", assessment(c, [], "open"), dry_run=True)
    lib.accept("owner", assessment(c, [e], "open"))
    for verdict in ("supported", "disputed", "accepted", "refuted"):
        body = lib.reject("owner", assessment(c, [], verdict), 422, "EVIDENCE_REQUIRED")
        assert body["details"]["pointer"] == "/body/evidence"
        lib.accept("owner", assessment(c, [e, e2], verdict))
    # duplicates: the schema's uniqueItems already refuses them
    body = lib.reject("owner", assessment(c, [e, e], "refuted"), 422, "SCHEMA_VIOLATION")
    assert body["details"]["pointer"] == "/body/evidence"


# --- "Spaces, discussions, claims and documents may carry one contained_in link to an existing
# --- space root, nested at most 64 deep. Parentage cannot change on revision; ..."


def test_contained_in_targets_one_existing_space_root(lib: RulesLedger) -> None:
    rule("Spaces, discussions, claims and documents may carry one contained_in link")
    first = space()
    s = lib.accept("owner", first)
    s_rev = lib.accept("owner", revise(first, s, title="Renamed"))
    other = lib.accept("owner", space("Other"))
    c = lib.accept("owner", claim(s))
    for content in (space("Sub", s), discussion(link("contained_in", s)), claim(s), document(s)):
        lib.accept("peer", content, dry_run=True)
    body = lib.reject("peer", claim(s_rev), 422, "LINK_TARGET_NOT_ROOT")
    assert body["details"]["root"] == s
    lib.reject("peer", claim(c), 422, "LINK_TARGET_KIND")
    lib.reject("peer", claim(s, link("contained_in", other)), 422, "TOO_MANY_LINKS")
    d = lib.accept("peer", discussion())
    for content in (reply(link("replies_to", d), link("contained_in", s)),
                    evidence(c, links=[link("evidence_for", c), link("contained_in", s)]),
                    vote(c, "1", link("contained_in", s))):
        lib.reject("peer", content, 422, "RELATION_NOT_ALLOWED")


def test_containment_is_nested_at_most_64_deep(lib: RulesLedger) -> None:
    parent = lib.accept("owner", space("Level 0"))
    for depth in range(1, MAX_DEPTH + 1):
        parent = str(lib.admitted(lib.envelope("owner", space(f"Level {depth}", parent)))["id"])
    # ``parent`` is nested 64 deep: a claim inside it would be the 65th level
    body = lib.reject("owner", claim(parent), 422, "TOO_DEEP")
    assert body["details"]["limit"] == MAX_DEPTH == 64
    lib.reject("owner", space("Level 65", parent), 422, "TOO_DEEP")
    grandparent = lib.record(parent)
    up = grandparent["record"]["links"][0]["target"]
    lib.accept("owner", claim(up), dry_run=True)  # the 64th level is fine


def test_parentage_cannot_change_on_revision(lib: RulesLedger) -> None:
    s = lib.accept("owner", space())
    t = lib.accept("owner", space("T"))
    for first in (space("Child", s), claim(s), document(s)):
        rev = lib.accept("owner", first)
        for links in ([], [link("contained_in", t)]):
            lib.reject("owner", revise(first, rev, links=links), 422, "PARENTAGE_CHANGED")
        lib.accept("owner", revise(first, rev, title="Same parent"), dry_run=True)
    orphan = claim()
    o = lib.accept("owner", orphan)
    lib.reject("owner", revise(orphan, o, links=[link("contained_in", s)]), 422,
                 "PARENTAGE_CHANGED")


# --- "Only spaces use includes links, each to a unique claim or document, without copying it."


def test_only_spaces_include_unique_claims_or_documents(lib: RulesLedger) -> None:
    rule("Only spaces use includes links")
    first = claim()
    c = lib.accept("owner", first)
    c2 = lib.accept("owner", revise(first, c, title="Revised"))
    doc = lib.accept("peer", document())
    d = lib.accept("peer", discussion())
    s = lib.accept("owner", space("Shelf", None, link("includes", c), link("includes", doc)),
                     dry_run=True)
    included = lib.record(s)
    assert included["record"]["links"] == [link("includes", c), link("includes", doc)]
    body = lib.reject("owner", space("Twice", None, link("includes", c),
                                            link("includes", c)), 422, "DUPLICATE_INCLUDE")
    assert body["details"]["pointer"] == "/record/links"
    # two revisions of one claim are still one claim
    lib.reject("owner", space("Twice", None, link("includes", c), link("includes", c2)),
                 422, "DUPLICATE_INCLUDE")
    lib.reject("owner", space("Bad", None, link("includes", d)), 422, "LINK_TARGET_KIND")
    for kind_content in (claim(None, link("includes", doc)), document(None, link("includes", c)),
                         discussion(link("includes", c))):
        lib.reject("owner", kind_content, 422, "RELATION_NOT_ALLOWED")
    # includes are not parentage: a revision may change them
    lib.accept("owner", revise(space("Shelf", None, link("includes", c2)), s))


# --- "A proposal pins the current head of a space, claim or document. Only the target author
# --- accepts it: same kind, previous=base, exactly the proposed title, body and links, plus one
# --- merges link to the proposal. Stale bases require a new proposal."


def _proposed(lib: RulesLedger) -> tuple[dict[str, Any], str, str, str, dict[str, Any]]:
    s = lib.accept("owner", space())
    base_content = claim(s)
    c = lib.accept("owner", base_content)
    body = {"statement": "One plus one equals two", "scope": "Peano", "assumptions": ["succ"]}
    p_content = proposal(c, "Proposed", body, [link("contained_in", s), link("cites", s)])
    p = lib.accept("peer", p_content)
    merge = {"kind": "claim", "title": "Proposed", "body": body,
             "links": [link("contained_in", s), link("cites", s), link("merges", p)],
             "previous": c}
    return base_content, s, c, p, merge


def test_a_proposal_pins_the_current_head(lib: RulesLedger) -> None:
    rule("A proposal pins the current head of a space, claim or document.")
    base_content, s, c, _p, _merge = _proposed(lib)
    c2 = lib.accept("owner", revise(base_content, c, title="Moved on"))
    stale = proposal(c, "T", {"statement": "s", "scope": "t", "assumptions": []},
                     [link("contained_in", s)])
    body = lib.reject("peer", stale, 409, "STALE_BASE")
    assert body["details"] == {"head": c2, "root": c}
    fresh = proposal(c2, "T", {"statement": "s", "scope": "t", "assumptions": []},
                     [link("contained_in", s)])
    lib.accept("peer", fresh, dry_run=True)
    sp = lib.accept("owner", space("Other"))
    lib.accept("peer", proposal(sp, "Space", {"summary": "New"}, []))


def test_proposed_content_must_be_valid_for_the_base(lib: RulesLedger) -> None:
    _base, s, c, _p, _merge = _proposed(lib)
    keep = [link("contained_in", s)]
    body = lib.reject("peer", proposal(c, "T", {"statement": "s"}, keep), 422,
                        "PROPOSAL_INVALID")
    assert body["details"]["pointer"].startswith("/body")
    lib.reject("peer", proposal(c, "T", {"text": "a document body"}, keep), 422,
                 "PROPOSAL_INVALID")
    good = {"statement": "s", "scope": "t", "assumptions": []}
    lib.reject("peer", proposal(c, "T", good, []), 422, "PARENTAGE_CHANGED")
    lib.reject("peer", proposal(c, "T", good, [*keep, link("merges", c)]), 422,
                 "RELATION_NOT_ALLOWED")
    lib.reject("peer", proposal(c, "   ", good, keep), 422, "SCHEMA_VIOLATION")
    body = lib.reject("peer", proposal(c, "T", good, [*keep, link("cites", "9" * 64)]),
                        422, "LINK_TARGET_MISSING")
    assert body["details"]["pointer"] == "/body/links/1/target"
    # links the base's kind may not carry would make a proposal nobody could merge
    body = lib.reject("peer", proposal(c, "T", good, [*keep, link("includes", c)]), 422,
                        "RELATION_NOT_ALLOWED")
    assert body["details"]["pointer"] == "/body/links/1/relation"
    d = lib.accept("owner", {"kind": "discussion", "title": "Talk",
                                    "body": {"text": "About it"}, "links": [], "previous": ""})
    body = lib.reject("peer", proposal(s, "S", {"summary": "s"}, [link("includes", d)]),
                        422, "LINK_TARGET_KIND")
    assert body["details"]["pointer"] == "/body/links/0/target"
    lib.reject("peer", proposal(s, "S", {"summary": "s"},
                                       [link("includes", c), link("includes", c)]),
                 422, "DUPLICATE_INCLUDE")
    lib.accept("peer", proposal(s, "S", {"summary": "s"}, [link("includes", c)]),
                 dry_run=True)


def test_only_the_target_author_merges_exactly_the_proposal(lib: RulesLedger) -> None:
    _base, s, c, p, merge = _proposed(lib)
    lib.reject("peer", merge, 422, "NOT_ORIGINAL_AUTHOR")
    for changed in ({"title": "Other title"},
                    {"body": {**merge["body"], "scope": "Other"}},
                    {"links": [link("contained_in", s), link("merges", p)]},
                    {"links": [link("cites", s), link("contained_in", s), link("merges", p)]}):
        body = lib.reject("owner", {**merge, **changed}, 422, "MERGE_MISMATCH")
        assert body["details"]["pointer"] == "/record"
    lib.reject("owner", {**merge, "links": [link("contained_in", s), link("merges", p),
                                                   link("cites", s)]}, 422, "MERGE_LINKS")
    lib.reject("owner", {**merge, "links": [*merge["links"], link("merges", p)]}, 422,
                 "TOO_MANY_LINKS")
    lib.reject("owner", {**merge, "links": [*merge["links"][:2], link("merges", c)]}, 422,
                 "LINK_TARGET_KIND")
    lib.reject("owner", {**merge, "previous": ""}, 422, "RELATION_NOT_ALLOWED")
    merged = lib.accept("owner", merge, dry_run=True)
    assert lib.head_of(c) == merged
    # the same proposal cannot be merged again: its base is no longer the head
    body = lib.reject("owner", merge, 409, "STALE_BASE")
    assert body["details"]["head"] == merged


def test_a_merge_revises_the_proposals_base(lib: RulesLedger) -> None:
    base_content, s, c, p, merge = _proposed(lib)
    c2 = lib.accept("owner", revise(base_content, c, title="Moved on"))
    # previous = the current head, but the proposal was for the older base
    body = lib.reject("owner", {**merge, "previous": c2}, 422, "MERGE_BASE")
    assert body["details"]["expected"] == c
    # previous = the proposal's base, which is no longer the head: stale
    body = lib.reject("owner", merge, 409, "STALE_BASE")
    assert body["details"]["head"] == c2
    other = lib.accept("owner", claim(s, title="Other"))
    lib.reject("owner", {**merge, "previous": other}, 422, "MERGE_BASE")
    doc = lib.accept("owner", document(s))
    lib.reject("owner", {"kind": "document", "title": "Proposed",
                                "body": {"text": "t"}, "previous": doc,
                                "links": [link("contained_in", s), link("merges", p)]}, 422,
                 "MERGE_BASE")


# --- "Sources require HTTPS without credentials; times and digests are author assertions ..."


def source(**fields: Any) -> dict[str, Any]:
    return {"label": "Source", "url": "https://example.org/paper", **fields}


def test_sources_require_https_without_credentials(lib: RulesLedger) -> None:
    rule("Sources require HTTPS without credentials;")
    c = lib.accept("owner", claim())
    full = source(excerpt="quoted", locator="p. 3", retrieved_at="2026-05-01T12:00:00Z",
                  digest="0" * 64, archive_url="https://archive.example.org/x")
    reproducibility: dict[str, Any] = {
        "status": "claimed", "environment": "e", "inputs": "i", "outputs": "o",
        "artifacts": [{"label": "a", "url": "https://example.org/a", "digest": "1" * 64}],
    }
    lib.accept("peer", evidence(c, sources=[full], reproducibility=reproducibility),
                 dry_run=True)
    lib.accept("peer", evidence(c, sources=[source(url="https://[2001:db8::1]:8443/x")]))
    bad_urls = ["http://example.org/", "https://user:pass@example.org/", "https://user@example.org/",
                "https:///nohost", "https://", "https://example.org/a b", "https://example.org/\n",
                "ftp://example.org/", "HTTPS://example.org/", "https://exa mple.org/",
                "https://example.org:99999/", "//example.org/", "https://é.example/"]
    for url in bad_urls:
        body = lib.reject("peer", evidence(c, sources=[source(url=url)]), 422,
                            "SCHEMA_VIOLATION")
        assert body["details"]["pointer"] == "/body/sources/0/url", url
        body = lib.reject("peer", evidence(c, sources=[source(archive_url=url)]), 422,
                            "SCHEMA_VIOLATION")
        assert body["details"]["pointer"] == "/body/sources/0/archive_url", url
    artifact = reproducibility["artifacts"][0]
    body = lib.reject("peer", evidence(c, reproducibility={
        **reproducibility, "artifacts": [{**artifact, "url": "https://u:p@example.org/"}]}), 422,
        "SCHEMA_VIOLATION")
    assert body["details"]["pointer"] == "/body/reproducibility/artifacts/0/url"


def test_source_times_are_utc_ending_in_z(lib: RulesLedger) -> None:
    c = lib.accept("owner", claim())
    for stamp in ("2026-05-01T12:00:00Z", "2026-05-01T12:00:00.123456Z"):
        lib.accept("peer", evidence(c, sources=[source(retrieved_at=stamp)]), dry_run=True)
    for stamp in ("2026-05-01T12:00:00+00:00", "2026-05-01T12:00:00", "2026-05-01",
                  "2026-05-01T12:00:00z", "2026-02-30T12:00:00Z", "2026-05-01T12:00:00Z\n"):
        body = lib.reject("peer", evidence(c, sources=[source(retrieved_at=stamp)]), 422,
                            "SCHEMA_VIOLATION")
        assert body["details"]["pointer"] == "/body/sources/0/retrieved_at", stamp
    lib.reject("peer", evidence(c, sources=[source(digest="A" * 64)]), 422,
                 "SCHEMA_VIOLATION")


# --- free citations (PROTOCOL §3) --------------------------------------------------------------


def test_free_citations_on_the_kinds_that_may_cite(lib: RulesLedger) -> None:
    s = lib.accept("owner", space())
    c = lib.accept("owner", claim(s))
    d = lib.accept("peer", discussion(link("about", c)))
    cite = link("see-also_2", c)
    for content in (space("S", None, cite), discussion(cite), claim(None, cite),
                    document(None, cite), reply(link("replies_to", d), cite)):
        lib.accept("peer", content, dry_run=True)
    lib.reject("peer", evidence(c, links=[link("evidence_for", c), cite]), 422,
                 "RELATION_NOT_ALLOWED")
    lib.reject("peer", vote(c, "1", cite), 422, "RELATION_NOT_ALLOWED")
    lib.reject("peer", claim(None, link("Cites", c)), 422, "SCHEMA_VIOLATION")


# --- timestamp rules (PROTOCOL §4) --------------------------------------------------------------


def test_authored_at_at_most_60_seconds_ahead(lib: RulesLedger) -> None:
    now = lib.clock.ms
    body = lib.reject("owner", space("Early"), 422, "TIMESTAMP_IN_FUTURE",
                        authored_at=format_ms(now + 60_001))
    assert body["details"]["pointer"] == "/record/authored_at"
    env = lib.envelope("owner", space("Just in time"), format_ms(now + 60_000))
    lib.admitted(env)


def test_authored_at_inside_the_worker_certificate_window(lib: RulesLedger) -> None:
    f = lib.founding
    late = f.enroll("late", not_before="2026-05-01T00:00:00.000Z",
                    not_after="2027-01-01T00:00:00.000Z")
    before = late.envelope(f.genesis, space(), "2026-04-30T23:59:59.999Z")
    lib.refused(before, 422, "TIMESTAMP_OUTSIDE_CERTIFICATE")
    lib.admitted(late.envelope(f.genesis, space(), "2026-05-01T00:00:00.000Z"))


def test_authored_at_not_before_the_previous_revision(lib: RulesLedger) -> None:
    first = claim()
    t = lib.clock.tick()
    c = str((lib.admitted(lib.envelope("owner", first, t)))["id"])
    earlier = format_ms(lib.clock.ms - 1)
    body = lib.reject("owner", revise(first, c, title="Earlier"), 422,
                        "TIMESTAMP_BEFORE_PREVIOUS", authored_at=earlier)
    assert body["details"]["pointer"] == "/record/authored_at"
    lib.admitted(lib.envelope("owner", revise(first, c, title="Same ms"), t))


# --- order of the checks (PROTOCOL §4) ----------------------------------------------------------


def test_state_rules_come_before_timestamp_rules(lib: RulesLedger) -> None:
    future = format_ms(lib.clock.ms + 3_600_000)
    lib.reject("owner", space("S", "f" * 64), 422, "LINK_TARGET_MISSING",
                 authored_at=future)
    c = lib.accept("owner", claim())
    lib.reject("owner", vote(c, "7"), 422, "SCHEMA_VIOLATION", authored_at=future)
