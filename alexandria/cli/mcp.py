"""``alexandria mcp``: the library for an AI agent, over MCP on stdio (docs/mcp.md).

Uses the participant's configuration exactly as every other command does (``$ALEXANDRIA_HOME``…,
``cli/config.py``): the pinned genesis, the worker key and certificate, the pending files.  The
MCP SDK is imported only when the command runs, so other commands start as fast as before.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from alexandria.cli.config import Home, LibraryConfig
from alexandria.cli.participant import command
from alexandria.cli.session import Session

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Sub) -> None:
    p = command(sub, "mcp", "serve your library to an AI agent over MCP (stdio)", cmd_mcp)
    p.add_argument("--library", metavar="URL",
                   help="library URL (default: the one `alexandria worker init` configured);"
                   " answers are always checked against your pinned genesis")


def cmd_mcp(args: argparse.Namespace) -> int:
    import anyio

    from alexandria.cli.agent import serve_stdio

    home = Home.locate()
    config = home.library()
    url = (args.library or config.url).rstrip("/")
    session = Session(home, library=LibraryConfig(url, config.pin))
    try:
        session.genesis()  # the pin is checked before the first message is served
        anyio.run(serve_stdio, session)
    finally:
        session.close()
    return 0
