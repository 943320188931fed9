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
from alexandria.errors import Conflict, Invalid
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


class RuleViolation(Invalid):
    default_code = "STATE_RULE"


def _refuse(message: str, code: str, **details: Any) -> RuleViolation:
    return RuleViolation(message, code, **details)


@dataclass(frozen=True)
class RelationRule:
    """Rule b for one relation of :data:`RULE_RELATIONS`: the kinds that carry it, the kinds
    it targets, how many one record carries (``at_most``; ``exactly`` for the links an
    immutable kind or a vote must carry), and whether only a revision carries it."""

    used_by: frozenset[str]
    targets: tuple[str, ...]
    what: str  # the targets, as the refusal says them
    at_most: int | None = None
    exactly: bool = False
    revision_only: bool = False


def _one_kind(kind: str, targets: tuple[str, ...], what: str) -> RelationRule:
    return RelationRule(frozenset((kind,)), targets, what, 1, exactly=True)


_OBJECTS = tuple(sorted(k for k in PUBLIC_KINDS if k != "vote"))

#: The write contract's relation rules (its ``state_rules``, "the links" of the module
#: docstring) as data: ``_check_links`` enforces this table and :func:`allowed_links` derives
#: from it what a refusal says each kind takes, so the two cannot drift apart.
RELATIONS: Mapping[str, RelationRule] = MappingProxyType({
    "contained_in": RelationRule(CONTAINABLE, ("space",), "a space root", 1),
    "includes": RelationRule(frozenset(("space",)), ("claim", "document"),
                             "a claim or document"),
    "replies_to": RelationRule(frozenset(("reply",)), ("discussion", "reply"),
                               "a discussion or reply", 1),
    "answers": RelationRule(frozenset(("reply",)), ("discussion", "reply"),
                            "a discussion or reply", 1),
    "branches_from": RelationRule(frozenset(("discussion",)), ("discussion", "reply"),
                                  "a discussion or reply", 1),
    "about": RelationRule(frozenset(("discussion",)), ("claim", "space"), "a claim or space", 1),
    "merges": RelationRule(MERGEABLE, ("proposal",), "a proposal", 1, revision_only=True),
    "evidence_for": _one_kind("evidence", ("claim",), "the body's claim"),
    "assesses": _one_kind("assessment", ("claim",), "the body's claim"),
    "relates_from": _one_kind("relationship", _OBJECTS, "the body's from"),
    "relates_to": _one_kind("relationship", _OBJECTS, "the body's to"),
    "proposes_for": _one_kind("proposal", tuple(sorted(MERGEABLE)), "the body's base"),
    "votes_on": _one_kind("vote", _OBJECTS, "the root of a non-vote object"),
})
assert set(RELATIONS) == RULE_RELATIONS


