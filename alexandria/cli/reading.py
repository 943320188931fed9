"""Reading commands: ``get REV``, ``search Q``, ``object REV`` and ``changes --root R``.

``get`` checks what it fetched against the pinned genesis; ``changes`` saves its cursor after
every page, resumes from it on the next run (also after a restart) and starts again from the
beginning, saying so, when the library answers 409 ``resync_required``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from alexandria.cli.participant import command, names_file_option, session_of
from alexandria.cli.session import Session, body_of, check_signed_record
from alexandria.cli.terminal import (
    emit_json,
    emit_raw,
    note,
    one_line,
    safe_json,
    say,
    say_lines,
    short,
)
from alexandria.errors import Malformed, ResyncRequired

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    p = command(sub, "get", "fetch a signed record and check it against the pinned genesis",
                cmd_get, examples="  alexandria get claim --head\n"
                "  alexandria --json get 3f2a…64hex --library https://library.example")
    p.add_argument("revision", metavar="REV", help="revision id or a name from the names file")
    p.add_argument("--head", action="store_true", help="the current head of REV's object")
    names_file_option(p)

    p = command(sub, "search", "search the library's catalogue", cmd_search,
                examples="  alexandria search arithmetic\n"
                "  alexandria search --kind claim --sort top\n"
                "  ALEXANDRIA_LIBRARY=https://library.example alexandria search successor")
    p.add_argument("query", metavar="Q", nargs="?", default="", help="query tokens")
    p.add_argument("--kind", help="only this kind")
    p.add_argument("--sort", choices=("relevance", "new", "top"),
                   help="default: relevance with a query, new without")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--full", action="store_true", help="signed records instead of summaries")

    p = command(sub, "object", "show an object with a section of what surrounds it", cmd_object)
    p.add_argument("revision", metavar="REV", help="revision id or a name")
    p.add_argument("--section", default="all",
                   choices=("all", "children", "related", "history", "graph", "discussions",
                            "knowledge"))
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--exact", action="store_true", help="this exact revision, not the head")
    names_file_option(p)

    p = command(sub, "changes", "print what changed under a root, resuming where you left off",
                cmd_changes,
                "Print the revisions of ROOT and everything under it, in admission order. The"
                " cursor is saved after each page, so the next run continues where this one"
                " stopped (also after a restart).",
                examples="  alexandria changes --root space\n"
                "  alexandria changes --root space --follow --interval 5")
    p.add_argument("--root", required=True, metavar="R", help="root id or a name")
    p.add_argument("--follow", action="store_true", help="keep polling for new changes")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    p.add_argument("--limit", type=int, default=50, help="items per page (1..50)")
    p.add_argument("--reset", action="store_true", help="forget the saved cursor first")
    names_file_option(p)


def describe(item: dict[str, Any]) -> str:
    """One line for a signed record or a catalogue summary."""
    record = item.get("record", item)
    kind, title = record.get("kind", "?"), record.get("title", "")
    seq = item.get("admission", {}).get("sequence")
    prefix = f"entry {seq:<6} " if isinstance(seq, int) else ""
    return f"{prefix}{item.get('id', '?')}  {kind:<12} {one_line(title or '(untitled)', 60)}"


def cmd_get(args: argparse.Namespace) -> int:
    session = session_of(args)
    try:
        rev = session.revision(args.revision)
        answer = session.client.entry(rev, head=args.head)
        signed = orjson.loads(answer.content)
        check_signed_record(signed, session.genesis())
    finally:
        session.close()
    if args.json:
        emit_raw(answer.content)
        return 0
    record, admission = signed["record"], signed["admission"]
    say(f"{signed['id']}  {record['kind']} “{record['title']}”")
    rows = [("root", signed["root"]), ("author", record["author"]),
            ("authored", record["authored_at"]),
            ("admitted", f"entry {admission['sequence']} at {admission['admitted_at']}"),
            ("previous", record["previous"] or "—")]
    rows += [("link", f"{lk['relation']} → {lk['target']}") for lk in record["links"]]
    pin = short(session.genesis().pin)
    rows.append(("verified", f"signatures chain to the pinned genesis {pin}" if session.pinned
                 else f"signatures chain to the library's own genesis {pin} (not pinned:"
                 " pass a pin with `alexandria login` or `worker init --genesis`)"))
    for label, value in rows:
        say(f"  {label:<9} {value}")
    body = body_of(record)
    say("")
    say_lines(body if isinstance(body, str)
              else safe_json(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode("utf-8")))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    session = session_of(args)
    sort = args.sort or ("relevance" if args.query else "new")
    try:
        result = session.client.get_json(
            "/api/catalogue", q=args.query or None, kind=args.kind, sort=sort,
            offset=args.offset, projection="full" if args.full else "summary",
        )
    finally:
        session.close()
    if args.json:
        emit_json(result)
        return 0
    items = result.get("items", [])
    for item in items:
        say(describe(item))
    total, nxt = result.get("total"), result.get("next_offset")
    shown = f"{args.offset + 1}–{args.offset + len(items)}" if items else "none"
    note(f"{shown} of {total} in {result.get('library', 'the library')}"
         + (f" — next page: --offset {nxt}" if nxt is not None else ""))
    return 0


def cmd_object(args: argparse.Namespace) -> int:
    session = session_of(args)
    try:
        rev = session.revision(args.revision)
        result = session.client.get_json(
            f"/api/objects/{rev}", section=args.section, offset=args.offset or None,
            exact="true" if args.exact else None,
        )
    finally:
        session.close()
    if args.json:
        emit_json(result)
        return 0
    item = result.get("item") or {}
    record = item.get("record", {})
    say(f"{item.get('id', rev)}  {record.get('kind', '?')} “{record.get('title', '')}”")
    count = result.get("revisions")
    say(f"  head      {result.get('head')}  ({count} revision{'' if count == 1 else 's'})")
    path = [a.get("record", {}).get("title", "?") for a in result.get("ancestors") or []]
    if path:
        say(f"  in        {' › '.join(path)}")
    items = result.get("items") or []
    say(f"  {args.section}: {len(items)} item{'s' if len(items) != 1 else ''}")
    for entry in items:
        say("    " + describe(entry))
    if result.get("next_offset") is not None:
        note(f"next page: --offset {result['next_offset']}")
    return 0


def _pages(session: Session, root: str, limit: int, reset: bool
           ) -> Iterator[list[dict[str, Any]]]:
    """Pages of ``/api/changes`` up to the end of the snapshot; the cursor is saved after each
    page is handed out, so an interruption repeats at most one page and never skips one."""
    pin = session.library.pin
    if reset:
        session.home.drop_cursor(root)
    cursor = session.home.cursor(root, pin)
    while True:
        try:
            page = session.client.get_json("/api/changes", root=root, cursor=cursor, limit=limit)
        except ResyncRequired as exc:
            if cursor is None:
                raise
            note(f"the library cannot continue from the saved cursor ({exc.message}):"
                 " starting again from the beginning")
            session.home.drop_cursor(root)
            cursor = None
            continue
        yield page.get("items", [])
        cursor = page["cursor"]
        session.home.save_cursor(root, pin, cursor, page.get("snapshot"))
        if not page.get("has_more"):
            return


def cmd_changes(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 50:
        raise Malformed("--limit is 1..50", "BAD_PARAMETER")
    session = session_of(args)
    try:
        root = session.revision(args.root)
        if not args.reset and session.home.cursor(root, session.library.pin):
            note(f"resuming from the saved cursor of {short(root)}")
        while True:
            count = 0
            for items in _pages(session, root, args.limit, args.reset):
                count += len(items)
                for item in items:
                    if args.json:
                        emit_json(item)
                    else:
                        say(describe(item))
            args.reset = False
            if not args.follow:
                if not args.json:
                    note(f"{count} change{'s' if count != 1 else ''}; cursor saved"
                         f" — the next run prints only what is new")
                return 0
            time.sleep(args.interval)
    finally:
        session.close()
