"""The participant's session as MCP tools, served on stdio (``alexandria mcp``, ``cli/mcp.py``).

The participant's own configuration, exactly as every other command reads it
(``$ALEXANDRIA_HOME``…: ``cli/config.py``): the pinned genesis every answer is checked against,
the worker key and certificate that sign, the pending files.  The read tools are the ones
``/mcp`` serves (``api/mcp/tools.py``); the write tools are here because they need the key:

- ``validate`` signs the content and asks the library for its dry run (nothing is stored);
- ``publish`` signs it, writes the envelope to ``pending/`` *before* sending, and delivers it
  with ``pending.Outbox`` — the CLI's semantics: admitted → ``published/``; no definitive answer
  → kept, and ``publish`` with ``retry: ID`` resends those exact bytes, never re-signed; a
  definitive rejection → ``rejected/`` with the library's typed error, never resent;
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

from alexandria.api.mcp import untrusted as checked
from alexandria.api.mcp.answers import (
    TEXT_RESERVE,
    UNTRUSTED_NOTE,
    Budget,
    fit,
    size,
)
from alexandria.api.mcp.schemas import BUDGET_PROPERTIES, Answer, Tool
from alexandria.api.mcp.server import build_server
from alexandria.api.mcp.source import ClientSource
from alexandria.api.mcp.tools import Reader, checked_view, library_resources, read_tools
from alexandria.api.openapi import HEX64, OFFSET
from alexandria.cli.pending import Outbox, Pending
from alexandria.cli.personal import _lists_of, _personal_read, apply_action
from alexandria.cli.session import Session
from alexandria.client import Unreachable
from alexandria.core.schema import content_schema
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError, BadRequest
from alexandria.rules.personal import MAX_ROOTS

T = TypeVar("T")
LISTS_PAGE = 50  # roots per lists call, as the read routes page


async def serve_stdio(session: Session, witnesses: WitnessPolicy | None = None) -> None:
    agent = Agent(session, witnesses)
    server = build_server("alexandria", agent.tools(), library_resources(agent.reader))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class KeptPending(AlexandriaError):
    """``publish`` had no definitive answer: the signed envelope stays pending."""

    default_code = "UNREACHABLE"


def _kept(pending: Pending, error: AlexandriaError) -> KeptPending:
    """No definitive answer: the envelope stays pending, and the agent is told how to resend.
    The sentence is this server's; what the library or the network said is under
    ``details.untrusted``."""
    code, status, said = checked.library_parts(error)
    return KeptPending(
        f"no definitive answer from the library ({code}); the signed envelope is kept as"
        f" pending {pending.id}; call publish with retry to resend exactly these bytes (never"
        " re-signed)", code, status=status, pending=pending.id, retry={"retry": pending.id},
        untrusted=said)


def content_property() -> dict[str, Any]:
    """The write contract's ``content_schema``, as the ``content`` argument."""
    schema = {k: v for k, v in content_schema().items() if k != "$schema"}
    schema["description"] = ("the contract's {kind, title, body, links, previous}; object"
                             " bodies as JSON objects (they are encoded when signed)")
    return schema


def _state_id(state: dict[str, Any] | None) -> str | None:
    return None if state is None else checked.hex64(state.get("id"), "state.id")


def _checked_lists(state: dict[str, Any] | None) -> dict[str, list[str]]:
    """The lists of the personal state the library holds, every root checked as an id."""
    return {name: [checked.hex64(root, f"{name}[]") for root in roots]
            for name, roots in _lists_of(state).items()}


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
        answer = {"valid": True, "dry_run": True, "id": checked.hex64(result.get("id"), "id"),
                  "root": checked.hex64(result.get("root"), "root"),
                  "already_admitted": checked.flag(result.get("already_admitted"),
                                                   "already_admitted")}
        text = ("validate: the library would admit this contribution (nothing was stored;"
                " publish signs it anew)." if not answer["already_admitted"] else
                "validate: the library already holds this exact contribution.")
        return answer, text

    async def publish(self, args: dict[str, Any]) -> Answer:
        if ("content" in args) == ("retry" in args):
            raise BadRequest("publish takes either content or retry", "BAD_ARGUMENT",
                             allowed=["content", "retry"])

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
        result = await self.reader.verifier.check([signed], with_proof=False)
        view = checked_view(signed, "ids", result.verdicts[0])
        answer = {**view, "id": pending.id, "created": outcome.created}
        verb = "admitted" if outcome.created else "already admitted (an exact retry)"
        if not view["signature_chain"]:
            code = checked.code(view["failure"]["code"])
            return answer, (f"publish: {verb} as revision {pending.id}, but the record the"
                            f" library answered does not verify ({code}); see 'failure'.")
        return answer, (f"publish: {verb} as revision {pending.id}, log entry"
                        f" {int(view['entry'])} (leaf index {int(view['leaf_index'])}).")

    # --- personal lists ---------------------------------------------------------------------

    def _personal(self, action: str, revisions: list[str]) -> dict[str, Any]:
        _target, roots, state, changed = apply_action(self.session, action, revisions)
        return {"changed": checked.flag(changed, "changed"),
                "roots": [checked.hex64(r, "roots[]") for r in roots],
                "state_id": _state_id(state), **_checked_lists(state)}

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
        lists = _checked_lists(state)
        everything: list[dict[str, Any]] = [
            {"list": name, "root": root} for name in ("following", "saved") for root in lists[name]]
        page = everything[offset:offset + LISTS_PAGE]
        if budget.detail != "ids":  # each root's current head, checked like any read
            heads = [orjson.loads(await self.reader.source.get(f"/api/entries/{i['root']}/head"))
                     for i in page]
            result = await self.reader.verifier.check(heads, with_proof=False)
            page = [{**item, "head": checked_view(head, budget.detail, verdict)}
                    for item, head, verdict in zip(page, heads, result.verdicts, strict=True)]
        answer: dict[str, Any] = {"state_id": _state_id(state),
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
                 " typed error and never resent.",
                 {"type": "object", "properties": {"content": content, "retry": retry},
                  "additionalProperties": False},
                 self.publish, read_only=False,
                 check_schema={"type": "object",
                               "properties": {"content": {"type": "object"}, "retry": retry},
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

