"""Personal lists: ``follow``, ``unfollow``, ``save``, ``unsave`` and ``lists``.

The contract's ``personal_lists``: a ``personal-read`` (a fresh 64-hex nonce) returns the signed
state; a ``personal-state`` replaces it by compare-and-set on ``previous``.  On a 409 the change
is applied again to the state the library returned, and signed again.
"""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from alexandria.cli.participant import command, names_file_option, session_of
from alexandria.cli.session import Session, body_of
from alexandria.cli.terminal import emit_json, note, one_line, say
from alexandria.client import ServerError
from alexandria.errors import Conflict

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    for name, verb in (("follow", "follow"), ("unfollow", "stop following"),
                       ("save", "save"), ("unsave", "remove from saved")):
        p = command(sub, name, f"{verb} objects (personal list)", cmd_personal)
        p.add_argument("revisions", nargs="+", metavar="REV", help="revision ids or names")
        p.set_defaults(personal_action=name)
        names_file_option(p)
    command(sub, "lists", "show what you follow and what you saved", cmd_lists)


LISTS = ("following", "saved")


def _personal_read(session: Session) -> dict[str, Any] | None:
    signed = session.sign({"kind": "personal-read", "title": "",
                           "body": {"nonce": secrets.token_hex(32)}, "links": [],
                           "previous": ""})
    state: dict[str, Any] | None = session.client.personal(signed.envelope).get("state")
    return state


def _lists_of(state: dict[str, Any] | None) -> dict[str, list[str]]:
    if state is None:
        return {name: [] for name in LISTS}
    body = body_of(state["record"])
    return {name: list(body.get(name, [])) for name in LISTS}


def _update(session: Session, change: Callable[[dict[str, list[str]]], dict[str, list[str]]]
            ) -> tuple[dict[str, Any] | None, bool]:
    """Compare-and-set: sign the change on the current state; on a 409 apply it again on the
    state the library returned."""
    state = _personal_read(session)
    for _attempt in range(5):
        current = _lists_of(state)
        wanted = change({k: list(v) for k, v in current.items()})
        if wanted == current:
            return state, False
        signed = session.sign({"kind": "personal-state", "title": "", "body": wanted,
                               "links": [], "previous": state["id"] if state else ""})
        try:
            return session.client.personal(signed.envelope).get("state"), True
        except ServerError as exc:
            if exc.http_status != 409:
                raise
            fresh = exc.details.get("state", "absent")
            state = _personal_read(session) if fresh == "absent" else fresh
    raise Conflict("your lists kept changing elsewhere; try again", "PERSONAL_BUSY")


def apply_action(session: Session, action: str, revisions: list[str]
                 ) -> tuple[str, list[str], dict[str, Any] | None, bool]:
    """``follow``/``unfollow``/``save``/``unsave`` the objects of ``revisions`` (revision ids):
    their list, their roots, the state now and whether it changed.  The CLI and the MCP tools
    both call it."""
    target = "following" if action in ("follow", "unfollow") else "saved"
    adding = action in ("follow", "save")
    roots = [orjson.loads(session.client.entry(rev).content)["root"] for rev in revisions]

    def change(lists: dict[str, list[str]]) -> dict[str, list[str]]:
        items = lists[target]
        for root in roots:
            if adding and root not in items:
                items.append(root)
            elif not adding and root in items:
                items.remove(root)
        return lists

    state, changed = _update(session, change)
    return target, roots, state, changed


def cmd_personal(args: argparse.Namespace) -> int:
    session = session_of(args)
    try:
        revisions = [session.revision(text) for text in args.revisions]
        target, roots, state, changed = apply_action(session, args.personal_action, revisions)
    finally:
        session.close()
    lists = _lists_of(state)
    if args.json:
        emit_json({"changed": changed, "state": state, **lists})
        return 0
    for root in roots:
        say(root)
    note(f"{target}: {len(lists[target])} object{'s' if len(lists[target]) != 1 else ''}"
         + ("" if changed else " (unchanged)"))
    return 0


def cmd_lists(args: argparse.Namespace) -> int:
    session = session_of(args)
    try:
        state = _personal_read(session)
        lists = _lists_of(state)
        if args.json:
            emit_json({"state": state, **lists})
            return 0
        for name in LISTS:
            say(f"{name} ({len(lists[name])})")
            for root in lists[name]:
                head = orjson.loads(session.client.entry(root, head=True).content)["record"]
                say(f"  {root}  {head['kind']:<12} {one_line(head['title'], 60)}")
    finally:
        session.close()
    return 0
