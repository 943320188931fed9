"""``alexandria witness init|serve``: run a C2SP tlog-witness (docs/log.md "Witnesses").

``witness init --dir D --name NAME`` creates the witness key (``D/witness.key``, mode 0600) and
``D/witness.json`` (name and verifier key) and prints the verifier key that logs and verifiers
configure.  ``witness serve --dir D --log ORIGIN=VKEY …`` serves ``POST /add-checkpoint`` for
those logs, its state in ``D/witness.db``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from alexandria.api.witness import create_witness_app
from alexandria.cli.usage import UsageError
from alexandria.core import note
from alexandria.core.keys import HEX64
from alexandria.service.witness import STATE_FILE, Witness, init_witness_dir, load_witness_dir
from alexandria.store.witness_state import WitnessState

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    w = sub.add_parser("witness", help="run a witness that cosigns logs' checkpoints",
                       description="A C2SP tlog-witness: cosigns a log's checkpoint only if it"
                       " is consistent with the last one it cosigned for that log.")
    wsub = w.add_subparsers(dest="witness_command", metavar="COMMAND", required=True)
    p = wsub.add_parser("init", help="create a witness key and name in a directory")
    p.add_argument("--dir", required=True, metavar="DIR")
    p.add_argument("--name", required=True,
                   help="the witness's key name, e.g. witness.example.org/w1")
    p.set_defaults(func=cmd_init)
    p = wsub.add_parser("serve", help="serve POST /add-checkpoint")
    p.add_argument("--dir", required=True, metavar="DIR")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--log", action="append", required=True, metavar="ORIGIN=VKEY",
                   help="a log to witness: its origin and its checkpoint key, as a signed-note"
                   " verifier key (ORIGIN+KEYID+BASE64) or 64 hex characters of its Ed25519"
                   " public key (repeatable)")
    p.set_defaults(func=cmd_serve)


def parse_log_option(value: str) -> tuple[str, note.Verifier]:
    """``ORIGIN=VKEY`` (or ``ORIGIN=HEX``): a log key, whose name must be the origin."""
    origin, eq, key = value.partition("=")
    if not eq or not origin:
        raise UsageError(f"--log {value!r}: expected ORIGIN=VKEY")
    if HEX64.match(key):
        verifier = note.Verifier(origin, note.ED25519, bytes.fromhex(key))
    else:
        verifier = note.parse_vkey(key)
    if verifier.name != origin or verifier.key_type != note.ED25519:
        raise UsageError(f"--log {value!r}: the key is not an Ed25519 key named {origin!r}")
    return origin, verifier


def cmd_init(args: argparse.Namespace) -> int:
    identity = init_witness_dir(Path(args.dir), args.name)
    print(identity.verifier.vkey)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    logs: dict[str, list[note.Verifier]] = {}
    for value in args.log:
        origin, verifier = parse_log_option(value)
        logs.setdefault(origin, []).append(verifier)
    directory = Path(args.dir)
    identity = load_witness_dir(directory)
    witness = Witness(identity, logs, WitnessState(directory / STATE_FILE))
    print(f"witness {identity.verifier.vkey}")
    print(f"serving POST http://{args.host}:{args.port}/add-checkpoint for"
          f" {', '.join(sorted(logs))}", flush=True)
    uvicorn.run(create_witness_app(witness), host=args.host, port=args.port, log_level="warning",
                server_header=False, access_log=False)
    return 0
