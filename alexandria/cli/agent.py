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
import re
from collections.abc import Callable
from dataclasses import dataclass
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
    plural,
    size,
)
from alexandria.api.mcp.schemas import BUDGET_PROPERTIES, Answer, Tool
from alexandria.api.mcp.server import build_server
from alexandria.api.mcp.source import ClientSource
from alexandria.api.mcp.tools import Reader, checked_view, library_resources, read_tools
from alexandria.api.openapi import HEX64, OFFSET
from alexandria.cli.config import Home, SetupRequired
from alexandria.cli.duplicates import DuplicateContribution, find_duplicate
from alexandria.cli.idempotency import Keys, content_digest
from alexandria.cli.pending import Outbox, Outcome, Pending, batch_chunks
from alexandria.cli.personal import _lists_of, _personal_read, apply_action
from alexandria.cli.session import Session
from alexandria.client import Unreachable
from alexandria.core.contract import write_contract
from alexandria.core.schema import content_schema
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.core.trust import Genesis
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError, Failed, Malformed, Refused
from alexandria.rules.personal import MAX_ROOTS

T = TypeVar("T")
LISTS_PAGE = 50  # roots per lists call, as the read routes page
#: contents one publish call takes (its arguments hold at most 2,000 elements in all)
MAX_CONTRIBUTIONS = 100


async def serve_stdio(session: Session, genesis: Genesis, login: Login,
                      witnesses: WitnessPolicy | None = None) -> None:
    agent = Agent(session, genesis, login, witnesses)
    server = build_server("alexandria", agent.tools(),
                          [*library_resources(agent.reader), write_schema_resource()])
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


@dataclass(frozen=True)
class Login:
    """The library this server reads (``library``, checked against ``pin``), how that pin was
    chosen, and the config home whose worker key signs — when it is logged in to the library
    of that genesis.  Checked at every call, so a ``login`` made while the server runs counts."""

    home: Home
    library: str
    pin: str
    pinned_by: str
    """``home`` (the home's own pin), ``argument`` (--genesis-pin) or ``trust on first use``."""

    @property
    def command(self) -> str:
        return f"alexandria login {self.library} --genesis {self.pin}"

    def problem(self) -> str | None:
        """Why the home cannot sign for this library, or ``None`` when it can."""
        known = self.home.library_or_none()
        if known is None:
            return f"{self.home.root} has no login"
        if known.pin != self.pin:
            return (f"{self.home.root} is logged in to another library ({known.url}, genesis"
                    f" {known.pin})")
        if not self.home.key_path.exists():
            return f"{self.home.root} has no worker key"
        if not self.home.certificate_path.exists():
            return f"{self.home.root} has no certificate yet (the login is not approved)"
        return None


class NotLoggedIn(SetupRequired):
    """A tool that signs, called by a server whose home has no login for its library."""

    default_code = "NOT_LOGGED_IN"


class KeptPending(Failed):
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


WRITE_SCHEMA_URI = "alexandria://write-schema"


def content_property() -> dict[str, Any]:
    """The ``content`` argument: the write contract's ``content_schema`` without its rules per
    kind (``allOf``), which ``validate`` and ``publish`` share through one resource."""
    schema = content_schema()
    properties = dict(schema["properties"])
    properties["body"] = {"type": ["object", "string"],
                          "description": "string for replies and votes, else object"}
    return {"type": "object", "properties": properties, "required": schema["required"],
            "additionalProperties": False}


def link_rules() -> str:
    """The write contract's sentences about links, as the contract words them (read from the
    contract when the server starts, never copied): each sentence of its ``state_rules`` that
    names a link, with the sentence before when it goes on from it ("Their links…")."""
    kept: list[str] = []
    for rule in write_contract()["state_rules"]:
        sentences = [x.strip() for x in re.split(r"(?<=\.)\s+", rule) if x.strip()]
        for i, sentence in enumerate(sentences):
            if "link" not in sentence:
                continue
            if i and re.match(r"(Their|Only the target author accepts it)\b", sentence) \
                    and sentences[i - 1] not in kept:
                kept.append(sentences[i - 1])
            kept.append(sentence)
    return " ".join(kept)


