"""``alexandria mcp``: the library for an AI agent, over MCP on stdio (docs/mcp.md).

Uses the participant's configuration exactly as every other command does (``$ALEXANDRIA_HOME``…,
``cli/config.py``): the pinned genesis, the worker key and certificate, the pending files.  The
MCP SDK is imported only when the command runs, so other commands start as fast as before.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from alexandria.cli.config import Home, LibraryConfig
from alexandria.cli.participant import command, library_url
from alexandria.cli.session import Session
from alexandria.core.witness_policy import policy_of

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    # --library URL (or $ALEXANDRIA_LIBRARY) replaces the configured library's URL; answers are
    # always checked against the pin in your configuration
    p = command(sub, "mcp", "serve your library to an AI agent over MCP (stdio)", cmd_mcp)
    p.add_argument("--witness", action="append", default=[], metavar="NAME=VKEY",
                   help="a witness you trust (repeatable): `verify` and with_proof answers then"
                   " require checkpoints cosigned by --witness-quorum of them")
    p.add_argument("--witness-quorum", type=int, default=None, metavar="N",
                   help="how many trusted witnesses must have cosigned (default: all given)")


def cmd_mcp(args: argparse.Namespace) -> int:
    import anyio

    from alexandria.cli.agent import serve_stdio

    home = Home.locate()
    config = home.library()
    url = (library_url(args) or config.url).rstrip("/")
    session = Session(home, library=LibraryConfig(url, config.pin))
    try:
        session.genesis()  # the pin is checked before the first message is served
        anyio.run(serve_stdio, session, policy_of(args.witness, args.witness_quorum))
    finally:
        session.close()
    return 0
