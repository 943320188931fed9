"""State rules: steps 8 and 9 of PROTOCOL §4, pure functions of (ledger state, record).

The checks of PROTOCOL §4 run in this order (``admission.decide`` runs them, one comment per
step); each failure is a typed error (PROTOCOL §6).  Steps 1–3 need no state and run in
``admission.prepare``; the rest run inside the storage's write transaction, against a
``view.StateView`` that only answers questions.

 0. exact retry: a record admitted before is answered as such (200)        — admission.py
 1. body size (413), envelope shape (400)                                  — records.py
 2. record shape: exact fields, known kind, genesis, formats, timestamp syntax, canonical
    body string, no floats, body length (422)                              — records.py
 3. worker certificate shape, genesis and authority signature (403)       — trust.py
 4. authority chain: record author is the certified actor; the authority key holds an
    admitted ``native-application`` certificate valid now and not revoked; the worker
    certificate is valid now and its key not revoked by root or its issuer (403)
                                                                           — authority.py
 5. proof: the worker's signature over JCS(record) (403)
 6. scope: the certificate's scopes grant the kind (403)                 — authority.py
 7. content schema of the write contract (422)                             — schema.py
 8. state rules of the write contract (422, conflicts 409), here, one function per kind:
    a. every link target exists;
    b. relations are used only by the kinds the contract gives them, with their target kinds:
       a reply has exactly one replies_to or answers link to a discussion or reply; a discussion
       at most one branches_from (discussion or reply) and one about (claim or space); spaces,
       discussions, claims and documents at most one contained_in, to a space root, nested at
       most 64 deep; only spaces use includes, each to a distinct claim or document; other
       relations are free citations, allowed on space, discussion, claim, document and reply;
    c. evidence, assessments, relationships and proposals are immutable and carry exactly
       evidence_for(claim), assesses(claim), relates_from(from) + relates_to(to) and
       proposes_for(base); assessment evidence concerns the same exact claim revision, and
       verdicts other than open need evidence;
    d. a vote carries exactly one votes_on link to the root of a non-vote object; one vote per
       actor and target (a second is 409), changed by revising that vote;
    e. a proposal pins the current head (409 when stale) of a space, claim or document, and
       what it proposes is valid content of that kind that keeps the object's parentage and
       whose links pass a and b as that kind's (so that its merge can be admitted);
    f. a revision names an existing previous of the same kind, by the original author; previous
       must be the current head (409); feed relations (parentage) do not change;
    g. a merge is a revision by the target author whose title, body and links are exactly the
       proposal's, followed by one merges link to the proposal, with previous = its base
       (409 STALE_BASE once the base is no longer the head);
 9. timestamp rules (422): authored_at at most 60 s ahead of the server clock, inside the
    worker certificate's window, and not before the previous revision's authored_at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from alexandria.core.records import PUBLIC_KINDS, Link, Record
from alexandria.core.schema import validate_content
from alexandria.core.trust import WorkerCertificate
from alexandria.errors import Conflict, Unprocessable
from alexandria.rules.view import RevisionFacts, StateView, Verdict

FEED_RELATIONS = (
    "contained_in", "replies_to", "answers", "branches_from", "about", "evidence_for",
    "assesses", "proposes_for",
)
RULE_RELATIONS = frozenset(
    (*FEED_RELATIONS, "includes", "relates_from", "relates_to", "merges", "votes_on")
)
CONTAINABLE = frozenset(("space", "discussion", "claim", "document"))
CITING = frozenset(("space", "discussion", "claim", "document", "reply"))
IMMUTABLE = frozenset(("evidence", "assessment", "relationship", "proposal"))
MERGEABLE = frozenset(("space", "claim", "document"))
MAX_DEPTH = 64
CLOCK_SKEW_MS = 60_000


class RuleViolation(Unprocessable):
    default_code = "STATE_RULE"


def _refuse(message: str, code: str, **details: Any) -> RuleViolation:
    return RuleViolation(message, code, **details)


# --- step 8 ----------------------------------------------------------------------------------


def _link_ptr(i: int) -> str:
    return f"/record/links/{i}"


def _feed(links: Sequence[Link]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((lk.relation, lk.target) for lk in links if lk.relation in FEED_RELATIONS))


def _exact_links(rec: Record, expected: list[tuple[str, str]]) -> None:
    got = sorted((lk.relation, lk.target) for lk in rec.links)
    if got != sorted(expected):
        raise _refuse(
            f"a {rec.kind} carries exactly the links {expected}", "LINKS_NOT_EXACT",
            pointer="/record/links", expected=[{"relation": r, "target": t} for r, t in expected],
        )


def _target_of_kind(
    targets: Mapping[str, RevisionFacts], links: Sequence[Link], i: int,
    allowed: frozenset[str] | tuple[str, ...], what: str, base: str,
) -> RevisionFacts:
    """The facts of link ``i``'s target, refused unless its kind is ``allowed``."""
    t = targets[links[i].target]
    if t.kind not in allowed:
        raise _refuse(
            f"{links[i].relation} must target {what}, not a {t.kind}", "LINK_TARGET_KIND",
            pointer=f"{base}/{i}/target", allowed=sorted(allowed), actual=t.kind,
        )
    return t


