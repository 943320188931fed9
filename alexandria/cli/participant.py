"""Participant commands: the worker key, dry runs and what is pending.

``worker init`` / ``worker import CERT`` / ``whoami``; ``validate FILE|-``,
``pending [--clear-rejected | --drop ID]``, ``retry``.  Publishing is in ``cli/publish.py``,
login in ``cli/login.py``, reading in ``cli/reading.py``, personal lists in ``cli/personal.py``; the
helpers here (``command``, ``session_of``, ``library_url``…) are shared by them.  The
configuration directory is described in ``config.py``; the pending-file rule in ``pending.py``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from alexandria.cli.command_table import EXIT_PENDING, EXIT_REFUSED
from alexandria.cli.config import DEFAULT_LIBRARY, Home, LibraryConfig
from alexandria.cli.parser import Formatter
from alexandria.cli.pending import Outbox, Outcome, Pending
from alexandria.cli.session import (
    Session,
    fetch_genesis,
    parse_content,
    parse_document,
    parse_refs,
    read_input,
)
from alexandria.cli.terminal import (
    Progress,
    emit_json,
    note,
    one_line,
    say,
    short,
)
from alexandria.cli.usage import UsageError
from alexandria.client import check_library_url
from alexandria.core.keys import HEX64
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.core.trust import parse_worker_certificate
from alexandria.errors import Malformed, NotPermitted

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]

JSON_HELP = "machine-readable output (and typed errors) on stdout"


def command(sub: Sub, name: str, help_text: str, func: Callable[[argparse.Namespace], int],
            description: str | None = None, examples: str = "",
            library: bool = True) -> argparse.ArgumentParser:
    """A command whose ``--help`` shows its defaults and ``examples``; ``--json`` and (unless
    ``library`` is false) ``--library URL`` are accepted after the command as before it."""
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, description=description or help_text,
        epilog=f"examples:\n{examples}" if examples else None,
        formatter_class=HelpFormatter)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    if library:
        p.add_argument("--library", dest="global_library", metavar="URL",
                       default=argparse.SUPPRESS, help=LIBRARY_HELP)
    p.set_defaults(func=func)
    return p


class HelpFormatter(Formatter):
    """Each option's default after its help (when it has a real one: not for flags); the
    description and examples kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or default in (None, False, [], argparse.SUPPRESS) \
                or "(default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


LIBRARY_HELP = "library URL (default: $ALEXANDRIA_LIBRARY, else the one in your config home)"


def library_url(args: argparse.Namespace) -> str | None:
    """``--library URL``, else ``$ALEXANDRIA_LIBRARY``, else none (the configured library)."""
    return getattr(args, "global_library", None) or os.environ.get("ALEXANDRIA_LIBRARY") or None


def names_file_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--names", metavar="FILE",
                   help="names file to resolve NAME from (default: the one in your config home)")


def names_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", action="append", default=[], metavar="NAME=REV",
                   help="resolve $NAME in the content to REV (repeatable)")
    names_file_option(p)


def register(sub: Sub) -> None:
    worker = sub.add_parser("worker", help="create or import your worker key's certificate",
                            description="Your worker key signs what you publish.")
    wsub = worker.add_subparsers(dest="worker_command", metavar="COMMAND", required=True)
    p = command(wsub, "init", "create your Ed25519 worker key and pin your library", cmd_init,
                "Create the worker key (mode 0600) in your config home (ALEXANDRIA_HOME, else"
                " XDG_CONFIG_HOME/alexandria, else ~/.config/alexandria), record the library"
                " and its genesis pin, and print the public key for the operator to approve."
                " (`alexandria login URL` does this and the approval in one step.)")
    p.add_argument("--genesis", metavar="PIN",
                   help="genesis pin, obtained out of band from the operator (required unless"
                   " --trust-served-genesis)")
    p.add_argument("--trust-served-genesis", action="store_true",
                   help="pin whatever genesis the library serves (trust on first use): only"
                   " when you have compared the pin it prints with the operator's")
    p = command(wsub, "import", "import the worker certificate the operator issued", cmd_import)
    p.add_argument("certificate", metavar="CERT", help="certificate file, or - for stdin")

    command(sub, "whoami", "show your worker key, actor, scopes and library", cmd_whoami)

    p = command(sub, "validate", "ask the library whether it would admit content (dry run)",
                cmd_validate)
    p.add_argument("file", metavar="FILE", help="content file, or - for stdin")
    names_options(p)

    p = command(sub, "pending", "list envelopes not yet admitted, and rejected ones",
                cmd_pending)
    p.add_argument("--clear-rejected", action="store_true",
                   help="delete the envelopes the library rejected (they are never resent)")
    p.add_argument("--drop", metavar="ID", action="append", default=[],
                   help="delete pending envelope ID without sending it (repeatable); what"
                   " was dropped is printed")
    p = command(sub, "retry", "resend pending envelopes, byte for byte", cmd_retry)
    p.add_argument("ids", nargs="*", metavar="ID", help="only these pending ids")