def write_schema_resource() -> tuple[str, str, str, Callable[[], Any]]:
    async def read() -> str:
        contract = write_contract()
        return orjson.dumps({"content_schema": contract["content_schema"],
                             "state_rules": contract["state_rules"]}).decode()

    return (WRITE_SCHEMA_URI, "write-schema", "The write contract validate and publish take:"
            " its content_schema (each kind's body) and state_rules (links per kind).", read)


def _state_id(state: dict[str, Any] | None) -> str | None:
    return None if state is None else checked.hex64(state.get("id"), "state.id")


def _checked_lists(state: dict[str, Any] | None) -> dict[str, list[str]]:
    """The lists of the personal state the library holds, every root checked as an id."""
    return {name: [checked.hex64(root, f"{name}[]") for root in roots]
            for name, roots in _lists_of(state).items()}


class Agent:
    """The participant's session as MCP tools."""

    def __init__(self, session: Session, genesis: Genesis, login: Login,
                 witnesses: WitnessPolicy | None = None) -> None:
        self.session = session
        self.login = login
        self.reader = Reader(ClientSource(session.client), genesis, witnesses,
                             pinned_by_reader=session.pinned)
        self.outbox = Outbox(session.home)
        self.keys = Keys(session.home)

    async def _sync(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    def _signer(self, tool: str) -> None:
        """Refuse a tool that signs when the home cannot sign for this library."""
        problem = self.login.problem()
        if problem is not None:
            raise NotLoggedIn(
                f"{tool} signs with your worker key, and {problem}: run `{self.login.command}`"
                " with ALEXANDRIA_HOME set to the home this server uses (the read tools work"
                " without)", home=str(self.login.home.root), library=self.login.library,
                login=self.login.command)

    # --- whoami -----------------------------------------------------------------------------

    def _whoami(self) -> Answer:
        login = self.login
        answer: dict[str, Any] = {"library": login.library, "pin": login.pin,
                                  "pinned_by": login.pinned_by,
                                  "home": str(login.home.root), "logged_in": False}
        problem = login.problem()
        cert = None
        if problem is None:
            try:
                cert = self.session.certificate()
            except AlexandriaError as exc:
                problem = f"its certificate does not check ({checked.code(exc.code)})"
        if cert is None:
            answer.update(problem=problem, login=login.command)
            return answer, (f"whoami: not logged in ({problem}); reading works, publishing"
                            f" needs `{login.command}`. Library {login.library}, pin"
                            f" {login.pin} ({login.pinned_by}).")
        valid = cert.valid_at(now_ms())
        answer.update(logged_in=True, actor=cert.actor, worker=cert.worker,
                      scopes=list(cert.scopes), certificate={
                          "authority": cert.authority,
                          "not_before": format_ms(cert.not_before),
                          "not_after": format_ms(cert.not_after), "valid_now": valid})
        state = "valid" if valid else "NOT valid now"
        return answer, (f"whoami: actor {cert.actor}, worker {cert.worker}, scopes"
                        f" {', '.join(cert.scopes)}; certificate {state} until"
                        f" {format_ms(cert.not_after)}. Library {login.library}, pin"
                        f" {login.pin} ({login.pinned_by}).")

    async def whoami(self, _args: dict[str, Any]) -> Answer:
        return await self._sync(self._whoami)

    # --- validate, publish ------------------------------------------------------------------

    async def validate(self, args: dict[str, Any]) -> Answer:
        self._signer("validate")

        def run() -> tuple[dict[str, Any], str | None]:
            signed = self.session.sign({"links": [], "previous": "", **args["content"]})
            return (self.session.client.dry_run(signed.envelope),
                    find_duplicate(self.session.home, signed.record))

        result, duplicate = await self._sync(run)
        answer = {"valid": True, "dry_run": True, "id": checked.hex64(result.get("id"), "id"),
                  "root": checked.hex64(result.get("root"), "root"),
                  "already_admitted": checked.flag(result.get("already_admitted"),
                                                   "already_admitted"),
                  "duplicate_of": duplicate}
        text = ("validate: the library would admit this contribution (nothing was stored;"
                " publish signs it anew)." if not answer["already_admitted"] else
                "validate: the library already holds this exact contribution.")
        if duplicate is not None:
            text += (f" This home already has an identical contribution, {duplicate}: publish"
                     " refuses it unless allow_duplicate is true.")
        return answer, text

    def _duplicate(self, rev: str) -> DuplicateContribution:
        pending = (self.outbox.home.pending_dir / f"{rev}.json").exists()
        details: dict[str, Any] = {"existing": rev, "state": "pending" if pending
                                   else "published", "allow": {"allow_duplicate": True}}
        if pending:
            details["retry"] = {"retry": rev}
        way = ("it is still pending: call publish with retry to resend it" if pending
               else "read it with get")
        return DuplicateContribution(
            f"this home already has an identical contribution (same kind, title, body, links"
            f" and previous): revision {rev}; {way}, or pass allow_duplicate=true to publish"
            " another identical entry", **details)

    def _prepare(self, args: dict[str, Any]) -> Pending:
        """The envelope to deliver: the pending one to retry, the one an idempotency key is
        bound to, or the content signed anew (refused when it duplicates one of the home's)."""
        if "retry" in args:
            rev = args["retry"]
            if rev not in {p.id for p in self.outbox.pending()}:
                raise Malformed(f"{rev} is not pending", "NOT_PENDING", id=rev)
            return self.outbox.load(rev)
        key = args.get("idempotency_key")
        if key is not None:
            entry = self.keys.get(key)
            if entry is not None and (self.outbox.home.pending_dir
                                      / f"{entry.get('id')}.json").exists():
                return self.outbox.load(str(entry["id"]))
        content = {"links": [], "previous": "", **args["content"]}
        signed = self.session.sign(content)
        if not args.get("allow_duplicate", False):
            duplicate = find_duplicate(self.session.home, signed.record)
            if duplicate is not None:
                raise self._duplicate(duplicate)
        meta = {"kind": content["kind"], "title": content["title"],
                "library": self.session.library.url, "via": "mcp"}
        pending = self.outbox.write(signed.id, signed.envelope, meta)
        if key is not None:  # bound before sending: a repeat resends, never re-signs
            self.keys.put(key, {"digest": content_digest(args["content"]), "id": signed.id})
        return pending

    def _replayed(self, key: str, content: dict[str, Any]) -> Answer | None:
        """The first outcome of ``key``, when it is final."""
        entry = self.keys.get(key)
        if entry is None:
            return None
        if entry.get("digest") != content_digest(content):
            raise Malformed(
                f"idempotency_key {key!r} was used for other content (revision"
                f" {entry.get('id')}); use a new key for new content",
                "IDEMPOTENCY_KEY_REUSED", revision=entry.get("id"))
        outcome = entry.get("outcome")
        if not isinstance(outcome, dict):
            return None
        if "error" in outcome:
            doc = outcome["error"]
            raise Refused(doc["error"], doc["code"], **{
                **doc.get("details", {}), "idempotent_replay": True})
        return ({**outcome["answer"], "idempotent_replay": True},
                f"{outcome['text']} (The first outcome of this idempotency_key: nothing was"
                " sent again.)")

    async def publish(self, args: dict[str, Any]) -> Answer:
        given = [k for k in ("content", "contributions", "retry") if k in args]
        if len(given) != 1:
            raise Malformed("publish takes one of content, contributions or retry",
                            "BAD_ARGUMENT", allowed=["content", "contributions", "retry"])
        if "content" not in args and ({"idempotency_key", "allow_duplicate"} & set(args)):
            raise Malformed("idempotency_key and allow_duplicate go with content",
                            "BAD_ARGUMENT", allowed=given)
        self._signer("publish")
        if "contributions" in args:
            return await self._publish_many(args["contributions"])
        key = args.get("idempotency_key")
        if key is not None:
            replayed = await self._sync(self._replayed, key, args["content"])
            if replayed is not None:
                return replayed
        try:
            admitted = None if key is None else await self._sync(self._admitted_for, key)
            if admitted is not None:  # admitted, but its answer was never remembered
                answer, text = await self._answer(admitted[0], admitted[1], False)
            else:
                answer, text = await self._deliver(await self._sync(self._prepare, args))
        except AlexandriaError as exc:
            if key is not None and not isinstance(exc, KeptPending):
                self._remember(key, args, error=exc)
            raise
        if key is not None:
            self._remember(key, args, answer=(answer, text))
        return answer, text

    def _remember(self, key: str, args: dict[str, Any], answer: Answer | None = None,
                  error: AlexandriaError | None = None) -> None:
        """A definitive first outcome of ``key``: the answer, or a refusal the library (not
        the arguments) gave for the content signed for it."""
        entry = self.keys.get(key)
        if entry is None:  # refused before anything was signed: nothing to remember
            return
        if error is not None:
            if checked.is_from_library(error):
                error = checked.from_library(error)
            outcome: dict[str, Any] = {"error": error.to_json()}
        else:
            assert answer is not None
            outcome = {"answer": answer[0], "text": answer[1]}
        self.keys.put(key, {**entry, "digest": content_digest(args["content"]),
                            "outcome": outcome})

    async def _deliver(self, pending: Pending) -> Answer:
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
        return await self._answer(pending.id, outcome.signed, outcome.created)

    def _admitted_for(self, key: str) -> tuple[str, bytes] | None:
        """The revision an idempotency key is bound to and its signed record, when it was
        admitted (``published/``) and is no longer pending — say the server stopped between
        the library's answer and remembering it."""
        entry = self.keys.get(key)
        rev = entry.get("id") if entry is not None else None
        if not isinstance(rev, str) or not checked.is_hex64(rev) \
                or (self.outbox.home.pending_dir / f"{rev}.json").exists():
            return None
        signed = self.outbox.published(rev)
        return None if signed is None else (rev, signed)

    async def _answer(self, rev: str, signed_bytes: bytes, created: bool) -> Answer:
        signed = orjson.loads(signed_bytes)
        result = await self.reader.verifier.check([signed], with_proof=False)
        view = checked_view(signed, "ids", result.verdicts[0])
        answer = {**view, "id": rev, "created": created}
        verb = "admitted" if created else "already admitted (an exact retry)"
        if not view["signature_chain"]:
            code = checked.code(view["failure"]["code"])
            return answer, (f"publish: {verb} as revision {rev}, but the record the"
                            f" library answered does not verify ({code}); see 'failure'.")
        return answer, (f"publish: {verb} as revision {rev}, log entry"
                        f" {int(view['entry'])} (leaf index {int(view['leaf_index'])}).")

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
                answered = outcomes if len(outcomes) == len(pendings) else None
                self.outbox.settle(admitted, answered)
                if answered is None:  # a failure while sending: what was not answered stays
                    self.outbox.keep(pendings)
            for (i, _e, _m), outcome in zip(signed, outcomes, strict=True):
                results[i] = {"id": outcome.pending.id, "status": outcome.status}
                if outcome.status == "admitted":
                    record = orjson.loads(outcome.signed)
                    entry = checked.count(
                        checked.mapping(record.get("admission"), "admission").get("sequence"),
                        "admission.sequence", 1)
                    results[i].update(created=outcome.created,
                                      root=checked.hex64(record.get("root"), "root"),
                                      entry=entry, leaf_index=entry - 1)
                    results[i]["signed"] = record
                elif outcome.error is not None:
                    error = outcome.error
                    if checked.is_from_library(error):  # the library's words stay untrusted
                        error = checked.from_library(error)
                    results[i]["error"] = error.to_json()
                    if outcome.status == "kept":
                        results[i]["retry"] = {"retry": outcome.pending.id}
            return results

        results = await self._sync(send)
        records = [r.pop("signed") for r in results if "signed" in r]
        if records:
            verified = await self.reader.verifier.check(records, with_proof=False)
            verdicts = iter(verified.verdicts)
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
        return {"changed": checked.flag(changed, "changed"),
                "roots": [checked.hex64(r, "roots[]") for r in roots],
                "state_id": _state_id(state), **_checked_lists(state)}

    def personal_tool(self, action: str) -> Callable[[dict[str, Any]], Any]:
        async def run(args: dict[str, Any]) -> Answer:
            self._signer(action)
            answer = await self._sync(self._personal, action, args["revisions"])
            lists = ("following", "saved")
            return answer, (f"{action}: {'changed' if answer['changed'] else 'unchanged'};"
                            + ", ".join(f" {len(answer[k])} {k}" for k in lists) + ".")
        return run

    async def lists(self, args: dict[str, Any]) -> Answer:
        self._signer("lists")
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
        return answer, (f"lists: {kept} of {len(everything)} {plural(len(everything), 'root')}."
                        f" {UNTRUSTED_NOTE}")

    # --- the tool list ----------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        content = content_property()
        revisions = {"type": "array", "items": HEX64, "minItems": 1, "maxItems": MAX_ROOTS,
                     "uniqueItems": True}
        many = {"type": "array", "items": {"type": "object"}, "minItems": 1,
                "maxItems": MAX_CONTRIBUTIONS,
                "description": "several contents, in order, in one batch"}
        retry = {**HEX64, "description": "a pending id to resend"}
        key = {"type": "string", "minLength": 1, "maxLength": 128,
               "pattern": "^[A-Za-z0-9._:-]+$",
               "description": "a repeated call with it returns the first outcome"}
        allow = {"type": "boolean", "default": False,
                 "description": "else content identical to one this home published or holds"
                 " pending is refused"}
        write: list[Tool] = [
            Tool("whoami", "Who signs: actor, worker key, scopes, certificate validity, library"
                 " and pin; or why nobody can, and the command that logs in.",
                 {"type": "object", "properties": {}, "additionalProperties": False},
                 self.whoami),
            Tool("validate", "Dry run of publish: would the library admit this content? Nothing"
                 " is stored; a refusal is the library's typed error.",
                 {"type": "object", "properties": {"content": {
                     "type": "object", "description": "as publish's content"}},
                  "required": ["content"], "additionalProperties": False},
                 self.validate, read_only=False,
                 check_schema={"type": "object", "properties": {"content": {"type": "object"}},
                               "required": ["content"], "additionalProperties": False}),
            Tool("publish", "Sign with your worker key and publish. Kept pending first: after an"
                 " uncertain answer, retry=ID resends the same bytes. contributions: several"
                 " in one batch, one result each. Bodies per kind:"
                 f" {WRITE_SCHEMA_URI}. Links, in the write contract's words: {link_rules()}",
                 {"type": "object", "properties": {
                     "content": content, "contributions": many, "retry": retry,
                     "idempotency_key": key, "allow_duplicate": allow},
                  "additionalProperties": False},
                 self.publish, read_only=False,
                 check_schema={"type": "object",
                               "properties": {"content": {"type": "object"},
                                              "contributions": {
                                                  "type": "array", "items": {"type": "object"},
                                                  "minItems": 1,
                                                  "maxItems": MAX_CONTRIBUTIONS},
                                              "retry": retry,
                                              "idempotency_key": key,
                                              "allow_duplicate": {"type": "boolean"}},
                               "additionalProperties": False}),
        ]
        for action, verb in (("follow", "Follow"), ("unfollow", "Stop following"),
                             ("save", "Save"), ("unsave", "Remove from saved")):
            write.append(Tool(
                action, f"{verb} objects in your private lists (never published).",
                {"type": "object", "properties": {"revisions": revisions},
                 "required": ["revisions"], "additionalProperties": False},
                self.personal_tool(action), read_only=False))
        write.append(Tool(
            "lists", "The roots you follow and the roots you saved.",
            {"type": "object", "properties": {
                "offset": OFFSET, "max_bytes": BUDGET_PROPERTIES["max_bytes"],
                "detail": BUDGET_PROPERTIES["detail"]},
             "additionalProperties": False},
            self.lists))
        return [*read_tools(self.reader), *write]