def _plural(kinds: Sequence[str]) -> str:
    names = ["replies" if k == "reply" else "evidence" if k == "evidence" else f"{k}s"
             for k in sorted(kinds)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def allowed_links(kind: str) -> dict[str, Any]:
    """What a ``kind`` may link, from :data:`RELATIONS` and :data:`CITING`: each relation it
    takes with the kinds it targets and how many (``"exactly 1"``, ``"at most 1"``, ``"any"``),
    and whether it also takes free citations (any other relation name, to any object)."""
    relations = []
    for rel, rule in RELATIONS.items():
        if kind not in rule.used_by:
            continue
        count = ("exactly 1" if rule.exactly else
                 "any" if rule.at_most is None else f"at most {rule.at_most}")
        entry: dict[str, Any] = {"relation": rel, "targets": list(rule.targets),
                                 "count": count}
        if rule.revision_only:
            entry["only"] = "the last link of a revision that merges a proposal"
        relations.append(entry)
    if kind == "reply":
        for entry in relations:
            entry["count"] = "exactly 1 replies_to or answers link"
    return {"kind": kind, "relations": relations, "citations": kind in CITING}


def _relation_refusal(kind: str, rel: str, message: str, pointer: str) -> RuleViolation:
    """RELATION_NOT_ALLOWED naming what ``kind`` takes and which kinds use ``rel``."""
    allowed = allowed_links(kind)
    takes = ", ".join(e["relation"] for e in allowed["relations"]) or "no rule relation"
    if allowed["citations"]:
        takes += " and free citations (any other relation name)"
    details: dict[str, Any] = {"pointer": pointer, "relation": rel, "allowed": allowed}
    rule = RELATIONS.get(rel)
    if rule is not None:
        details["used_by"] = sorted(rule.used_by)
    return _refuse(f"{message}; a {kind} takes {takes}", "RELATION_NOT_ALLOWED", **details)


def proposal_route(kind: str, target: str) -> dict[str, Any]:
    """The way forward when an object is another actor's: a proposal based on its head, which
    its author may merge (rule e).  ``message`` says it; the other keys go in ``details``."""
    if kind not in MERGEABLE:
        return {"message": f"Only its author changes a {kind}: publish your own {kind} instead",
                "next": "alexandria publish FILE"}
    proposal = {"kind": "proposal", "title": "…",
                "body": {"base": target, "title": "…", "body": {}, "links": [],
                         "rationale": "…"},
                "links": [{"relation": "proposes_for", "target": target}]}
    return {
        "message": (f"To change another author's {kind}, publish a proposal with proposes_for"
                    f" {target} (its current head): `alexandria publish proposal.json`;"
                    " its author may merge it"),
        "next": "alexandria publish proposal.json", "proposal": proposal,
    }


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
            allowed=allowed_links(rec.kind),
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

    # b. relations by kind (the table RELATIONS; any other relation is a free citation)
    counts: dict[str, int] = {}
    parent_depth = -1
    for i, lk in enumerate(links):
        rel = lk.relation
        counts[rel] = counts.get(rel, 0) + 1
        at = f"{base}/{i}/relation"
        rule = RELATIONS.get(rel)
        if rule is None:
            if kind not in CITING:
                raise _relation_refusal(kind, rel, f"a {kind} carries no citation links", at)
            continue
        if kind not in rule.used_by or (rule.revision_only and not revising):
            if rel == "contained_in":
                message = f"a {kind} cannot be contained_in a space"
            elif rel == "merges":
                message = ("merges is only the last link of a revision of a space, claim or"
                           " document")
            elif rule.exactly:
                message = f"only a {next(iter(rule.used_by))} uses {rel}"
            else:
                message = f"only {_plural(sorted(rule.used_by))} use {rel}"
            raise _relation_refusal(kind, rel, message, at)
        if rule.exactly:
            continue  # the kind's own rule (c, d) checks these links exactly
        t = kind_of(i, rule.targets, rule.what)
        if rel == "contained_in":
            if t.id != t.root:
                raise _refuse("contained_in must target the root id of a space",
                              "LINK_TARGET_NOT_ROOT", pointer=f"{base}/{i}/target", root=t.root)
            parent = state.object(t.root)
            assert parent is not None
            parent_depth = parent.depth

    for rel, rule in RELATIONS.items():
        if rule.at_most is not None and not rule.exactly and kind != "reply" \
                and counts.get(rel, 0) > rule.at_most:
            raise _refuse(f"at most {rule.at_most} {rel} link", "TOO_MANY_LINKS", relation=rel,
                          allowed=allowed_links(kind))
    if kind == "reply" and counts.get("replies_to", 0) + counts.get("answers", 0) != 1:
        raise _refuse("a reply carries exactly one replies_to or answers link",
                      "REPLY_PARENT", pointer=base, allowed=allowed_links(kind))
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
                      pointer="/record/links", allowed=allowed_links("vote"))
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
        route = proposal_route(obj.kind, obj.head)
        raise _refuse(f"only the original author revises an object. {route.pop('message')}",
                      "NOT_ORIGINAL_AUTHOR", pointer="/record/author", author=obj.author,
                      head=obj.head, root=obj.root, **route)
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
    except Invalid as exc:
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