def session_of(args: argparse.Namespace) -> Session:
    return Session(Home.locate(), getattr(args, "names", None), library_url=library_url(args))


# --- worker, whoami ---------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    home = Home.locate()
    if args.genesis is not None and not HEX64.match(args.genesis):
        raise Malformed("--genesis is a 64-hex pin", "BAD_PIN")
    chosen = library_url(args)
    url = check_library_url(chosen) if chosen else None
    known = home.library_or_none()
    url = url or (known.url if known else DEFAULT_LIBRARY)
    pin = args.genesis or (known.pin if known and not chosen else None)
    session = Session(home, library=LibraryConfig(url, pin or ""))
    try:
        genesis = fetch_genesis(session.client, pin)
    finally:
        session.close()
    if pin is None and not args.trust_served_genesis:
        # whoever answers at URL (or sits on the path to it) chooses what a served genesis
        # says: the pin must come from the operator, out of band
        raise NotPermitted(
            f"{url} serves genesis {genesis.pin}; compare it with the pin the operator"
            " published, then run again with --genesis PIN (or --trust-served-genesis)",
            "GENESIS_PIN_REQUIRED", served=genesis.pin, library=url,
        )
    if pin is None:
        note(f"pinned genesis {genesis.pin} as the library served it (trust on first use)")
    key, created = home.create_key()
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
    session = session_of(args)
    doc = parse_document(read_input(args.certificate), args.certificate)
    try:
        cert = parse_worker_certificate(doc, session.genesis())
        key = session.home.worker_key()
        if cert.worker != key.public_hex:
            raise Malformed(
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
    session = session_of(args)
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
            ("library", out["library"] or "— (run `alexandria login URL`)"),
            ("genesis", out["genesis"] or "—")]
    if cert:
        left = (cert.not_after - now_ms()) // 86_400_000
        state = f"{left} days left" if cert.valid_at(now_ms()) else "NOT VALID NOW"
        rows += [("actor", cert.actor), ("scopes", ", ".join(cert.scopes)),
                 ("valid", f"{format_ms(cert.not_before)} → {format_ms(cert.not_after)}"
                           f" ({state})"),
                 ("authority", cert.authority)]
    else:
        rows.append(("actor", "— not approved yet: `alexandria login` (the operator approves"
                              " its code)"))
    for label, value in rows:
        say(f"{label:<10} {value}")
    return 0


# --- publish, validate, pending, retry --------------------------------------------------------


def _signed_content(session: Session, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    content = parse_content(read_input(args.file), args.file)
    resolved = session.resolve(content, parse_refs(args.ref))
    return session.sign(resolved), resolved


def cmd_validate(args: argparse.Namespace) -> int:
    session = session_of(args)
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
    if args.drop:
        if args.clear_rejected:
            raise UsageError("--drop and --clear-rejected are separate commands")
        return _drop(args, home, outbox)
    if args.clear_rejected:
        cleared = outbox.clear_rejected()
        if args.json:
            emit_json({"cleared": cleared})
        else:
            note(f"deleted {len(cleared)} rejected envelope{'' if len(cleared) == 1 else 's'}"
                 f" from {home.rejected_dir}/")
        return 0
    items, rejected = outbox.pending(), outbox.rejected()
    if args.json:
        emit_json({"pending": [{"id": p.id, "kind": p.record["kind"], "title": p.record["title"],
                                **p.meta} for p in items], "rejected": rejected})
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


def _drop(args: argparse.Namespace, home: Home, outbox: Outbox) -> int:
    """``pending --drop ID…``: every id is checked before any envelope is deleted."""
    known = {p.id: p for p in outbox.pending()}
    missing = [i for i in args.drop if i not in known]
    if missing:
        raise Malformed(
            f"not pending: {', '.join(missing)} (`alexandria pending` lists what is)",
            "NOT_PENDING", ids=missing, pending=sorted(known),
        )
    dropped = [known[i] for i in dict.fromkeys(args.drop)]
    for p in dropped:
        outbox.drop(p.id)
    if args.json:
        emit_json({"dropped": [{"id": p.id, "kind": p.record["kind"],
                                "title": p.record["title"], **p.meta} for p in dropped]})
        return 0
    for p in dropped:
        say(p.id)
        note(f"dropped {p.record['kind']} “{one_line(p.record['title'], 40)}” signed"
             f" {p.record['authored_at']}: never sent by this home again")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    session = session_of(args)
    outbox = Outbox(session.home)
    items = outbox.pending()
    if args.ids:
        known = {p.id: p for p in items}
        missing = [i for i in args.ids if i not in known]
        if missing:
            raise Malformed(f"not pending: {', '.join(missing)}", "NOT_PENDING", ids=missing)
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
        return EXIT_PENDING if kept else EXIT_REFUSED
    return 0
