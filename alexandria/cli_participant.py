"""Participant commands: the worker key, publishing, pending files and reading.

``worker init`` / ``worker import CERT`` / ``whoami``; ``publish FILE|-``, ``validate FILE|-``,
``pending``, ``retry``; ``get REV``, ``search Q``, ``object REV``, ``changes --root R``; personal
lists (``follow``, ``unfollow``, ``save``, ``unsave``, ``lists``).  The configuration directory
is described in ``config.py``; the pending-file rule in ``pending.py``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from alexandria.client import ServerError, Unreachable
from alexandria.config import DEFAULT_LIBRARY, Home, LibraryConfig, check_name
from alexandria.errors import AlexandriaError, BadRequest
from alexandria.keys import HEX64
from alexandria.participant import (
    Session,
    body_of,
    check_signed_record,
    fetch_genesis,
    parse_content,
    parse_document,
    parse_refs,
    read_input,
)
from alexandria.pending import Outbox, Outcome, Pending
from alexandria.terminal import Progress, emit_json, emit_raw, note, one_line, say, short
from alexandria.timestamps import format_ms, now_ms
from alexandria.trust import parse_worker_certificate

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]

JSON_HELP = "machine-readable output (and typed errors) on stdout"


def _parser(sub: Sub, name: str, help_text: str, func: Callable[[argparse.Namespace], int],
            description: str | None = None) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text,
                                                description=description or help_text)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    p.set_defaults(func=func)
    return p


def _names_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("--names", metavar="FILE",
                   help="names file to resolve NAME from (default: the one in your config home)")


def _names_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", action="append", default=[], metavar="NAME=REV",
                   help="resolve $NAME in the content to REV (repeatable)")
    _names_file(p)


def register(sub: Sub) -> None:
    worker = sub.add_parser("worker", help="create or import your worker key's certificate",
                            description="Your worker key signs what you publish.")
    wsub = worker.add_subparsers(dest="worker_command", metavar="COMMAND", required=True)
    p = _parser(wsub, "init", "create your Ed25519 worker key and pin your library", cmd_init,
                "Create the worker key (mode 0600) in your config home (ALEXANDRIA_HOME, else"
                " XDG_CONFIG_HOME/alexandria, else ~/.config/alexandria), record the library"
                " and its genesis pin, and print the public key for the operator to approve.")
    p.add_argument("--library", metavar="URL", help=f"library URL (default {DEFAULT_LIBRARY})")
    p.add_argument("--genesis", metavar="PIN",
                   help="genesis pin, obtained out of band (without it the library's own"
                   " genesis is pinned on first use)")
    p = _parser(wsub, "import", "import the worker certificate the operator issued", cmd_import)
    p.add_argument("certificate", metavar="CERT", help="certificate file, or - for stdin")

    _parser(sub, "whoami", "show your worker key, actor, scopes and library", cmd_whoami)

    p = _parser(sub, "publish", "sign content and publish it", cmd_publish,
                "Sign content ({kind,title,body,links,previous} as the write contract's"
                " content_schema describes it) and publish it. The signed envelope is written to"
                " pending/ first; when the library cannot be reached it stays there for"
                " `alexandria retry`.")
    p.add_argument("file", metavar="FILE", help="content file, or - for stdin")
    p.add_argument("--name", help="record the published id under NAME in the names file")
    _names_option(p)

    p = _parser(sub, "validate", "ask the library whether it would admit content (dry run)",
                cmd_validate)
    p.add_argument("file", metavar="FILE", help="content file, or - for stdin")
    _names_option(p)

    _parser(sub, "pending", "list envelopes not yet admitted, and rejected ones", cmd_pending)
    p = _parser(sub, "retry", "resend pending envelopes, byte for byte", cmd_retry)
    p.add_argument("ids", nargs="*", metavar="ID", help="only these pending ids")

    p = _parser(sub, "get", "fetch a signed record and check it against the pinned genesis",
                cmd_get)
    p.add_argument("revision", metavar="REV", help="revision id or a name from the names file")
    p.add_argument("--head", action="store_true", help="the current head of REV's object")
    _names_file(p)

    p = _parser(sub, "search", "search the library's catalogue", cmd_search)
    p.add_argument("query", metavar="Q", nargs="?", default="", help="query tokens")
    p.add_argument("--kind", help="only this kind")
    p.add_argument("--sort", choices=("relevance", "new", "top"),
                   help="default: relevance with a query, new without")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--full", action="store_true", help="signed records instead of summaries")

    p = _parser(sub, "object", "show an object with a section of what surrounds it", cmd_object)
    p.add_argument("revision", metavar="REV", help="revision id or a name")
    p.add_argument("--section", default="all",
                   choices=("all", "children", "related", "history", "graph", "discussions",
                            "knowledge"))
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--exact", action="store_true", help="this exact revision, not the head")
    _names_file(p)

    p = _parser(sub, "changes", "print what changed under a root, resuming where you left off",
                cmd_changes,
                "Print the revisions of ROOT and everything under it, in admission order. The"
                " cursor is saved after each page, so the next run continues where this one"
                " stopped (also after a restart).")
    p.add_argument("--root", required=True, metavar="R", help="root id or a name")
    p.add_argument("--follow", action="store_true", help="keep polling for new changes")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    p.add_argument("--limit", type=int, default=50, help="items per page (1..50)")
    p.add_argument("--reset", action="store_true", help="forget the saved cursor first")
    _names_file(p)

    for name, verb in (("follow", "follow"), ("unfollow", "stop following"),
                       ("save", "save"), ("unsave", "remove from saved")):
        p = _parser(sub, name, f"{verb} objects (personal list)", cmd_personal)
        p.add_argument("revisions", nargs="+", metavar="REV", help="revision ids or names")
        p.set_defaults(personal_action=name)
        _names_file(p)
    _parser(sub, "lists", "show what you follow and what you saved", cmd_lists)


def _session(args: argparse.Namespace) -> Session:
    return Session(Home.locate(), getattr(args, "names", None))


# --- worker, whoami ---------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    home = Home.locate()
    if args.genesis is not None and not HEX64.match(args.genesis):
        raise BadRequest("--genesis is a 64-hex pin", "BAD_PIN")
    key, created = home.create_key()
    known = home.library_or_none()
    url = (args.library or (known.url if known else DEFAULT_LIBRARY)).rstrip("/")
    pin = args.genesis or (known.pin if known and not args.library else None)
    session = Session(home, library=LibraryConfig(url, pin or ""))
    try:
        genesis = fetch_genesis(session.client, pin)
    finally:
        session.close()
    if pin is None:
        note(f"pinned genesis {genesis.pin} as the library served it (trust on first use):"
             " compare it with the pin the operator published")
    home.save_library(LibraryConfig(url, genesis.pin))
    home.save_genesis(dict(genesis.document))
    if args.json:
        emit_json({"worker": key.public_hex, "created": created, "home": str(home.root),
                   "library": url, "genesis": genesis.pin})
        return 0
    say(key.public_hex)
    note(("created worker key " if created else "worker key already exists: ")
         + f"{home.key_path} (mode 0600)")
    note(f"library {url} ({genesis.library}), genesis {genesis.pin}")
    note("next: send the key above to the operator, then `alexandria worker import CERT`")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    session = _session(args)
    doc = parse_document(read_input(args.certificate), args.certificate)
    try:
        cert = parse_worker_certificate(doc, session.genesis())
        key = session.home.worker_key()
        if cert.worker != key.public_hex:
            raise BadRequest(
                f"this certificate is for worker {cert.worker}, not yours ({key.public_hex})",
                "CERTIFICATE_KEY_MISMATCH", certificate_worker=cert.worker,
                worker=key.public_hex,
            )
        session.home.save_certificate(doc)
    finally:
        session.close()
    if args.json:
        emit_json(_cert_json(cert))
        return 0
    say(cert.actor)
    note(f"imported: actor {cert.actor}, scopes {', '.join(cert.scopes)},"
         f" valid until {format_ms(cert.not_after)}")
    return 0


def _cert_json(cert: Any) -> dict[str, Any]:
    return {"actor": cert.actor, "worker": cert.worker, "scopes": list(cert.scopes),
            "authority": cert.authority, "not_before": format_ms(cert.not_before),
            "not_after": format_ms(cert.not_after)}


def cmd_whoami(args: argparse.Namespace) -> int:
    session = _session(args)
    home = session.home
    key = home.worker_key()
    out: dict[str, Any] = {"home": str(home.root), "worker": key.public_hex}
    lib = home.library_or_none()
    out["library"], out["genesis"] = (lib.url, lib.pin) if lib else (None, None)
    cert = session.certificate() if home.certificate_path.exists() else None
    out["certificate"] = _cert_json(cert) if cert else None
    if cert:
        out["certificate"]["valid_now"] = cert.valid_at(now_ms())
    session.close()
    if args.json:
        emit_json(out)
        return 0
    rows = [("worker", key.public_hex), ("home", str(home.root)),
            ("library", out["library"] or "— (run `alexandria worker init`)"),
            ("genesis", out["genesis"] or "—")]
    if cert:
        left = (cert.not_after - now_ms()) // 86_400_000
        state = f"{left} days left" if cert.valid_at(now_ms()) else "NOT VALID NOW"
        rows += [("actor", cert.actor), ("scopes", ", ".join(cert.scopes)),
                 ("valid", f"{format_ms(cert.not_before)} → {format_ms(cert.not_after)}"
                           f" ({state})"),
                 ("authority", cert.authority)]
    else:
        rows.append(("actor", "— not approved yet: send the worker key to the operator"))
    for label, value in rows:
        say(f"{label:<10} {value}")
    return 0


# --- publish, validate, pending, retry --------------------------------------------------------


def _signed_content(session: Session, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    content = parse_content(read_input(args.file), args.file)
    resolved = session.resolve(content, parse_refs(args.ref))
    return session.sign(resolved), resolved


def cmd_publish(args: argparse.Namespace) -> int:
    session = _session(args)
    if args.name is not None:
        check_name(args.name)
    try:
        signed, content = _signed_content(session, args)
        meta: dict[str, Any] = {"kind": content["kind"], "title": content["title"],
                                "library": session.library.url}
        if args.name is not None:
            meta["name"] = args.name
            if session.names_path is not None:
                meta["names_file"] = str(session.names_path)
        outbox = Outbox(session.home)
        outcome = outbox.deliver(outbox.write(signed.id, signed.envelope, meta), session.client)
    finally:
        session.close()
    return _report_publish(args, outcome, session.home)


def _report_publish(args: argparse.Namespace, outcome: Outcome, home: Home) -> int:
    p = outcome.pending
    if outcome.status == "kept":
        assert outcome.error is not None
        raise Unreachable(
            f"{outcome.error.message} — the signed envelope is kept in"
            f" {home.pending_dir / (p.id + '.json')}: `alexandria retry` resends it",
            outcome.error.code, pending=p.id, **outcome.error.details,
        )
    if outcome.status == "rejected":
        assert outcome.error is not None
        raise _rejected(outcome.error, p, home)
    if args.json:
        emit_raw(outcome.signed)
        return 0
    signed = orjson.loads(outcome.signed)
    say(p.id)
    verb = "admitted" if outcome.created else "already admitted"
    name = f" as ${p.meta['name']}" if "name" in p.meta else ""
    note(f"{verb} {signed['record']['kind']} “{one_line(signed['record']['title'], 60)}”"
         f" #{signed['admission']['sequence']}{name}")
    return 0


def _rejected(exc: AlexandriaError, p: Pending, home: Home) -> AlexandriaError:
    exc.message = (f"rejected: {exc.message} — recorded in {home.rejected_dir / (p.id + '.json')}"
                   " and never resent; correct the content and publish anew")
    return exc


def cmd_validate(args: argparse.Namespace) -> int:
    session = _session(args)
    try:
        signed, content = _signed_content(session, args)
        result = session.client.dry_run(signed.envelope)
    finally:
        session.close()
    if args.json:
        emit_json(result)
        return 0
    if result.get("already_admitted"):
        say(f"valid: the library already holds this exact {content['kind']}")
    else:
        say(f"valid: the library would admit this {content['kind']}")
        note("nothing was stored; `alexandria publish` signs it anew (a new time, a new id)")
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    home = Home.locate()
    outbox = Outbox(home)
    items, rejected = outbox.pending(), outbox.rejected()
    if args.json:
        emit_json({"pending": [{"id": p.id, **p.meta} for p in items], "rejected": rejected})
        return 0
    for p in items:
        name = f"  ${p.meta['name']}" if "name" in p.meta else ""
        say(f"{p.id}  {p.record['kind']:<12} “{one_line(p.record['title'], 40)}”"
            f"  signed {p.record['authored_at']}{name}")
    if items:
        note(f"{len(items)} pending: `alexandria retry` resends them exactly as signed")
    else:
        note("nothing pending")
    if rejected:
        note(f"{len(rejected)} rejected by the library, never resent: see {home.rejected_dir}/")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    session = _session(args)
    outbox = Outbox(session.home)
    items = outbox.pending()
    if args.ids:
        known = {p.id: p for p in items}
        missing = [i for i in args.ids if i not in known]
        if missing:
            raise BadRequest(f"not pending: {', '.join(missing)}", "NOT_PENDING", ids=missing)
        items = [known[i] for i in args.ids]
    if not items:
        if args.json:
            emit_json({"results": []})
        else:
            note("nothing pending")
        return 0
    progress = Progress(len(items), "retry")
    outcomes: list[Outcome] = []
    try:
        for p in items:
            outcome = outbox.deliver(p, session.client)
            outcomes.append(outcome)
            progress.step(f"{short(p.id)} {outcome.status}")
            if outcome.status == "kept":
                break  # the library is unreachable: keep the rest, in order, for next time
    finally:
        session.close()
    return _report_retry(args, items, outcomes, session.home)


def _report_retry(args: argparse.Namespace, items: list[Pending], outcomes: list[Outcome],
                  home: Home) -> int:
    results = []
    for o in outcomes:
        entry: dict[str, Any] = {"id": o.pending.id, "status": o.status}
        if o.status == "admitted":
            entry["created"] = o.created
        if o.error is not None:
            entry["error"] = o.error.to_json()
        results.append(entry)
    untried = [p.id for p in items[len(outcomes):]]
    results += [{"id": i, "status": "kept"} for i in untried]
    if args.json:
        emit_json({"results": results})
    else:
        for o in outcomes:
            if o.status == "admitted":
                say(f"{o.pending.id}  " + ("admitted" if o.created else "already admitted"))
            elif o.status == "kept":
                assert o.error is not None
                say(f"{o.pending.id}  still pending: {o.error.message}")
            else:
                assert o.error is not None
                say(f"{o.pending.id}  rejected [{o.error.code}]: {o.error.message}")
        for i in untried:
            say(f"{i}  still pending (not tried)")
    kept = sum(1 for r in results if r["status"] == "kept")
    rejected = sum(1 for r in results if r["status"] == "rejected")
    if kept or rejected:
        note(f"alexandria: {kept} still pending, {rejected} rejected"
             + (f" (see {home.rejected_dir}/)" if rejected else ""))
        return 1
    return 0


# --- reading ----------------------------------------------------------------------------------


def _describe(item: dict[str, Any]) -> str:
    """One line for a signed record or a catalogue summary."""
    record = item.get("record", item)
    kind, title = record.get("kind", "?"), record.get("title", "")
    seq = item.get("admission", {}).get("sequence")
    prefix = f"#{seq:<5} " if isinstance(seq, int) else ""
    return f"{prefix}{item.get('id', '?')}  {kind:<12} {one_line(title or '(untitled)', 60)}"


def cmd_get(args: argparse.Namespace) -> int:
    session = _session(args)
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
            ("admitted", f"#{admission['sequence']} at {admission['admitted_at']}"),
            ("previous", record["previous"] or "—")]
    rows += [("link", f"{lk['relation']} → {lk['target']}") for lk in record["links"]]
    pin = short(session.genesis().pin)
    rows.append(("verified", f"signatures chain to the pinned genesis {pin}"))
    for label, value in rows:
        say(f"  {label:<9} {value}")
    body = body_of(record)
    say("")
    say(body if isinstance(body, str)
        else orjson.dumps(body, option=orjson.OPT_INDENT_2).decode("utf-8"))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    session = _session(args)
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
        say(_describe(item))
    total, nxt = result.get("total"), result.get("next_offset")
    shown = f"{args.offset + 1}–{args.offset + len(items)}" if items else "none"
    note(f"{shown} of {total} in {result.get('library', 'the library')}"
         + (f" — next page: --offset {nxt}" if nxt is not None else ""))
    return 0


def cmd_object(args: argparse.Namespace) -> int:
    session = _session(args)
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
        say("    " + _describe(entry))
    if result.get("next_offset") is not None:
        note(f"next page: --offset {result['next_offset']}")
    return 0


def _pages(session: Session, root: str, limit: int, reset: bool
           ) -> Iterator[tuple[list[dict[str, Any]], bool]]:
    """Pages of ``/api/changes``; the cursor is saved after each page is handed out."""
    pin = session.library.pin
    if reset:
        session.home.drop_cursor(root)
    cursor = session.home.cursor(root, pin)
    while True:
        try:
            page = session.client.get_json("/api/changes", root=root, cursor=cursor, limit=limit)
        except ServerError as exc:
            if getattr(exc, "http_status", 0) == 409 and exc.to_json().get("resync_required"):
                note(f"the library cannot continue from the saved cursor ({exc.message}):"
                     " starting again from the beginning")
                session.home.drop_cursor(root)
                cursor = None
                continue
            raise
        items = page.get("items", [])
        yield items, bool(page.get("has_more"))
        cursor = page["cursor"]
        session.home.save_cursor(root, pin, cursor, page.get("snapshot"))
        if not page.get("has_more"):
            return


def cmd_changes(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 50:
        raise BadRequest("--limit is 1..50", "BAD_PARAMETER")
    session = _session(args)
    try:
        root = session.revision(args.root)
        if not args.reset and session.home.cursor(root, session.library.pin):
            note(f"resuming from the saved cursor of {short(root)}")
        while True:
            count = 0
            for items, _more in _pages(session, root, args.limit, args.reset):
                count += len(items)
                for item in items:
                    if args.json:
                        emit_json(item)
                    else:
                        say(_describe(item))
            args.reset = False
            if not args.follow:
                if not args.json:
                    note(f"{count} change{'s' if count != 1 else ''}; cursor saved"
                         f" — the next run prints only what is new")
                return 0
            time.sleep(args.interval)
    finally:
        session.close()


# --- personal lists ---------------------------------------------------------------------------

LISTS = ("following", "saved")


def _personal_read(session: Session) -> dict[str, Any] | None:
    import secrets

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
    raise AlexandriaError("your lists kept changing elsewhere; try again", "PERSONAL_BUSY")


def cmd_personal(args: argparse.Namespace) -> int:
    session = _session(args)
    action: str = args.personal_action
    target = "following" if action in ("follow", "unfollow") else "saved"
    adding = action in ("follow", "save")
    try:
        roots = []
        for text in args.revisions:
            rev = session.revision(text)
            roots.append(orjson.loads(session.client.entry(rev).content)["root"])

        def change(lists: dict[str, list[str]]) -> dict[str, list[str]]:
            items = lists[target]
            for root in roots:
                if adding and root not in items:
                    items.append(root)
                elif not adding and root in items:
                    items.remove(root)
            return lists

        state, changed = _update(session, change)
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
    session = _session(args)
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
