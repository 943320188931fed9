"""``alexandria`` (and ``python cli.py``): the participant and operator command line.

Each command group lives in its own module with a ``register(subparsers)`` function; this module
builds the parser, dispatches, and turns every ``AlexandriaError`` into one clear line on stderr
(or, with ``--json``, the typed error document) and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import orjson

from alexandria import __version__
from alexandria.cli.terminal import inline
from alexandria.errors import AlexandriaError
from alexandria.files import PRIVATE_UMASK

COMMAND_MODULES = (
    "alexandria.cli.participant",
    "alexandria.cli.reading",
    "alexandria.cli.personal",
    "alexandria.cli.operator",
    "alexandria.cli.log",
)

EXIT_FAILURE = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alexandria",
        description="Alexandria: a signed, append-only contribution ledger for a public library.",
    )
    parser.add_argument("--version", action="version", version=f"alexandria {__version__}")
    parser.add_argument(
        "--json", action="store_true", help="machine-readable output (and typed errors) on stdout"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # everything the CLI creates (keys, the library's directory and database with its -wal and
    # -shm files, configuration, exports) is its user's alone: alexandria/files.py
    os.umask(PRIVATE_UMASK)
    try:
        result = args.func(args)
    except AlexandriaError as exc:
        if args.json:
            sys.stdout.buffer.write(orjson.dumps(exc.to_json()) + b"\n")
        print(f"alexandria: error: {inline(exc.message)} [{inline(exc.code)}]", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("alexandria: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)