@dataclass(frozen=True)
class _Links:
    """What steps a and b learn about a list of links: their targets' facts, how many of each
    relation, and the depth of the containing space (-1: none)."""

    targets: dict[str, RevisionFacts]
    counts: dict[str, int]
    parent_depth: int


def _check_links(
    state: StateView, kind: str, links: Sequence[Link], revising: bool, base: str
) -> _Links:
    """Steps a and b for ``links`` as an object of ``kind`` carries them (``revising``: with a
    previous revision): a record's own links (``base`` = "/record/links") or the links a
    proposal proposes for its base (``base`` = "/body/links")."""
    targets: dict[str, RevisionFacts] = {}
    # a. every link target exists
    for i, lk in enumerate(links):
        found = state.revision(lk.target)
        if found is None:
            raise _refuse(
                f"link target {lk.target} does not exist", "LINK_TARGET_MISSING",
                pointer=f"{base}/{i}/target", target=lk.target,
            )
        targets[lk.target] = found

    def kind_of(i: int, allowed: frozenset[str] | tuple[str, ...], what: str) -> RevisionFacts:
        return _target_of_kind(targets, links, i, allowed, what, base)

    # b. relations by kind
    counts: dict[str, int] = {}
    parent_depth = -1
    for i, lk in enumerate(links):
        rel = lk.relation
        counts[rel] = counts.get(rel, 0) + 1
        at = f"{base}/{i}/relation"
        if rel not in RULE_RELATIONS:
            if kind not in CITING:
                raise _refuse(f"a {kind} carries no citation links", "RELATION_NOT_ALLOWED",
                              pointer=at, relation=rel)
            continue
        if rel == "contained_in":
            if kind not in CONTAINABLE:
                raise _refuse(f"a {kind} cannot be contained_in a space",
                              "RELATION_NOT_ALLOWED", pointer=at)
            t = kind_of(i, ("space",), "a space root")
            if t.id != t.root:
                raise _refuse("contained_in must target the root id of a space",
                              "LINK_TARGET_NOT_ROOT", pointer=f"{base}/{i}/target", root=t.root)
            parent = state.object(t.root)
            assert parent is not None
            parent_depth = parent.depth
        elif rel == "includes":
            if kind != "space":
                raise _refuse("only spaces use includes links", "RELATION_NOT_ALLOWED",
                              pointer=at)
            kind_of(i, ("claim", "document"), "a claim or document")
        elif rel in ("replies_to", "answers"):
            if kind != "reply":
                raise _refuse(f"only replies use {rel}", "RELATION_NOT_ALLOWED", pointer=at)
            kind_of(i, ("discussion", "reply"), "a discussion or reply")
        elif rel == "branches_from":
            if kind != "discussion":
                raise _refuse("only discussions use branches_from", "RELATION_NOT_ALLOWED",
                              pointer=at)
            kind_of(i, ("discussion", "reply"), "a discussion or reply")
        elif rel == "about":
            if kind != "discussion":
                raise _refuse("only discussions use about", "RELATION_NOT_ALLOWED", pointer=at)
            kind_of(i, ("claim", "space"), "a claim or space")
        elif rel == "merges":
            if kind not in MERGEABLE or not revising:
                raise _refuse("merges is only the last link of a revision of a space, claim"
                              " or document", "RELATION_NOT_ALLOWED", pointer=at)
            kind_of(i, ("proposal",), "a proposal")
        else:
            expected_kind = {
                "evidence_for": "evidence", "assesses": "assessment",
                "relates_from": "relationship", "relates_to": "relationship",
                "proposes_for": "proposal", "votes_on": "vote",
            }[rel]
            if kind != expected_kind:
                raise _refuse(f"only a {expected_kind} uses {rel}", "RELATION_NOT_ALLOWED",
                              pointer=at)

    for rel, most in (("contained_in", 1), ("branches_from", 1), ("about", 1), ("merges", 1)):
        if counts.get(rel, 0) > most:
            raise _refuse(f"at most {most} {rel} link", "TOO_MANY_LINKS", relation=rel)
    if kind == "reply" and counts.get("replies_to", 0) + counts.get("answers", 0) != 1:
        raise _refuse("a reply carries exactly one replies_to or answers link",
                      "REPLY_PARENT", pointer=base)
    # "each to a unique claim or document": two revisions of one claim are the same claim
    included = [targets[lk.target].root for lk in links if lk.relation == "includes"]
    if len(set(included)) != len(included):
        raise _refuse("each includes link targets a distinct claim or document",
                      "DUPLICATE_INCLUDE", pointer=base)
    if counts.get("merges") and links[-1].relation != "merges":
        raise _refuse("the merges link comes last", "MERGE_LINKS", pointer=base)
    if parent_depth + 1 > MAX_DEPTH:
        raise _refuse(f"containment is nested at most {MAX_DEPTH} deep", "TOO_DEEP",
                      limit=MAX_DEPTH)
    return _Links(targets, counts, parent_depth)


