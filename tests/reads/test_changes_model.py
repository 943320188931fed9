"""Model-based test of ``/api/changes`` (PROTOCOL §5), through the real HTTP app.

A seeded random walk interleaves admissions — members and non-members of the followed roots,
deep containment, replies to replies, branches, about, evidence, assessments, votes,
relationships, includes, citations, proposals and merges, revisions, exact retries, refused
admissions and authority documents — with paging calls of random limits on several followed
roots.  The test keeps its own model of membership (from the links it generated, walked as a
graph) and checks after every page that what a follower has collected is exactly the member
revisions in admission order up to the page's snapshot: nothing missing, nothing twice,
nothing foreign, nothing newer than its snapshot.  Some runs inject smaller page-byte and scan
bounds so that those stopping rules are exercised too.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from alexandria.core.canonical import canonical
from alexandria.core.keys import SigningKey
from alexandria.core.trust import make_authority_certificate
from alexandria.reads.changes import Limits
from tests.support.library import Api

# Written out from PROTOCOL §5 rather than imported, so that the model is independent.
FEED = {"contained_in", "replies_to", "answers", "branches_from", "about", "evidence_for",
        "assesses", "proposes_for"}
MUTABLE = ("space", "discussion", "claim", "document", "reply")
AUTHORS = ("owner", "peer")


@dataclass
class Obj:
    root: str
    kind: str
    author: str
    head: str
    content: dict[str, Any]  # content of the head revision
    parents: set[str]  # roots this object is linked to by feed relations
    revisions: list[str] = field(default_factory=list)


@dataclass
class Follower:
    root: str
    cursor: str | None = None
    snapshot: int = 0
    after: int = 0  # the sequence the follower has caught up to
    items: list[tuple[int, str]] = field(default_factory=list)


class World:
    def __init__(self, api: Api, rng: random.Random, limits: Limits) -> None:
        self.api = api
        self.rng = rng
        self.limits = limits
        self.log_size = 2  # the two authority certificates admitted by the fixture
        self.objects: dict[str, Obj] = {}
        self.root_of: dict[str, str] = {}
        self.seq_of: dict[str, int] = {}
        self.admitted: list[tuple[int, str, str]] = []  # (sequence, id, root)
        self.signed: dict[int, bytes] = {}
        self.envelopes: list[tuple[dict[str, Any], bytes]] = []
        self.followers: dict[str, Follower] = {}
        self.votes: dict[tuple[str, str], str] = {}  # (author, target root) → vote root
        self.proposals: list[tuple[str, dict[str, Any]]] = []  # (proposal id, body)
        self.n = 0

    # --- the model ---------------------------------------------------------------------------

    def members(self, root: str) -> set[str]:
        children: dict[str, set[str]] = {}
        for obj in self.objects.values():
            for p in obj.parents:
                children.setdefault(p, set()).add(obj.root)
        out, todo = {root}, [root]
        while todo:
            for c in children.get(todo.pop(), ()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out

    def expected(self, root: str, hi: int) -> list[tuple[int, str]]:
        members = self.members(root)
        return [(s, i) for s, i, r in self.admitted if r in members and s <= hi]

    # --- admissions --------------------------------------------------------------------------

    def pick(self, kinds: tuple[str, ...]) -> Obj | None:
        found = [o for o in self.objects.values() if o.kind in kinds]
        return self.rng.choice(found) if found else None

    def any_revision(self, obj: Obj) -> str:
        return self.rng.choice(obj.revisions)

    def title(self, what: str) -> str:
        self.n += 1
        return f"{what} {self.n}"

    async def publish(self, who: str, content: dict[str, Any], expect: int = 201) -> str | None:
        env = self.api.envelope(who, content)
        r = await self.api.post(env)
        assert r.status_code == expect, (content, r.text)
        if expect != 201:
            return None
        signed = r.json()
        seq = signed["admission"]["sequence"]
        self.log_size += 1
        assert seq == self.log_size
        rev, root = signed["id"], signed["root"]
        self.admitted.append((seq, rev, root))
        self.signed[seq] = r.content
        self.envelopes.append((env, r.content))
        self.root_of[rev] = root
        self.seq_of[rev] = seq
        if content["previous"]:
            obj = self.objects[root]
            obj.head = rev
            obj.content = content
            obj.revisions.append(rev)
        else:
            parents = {self.root_of[lk["target"]] for lk in content["links"]
                       if lk["relation"] in FEED}
            self.objects[root] = Obj(root, content["kind"], who, rev, content, parents, [rev])
        return rev

    def who(self) -> str:
        return self.rng.choice(AUTHORS)

    async def new_space(self) -> None:
        links = []
        parent = self.pick(("space",))
        if parent is not None and self.rng.random() < 0.8:
            links.append({"relation": "contained_in", "target": parent.root})
        if self.rng.random() < 0.3:
            pool = [o for o in self.objects.values() if o.kind in ("claim", "document")]
            for inc in self.rng.sample(pool, min(2, len(pool))):
                links.append({"relation": "includes", "target": self.any_revision(inc)})
        await self.publish(self.who(), {
            "kind": "space", "title": self.title("space"), "body": {"summary": "s"},
            "links": links, "previous": "",
        })

    def citation(self) -> list[dict[str, str]]:
        if self.admitted and self.rng.random() < 0.3:
            _s, rev, _r = self.rng.choice(self.admitted)
            return [{"relation": "cites", "target": rev}]
        return []

    def container(self) -> list[dict[str, str]]:
        space = self.pick(("space",))
        if space is not None and self.rng.random() < 0.7:
            return [{"relation": "contained_in", "target": space.root}]
        return []

    async def new_claim_or_document(self) -> None:
        kind = self.rng.choice(("claim", "document"))
        body: dict[str, Any] = {"text": "t"}
        if kind == "claim":
            body = {"statement": "x", "scope": "y", "assumptions": []}
        await self.publish(self.who(), {
            "kind": kind, "title": self.title(kind), "body": body,
            "links": self.container() + self.citation(), "previous": "",
        })

    async def new_discussion(self) -> None:
        links = self.container()
        about = self.pick(("claim", "space"))
        if about is not None and self.rng.random() < 0.6:
            links.append({"relation": "about", "target": self.any_revision(about)})
        branch = self.pick(("discussion", "reply"))
        if branch is not None and self.rng.random() < 0.3:
            links.append({"relation": "branches_from", "target": self.any_revision(branch)})
        await self.publish(self.who(), {
            "kind": "discussion", "title": self.title("discussion"), "body": {"text": "d"},
            "links": links + self.citation(), "previous": "",
        })

    async def new_reply(self) -> None:
        parent = self.pick(("discussion", "reply"))
        if parent is None:
            return
        rel = self.rng.choice(("replies_to", "replies_to", "answers"))
        await self.publish(self.who(), {
            "kind": "reply", "title": self.title("reply"), "body": "r",
            "links": [{"relation": rel, "target": self.any_revision(parent)}, *self.citation()],
            "previous": "",
        })

    async def new_evidence_or_assessment(self) -> None:
        claim = self.pick(("claim",))
        if claim is None:
            return
        rev = self.any_revision(claim)
        evidence = [o for o in self.objects.values()
                    if o.kind == "evidence" and o.content["body"]["claim"] == rev]
        if evidence and self.rng.random() < 0.5:
            chosen = [e.root for e in evidence[:2]]
            await self.publish(self.who(), {
                "kind": "assessment", "title": self.title("assessment"),
                "body": {"claim": rev, "verdict": "supported", "rationale": "r",
                         "evidence": chosen},
                "links": [{"relation": "assesses", "target": rev}], "previous": "",
            })
        elif self.rng.random() < 0.3:
            await self.publish(self.who(), {
                "kind": "assessment", "title": self.title("assessment"),
                "body": {"claim": rev, "verdict": "open", "rationale": "r", "evidence": []},
                "links": [{"relation": "assesses", "target": rev}], "previous": "",
            })
        else:
            await self.publish(self.who(), {
                "kind": "evidence", "title": self.title("evidence"),
                "body": {"claim": rev, "method": "example", "content": "c", "sources": []},
                "links": [{"relation": "evidence_for", "target": rev}], "previous": "",
            })

    async def new_relationship(self) -> None:
        pool = [o for o in self.objects.values() if o.kind != "vote"]
        if len(pool) < 2:
            return
        a, b = self.rng.sample(pool, 2)
        ra, rb = self.any_revision(a), self.any_revision(b)
        await self.publish(self.who(), {
            "kind": "relationship", "title": self.title("relationship"),
            "body": {"from": ra, "to": rb, "relation": "related_to", "rationale": "r"},
            "links": [{"relation": "relates_from", "target": ra},
                      {"relation": "relates_to", "target": rb}],
            "previous": "",
        })

    async def vote(self) -> None:
        target = self.pick(("space", "discussion", "claim", "document", "evidence", "reply",
                            "assessment", "relationship", "proposal"))
        if target is None:
            return
        who = self.who()
        existing = self.votes.get((who, target.root))
        link = [{"relation": "votes_on", "target": target.root}]
        if existing is None:
            await self.publish(who, {"kind": "vote", "title": "vote", "body": "1",
                                     "links": link, "previous": ""})
            self.votes[(who, target.root)] = self.admitted[-1][2]
        elif self.rng.random() < 0.5:  # a second vote on the same target is refused
            await self.publish(who, {"kind": "vote", "title": "vote", "body": "-1",
                                     "links": link, "previous": ""}, expect=409)
        else:
            obj = self.objects[existing]
            body = self.rng.choice(("-1", "0", "1"))
            await self.publish(who, {"kind": "vote", "title": "vote", "body": body,
                                     "links": link, "previous": obj.head})

    async def revise(self) -> None:
        obj = self.pick(MUTABLE)
        if obj is None:
            return
        content = dict(obj.content)
        content["title"] = self.title(f"{obj.kind} revised")
        content["previous"] = obj.head
        links = [lk for lk in content["links"] if lk["relation"] != "merges"]
        if obj.kind == "space" and self.rng.random() < 0.5:
            inc = self.pick(("claim", "document"))
            included = {self.root_of[lk["target"]] for lk in links if lk["relation"] == "includes"}
            if inc is not None and inc.root not in included:
                links.append({"relation": "includes", "target": self.any_revision(inc)})
        content["links"] = links
        await self.publish(obj.author, content)

    async def propose_or_merge(self) -> None:
        pending = [(pid, body) for pid, body in self.proposals
                   if self.objects[self.root_of[body["base"]]].head == body["base"]]
        if pending and self.rng.random() < 0.5:
            pid, body = self.rng.choice(pending)
            obj = self.objects[self.root_of[body["base"]]]
            await self.publish(obj.author, {
                "kind": obj.kind, "title": body["title"], "body": body["body"],
                "links": [*body["links"], {"relation": "merges", "target": pid}],
                "previous": body["base"],
            })
            return
        obj = self.pick(("space", "claim", "document"))
        if obj is None:
            return
        body = {
            "base": obj.head, "title": self.title("proposed"), "body": obj.content["body"],
            "links": [lk for lk in obj.content["links"] if lk["relation"] != "merges"],
            "rationale": "better",
        }
        pid = await self.publish(self.who(), {
            "kind": "proposal", "title": self.title("proposal"), "body": body,
            "links": [{"relation": "proposes_for", "target": obj.head}], "previous": "",
        })
        assert pid is not None
        self.proposals.append((pid, body))

    async def retry(self) -> None:
        if not self.envelopes:
            return
        env, first = self.rng.choice(self.envelopes)
        r = await self.api.post(env)
        assert r.status_code == 200 and r.content == first

    async def authority_document(self) -> None:
        f = self.api.founding
        key = SigningKey(self.rng.randbytes(32))
        doc = make_authority_certificate(
            f.genesis, key.public_hex, ["log"], f.not_before, f.not_after, f.roots
        )
        r = await self.api.client.post("/api/authority", json=doc)
        assert r.status_code == 201, r.text
        self.log_size += 1

    # --- following ---------------------------------------------------------------------------

    def maybe_follow(self) -> None:
        """Follow one more object, from scratch (it has history by now)."""
        fresh = [o for o in self.objects.values() if o.root not in self.followers]
        if len(self.followers) >= 7 or not fresh:
            return
        obj = self.rng.choice(fresh)
        self.followers[obj.root] = Follower(obj.root)

    async def page(self, f: Follower, limit: int | None = None) -> bool:
        """One call; checks every invariant; returns has_more."""
        params = {"root": f.root}
        if limit is not None:
            params["limit"] = str(limit)
        if f.cursor is not None:
            params["cursor"] = f.cursor
        r = await self.api.client.get("/api/changes", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert set(page) == {"items", "cursor", "has_more", "snapshot"}
        hi = page["snapshot"]
        fresh = f.cursor is None or f.after == f.snapshot  # this call fixes a new snapshot
        if fresh:
            assert hi == self.log_size  # the latest sequence, nothing else is admitted meanwhile
        else:
            assert hi == f.snapshot  # has_more continues the same snapshot
        assert hi >= f.snapshot
        items = page["items"]
        assert len(items) <= (limit or 50)
        sizes = [len(canonical(it)) for it in items]
        assert len(items) <= 1 or sum(sizes) <= self.limits.page_bytes
        expected = self.expected(f.root, hi)
        remaining = [e for e in expected if e[0] > f.after]
        if remaining:
            assert items, "at least one item when any remains"
        for it in items:
            seq = it["admission"]["sequence"]
            assert f.after < seq <= hi, "nothing newer than the snapshot, nothing repeated"
            assert canonical(it) == self.signed[seq], "items are the stored signed records"
            f.items.append((seq, it["id"]))
            f.after = seq
        assert f.items == expected[: len(f.items)], "a prefix of the members, in order"
        if not page["has_more"]:
            assert f.items == expected, "has_more false: the snapshot is complete"
            f.after = hi
        f.cursor = page["cursor"]
        f.snapshot = hi
        return bool(page["has_more"])

    async def drain(self, f: Follower) -> None:
        for _ in range(10_000):
            more = await self.page(f, self.rng.choice((None, 50, 7)))
            if not more and f.snapshot == self.log_size:
                return
        raise AssertionError("the feed did not terminate")


STEPS = 150
# More walks on demand: ALEXANDRIA_WALKS=500 pytest tests/reads/test_changes_model.py
WALKS = int(os.environ.get("ALEXANDRIA_WALKS", "30"))


async def run_walk(api: Api, seed: int) -> World:
    rng = random.Random(seed)
    limits = rng.choice([Limits(), Limits(), Limits(page_bytes=3000),
                         Limits(scan=rng.choice((1, 2, 5))),
                         Limits(page_bytes=5000, scan=3)])
    api.library.limits = limits
    w = World(api, rng, limits)
    await w.publish("owner", {"kind": "space", "title": "top", "body": {"summary": "top"},
                              "links": [], "previous": ""})
    w.followers[w.admitted[0][2]] = Follower(w.admitted[0][2])
    actions = [
        (w.new_space, 6), (w.new_claim_or_document, 8), (w.new_discussion, 8),
        (w.new_reply, 12), (w.new_evidence_or_assessment, 6), (w.new_relationship, 4),
        (w.vote, 6), (w.revise, 10), (w.propose_or_merge, 4), (w.retry, 2),
        (w.authority_document, 1),
    ]
    fns = [a for a, _ in actions]
    weights = [k for _, k in actions]
    for step in range(STEPS):
        if step in (STEPS // 3, 2 * STEPS // 3):
            w.maybe_follow()
        roll = rng.random()
        if roll < 0.35:
            f = rng.choice(list(w.followers.values()))
            await w.page(f, rng.choice((None, 1, 1, 2, 3, 5, 50, rng.randint(1, 50))))
        elif roll < 0.4:
            w.maybe_follow()
        else:
            await rng.choices(fns, weights)[0]()
    for f in w.followers.values():
        await w.drain(f)
        assert await w.page(f) is False  # caught up: an empty page of a new snapshot
        assert f.items == w.expected(f.root, w.log_size)
    return w


@pytest.mark.parametrize("seed", range(WALKS))
async def test_random_walk_feeds_are_exactly_the_members(api: Api, seed: int) -> None:
    w = await run_walk(api, seed)
    assert len(w.followers) >= 3
    kinds = {o.kind for o in w.objects.values()}
    assert {"space", "reply"} <= kinds


async def test_walks_cover_every_kind_and_membership_shape(api: Api) -> None:
    """The walk is only as good as what it generates: check one long run reaches deep
    containment, replies to replies, members that are not direct children, and non-members."""
    w = await run_walk(api, 1000)
    assert {o.kind for o in w.objects.values()} >= {
        "space", "discussion", "claim", "document", "evidence", "reply", "relationship",
        "proposal", "vote",
    }
    depth = {o.root: 0 for o in w.objects.values()}
    for _ in range(len(depth)):
        for o in w.objects.values():
            depth[o.root] = max([depth[o.root], *(depth[p] + 1 for p in o.parents)])
    assert max(depth.values()) >= 3
    top = w.admitted[0][2]
    assert len(w.members(top)) < len(w.objects)  # some objects are not members of the top

