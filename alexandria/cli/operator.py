"""Operator commands: ``serve``, ``genesis init``, ``authority issue|enroll|approve|revoke``
and ``demo``.

The server and its storage are imported only by the commands that run them, so that every other
command starts quickly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from alexandria.cli.config import DEFAULT_LIBRARY
from alexandria.cli.participant import command
from alexandria.cli.terminal import emit_json, note, say, warn_plain_http
from alexandria.errors import BadRequest
from alexandria.service.operator_dir import OperatorDir

DEFAULT_DIR = Path("alexandria-data")  # serve.DEFAULT_DIR: the embedded default library


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve", help="serve a library over HTTP",
        description="Serve the library whose genesis document is FILE from the SQLite database"
        " FILE (created when absent). With no --genesis/--db, use (and on first run create) the"
        " embedded default in ./alexandria-data/.",
    )
    p.add_argument("--genesis", metavar="FILE", help="genesis document (JSON)")
    p.add_argument("--db", metavar="FILE", help="SQLite database file")
    p.add_argument("--log-key", metavar="FILE", help="private key file of the log signing key")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1,
                   help="HTTP server processes (default 1); with more than one, they share one"
                   " admission writer process")
    p.add_argument("--writer-process", action="store_true",
                   help="admit in a dedicated writer process, beside the HTTP process(es): uses"
                   " a second core")
    p.add_argument("--public-url", metavar="URL",
                   help="the origin clients reach this library at, e.g. https://library.example"
                   " behind a TLS reverse proxy: what /api/contract and /api/openapi.json"
                   " advertise (default: the request's scheme and well-formed Host header)")
    p.add_argument("--trust-proxy-headers", action="store_true",
                   help="take the advertised origin from X-Forwarded-Proto and X-Forwarded-Host"
                   " (only behind a proxy that sets both: a client could forge them otherwise)")
    p.add_argument("--data-dir", default=str(DEFAULT_DIR), help=argparse.SUPPRESS)
    # uvicorn only for bench/'s comparisons: it bounds neither head size nor head time
    p.add_argument("--front-end", choices=("granian", "uvicorn"), default="granian",
                   help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
    register_operator(sub)


def cmd_serve(args: argparse.Namespace) -> int:
    from alexandria.api.origin import Origin, public_url
    from alexandria.api.serve import DataDir, default_library, run
    from alexandria.service.library import Library

    if bool(args.genesis) != bool(args.db):
        raise BadRequest("--genesis and --db go together", "USAGE")
    origin = Origin(public_url(args.public_url) if args.public_url else None,
                    args.trust_proxy_headers)
    if args.genesis:
        library = Library.from_files(args.genesis, args.db, args.log_key)
    else:
        data = DataDir(Path(args.data_dir))
        log_key = args.log_key or (str(data.log_key) if data.log_key.exists() else None)
        if data.genesis_path.exists() and log_key is None:
            # made by `alexandria genesis init`: no checkpoints until `alexandria authority
            # issue --roles log` creates and certifies DIR/log.key and the server restarts
            library, created = Library.from_files(data.genesis_path, data.db), False
            print(f"no log key in {data.root}/: serving without signed checkpoints",
                  file=sys.stderr)
        else:
            library, created = default_library(data)
        if args.log_key:
            library = Library.from_files(data.genesis_path, data.db, args.log_key)
        if created:
            print(f"created a new library in {data.root}/", file=sys.stderr)
    url = f"http://{args.host}:{args.port}"
    print(f"genesis pin {library.genesis.pin}")
    print(f"serving {library.genesis.library} on {url}"
          + (f", advertised as {origin.public}" if origin.public else ""), flush=True)
    if args.genesis:
        files = (args.genesis, args.db, args.log_key)
    else:  # the log key may have been created just now, with the library
        log_key = args.log_key or (str(data.log_key) if data.log_key.exists() else None)
        files = (str(data.genesis_path), str(data.db), log_key)
    run(library, args.host, args.port, args.workers, files, args.writer_process, args.front_end,
        origin)
    return 0


# --- genesis, authority, demo -----------------------------------------------------------------

def _dir_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=str(DEFAULT_DIR), metavar="DIR",
                   help=f"operator directory (default {DEFAULT_DIR}/, the one `alexandria serve`"
                   " creates)")


def _url_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--library", metavar="URL", default=DEFAULT_LIBRARY,
                   help=f"library to submit to (default {DEFAULT_LIBRARY})")


def register_operator(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    genesis = sub.add_parser("genesis", help="create a library's genesis",
                             description="The genesis pins a library: its name, its log origin"
                             " and the root keys that certify its authorities.")
    gsub = genesis.add_subparsers(dest="genesis_command", metavar="COMMAND", required=True)
    p = command(gsub, "init", "write a genesis document and its root keys", cmd_genesis_init)
    _dir_option(p)
    p.add_argument("--library", required=True, metavar="NAME", help="the library's namespace")
    p.add_argument("--origin", required=True,
                   help="schema-less name of the library's log, e.g. library.example.org/log")
    p.add_argument("--roots", type=int, default=1, metavar="N", help="root keys (default 1)")
    p.add_argument("--threshold", type=int, default=1, metavar="K",
                   help="root signatures needed (default 1)")

    authority = sub.add_parser("authority", help="certify authorities, approve participants",
                               description="The native application's authority: certificates,"
                               " participant enrolment and approval, revocation.")
    asub = authority.add_subparsers(dest="authority_command", metavar="COMMAND", required=True)
    p = command(asub, "issue", "certify an authority key with root keys and submit it",
                 cmd_authority_issue,
                 "Sign an authority certificate (roles native-application and/or log) with the"
                 " root keys and submit it to POST /api/authority. The key is created when"
                 " absent.")
    _dir_option(p)
    _url_option(p)
    p.add_argument("--roles", default="native-application",
                   help="comma-separated: native-application, log (default native-application)")
    p.add_argument("--key", metavar="FILE",
                   help="the authority key (default DIR/authority.key, DIR/log.key for log)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--root-key", action="append", metavar="FILE",
                   help="root key file (repeatable; default DIR/root*.key)")

    p = command(asub, "enroll", "mint an actor id for a participant", cmd_authority_enroll)
    p.add_argument("name", metavar="NAME")
    _dir_option(p)

    p = command(asub, "approve", "issue a worker certificate for a participant's key",
                 cmd_authority_approve,
                 "Approve one participant's worker key: a worker certificate signed by the"
                 " authority key. It is printed (or written to --out) for the participant to"
                 " `alexandria worker import`.")
    p.add_argument("--actor", required=True, help="enrolled NAME or 64-hex actor id")
    p.add_argument("--worker", required=True, metavar="KEY", help="the participant's public key")
    p.add_argument("--scopes", required=True, action="append",
                   help="comma-separated: publish, comment, vote, curate, or all")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--out", metavar="FILE", help="write the certificate here")
    p.add_argument("--authority-key", metavar="FILE", help="default DIR/authority.key")
    _dir_option(p)

    p = command(asub, "revoke", "revoke an authority or worker key and submit it",
                 cmd_authority_revoke,
                 "Sign a revocation (root keys for an authority key, the issuing authority for a"
                 " worker key) and submit it to POST /api/authority. It applies to every"
                 " admission after it; what was admitted before stays verifiable.")
    p.add_argument("key", metavar="KEY", help="the public key to revoke")
    p.add_argument("--reason", default="revoked by the operator")
    p.add_argument("--by", choices=("root", "authority"),
                   help="who signs (default: found from the keys DIR issued)")
    p.add_argument("--authority-key", metavar="FILE", help="default DIR/authority.key")
    p.add_argument("--root-key", action="append", metavar="FILE",
                   help="root key file (repeatable; default DIR/root*.key)")
    _dir_option(p)
    _url_option(p)

    p = command(sub, "demo", "serve a fresh library seeded with the contract's worked example",
                 cmd_demo,
                 "Create a fresh library in DIR (replacing an earlier demo there), enroll two"
                 " participants (owner and peer, each with their own config home), publish the"
                 " contract's worked example through this CLI, then serve it.")
    p.add_argument("--dir", default="alexandria-demo", help="demo directory (alexandria-demo/)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)


def _op(args: argparse.Namespace) -> OperatorDir:
    return OperatorDir(Path(args.dir))


def cmd_genesis_init(args: argparse.Namespace) -> int:
    from alexandria.service.operator_dir import init_genesis

    op = _op(args)
    genesis = init_genesis(op, args.library, args.origin, args.roots, args.threshold)
    if args.json:
        emit_json({"pin": genesis.pin, "library": genesis.library, "origin": genesis.origin,
                   "root_keys": list(genesis.root_keys), "threshold": genesis.threshold,
                   "genesis": str(op.genesis_path)})
        return 0
    say(genesis.pin)
    note(f"wrote {op.genesis_path} and {args.roots} root key(s) (threshold {args.threshold});"
         f" publish the pin above out of band")
    note(f"next: alexandria serve --genesis {op.genesis_path} --db {op.root / 'library.db'}")
    return 0


def _submit(url: str, document: dict[str, Any]) -> dict[str, Any]:
    from alexandria.client import Client

    warn_plain_http(url)
    with Client(url) as client:
        result: dict[str, Any] = client.authority(document).json()
    return result


def cmd_authority_issue(args: argparse.Namespace) -> int:
    from alexandria.service.operator_dir import default_key_path, issue_authority

    op = _op(args)
    roles = sorted({r.strip() for r in args.roles.split(",") if r.strip()})
    key_path = Path(args.key) if args.key else default_key_path(op, roles)
    doc, created = issue_authority(op, roles, key_path, args.days, args.root_key)
    if created:
        note(f"created {key_path} (mode 0600)")
    note(f"wrote {op.certificate_path(key_path)}")
    result = _submit(args.library, doc)
    if args.json:
        emit_json(result)
        return 0
    say(doc["certificate"]["key"])
    note(f"admitted authority certificate ({', '.join(roles)}) as #{result['sequence']}"
         f" in {args.library}")
    return 0


def cmd_authority_enroll(args: argparse.Namespace) -> int:
    from alexandria.service.operator_dir import enroll

    op = _op(args)
    actor = enroll(op, args.name)
    if args.json:
        emit_json({"name": args.name, "actor": actor})
        return 0
    say(actor)
    note(f"enrolled {args.name} (recorded in {op.actors_path})")
    return 0


def cmd_authority_approve(args: argparse.Namespace) -> int:
    from alexandria.files import write_json
    from alexandria.service.operator_dir import approve, parse_scopes

    op = _op(args)
    key = Path(args.authority_key) if args.authority_key else op.root / "authority.key"
    doc = approve(op, args.actor, args.worker, parse_scopes(args.scopes), args.days, key)
    if args.out:
        write_json(Path(args.out), doc)
        if args.json:
            emit_json({"path": args.out, "certificate": doc})
        else:
            note(f"wrote {args.out}: the participant runs `alexandria worker import {args.out}`")
        return 0
    emit_json(doc)
    return 0


def cmd_authority_revoke(args: argparse.Namespace) -> int:
    from alexandria.service.operator_dir import revocation

    op = _op(args)
    key = Path(args.authority_key) if args.authority_key else op.root / "authority.key"
    doc = revocation(op, args.key, args.reason, args.by, key, args.root_key)
    result = _submit(args.library, doc)
    if args.json:
        emit_json(result)
        return 0
    say(args.key)
    note(f"revoked as #{result['sequence']}: admissions after it refuse this key")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from alexandria.cli.demo import run_demo

    return run_demo(Path(args.dir), args.host, args.port)