# c–e: the rules of each kind.  Each takes the record and what steps a and b learnt of its
# links, and returns the root the record votes on ("" for every kind but vote).

KindRule = Callable[[StateView, Record, _Links], str]


def _no_kind_rules(state: StateView, rec: Record, checked: _Links) -> str:
    """Spaces, discussions, claims, documents and replies: only the link rules (a, b), the
    revision rules (f, g) and the timestamps apply."""
    return ""


def _evidence(state: StateView, rec: Record, checked: _Links) -> str:
    """c. "Evidence, assessments, relationships and proposals are immutable; publish a new
    contribution rather than setting previous.  Their links must be exactly
    evidence_for(claim), …" — the one link is evidence_for the body's claim revision."""
    _exact_links(rec, [("evidence_for", rec.decoded_body["claim"])])
    _target_of_kind(checked.targets, rec.links, 0, ("claim",), "a claim", "/record/links")
    return ""


def _assessment(state: StateView, rec: Record, checked: _Links) -> str:
    """c. "Their links must be exactly … assesses(claim) …"; "Assessment evidence must concern
    the same exact claim revision; non-open verdicts require evidence, with no duplicates."
    """
    body = rec.decoded_body
    _exact_links(rec, [("assesses", body["claim"])])
    _target_of_kind(checked.targets, rec.links, 0, ("claim",), "a claim", "/record/links")
    evidence = body["evidence"]
    if len(set(evidence)) != len(evidence):
        raise _refuse("assessment evidence has duplicates", "DUPLICATE_EVIDENCE",
                      pointer="/body/evidence")
    if body["verdict"] != "open" and not evidence:
        raise _refuse(f"a {body['verdict']} verdict needs evidence", "EVIDENCE_REQUIRED",
                      pointer="/body/evidence")
    for j, ev in enumerate(evidence):
        e = state.revision(ev)
        if e is None or e.kind != "evidence":
            raise _refuse(f"evidence {ev} is not an admitted evidence revision",
                          "EVIDENCE_MISSING", pointer=f"/body/evidence/{j}")
        if e.decoded().get("claim") != body["claim"]:
            raise _refuse("evidence concerns another claim revision", "EVIDENCE_OTHER_CLAIM",
                          pointer=f"/body/evidence/{j}")
    return ""


def _relationship(state: StateView, rec: Record, checked: _Links) -> str:
    """c. "Their links must be exactly … relates_from(from) plus relates_to(to) …"; what a
    relationship connects are objects, never votes."""
    body = rec.decoded_body
    _exact_links(rec, [("relates_from", body["from"]), ("relates_to", body["to"])])
    for i, lk in enumerate(rec.links):
        if checked.targets[lk.target].kind == "vote":
            raise _refuse("relationships connect objects, not votes", "LINK_TARGET_KIND",
                          pointer=_link_ptr(i) + "/target")
    return ""


