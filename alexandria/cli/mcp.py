"""``alexandria mcp``: the library for an AI agent, over MCP on stdio (docs/mcp.md).

Reading needs no login, as ``alexandria search`` does not: ``--library URL`` (or
``$ALEXANDRIA_LIBRARY``) with ``--genesis-pin PIN``; without a pin, the pin of the config home
(``$ALEXANDRIA_HOME``…, ``cli/config.py``) when it has one — for whatever URL is given, as a
library that moved or a mirror still has the same genesis — else the library's own genesis,
pinned on first use as ``login`` pins it, and said so on stderr.  Publishing
and the personal lists sign with the home's worker key and certificate: they answer a typed
``NOT_LOGGED_IN`` naming ``alexandria login`` when the home has none for this library.  The MCP
SDK is imported only when the command runs, so other commands start as fast as before.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import anyio

from alexandria.cli.agent import Login, serve_stdio
from alexandria.cli.config import Home, LibraryConfig, SetupRequired
from alexandria.cli.participant import command, library_url
from alexandria.cli.session import Session, fetch_genesis
from alexandria.cli.terminal import note
from alexandria.client import Client, check_library_url
from alexandria.core.keys import HEX64
from alexandria.core.witness_policy import policy_of
from alexandria.errors import Malformed

if TYPE_CHECKING:
    from alexandria.cli.agent import Login
    from alexandria.core.trust import Genesis

    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    p = command(sub, "mcp", "serve your library to an AI agent over MCP (stdio)", cmd_mcp,
                "Serve the library's read tools (no login needed) and, with a logged-in config"
                " home, the tools that publish and keep your lists, over MCP on stdio.",
                examples="  alexandria mcp --library http://127.0.0.1:8080 --genesis-pin PIN\n"
                "  ALEXANDRIA_HOME=~/alexandria-alice alexandria mcp   # the home's library")
    p.add_argument("--genesis-pin", metavar="PIN",
                   help="the library's genesis pin, obtained out of band (default: the home's"
                   " pin for this library, else the served genesis, trusted on first use)")
    p.add_argument("--witness", action="append", default=[], metavar="NAME=VKEY",
                   help="a witness you trust (repeatable): `verify` and with_proof answers then"
                   " require checkpoints cosigned by --witness-quorum of them")
    p.add_argument("--witness-quorum", type=int, default=None, metavar="N",
                   help="how many trusted witnesses must have cosigned (default: all given)")


def resolve(home: Home, chosen: str | None, pin: str | None
            ) -> tuple[Session, Genesis, Login]:
    """The session the server reads through, the genesis every answer is checked against, and
    the library and pin a login must be for to sign.  Says on stderr when a genesis is pinned
    on first use."""
    if pin is not None and not HEX64.match(pin):
        raise Malformed("--genesis-pin is a 64-hex pin", "BAD_PIN")
    known = home.library_or_none()
    if chosen is None and known is None:
        raise SetupRequired(
            f"no library to serve: {home.root} has no login. Pass --library URL (with"
            " --genesis-pin PIN, else its genesis is trusted on first use) to read, or run"
            " `alexandria login URL` to make a home that also publishes", "NO_LIBRARY",
            home=str(home.root), login="alexandria login URL --genesis PIN")
    url = check_library_url(chosen).rstrip("/") if chosen else None
    if known is not None and pin in (None, known.pin):
        # the home's pin, wherever the library answers (a new address, a mirror, a proxy):
        # its genesis document is in the home, so this needs no network
        where = url or known.url.rstrip("/")
        session = Session(home, library=LibraryConfig(where, known.pin))
        try:
            genesis = session.genesis()
        except BaseException:
            session.close()
            raise
        if where != known.url.rstrip("/"):
            note(f"checking {where} against the genesis pinned in {home.root} ({known.url});"
                 " pass --genesis-pin PIN to read another library")
        return session, genesis, Login(home, where, genesis.pin, "home")
    target = url or (known.url.rstrip("/") if known else "")
    with Client(target) as client:
        genesis = fetch_genesis(client, pin)
    if pin is None:
        note(f"pinned genesis {genesis.pin} as {target} served it (trust on first use):"
             " compare it with the pin the operator published, and pass --genesis-pin PIN")
    session = Session(home, library=LibraryConfig(target, genesis.pin))
    return session, genesis, Login(home, target, genesis.pin,
                                   "argument" if pin else "trust on first use")


def cmd_mcp(args: argparse.Namespace) -> int:
    session, genesis, login = resolve(Home.locate(), library_url(args), args.genesis_pin)
    try:
        anyio.run(serve_stdio, session, genesis, login,
                  policy_of(args.witness, args.witness_quorum))
    finally:
        session.close()
    return 0
