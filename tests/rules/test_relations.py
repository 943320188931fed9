"""The relation rules the server enforces (``rules.state.RELATIONS``) against the contract that
states them (``contracts/alexandria-contract.json``, the copy shipped with the package): each
relation's row below quotes the contract's words for it, the quotation must stand in the
contract, and ``RELATIONS`` must be exactly this table.  What the contract leaves unsaid (the
name ``votes_on`` of "Votes target a non-vote root", the kinds a reply's link targets) is quoted
from the wire protocol's decisions (``docs/protocol.md``).  The contract's worked example obeys
the table link for link."""

from __future__ import annotations

import re
from typing import NamedTuple

import pytest

from alexandria.core.records import PUBLIC_KINDS
from alexandria.rules.state import CITING, RELATIONS, RULE_RELATIONS, allowed_links
from tests.support.library import CONTRACT, ROOT

STATE_RULES = " ".join(CONTRACT["write_contract"]["state_rules"])
PROTOCOL = " ".join((ROOT / "docs" / "protocol.md").read_text().split())
OBJECTS = frozenset(PUBLIC_KINDS) - {"vote"}
MERGEABLE = frozenset(("space", "claim", "document"))


class Row(NamedTuple):
    used_by: frozenset[str]
    targets: frozenset[str]
    count: str  # as ``allowed_links`` says it: "exactly 1", "at most 1" or "any"
    quoted: tuple[str, ...]  # the contract's words; "protocol: …" the protocol's


def row(used_by: set[str] | frozenset[str], targets: set[str] | frozenset[str], count: str,
        *quoted: str) -> Row:
    return Row(frozenset(used_by), frozenset(targets), count, quoted)


#: what the contract leaves to the protocol: the kinds a reply's link targets
REPLY_TARGETS = "protocol: a reply's `replies_to`/`answers`: a discussion or reply"

TABLE: dict[str, Row] = {
    "contained_in": row({"space", "discussion", "claim", "document"}, {"space"}, "at most 1",
                        "Spaces, discussions, claims and documents may carry one contained_in"
                        " link to an existing space root"),
    "includes": row({"space"}, {"claim", "document"}, "any",
                    "Only spaces use includes links, each to a unique claim or document"),
    "replies_to": row({"reply"}, {"discussion", "reply"}, "at most 1",
                      "A reply uses one replies_to or answers link", REPLY_TARGETS),
    "answers": row({"reply"}, {"discussion", "reply"}, "at most 1",
                   "A reply uses one replies_to or answers link", REPLY_TARGETS),
    "branches_from": row({"discussion"}, {"discussion", "reply"}, "at most 1",
                         "a discussion may use one branches_from link to a discussion or reply"),
    "about": row({"discussion"}, {"claim", "space"}, "at most 1",
                 "and one about link to a claim or space"),
    "merges": row(MERGEABLE, {"proposal"}, "at most 1",
                  "A proposal pins the current head of a space, claim or document",
                  "same kind, previous=base", "plus one merges link to the proposal"),
    "evidence_for": row({"evidence"}, {"claim"}, "exactly 1", "evidence_for(claim)"),
    "assesses": row({"assessment"}, {"claim"}, "exactly 1", "assesses(claim)"),
    "relates_from": row({"relationship"}, OBJECTS, "exactly 1", "relates_from(from)"),
    "relates_to": row({"relationship"}, OBJECTS, "exactly 1", "relates_to(to)"),
    "proposes_for": row({"proposal"}, MERGEABLE, "exactly 1", "or proposes_for(base)",
                        "A proposal pins the current head of a space, claim or document"),
    "votes_on": row({"vote"}, OBJECTS, "exactly 1", "Votes target a non-vote root",
                    "protocol: Votes carry exactly one link, relation `votes_on`, whose target"
                    " is the root id of a non-vote object"),
}


@pytest.mark.parametrize("relation", sorted(TABLE))
def test_each_relation_is_what_the_contract_says(relation: str) -> None:
    expected = TABLE[relation]
    for words in expected.quoted:
        source = PROTOCOL if words.startswith("protocol: ") else STATE_RULES
        words = words.removeprefix("protocol: ")
        assert words in source, f"{words!r} is no longer stated: update {relation}'s row"
    rule = RELATIONS[relation]
    assert rule.used_by == expected.used_by
    assert frozenset(rule.targets) == expected.targets
    assert rule.exactly == (expected.count == "exactly 1")
    assert rule.at_most == (None if expected.count == "any" else 1)


def test_the_relations_with_rules_are_the_contracts() -> None:
    assert set(RELATIONS) == set(TABLE) == RULE_RELATIONS
    named = {rel for rel in RULE_RELATIONS if re.search(rf"\b{rel}\b", STATE_RULES)}
    assert named == RULE_RELATIONS - {"votes_on"}
    listed = re.search(r"Relations with rules: ([a-z_, ]+)\.", PROTOCOL)
    assert listed is not None
    assert set(listed.group(1).split(", ")) == RULE_RELATIONS
    # the kinds that may cite freely are the ones the protocol names
    assert "(allowed on space, discussion, claim, document and reply)" in PROTOCOL
    assert {"space", "discussion", "claim", "document", "reply"} == CITING


@pytest.mark.parametrize("kind", sorted(PUBLIC_KINDS))
def test_what_a_refusal_says_a_kind_takes_is_the_table(kind: str) -> None:
    said = allowed_links(kind)
    takes = {e["relation"]: (frozenset(e["targets"]), e["count"]) for e in said["relations"]}
    expected = {rel: (r.targets, r.count) for rel, r in TABLE.items() if kind in r.used_by}
    if kind == "reply":  # one of the two, exactly
        expected = {rel: (t, "exactly 1 replies_to or answers link")
                    for rel, (t, _count) in expected.items()}
    assert takes == expected
    assert said["citations"] == (kind in CITING)


def test_the_worked_example_obeys_the_table() -> None:
    kinds: dict[str, str] = {}
    checked = 0
    for step in CONTRACT["object_examples"]["steps"]:
        content = step["content"]
        for lk in content["links"]:
            rule = TABLE.get(lk["relation"])
            if rule is None:
                continue
            target_kind = kinds[lk["target"].removeprefix("$")]
            assert content["kind"] in rule.used_by, (step["name"], lk)
            assert target_kind in rule.targets, (step["name"], lk)
            checked += 1
        kinds[step["name"]] = content["kind"]
    assert checked >= 12
