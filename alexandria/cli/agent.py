"""The participant's session as MCP tools, served on stdio (``alexandria mcp``, ``cli/mcp.py``).

The participant's own configuration, exactly as every other command reads it
(``$ALEXANDRIA_HOME``…: ``cli/config.py``): the pinned genesis every answer is checked against,
the worker key and certificate that sign, the pending files.  The read tools are the ones
``/mcp`` serves (``api/mcp/tools.py``); the write tools are here because they need the key:

- ``validate`` signs the content and asks the library for its dry run (nothing is stored);
- ``publish`` signs it, writes the envelope to ``pending/`` *before* sending, and delivers it
  with ``pending.Outbox`` — the CLI's semantics: admitted → ``published/``; no definitive answer
  → kept, and ``publish`` with ``retry: ID`` resends those exact bytes, never re-signed; a
  definitive rejection → ``rejected/`` with the library's typed error, never resent.  With
  ``contributions`` (several contents) every one is signed and made durable in ``pending/``
  first, then all are sent in one ``POST /api/entries/batch`` and each is answered in its
  place, as ``publish --jsonl`` does;
- ``follow``, ``unfollow``, ``save``, ``unsave``, ``lists``: the personal lists, by
  compare-and-set (``cli/personal.py``).

Nothing but MCP messages is written to stdout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import orjson
from mcp.server.stdio import stdio_server

from alexandria.api.mcp.answers import (
    TEXT_RESERVE,
    UNTRUSTED_NOTE,
    Budget,
    fit,
    record_view,
    size,
)
from alexandria.api.mcp.schemas import BUDGET_PROPERTIES, Answer, Tool
from alexandria.api.mcp.server import build_server
from alexandria.api.mcp.source import ClientSource
from alexandria.api.mcp.tools import Reader, library_resources, read_tools
from alexandria.api.openapi import HEX64, OFFSET
from alexandria.cli.pending import Outbox, Outcome, Pending, batch_chunks
from alexandria.cli.personal import _lists_of, _personal_read, apply_action
from alexandria.cli.session import Session
from alexandria.client import Unreachable
from alexandria.core.schema import content_schema
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError, BadRequest
from alexandria.rules.personal import MAX_ROOTS

T = TypeVar("T")
LISTS_PAGE = 50  # roots per lists call, as the read routes page
#: contents one publish call takes (its arguments hold at most 2,000 elements in all)
MAX_CONTRIBUTIONS = 100


async def serve_stdio(session: Session, witnesses: WitnessPolicy | None = None) -> None:
    agent = Agent(session, witnesses)
    server = build_server("alexandria", agent.tools(), library_resources(agent.reader))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _kept(pending: Pending, error: AlexandriaError) -> Unreachable:
    """No definitive answer: the envelope stays pending, and the agent is told how to resend."""
    return Unreachable(
        f"{error.message} — the signed envelope is kept as pending {pending.id}; call publish"
        " with retry to resend exactly these bytes (never re-signed)",
        error.code, **{**error.details, "pending": pending.id, "retry": {"retry": pending.id}})


def content_property() -> dict[str, Any]:
    """The write contract's ``content_schema``, as the ``content`` argument."""
    schema = {k: v for k, v in content_schema().items() if k != "$schema"}
    schema["description"] = ("the contract's {kind, title, body, links, previous}; object"
                             " bodies as JSON objects (they are encoded when signed)")
    return schema


