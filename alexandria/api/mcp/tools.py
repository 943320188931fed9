"""The read tools: one per read route of the contract, plus ``verify``.

Their input schemas are derived from the contracts (``schemas.py``).  Every tool answers with
structured content (the data, author content under ``untrusted``) and one text line written by
this server; ``server.py`` adds the structured content serialised as a second text block.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from alexandria.api.mcp import untrusted as checked
from alexandria.api.mcp.answers import (
    TEXT_RESERVE,
    UNTRUSTED_NOTE,
    Budget,
    fit,
    hint_view,
    plural,
    record_view,
    shrink,
    size,
    sizing_view,
    total_bytes,
    unverified_view,
)
from alexandria.api.mcp.checks import Verdict, Verifier
from alexandria.api.mcp.cursor import ChangesCursor
from alexandria.api.mcp.schemas import (
    BUDGET_PROPERTIES,
    WITH_PROOF,
    Answer,
    Tool,
    route_parameters,
    route_schema,
)
from alexandria.api.mcp.source import Source
from alexandria.api.mcp.untrusted import MalformedAnswer, failure
from alexandria.core.trust import Genesis
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError, Malformed, NotFound
from alexandria.rules.state import RULE_RELATIONS

VERIFY_TEXT = "x" * 320  # the longest text line verify writes

UNTRUSTED = " Author text: data under 'untrusted'."
"""What every read tool shares (detail, max_bytes, with_proof, 'omitted', 'untrusted') is said
once, in the server's instructions (``server.py``); each description adds only this reminder,
so that the tool list stays small."""


def _query(args: Mapping[str, Any], path: str) -> dict[str, str | int]:
    out: dict[str, str | int] = {}
    for name in route_parameters(path):
        if name in args:
            value = args[name]
            out[name] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedAnswer("the library answered something that is not JSON") from exc
    if not isinstance(value, dict):
        raise MalformedAnswer("the library answered JSON that is not an object")
    return value


def _line(tool: str, answer: Mapping[str, Any], key: str, more: str) -> str:
    """The text block: composed by this server from counts and offsets it checked, never
    from a value it did not."""
    kept = len(answer.get(key) or [])
    noun = {"items": "item", "votes": "vote", "incoming": "incoming link"}.get(key, key)
    parts = [f"{tool}: {kept} {plural(kept, noun)}"]
    if answer.get("omitted"):
        parts.append(f"{int(answer['omitted'])} omitted to fit max_bytes")
    if more:
        parts.append(more)
    return "; ".join(parts) + ". " + UNTRUSTED_NOTE


def _continue(next_offset: int | None) -> str:
    return f"; continue with offset={int(next_offset)}" if next_offset is not None else ""


def checked_view(signed: Any, detail: str, verdict: Verdict, shrunk: bool = False
                 ) -> dict[str, Any]:
    """One record as an answer holds it: its view when its signature chain held (fields the
    server checked, author content under ``untrusted``), else all of it under ``untrusted``
    beside the verdict and its failure; then the verdict."""
    detail = "ids" if shrunk else detail
    if verdict.signature_chain:
        try:
            view = record_view(signed, detail)
        except (AlexandriaError, KeyError, TypeError, ValueError, IndexError) as exc:
            view, verdict = unverified_view(signed, detail), Verdict(
                False, False if verdict.inclusion is not None else None, failure(exc))
    else:
        view = unverified_view(signed, detail)
    if shrunk:
        view["shrunk"] = True
    view.update(verdict.to_json())
    return view


@dataclass
class Reader:
    """The read tools over one library, checked against one pinned genesis."""

    source: Source
    genesis: Genesis
    witnesses: WitnessPolicy | None = None  # checkpoints must carry this quorum (docs/log.md)
    counted: Callable[[str], None] | None = None  # hears of every verification run
    #: whose pin ``genesis`` is: the reader's own (``alexandria mcp`` with a pinned home) or
    #: only the one the library states (``/mcp``, whose client pinned nothing)
    pinned_by_reader: bool = False
    verifier: Verifier = field(init=False)

    def __post_init__(self) -> None:
        self.verifier = Verifier(self.source, self.genesis, self.witnesses,
                                 counted=self.counted)

    async def _resolved(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` with a ``revision`` prefix replaced by the full id the library's
        ``GET /api/lookup`` names (checked to begin with the prefix)."""
        given = str(args["revision"])
        if len(given) == 64:
            return args
        found = _json(await self.source.get("/api/lookup",
                                            {"id": given, "kind": "object,revision"}))
        full = checked.hex64(found.get("id"), "id")
        if not full.startswith(given):
            raise checked.malformed("id", f"an id beginning with {given}")
        return {**args, "revision": full}

    # --- shared: a page of signed records --------------------------------------------------

    async def _records(self, answer: dict[str, Any], key: str, signed: list[Any],
                       budget: Budget, hints: bool = False) -> None:
        """Fit ``signed`` into ``answer[key]`` and check the ones kept (signature chain, and
        inclusion when ``with_proof``)."""
        reserve = TEXT_RESERVE + (800 if budget.with_proof else 0)
        room = budget.max_bytes - size(answer) - reserve
        if hints:
            answer[key] = fit([hint_view(s, budget.detail) for s in signed], room)
            return
        sized = fit([sizing_view(s, budget.detail) for s in signed], room, budget.verdict_bytes)
        kept = signed[:len(sized)]
        checked = await self.verifier.check(kept, budget.with_proof)
        answer[key] = [checked_view(s, budget.detail, verdict, bool(pre.get("shrunk")))
                       for s, pre, verdict in zip(kept, sized, checked.verdicts, strict=True)]
        if budget.with_proof:
            answer["checkpoint"] = checked.checkpoint_json()

    @staticmethod
    def _settle(answer: dict[str, Any], key: str, available: int, budget: Budget,
                continuation: Callable[[int], dict[str, Any]], text: Callable[[], str]) -> str:
        """Count what was left out, say where to continue, and make sure the whole answer is
        within ``max_bytes`` (dropping items from the end when the estimate was short)."""
        while True:
            kept = len(answer[key])
            answer["omitted"] = available - kept
            answer.update(continuation(kept))
            line = text()
            if total_bytes(line, answer) <= budget.max_bytes or not answer[key]:
                return line
            last = answer[key][-1]
            if kept == 1 and isinstance(last, dict) and not last.get("shrunk"):
                # one item left: its ids form rather than none, so paging moves forward
                answer[key][-1] = {**shrink(last), **{
                    k: last[k] for k in ("verified", "signature_chain", "inclusion", "failure")
                    if k in last}}
                continue
            answer[key].pop()

    # --- the tools --------------------------------------------------------------------------

    async def search(self, args: dict[str, Any]) -> Answer:
        budget = Budget.of(args)
        offset = int(args.get("offset", 0))
        raw = _json(await self.source.get("/api/catalogue", _query(args, "/api/catalogue")))
        items = checked.items(raw.get("items"), "items")
        total = checked.count(raw.get("total"), "total")
        last = checked.next_offset(raw.get("next_offset"))
        answer: dict[str, Any] = {"total": total, "offset": offset,
                                  "untrusted": {"library": checked.clipped(raw.get("library"))}}
        hints = args.get("projection") == "summary"
        await self._records(answer, "items", items, budget, hints=hints)

        def more(kept: int) -> dict[str, Any]:
            return {"next_offset": offset + kept if kept < len(items) else last}

        text = self._settle(answer, "items", len(items), budget, more, lambda: _line(
            "search", answer, "items",
            f"{total} matching in all" + _continue(answer["next_offset"])
            + ("; projection=summary items are unsigned hints: fetch them with get to verify"
               if hints else "")))
        return answer, text

    async def get(self, args: dict[str, Any]) -> Answer:
        args = await self._resolved(args)
        budget = Budget.of(args)
        rev = args["revision"]
        path = f"/api/entries/{rev}/head" if args.get("head") else f"/api/entries/{rev}"
        signed = _json(await self.source.get(path))
        answer: dict[str, Any] = {}
        await self._records(answer, "items", [signed], budget)
        text = self._settle(answer, "items", 1, budget, lambda _k: {}, lambda: _line(
            "get", answer, "items", "the current head" if args.get("head") else ""))
        answer["item"] = answer.pop("items")[0] if answer["items"] else None
        answer.pop("omitted")
        return answer, text

    async def object(self, args: dict[str, Any]) -> Answer:
        args = await self._resolved(args)
        budget = Budget.of(args)
        offset = int(args.get("offset", 0))
        path = "/api/objects/{revision}"
        raw = _json(await self.source.get(f"/api/objects/{args['revision']}",
                                          _query(args, path)))
        ancestors = checked.items(raw.get("ancestors"), "ancestors", 100)
        items = checked.items(raw.get("items"), "items")
        last = checked.next_offset(raw.get("next_offset"))
        fixed = [raw.get("item"), raw.get("original"), *ancestors]
        answer: dict[str, Any] = {"head": checked.hex64(raw.get("head"), "head"),
                                  "revisions": checked.count(raw.get("revisions"),
                                                             "revisions", 1),
                                  "section": args.get("section", "all"), "offset": offset}
        context: dict[str, Any] = {}
        # the object itself and its ancestors take at most half (TEXT_RESERVE is kept once,
        # for the whole answer, not for this part of it)
        room = budget.max_bytes // 2 + TEXT_RESERVE
        await self._records(context, "records", fixed,
                            Budget(budget.detail, room, budget.with_proof))
        if len(context["records"]) < len(fixed) and budget.detail != "ids":
            context = {}  # the whole room again, for the ids form of every one
            await self._records(context, "records", fixed,
                                Budget("ids", room, budget.with_proof))
        records = context["records"]
        answer["item"] = records[0] if records else {"shrunk": True}
        answer["original"] = records[1] if len(records) > 1 else None
        answer["ancestors"] = records[2:]
        answer["ancestors_omitted"] = len(ancestors) - len(answer["ancestors"])
        if "checkpoint" in context:
            answer["checkpoint"] = context["checkpoint"]
        await self._records(answer, "items", items, Budget(
            budget.detail, budget.max_bytes, budget.with_proof))

        def more(kept: int) -> dict[str, Any]:
            return {"next_offset": offset + kept if kept < len(items) else last}

        text = self._settle(answer, "items", len(items), budget, more, lambda: _line(
            "object", answer, "items",
            f"section {answer['section']}, {answer['revisions']}"
            f" {plural(answer['revisions'], 'revision')}"
            + _continue(answer["next_offset"])))
        return answer, text

    async def discussion(self, args: dict[str, Any]) -> Answer:
        args = await self._resolved(args)
        budget = Budget.of(args)
        offset = int(args.get("offset", 0))
        path = "/api/entries/{revision}/discussion"
        raw = _json(await self.source.get(f"/api/entries/{args['revision']}/discussion",
                                          _query(args, path)))
        items = checked.items(raw.get("items"), "items")
        last = checked.next_offset(raw.get("next_offset"))
        answer: dict[str, Any] = {"total": checked.count(raw.get("total"), "total"),
                                  "offset": offset}
        await self._records(answer, "items", items, budget)

        def more(kept: int) -> dict[str, Any]:
            return {"next_offset": offset + kept if kept < len(items) else last}

        text = self._settle(answer, "items", len(items), budget, more, lambda: _line(
            "discussion", answer, "items", f"{answer['total']} in the thread"
            + _continue(answer["next_offset"])))
        return answer, text

    async def connections(self, args: dict[str, Any]) -> Answer:
        args = await self._resolved(args)
        budget = Budget.of(args)
        offset = int(args.get("offset", 0))
        path = "/api/entries/{revision}/connections"
        raw = _json(await self.source.get(f"/api/entries/{args['revision']}/connections",
                                          _query(args, path)))
        outgoing = checked.items(raw.get("outgoing"), "outgoing")
        if not all(checked.is_link(o) for o in outgoing):
            raise checked.malformed("outgoing", "a list of links {relation, target}")
        incoming = []
        for each in checked.items(raw.get("incoming"), "incoming"):
            i = checked.mapping(each, "incoming[]")
            link = {"source": checked.hex64(i.get("source"), "incoming[].source"),
                    "relation": checked.one_of(i.get("relation"), RULE_RELATIONS,
                                               "incoming[].relation")}
            incoming.append(link if budget.detail == "ids" else
                            {**link, "untrusted": {"title": i.get("title")}})
        history = [{"id": checked.hex64(h, "history[]")}
                   for h in checked.items(raw.get("history"), "history")]
        last = checked.next_offset(raw.get("next_offset"))
        answer: dict[str, Any] = {"outgoing": [dict(o) for o in outgoing],
                                  "history_total": checked.count(raw.get("history_total"),
                                                                 "history_total", 1),
                                  "offset": offset}
        room = budget.max_bytes - size(answer) - TEXT_RESERVE - 40
        answer["incoming"] = fit(incoming, room, shrink_first=None)
        answer["history"] = fit(history, room - size(answer["incoming"]), shrink_first=None)
        # incoming and history share one offset: continue where the shorter-cut list stopped,
        # and hand back no more of the other list than that (no duplicates next time)
        cut = [len(answer[k]) for k, full in (("incoming", incoming), ("history", history))
               if len(answer[k]) < len(full)]
        if cut:
            stop = min(cut)
            answer["incoming"] = answer["incoming"][:stop]
            answer["history"] = answer["history"][:stop]
        answer["history"] = [h["id"] for h in answer["history"]]
        omitted = len(incoming) + len(history) - len(answer["incoming"]) - len(answer["history"])
        answer["omitted"] = omitted
        answer["next_offset"] = (offset + min(cut) if cut else last)
        text = _line("connections", answer, "incoming",
                     f"{len(answer['history'])} of {answer['history_total']} history"
                     f" {plural(answer['history_total'], 'id')}"
                     + _continue(answer["next_offset"]))
        while total_bytes(text, answer) > budget.max_bytes and answer["incoming"]:
            answer["incoming"].pop()
            answer["history"] = answer["history"][:len(answer["incoming"])]
            answer["next_offset"] = offset + len(answer["incoming"])
        return answer, text

    async def scores(self, args: dict[str, Any]) -> Answer:
        budget = Budget.of(args)
        offset = int(args.get("offset", 0))
        raw = _json(await self.source.get("/api/scores", _query(args, "/api/scores")))
        received = checked.mapping(raw.get("received"), "received")
        votes = []
        for each in checked.items(raw.get("votes"), "votes"):
            v = checked.mapping(each, "votes[]")
            votes.append({
                "target": checked.hex64(v.get("target"), "votes[].target"),
                "value": checked.one_of(v.get("value"), (-1, 0, 1), "votes[].value"),
                "vote": checked.hex64(v.get("vote"), "votes[].vote"),
                "vote_root": checked.hex64(v.get("vote_root"), "votes[].vote_root"),
                "target_score": checked.integer(v.get("target_score"), "votes[].target_score")})
        last = checked.next_offset(raw.get("next_offset"))
        answer: dict[str, Any] = {
            "author": checked.hex64(raw.get("author"), "author"),
            "received": {k: checked.integer(received.get(k), f"received.{k}")
                         for k in ("score", "up", "down", "neutral")},
            "votes_total": checked.count(raw.get("votes_total"), "votes_total"),
            "offset": offset}
        answer["votes"] = fit(votes, budget.max_bytes - size(answer) - TEXT_RESERVE,
                              shrink_first=None)

        def more(kept: int) -> dict[str, Any]:
            return {"next_offset": offset + kept if kept < len(votes) else last}

        text = self._settle(answer, "votes", len(votes), budget, more, lambda: _line(
            "scores", answer, "votes", f"score {answer['received']['score']}"
            + _continue(answer["next_offset"])))
        return answer, text

    async def changes(self, args: dict[str, Any]) -> Answer:
        budget = Budget.of(args)
        root = args["root"]
        position = ChangesCursor.parse(args.get("cursor"), root)
        params: dict[str, str | int] = {"root": root}
        if position.cursor is not None:
            params["cursor"] = position.cursor
        if "limit" in args:
            params["limit"] = args["limit"]
        raw = _json(await self.source.get("/api/changes", params))
        items = checked.items(raw.get("items"), "items")[position.skip:]
        library_cursor = raw.get("cursor")
        if not isinstance(library_cursor, str) or len(library_cursor) > 2_048:
            raise checked.malformed("cursor", "a cursor")
        has_more = checked.flag(raw.get("has_more"), "has_more")
        answer: dict[str, Any] = {"snapshot": checked.count(raw.get("snapshot"), "snapshot")}
        await self._records(answer, "items", items, budget)

        def more(kept: int) -> dict[str, Any]:
            if kept < len(items):  # the rest of this very page, from the same library cursor
                nxt = ChangesCursor(root, position.cursor, position.skip + kept)
                return {"cursor": nxt.encode(), "has_more": True}
            # the library's cursor is handed back wrapped (base64), never as words
            return {"cursor": ChangesCursor(root, library_cursor, 0).encode(),
                    "has_more": has_more}

        text = self._settle(answer, "items", len(items), budget, more, lambda: _line(
            "changes", answer, "items",
            ("more to read: call again with this cursor" if answer["has_more"]
             else "up to date: call again later with this cursor for what is new")))
        return answer, text

    def whose_pin(self) -> str:
        """Which pin the checks used, in words: the reader's, or only the library's own."""
        if self.pinned_by_reader:
            return f"against your pinned genesis {self.genesis.pin}"
        return (f"checked against the pin this library states: {self.genesis.pin}"
                " (compare it with the pin you trust)")

    async def verify(self, args: dict[str, Any]) -> Answer:
        args = await self._resolved(args)
        budget = Budget.of(args, with_proof=True)
        rev = args["revision"]
        answer: dict[str, Any] = {"id": rev}
        try:
            signed = _json(await self.source.get(f"/api/entries/{rev}"))
            result = await self.verifier.check([signed], with_proof=True)
        except AlexandriaError as exc:
            if isinstance(exc, (Malformed, NotFound)):  # a bad or unknown revision: no verdict
                raise
            answer.update(verified=False, failure=failure(exc))
            return answer, (f"verify: NOT verified ({answer['failure']['code']}),"
                            f" {self.whose_pin()}; see 'failure'.")
        verdict = result.verdicts[0]
        view = checked_view(signed, budget.detail, verdict)
        verified = view["verified"]
        answer.update({k: v for k, v in view.items() if k not in answer})
        answer["checkpoint"] = result.checkpoint_json()
        if budget.detail == "full" and verified:
            answer.setdefault("untrusted", {})["signed_record"] = signed
        # over budget: leave out, in this order, what the agent can ask for with a larger one
        cuts: list[Callable[[], object]] = [
            lambda: (answer.get("untrusted") or {}).pop("signed_record", None),
            lambda: answer.pop("untrusted", None),
            lambda: [answer.pop(k, None) for k in ("links", "previous", "author",
                                                    "authored_at", "admitted_at")],
            lambda: (answer.get("proof") or {}).pop("inclusion", None),
            lambda: ((answer.get("checkpoint") or {}).get("untrusted") or {}).pop("note", None),
        ]
        for cut in cuts:
            if total_bytes(VERIFY_TEXT, answer) <= budget.max_bytes:
                break
            cut()
            answer["shrunk"] = True
        if verified:
            text = (f"verify: verified, {self.whose_pin()}. Signature chain and inclusion"
                    f" of entry {int(answer['entry'])} (leaf index {int(answer['leaf_index'])})"
                    f" in the signed checkpoint of size"
                    f" {int(answer['checkpoint']['size'])} both checked by this server.")
        else:
            why = checked.code((answer.get("failure") or {}).get("code"))
            text = f"verify: NOT verified ({why}), {self.whose_pin()}; see 'failure'."
        return answer, text