def _proposal(state: StateView, rec: Record, checked: _Links) -> str:
    """c, e. "Their links must be exactly … proposes_for(base)"; "A proposal pins the current
    head of a space, claim or document."  What it proposes must be mergeable: valid content
    of the base's kind, keeping its parentage, whose links pass a and b as that kind's."""
    body = rec.decoded_body
    _exact_links(rec, [("proposes_for", body["base"])])
    base = _target_of_kind(checked.targets, rec.links, 0, tuple(sorted(MERGEABLE)),
                           "a space, claim or document", "/record/links")
    _check_proposal(state, base, body)
    return ""


def _vote(state: StateView, rec: Record, checked: _Links) -> str:
    """d. "Votes target a non-vote root; one vote per identity and target, changed by
    revising the existing vote."  A second vote of one actor on one target is a conflict."""
    if len(rec.links) != 1 or rec.links[0].relation != "votes_on":
        raise _refuse("a vote carries exactly one votes_on link", "LINKS_NOT_EXACT",
                      pointer="/record/links")
    t = checked.targets[rec.links[0].target]
    if t.kind == "vote" or t.id != t.root:
        raise _refuse("a vote targets the root id of a non-vote object",
                      "LINK_TARGET_KIND", pointer="/record/links/0/target", root=t.root)
    if not rec.previous:
        existing = state.vote_of(rec.author, t.root)
        if existing is not None:
            raise Conflict(
                "this actor already voted on that target: revise that vote instead",
                "DUPLICATE_VOTE", head=existing.head, root=existing.root,
            )
    return t.root


KIND_RULES: Mapping[str, KindRule] = MappingProxyType({
    "space": _no_kind_rules,
    "discussion": _no_kind_rules,
    "claim": _no_kind_rules,
    "document": _no_kind_rules,
    "reply": _no_kind_rules,
    "evidence": _evidence,
    "assessment": _assessment,
    "relationship": _relationship,
    "proposal": _proposal,
    "vote": _vote,
})
assert set(KIND_RULES) == set(PUBLIC_KINDS)


def _revision(state: StateView, rec: Record, checked: _Links) -> tuple[str, int]:
    """f, g. "previous is empty for new roots; revisions require the original author and
    current head."  "Preserve kind and discussion parent on revisions"; "Parentage cannot
    change on revision"; a merge (a revision ending in a merges link): "Only the target
    author accepts it: same kind, previous=base, exactly the proposed title, body and links,
    plus one merges link to the proposal.  Stale bases require a new proposal."

    Returns the object's root and depth."""
    if not rec.previous:
        return rec.id, checked.parent_depth + 1
    prev = state.revision(rec.previous)
    if prev is None:
        raise _refuse(f"previous revision {rec.previous} does not exist", "PREVIOUS_MISSING",
                      pointer="/record/previous")
    obj = state.object(prev.root)
    assert obj is not None
    if obj.kind != rec.kind:
        raise _refuse(f"a revision keeps its kind ({obj.kind})", "KIND_CHANGED",
                      pointer="/record/kind", expected=obj.kind)
    if obj.author != rec.author:
        raise _refuse("only the original author revises an object", "NOT_ORIGINAL_AUTHOR",
                      pointer="/record/author", author=obj.author)
    merging = bool(checked.counts.get("merges"))
    if obj.head != rec.previous:
        if merging:
            raise Conflict("the proposal's base is no longer the current head: a stale base"
                           " needs a new proposal", "STALE_BASE", head=obj.head, root=obj.root)
        raise Conflict("previous is not the current head", "HEAD_CONFLICT",
                       head=obj.head, root=obj.root)
    if _feed(rec.links) != obj.feed_links:
        raise _refuse("feed relations (parentage) cannot change on revision",
                      "PARENTAGE_CHANGED", pointer="/record/links",
                      expected=[{"relation": r, "target": t} for r, t in obj.feed_links])
    if rec.kind == "vote":
        old = state.revision(obj.root)
        assert old is not None
        if old.links != rec.links:
            raise _refuse("a vote's revisions keep its target", "VOTE_TARGET_CHANGED",
                          pointer="/record/links/0/target")
    if merging:
        _check_merge(state, rec, checked.targets[rec.links[-1].target])
    return obj.root, obj.depth