class Agent:
    """The participant's session as MCP tools."""

    def __init__(self, session: Session, witnesses: WitnessPolicy | None = None) -> None:
        self.session = session
        self.reader = Reader(ClientSource(session.client), session.genesis(), witnesses)
        self.outbox = Outbox(session.home)

    async def _sync(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    # --- validate, publish ------------------------------------------------------------------

    async def validate(self, args: dict[str, Any]) -> Answer:
        def run() -> dict[str, Any]:
            signed = self.session.sign({"links": [], "previous": "", **args["content"]})
            return self.session.client.dry_run(signed.envelope)

        result = await self._sync(run)
        answer = {"valid": True, **result}
        text = ("validate: the library would admit this contribution (nothing was stored;"
                " publish signs it anew)." if not result.get("already_admitted") else
                "validate: the library already holds this exact contribution.")
        return answer, text

    async def publish(self, args: dict[str, Any]) -> Answer:
        given = [k for k in ("content", "contributions", "retry") if k in args]
        if len(given) != 1:
            raise BadRequest("publish takes one of content, contributions or retry",
                             "BAD_ARGUMENT", allowed=["content", "contributions", "retry"])
        if "contributions" in args:
            return await self._publish_many(args["contributions"])

        def prepare() -> Pending:
            if "retry" in args:
                rev = args["retry"]
                if rev not in {p.id for p in self.outbox.pending()}:
                    raise BadRequest(f"{rev} is not pending", "NOT_PENDING", id=rev)
                return self.outbox.load(rev)
            content = {"links": [], "previous": "", **args["content"]}
            signed = self.session.sign(content)
            meta = {"kind": content["kind"], "title": content["title"],
                    "library": self.session.library.url, "via": "mcp"}
            return self.outbox.write(signed.id, signed.envelope, meta)

        pending = await self._sync(prepare)
        try:
            outcome = await self._sync(self.outbox.deliver, pending, self.session.client)
        except Unreachable as exc:  # e.g. an answer that is not the record sent: still pending
            raise _kept(pending, exc) from exc
        if outcome.status == "kept":
            assert outcome.error is not None
            raise _kept(pending, outcome.error)
        if outcome.status == "rejected":
            assert outcome.error is not None
            raise outcome.error  # the library's typed error, verbatim; never resent
        signed = orjson.loads(outcome.signed)
        checked = await self.reader.verifier.check([signed], with_proof=False)
        answer = {"id": signed["id"], "root": signed["root"],
                  "log_index": signed["admission"]["sequence"] - 1,
                  "created": outcome.created, **checked.verdicts[0].to_json()}
        verb = "admitted" if outcome.created else "already admitted (an exact retry)"
        return answer, f"publish: {verb} as revision {signed['id']} at log index" \
                       f" {answer['log_index']}."

    async def _publish_many(self, contents: list[dict[str, Any]]) -> Answer:
        """Each content signed (a content that cannot be is refused in its place), all of
        them durable in pending/, then sent together in batch requests; one result each, in
        order."""

        def send() -> list[dict[str, Any]]:
            results: list[dict[str, Any]] = [{} for _ in contents]
            signed: list[tuple[int, Any, dict[str, Any]]] = []
            for i, given in enumerate(contents):
                content = {"links": [], "previous": "", **given}
                try:
                    envelope = self.session.sign(content)
                except AlexandriaError as exc:
                    results[i] = {"status": "refused", "error": exc.to_json()}
                    continue
                meta = {"kind": content["kind"], "title": content["title"],
                        "library": self.session.library.url, "via": "mcp"}
                signed.append((i, envelope, meta))
            pendings = self.outbox.write_many([(e.id, e.envelope, m) for _i, e, m in signed])
            admitted: list[tuple[Pending, bytes, dict[str, Any]]] = []
            outcomes: list[Outcome] = []
            try:
                for chunk in batch_chunks(pendings):
                    if outcomes and outcomes[-1].status == "kept":
                        outcomes += [Outcome(p, "kept", error=outcomes[-1].error) for p in chunk]
                        continue
                    outcomes += self.outbox.deliver_many(chunk, self.session.client, admitted)
            finally:
                self.outbox.settle(admitted)
            for (i, _e, _m), outcome in zip(signed, outcomes, strict=True):
                results[i] = {"id": outcome.pending.id, "status": outcome.status}
                if outcome.status == "admitted":
                    record = orjson.loads(outcome.signed)
                    results[i].update(created=outcome.created, root=record["root"],
                                      log_index=record["admission"]["sequence"] - 1)
                    results[i]["signed"] = record
                elif outcome.error is not None:
                    results[i]["error"] = outcome.error.to_json()
                    if outcome.status == "kept":
                        results[i]["retry"] = {"retry": outcome.pending.id}
            return results

        results = await self._sync(send)
        records = [r.pop("signed") for r in results if "signed" in r]
        if records:
            checked = await self.reader.verifier.check(records, with_proof=False)
            verdicts = iter(checked.verdicts)
            for r in results:
                if r.get("status") == "admitted":
                    r.update(next(verdicts).to_json())
        counts = {s: sum(1 for r in results if r["status"] == s)
                  for s in ("admitted", "rejected", "refused", "kept")}
        text = (f"publish: {counts['admitted']} admitted, {counts['rejected']} rejected by the"
                f" library, {counts['refused']} refused before signing, {counts['kept']} kept"
                " pending (resend each with retry=ID).")
        return {"results": results, **counts}, text

    # --- personal lists ---------------------------------------------------------------------

    def _personal(self, action: str, revisions: list[str]) -> dict[str, Any]:
        _target, roots, state, changed = apply_action(self.session, action, revisions)
        return {"changed": changed, "roots": roots,
                "state_id": state["id"] if state else None, **_lists_of(state)}

    def personal_tool(self, action: str) -> Callable[[dict[str, Any]], Any]:
        async def run(args: dict[str, Any]) -> Answer:
            answer = await self._sync(self._personal, action, args["revisions"])
            lists = ("following", "saved")
            return answer, (f"{action}: {'changed' if answer['changed'] else 'unchanged'};"
                            + ", ".join(f" {len(answer[k])} {k}" for k in lists) + ".")
        return run

    async def lists(self, args: dict[str, Any]) -> Answer:
        budget = Budget.of(args)
        offset = int(args.get("offset", 0))
        state = await self._sync(_personal_read, self.session)
        lists = _lists_of(state)
        everything: list[dict[str, Any]] = [
            {"list": name, "root": root} for name in ("following", "saved") for root in lists[name]]
        page = everything[offset:offset + LISTS_PAGE]
        if budget.detail != "ids":  # each root's current head, checked like any read
            heads = [orjson.loads(await self.reader.source.get(f"/api/entries/{i['root']}/head"))
                     for i in page]
            checked = await self.reader.verifier.check(heads, with_proof=False)
            page = [{**item, "head": {**record_view(head, budget.detail), **verdict.to_json()}}
                    for item, head, verdict in zip(page, heads, checked.verdicts, strict=True)]
        answer: dict[str, Any] = {"state_id": state["id"] if state else None,
                                  "following_total": len(lists["following"]),
                                  "saved_total": len(lists["saved"]), "offset": offset}
        answer["items"] = fit(page, budget.max_bytes - size(answer) - TEXT_RESERVE,
                              shrink_first=None)
        kept = len(answer["items"])
        answer["omitted"] = len(page) - kept
        end = offset + kept
        answer["next_offset"] = end if end < len(everything) else None
        return answer, f"lists: {kept} of {len(everything)} roots. {UNTRUSTED_NOTE}"

    # --- the tool list ----------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        content = content_property()
        revisions = {"type": "array", "items": HEX64, "minItems": 1, "maxItems": MAX_ROOTS,
                     "uniqueItems": True,
                     "description": "revision ids; their objects' roots go to the list"}
        retry = {**HEX64, "description": "the id of a pending envelope to resend, byte for byte"}
        many = {"type": "array", "items": content, "minItems": 1, "maxItems": MAX_CONTRIBUTIONS,
                "description": "several contents, published in order in one batch (a later one"
                " may name an earlier one's id, which it has once published: publish them in"
                " separate calls for that); one result each"}
        write: list[Tool] = [
            Tool("validate", "Dry run: sign the content with your worker key and ask the"
                 " library whether it would admit it (every check, nothing stored). A refusal is"
                 " the library's typed error {error, code, details}: correct and retry.",
                 {"type": "object", "properties": {"content": content},
                  "required": ["content"], "additionalProperties": False},
                 self.validate, read_only=False,
                 check_schema={"type": "object", "properties": {"content": {"type": "object"}},
                               "required": ["content"], "additionalProperties": False}),
            Tool("publish", "Sign the content with your worker key and publish it. The signed"
                 " envelope is kept as a pending file before sending: if the library's answer"
                 " is uncertain it stays pending and publish with retry=ID resends those exact"
                 " bytes (never re-signed); a definitive refusal is returned as the library's"
                 " typed error and never resent. With contributions (several contents) they"
                 " go in one batch and each gets its own result: admitted, rejected (the"
                 " library's typed error), refused (before signing) or kept.",
                 {"type": "object",
                  "properties": {"content": content, "contributions": many, "retry": retry},
                  "additionalProperties": False},
                 self.publish, read_only=False,
                 check_schema={"type": "object",
                               "properties": {"content": {"type": "object"},
                                              "contributions": {
                                                  "type": "array", "items": {"type": "object"},
                                                  "minItems": 1,
                                                  "maxItems": MAX_CONTRIBUTIONS},
                                              "retry": retry},
                               "additionalProperties": False}),
        ]
        for action, verb in (("follow", "Follow"), ("unfollow", "Stop following"),
                             ("save", "Save"), ("unsave", "Remove from saved")):
            write.append(Tool(
                action, f"{verb} objects in your private lists (signed compare-and-set; never"
                " published to the public log).",
                {"type": "object", "properties": {"revisions": revisions},
                 "required": ["revisions"], "additionalProperties": False},
                self.personal_tool(action), read_only=False))
        write.append(Tool(
            "lists", "Your private lists: the roots you follow and the roots you saved.",
            {"type": "object", "properties": {
                "offset": OFFSET, "max_bytes": BUDGET_PROPERTIES["max_bytes"],
                "detail": BUDGET_PROPERTIES["detail"]},
             "additionalProperties": False},
            self.lists))
        return [*read_tools(self.reader), *write]