def read_tools(reader: Reader) -> list[Tool]:
    budget = BUDGET_PROPERTIES
    proof = {**BUDGET_PROPERTIES, **WITH_PROOF}
    changes_schema = route_schema("/api/changes", proof)
    changes_schema["properties"]["cursor"] = {
        "type": "string", "maxLength": 4096,
        "description": "from the previous call; omit for all history"}
    return [
        Tool("search", "Search the catalogue of current heads (GET /api/catalogue)."
             + UNTRUSTED,
             route_schema("/api/catalogue", proof), reader.search),
        Tool("get", "One exact revision, or with head=true its object's current head."
             + UNTRUSTED,
             route_schema("/api/entries/{revision}", {
                 **proof, "head": {"type": "boolean", "default": False,
                                   "description": "the object's current head instead"}}),
             reader.get),
        Tool("object", "An object in context: its head (or exact revision), original,"
             " containing spaces and one section, paged by offset." + UNTRUSTED,
             route_schema("/api/objects/{revision}", proof), reader.object),
        Tool("connections", "An object's outgoing links, incoming links and revision history,"
             " paged by offset." + UNTRUSTED,
             route_schema("/api/entries/{revision}/connections", budget), reader.connections),
        Tool("discussion", "The thread under a discussion or reply, or the debates about a"
             " claim or space, sorted old|new|top and paged by offset."
             + UNTRUSTED,
             route_schema("/api/entries/{revision}/discussion", proof), reader.discussion),
        Tool("scores", "Host-projected vote totals an actor received and the votes they hold"
             " (host projections are not certified).",
             route_schema("/api/scores", budget), reader.scores),
        Tool("changes", "Every revision of a root's members in admission order: pass back"
             " the cursor to continue; once has_more is false, the same cursor later returns"
             " exactly what is new." + UNTRUSTED, changes_schema, reader.changes),
        Tool("verify", "Check one revision against a genesis pin (yours from your home; over"
             " /mcp the library's: the text says which): signature chain and"
             " RFC 9162 inclusion proof under the signed checkpoint; 'verified' only when both"
             " held." + UNTRUSTED,
             route_schema("/api/entries/{revision}", budget), reader.verify),
    ]


def library_resources(reader: Reader) -> list[tuple[str, str, str, Callable[[], Awaitable[str]]]]:
    """``(uri, name, description, read)``: the served contract and the pinned genesis."""

    async def contract() -> str:
        # the library's document, as data: under "untrusted", never as this server's words
        served = _json(await reader.source.get("/api/contract"))
        return orjson.dumps({"untrusted": served}).decode()

    async def genesis() -> str:
        g = reader.genesis
        return orjson.dumps({"pin": g.pin, "untrusted": {
            "library": g.library, "origin": g.origin, "document": g.document}}).decode()

    return [
        ("alexandria://contract", "contract", "The agent read contract as this library serves"
         " it (GET /api/contract): routes, limits, the write contract, the worked example;"
         " the library's document, under 'untrusted'.",
         contract),
        ("alexandria://genesis", "genesis", "The pinned genesis this server checks every"
         " signature against: its pin (SHA-256 of the canonical payload) and, under"
         " 'untrusted', its document.",
         genesis),
    ]
