"""Operator commands: ``serve``, ``genesis init``, ``authority issue|enroll|approve|revoke``
and ``demo``.

The server and its storage are imported only by the commands that run them, so that every other
command starts quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from alexandria.api.origin import Origin, listen_url, public_url
from alexandria.api.serve import (
    DataDir,
    ServeConfig,
    auto_workers,
    configure_witnesses,
    default_library,
    run,
    usable_cores,
)
from alexandria.cli.config import DEFAULT_LIBRARY
from alexandria.cli.demo import check_port_free, run_demo
from alexandria.cli.participant import command, library_url
from alexandria.cli.terminal import emit_json, note, say, warn_plain_http
from alexandria.cli.usage import UsageError
from alexandria.client import Client
from alexandria.core.timestamps import now
from alexandria.errors import Conflict, NotFound
from alexandria.files import atomic_write, write_json
from alexandria.service.enrolment import LIST_HEADER, list_header, normalize_code
from alexandria.service.library import Library
from alexandria.service.operator_dir import (
    OperatorDir,
    approve,
    default_key_path,
    enroll,
    init_genesis,
    issue_authority,
    load_key,
    parse_scopes,
    revocation,
)
from alexandria.service.supervisor import Stopped, Supervisor
from alexandria.store.backends import open_readonly
from alexandria.store.migrations import check_database
from alexandria.store.postgresql import is_database_url
from alexandria.store.query_budget import DEFAULT_S

if TYPE_CHECKING:
    from alexandria.service.supervisor import Supervisor

DEFAULT_DIR = Path("alexandria-data")  # serve.DEFAULT_DIR: the embedded default library


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve", help="serve a library over HTTP",
        description="Serve the library whose genesis document is FILE from the SQLite database"
        " FILE (created when absent), or from a PostgreSQL database named by a libpq URL"
        " (postgresql://…, also postgresql:///NAME with PGHOST and the other PG* variables;"
        " several nodes may serve one database, docs/deployment.md). With no --genesis/--db,"
        " use (and on first run create) the embedded default in ./alexandria-data/.",
    )
    p.add_argument("--genesis", metavar="FILE", help="genesis document (JSON)")
    p.add_argument("--db", metavar="FILE|URL",
                   help="SQLite database file, or a postgresql:// URL")
    p.add_argument("--log-key", metavar="FILE", help="private key file of the log signing key")
    p.add_argument("--read-db", metavar="URL",
                   help="a streaming replica of the PostgreSQL --db to serve reads from; reads"
                   " after this node's own writes, and changes cursors beyond the replica, go"
                   " to the primary (one process per node: --workers 1; docs/deployment.md)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="HTTP server processes; with more than one, they share one admission"
                   " writer process (default: one per usable core, up to 8, so 1 on a"
                   " one-core machine; --workers 1 pins one process)")
    p.add_argument("--writer-process", action="store_true",
                   help="admit in a dedicated writer process, beside the HTTP process(es): uses"
                   " a second core")
    p.add_argument("--admission-deadline", type=float, default=None, metavar="SECONDS",
                   help="how long an admission waits for the writer before it is answered 503"
                   " ADMISSION_TIMEOUT, its outcome unknown (the client retries the same"
                   " bytes; default 10; docs/operations.md)")
    p.add_argument("--witness", action="append", default=[], metavar="NAME=URL+VKEY",
                   help="a witness to send each new checkpoint to (C2SP tlog-witness): its name,"
                   " its submission URL and its cosignature/v1 verifier key (repeatable)")
    p.add_argument("--witness-quorum", type=int, default=0, metavar="N",
                   help="serve at /api/log/checkpoint the newest checkpoint N witnesses cosigned"
                   " (default 0: the newest checkpoint)")
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=None,
                   help="log each request on stdout (default: when stdout is a terminal)")
    p.add_argument("--public-url", metavar="URL",
                   help="the origin clients reach this library at, e.g. https://library.example"
                   " behind a TLS reverse proxy: what /api/contract and /api/openapi.json"
                   " advertise (default: http://HOST:PORT this server listens on; never the"
                   " request's Host header)")
    p.add_argument("--trust-proxy-headers", action="store_true",
                   help="behind a reverse proxy: take the advertised origin from"
                   " X-Forwarded-Proto and X-Forwarded-Host, and the client's address (for"
                   " limits per client) from the right-most X-Forwarded-For (or Forwarded) hop"
                   " (only behind a proxy that sets them: a client could forge them otherwise;"
                   " docs/deployment.md)")
    p.add_argument("--query-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop a read that takes longer and answer it 503 QUERY_TIMEOUT with"
                   " Retry-After, so one slow query cannot hold a reader (default: 2; 0: no"
                   " limit)")
    p.add_argument("--refusal-burst", type=int, default=None, metavar="N",
                   help="refusals (4xx, 5xx answers) a client address gets at once before"
                   " each further one is held 2 s, pacing a flood of refused requests"
                   " (default: 20, refilled one per 5 s; docs/deployment.md)")
    p.add_argument("--server-timing", action="store_true",
                   help="send Server-Timing (the server's time per page) with every page;"
                   " off by default, as it tells anyone what each request cost")
    p.add_argument("--data-dir", default=str(DEFAULT_DIR), help=argparse.SUPPRESS)
    # uvicorn only for bench/'s comparisons: it bounds neither head size nor head time
    p.add_argument("--front-end", choices=("granian", "uvicorn"), default="granian",
                   help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
    register_operator(sub)


def cmd_serve(args: argparse.Namespace) -> int:
    # a stop signal stops the server from here on, whatever it is doing (docs/operations.md)
    supervisor = Supervisor()
    supervisor.install_signal_handlers()
    with contextlib.suppress(Stopped):
        _serve(args, supervisor)
    return 0


def _serve(args: argparse.Namespace, supervisor: Supervisor) -> None:
    query_timeout = _query_timeout(args.query_timeout)
    if bool(args.genesis) != bool(args.db):
        raise UsageError("--genesis and --db go together")
    check_port_free(args.host, args.port)  # before anything is created or announced
    origin = Origin(public_url(args.public_url) if args.public_url else None,
                    args.trust_proxy_headers, listen_url(args.host, args.port))
    check_database(args.db or DataDir(Path(args.data_dir)).db)  # an old leaf format: refused
    if args.read_db and not args.genesis:
        raise UsageError("--read-db goes with --genesis and --db postgresql://…")
    if args.genesis:
        library = Library.from_files(args.genesis, args.db, args.log_key, args.read_db)
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
    configure_witnesses(library, args.witness, args.witness_quorum)
    workers = args.workers if args.workers is not None else (
        1 if args.read_db else auto_workers())
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.read_db and (workers > 1 or args.writer_process):
        raise UsageError(
            "--read-db serves one process per node (--workers 1, no --writer-process): a node"
            " knows its own writes to read them back from the primary, other processes' it"
            " does not; run more nodes for more processes")
    if args.db and is_database_url(args.db):
        # an unreachable database is refused now, at start; an HTTP worker restarted later
        # during an outage waits for it instead (``Library.open_when_reachable``)
        with open_readonly(args.db):
            pass
    url = f"http://{args.host}:{args.port}"
    pin_file = Path(args.genesis).with_suffix(".pin") if args.genesis else data.pin_path
    _write_pin(pin_file, library.genesis.pin)
    say(f"genesis pin {library.genesis.pin}   (in {pin_file})")
    say(f"serving {library.genesis.library} on {url}"
        + (f", advertised as {origin.public}" if origin.public else ""))
    layout = (f"{workers} HTTP worker processes and one admission writer process"
              if workers > 1 or args.writer_process else "one process")
    why = "" if args.workers is not None else f" ({usable_cores()} usable cores; --workers N)"
    print(f"running {layout}{why}", file=sys.stderr, flush=True)
    operator_dir = Path(args.genesis).parent if args.genesis else data.root
    _next_steps(url, operator_dir, pin_file)
    if args.genesis:
        genesis, db, log_key = args.genesis, args.db, args.log_key
    else:  # the log key may have been created just now, with the library
        log_key = args.log_key or (str(data.log_key) if data.log_key.exists() else None)
        genesis, db = str(data.genesis_path), str(data.db)
    access_log = sys.stdout.isatty() if args.access_log is None else args.access_log
    if args.admission_deadline is not None and not args.admission_deadline > 0:
        raise UsageError("--admission-deadline is a number of seconds above 0")
    if args.refusal_burst is not None and args.refusal_burst < 1:
        raise UsageError("--refusal-burst is a number of refusals, at least 1")
    config = ServeConfig(
        genesis=genesis, db=str(db), log_key=log_key, read_db=args.read_db,
        witnesses=tuple(args.witness), witness_quorum=args.witness_quorum,
        public_url=origin.public, trust_proxy_headers=origin.trust_proxy_headers,
        host=args.host, port=args.port, workers=workers, dedicated_writer=args.writer_process,
        access_log=access_log, server_timing=args.server_timing,
        query_timeout_s=query_timeout, admission_deadline_s=args.admission_deadline,
        refusal_burst=args.refusal_burst,
    )
    run(config, args.front_end, supervisor)


def _query_timeout(value: float | None) -> float | None:
    """``--query-timeout``: seconds (default ``query_budget.DEFAULT_S``), 0 for no limit."""
    if value is None:
        return DEFAULT_S
    if not value >= 0 or value == float("inf"):  # NaN too
        raise UsageError("--query-timeout is a number of seconds, 0 for no limit")
    return value or None


def _write_pin(path: Path, pin: str) -> None:
    """``genesis.pin`` beside the genesis: what participants pin (`alexandria login --genesis`)."""
    if not path.exists() or path.read_text().strip() != pin:
        atomic_write(path, f"{pin}\n".encode())


def _next_steps(url: str, operator_dir: Path, pin_file: Path) -> None:
    roots = sorted(operator_dir.glob("root*.key"))
    if roots:
        note(f"warning: {', '.join(str(r) for r in roots)} (root key) sits beside the library:"
             " it certifies authorities and is needed only for `alexandria authority issue`"
             " and `revoke`; keep it offline")
    note(f"next: participants run `alexandria login {url} --genesis $(cat {pin_file})`;"
         f" you approve them with `alexandria authority requests --dir {operator_dir}` and"
         " `alexandria authority approve CODE`")


# --- genesis, authority, demo -----------------------------------------------------------------

def _dir_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=str(DEFAULT_DIR), metavar="DIR",
                   help=f"operator directory (default {DEFAULT_DIR}/, the one `alexandria serve`"
                   " creates)")


def _library(args: argparse.Namespace) -> str:
    """Where operator documents go: ``--library``, ``$ALEXANDRIA_LIBRARY``, else the local
    default."""
    return library_url(args) or DEFAULT_LIBRARY


def register_operator(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    genesis = sub.add_parser("genesis", help="create a library's genesis",
                             description="The genesis pins a library: its name, its log origin"
                             " and the root keys that certify its authorities.")
    gsub = genesis.add_subparsers(dest="genesis_command", metavar="COMMAND", required=True)
    p = command(gsub, "init", "write a genesis document and its root keys", cmd_genesis_init,
                library=False)
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

    p = command(asub, "requests", "list the open enrolment requests (`alexandria login`)",
                cmd_authority_requests,
                "The requests participants made with `alexandria login`, not approved yet and"
                " not expired: their one-time code, the name and scopes they ask for, their key."
                " Approve one with `alexandria authority approve CODE`. The listing is signed"
                " with the authority key: nobody else sees who waits.")
    p.add_argument("--authority-key", metavar="FILE", help="default DIR/authority.key")
    _dir_option(p)

    p = command(asub, "approve", "approve a login request by its code (or a key by hand)",
                cmd_authority_approve,
                "With CODE: approve the `alexandria login` request of that one-time code: the"
                " name is enrolled when new, a worker certificate is signed here with the"
                " authority key (which never leaves this machine) and handed to the library,"
                " which gives it to the waiting `login`. Without CODE: --actor, --worker and"
                " --scopes certify a key by hand; the certificate is printed (or written to"
                " --out) for `alexandria worker import`.",
                examples="  alexandria authority requests\n"
                "  alexandria authority approve K7QF-2XMB\n"
                "  alexandria authority approve K7QF-2XMB --scopes comment   # narrower\n"
                "  alexandria authority approve --actor alice --worker KEY --scopes all"
                " --out alice.cert.json")
    p.add_argument("code", metavar="CODE", nargs="?", help="the one-time code `login` showed")
    p.add_argument("--actor", help="enrolled NAME or 64-hex actor id (without CODE)")
    p.add_argument("--worker", metavar="KEY", help="the participant's public key (without CODE)")
    p.add_argument("--scopes", action="append",
                   help="comma-separated: publish, comment, vote, curate, or all (with CODE:"
                   " default what was asked)")
    p.add_argument("--days", type=int, default=365, help="validity in days")
    p.add_argument("--out", metavar="FILE", help="write the certificate here (without CODE)")
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
    warn_plain_http(url)
    with Client(url) as client:
        result: dict[str, Any] = client.authority(document).json()
    return result


def cmd_authority_issue(args: argparse.Namespace) -> int:
    op = _op(args)
    roles = sorted({r.strip() for r in args.roles.split(",") if r.strip()})
    key_path = Path(args.key) if args.key else default_key_path(op, roles)
    doc, created = issue_authority(op, roles, key_path, args.days, args.root_key)
    if created:
        note(f"created {key_path} (mode 0600)")
    note(f"wrote {op.certificate_path(key_path)}")
    result = _submit(_library(args), doc)
    if args.json:
        emit_json(result)
        return 0
    say(doc["certificate"]["key"])
    note(f"admitted authority certificate ({', '.join(roles)}) as log entry {result['sequence']}"
         f" in {_library(args)}")
    return 0


def cmd_authority_enroll(args: argparse.Namespace) -> int:
    op = _op(args)
    actor = enroll(op, args.name)
    if args.json:
        emit_json({"name": args.name, "actor": actor})
        return 0
    say(actor)
    note(f"enrolled {args.name} (recorded in {op.actors_path})")
    return 0


def _authority_key_path(args: argparse.Namespace, op: OperatorDir) -> Path:
    return Path(args.authority_key) if args.authority_key else op.root / "authority.key"


def _signed(op: OperatorDir, key_path: Path) -> dict[str, str]:
    """The header that signs a question about open requests with the authority key: only an
    authority of the library sees who waits for approval."""
    return {LIST_HEADER: list_header(op.genesis().pin, load_key(key_path, "authority"), now())}


def _open_requests(client: Any, op: OperatorDir, key_path: Path
                   ) -> tuple[list[dict[str, Any]], int]:
    """``GET /api/enrolments``: the oldest open requests, and how many are open."""
    answer = orjson.loads(client.request("GET", "/api/enrolments",
                                         headers=_signed(op, key_path)).content)
    requests: list[dict[str, Any]] = answer["requests"]
    return requests, int(answer.get("total", len(requests)))


def cmd_authority_requests(args: argparse.Namespace) -> int:
    op = _op(args)
    with Client(_library(args)) as client:
        requests, total = _open_requests(client, op, _authority_key_path(args, op))
    if args.json:
        emit_json({"requests": requests, "total": total})
        return 0
    actors = op.actors() if op.actors_path.exists() else {}
    for r in requests:
        who = f"{r['name']} (enrolled)" if r["name"] in actors else f"{r['name']} (new)"
        scopes = ",".join(s.removeprefix("library.") for s in r["scopes"])
        say(f"{r['code']}  {who:<24} {scopes:<22} key {r['worker'][:16]}…"
            f"  until {r['expires_at']}")
    if total > len(requests):
        note(f"the oldest {len(requests)} of {total} open requests; any other is approved by"
             " the code its participant shows you")
    if requests:
        note(f"approve one: alexandria authority approve CODE --dir {op.root}")
    else:
        note(f"no open requests at {_library(args)}")
    return 0


def _approve_code(args: argparse.Namespace) -> int:
    if args.actor or args.worker or args.out:
        raise UsageError("CODE takes no --actor, --worker or --out: the request names them")
    code = normalize_code(args.code)
    op = _op(args)
    key = Path(args.authority_key) if args.authority_key else op.root / "authority.key"
    with Client(_library(args)) as client:
        try:  # by its code, however many requests wait
            request = orjson.loads(client.request("GET", f"/api/enrolments/{code}",
                                                  headers=_signed(op, key)).content)
        except NotFound:
            raise NotFound(f"no open request {code} at {client.base_url} (expired, or"
                           " mistyped): `alexandria authority requests` lists them",
                           "UNKNOWN_CODE", enrolment=code) from None
        if request.get("status") != "pending":
            raise Conflict(f"request {code} is already approved: a code approves once",
                           "CODE_USED", enrolment=code)
        actors = op.actors() if op.actors_path.exists() else {}
        name = request["name"]
        actor = actors.get(name) or enroll(op, name)
        scopes = parse_scopes(args.scopes) if args.scopes else list(request["scopes"])
        doc = approve(op, actor, request["worker"], scopes, args.days, key)
        client.post(f"/api/enrolments/{code}/certificate", orjson.dumps(doc))
    if args.json:
        emit_json({"code": code, "name": name, "actor": actor, "worker": request["worker"],
                   "scopes": scopes})
        return 0
    say(actor)
    note(f"approved {code}: {name} ({'enrolled now' if name not in actors else 'enrolled'}),"
         f" scopes {', '.join(scopes)}, {args.days} days; their `alexandria login` finishes")
    return 0


def cmd_authority_approve(args: argparse.Namespace) -> int:
    if args.code:
        return _approve_code(args)
    if not (args.actor and args.worker and args.scopes):
        raise UsageError("give CODE (from `alexandria login`), or --actor, --worker and"
                         " --scopes")
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
    op = _op(args)
    key = Path(args.authority_key) if args.authority_key else op.root / "authority.key"
    doc = revocation(op, args.key, args.reason, args.by, key, args.root_key)
    result = _submit(_library(args), doc)
    if args.json:
        emit_json(result)
        return 0
    say(args.key)
    note(f"revoked as log entry {result['sequence']}: admissions after it refuse this key")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(Path(args.dir), args.host, args.port)