def check_state(state: StateView, rec: Record, authority_sequence: int) -> Verdict:
    """Step 8, the write contract's ``state_rules``, in the order of the module docstring:
    the links (a, b), immutability (c), the rules of the record's kind (c–e,
    :data:`KIND_RULES`), then those of a revision (f, g).  Returns what storage needs."""
    # a, b
    checked = _check_links(state, rec.kind, rec.links, bool(rec.previous), "/record/links")
    # c
    if rec.kind in IMMUTABLE and rec.previous:
        raise _refuse(f"a {rec.kind} is immutable: publish a new one instead of setting previous",
                      "IMMUTABLE", pointer="/record/previous")
    # c–e
    vote_target = KIND_RULES[rec.kind](state, rec, checked)
    # f, g
    root, depth = _revision(state, rec, checked)
    feed_links = _feed(rec.links)
    targets = checked.targets
    return Verdict(
        id=rec.id, root=root, kind=rec.kind, author=rec.author, previous=rec.previous,
        depth=depth, vote_target=vote_target, feed_links=feed_links,
        parent_roots=tuple(sorted({targets[t].root for _r, t in feed_links})),
        link_roots=tuple(targets[lk.target].root for lk in rec.links),
        authority_sequence=authority_sequence,
    )


def _check_proposal(state: StateView, base: RevisionFacts, body: Mapping[str, Any]) -> None:
    obj = state.object(base.root)
    assert obj is not None
    if obj.head != base.id:
        raise Conflict("the proposal's base is not the current head: propose again on it",
                       "STALE_BASE", head=obj.head, root=obj.root)
    proposed = {
        "kind": base.kind, "title": body["title"], "body": body["body"],
        "links": list(body["links"]), "previous": base.id,
    }
    try:
        validate_content(proposed)
    except Unprocessable as exc:
        raise _refuse(f"the proposed content is not a valid {base.kind}: {exc.message}",
                      "PROPOSAL_INVALID", pointer="/body" + exc.details.get("pointer", "")) from exc
    links = [Link(lk["relation"], lk["target"]) for lk in body["links"]]
    if _feed(links) != obj.feed_links:
        raise _refuse("the proposed links change the object's parentage", "PARENTAGE_CHANGED",
                      pointer="/body/links")
    if any(lk.relation == "merges" for lk in links):
        raise _refuse("proposed links carry no merges link", "RELATION_NOT_ALLOWED",
                      pointer="/body/links")
    # links a revision of the base could not carry would make a proposal nobody can merge:
    # every target exists, and the base's kind may use each relation (rules a and b)
    _check_links(state, base.kind, links, True, "/body/links")


def _check_merge(state: StateView, rec: Record, proposal: RevisionFacts) -> None:
    p = proposal.decoded()
    if p["base"] != rec.previous:
        raise _refuse("a merge's previous is the proposal's base", "MERGE_BASE",
                      pointer="/record/previous", expected=p["base"])
    expected_links = [*p["links"], {"relation": "merges", "target": proposal.id}]
    if (
        rec.title != p["title"]
        or rec.decoded_body != p["body"]
        or list(rec.raw["links"]) != expected_links
    ):
        raise _refuse(
            "a merge carries exactly the proposed title, body and links, then one merges link",
            "MERGE_MISMATCH", pointer="/record",
        )


# --- step 9 ----------------------------------------------------------------------------------


def check_timestamps(
    state: StateView, rec: Record, cert: WorkerCertificate, now_ms: int
) -> None:
    """Step 9: authored_at at most 60 s ahead of the server clock, inside the worker
    certificate's window, and not before the previous revision's authored_at."""
    if rec.authored_ms > now_ms + CLOCK_SKEW_MS:
        raise _refuse("authored_at is more than 60 s ahead of the server clock",
                      "TIMESTAMP_IN_FUTURE", pointer="/record/authored_at")
    if not cert.valid_at(rec.authored_ms):
        raise _refuse("authored_at is outside the worker certificate's validity window",
                      "TIMESTAMP_OUTSIDE_CERTIFICATE", pointer="/record/authored_at")
    if rec.previous:
        prev = state.revision(rec.previous)
        if prev is not None and rec.authored_ms < prev.authored_ms:
            raise _refuse("authored_at is before the previous revision's",
                          "TIMESTAMP_BEFORE_PREVIOUS", pointer="/record/authored_at")
