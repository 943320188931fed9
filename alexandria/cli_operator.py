"""Operator commands: ``serve``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alexandria.errors import BadRequest
from alexandria.library import Library
from alexandria.serve import DEFAULT_DIR, DataDir, default_library, run


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
                   help="server processes sharing the database (default 1)")
    p.add_argument("--data-dir", default=str(DEFAULT_DIR), help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if bool(args.genesis) != bool(args.db):
        raise BadRequest("--genesis and --db go together", "USAGE")
    if args.genesis:
        library = Library.from_files(args.genesis, args.db, args.log_key)
    else:
        data = DataDir(Path(args.data_dir))
        library, created = default_library(data)
        if args.log_key:
            library = Library.from_files(data.genesis, data.db, args.log_key)
        if created:
            print(f"created a new library in {data.root}/", file=sys.stderr)
    url = f"http://{args.host}:{args.port}"
    print(f"genesis pin {library.genesis.pin}")
    print(f"serving {library.genesis.library} on {url}", flush=True)
    if args.genesis:
        files = (args.genesis, args.db, args.log_key)
    else:
        files = (str(data.genesis), str(data.db), args.log_key or str(data.log_key))
    run(library, args.host, args.port, args.workers, files)
    return 0
