"""``alexandria`` (and ``python cli.py``): the participant and operator command line.

Startup cost is the whole cost of a short command, so nothing is imported up front:
``cli/command_table.COMMANDS`` names each command's module, group and summary; ``main`` finds the
command word, imports only that module and lets it ``register(subparsers)`` its commands
(``cli/parser.py``).  ``alexandria --version`` imports nothing but this module and the command
table, and the top-level help no command module at all.  Every ``AlexandriaError`` becomes one
clear message on stderr (with ``--json``, the typed error document on stdout) and the exit
status of ``cli/command_table.EXIT_CODES`` (documented in docs/cli.md).
"""

from __future__ import annotations

import os
import sys

from alexandria import __version__
from alexandria.cli.command_table import (
    COMMANDS,
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)

#: ``typing.TYPE_CHECKING`` without importing ``typing``: ``--version`` imports nothing more
#: than this module (mypy treats any constant of this name so)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from alexandria.errors import AlexandriaError


def exit_code(exc: AlexandriaError) -> int:
    for cls in type(exc).__mro__:
        if cls.__name__ in EXIT_CODES:
            return EXIT_CODES[cls.__name__]
    return EXIT_USAGE if exc.code == "USAGE" else EXIT_FAILURE


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: every command (``None``), only the module of ``command``, or none
    (``""``: the top-level help).  In ``cli/parser.py``: ``argparse`` is not imported until
    a command is parsed."""
    from alexandria.cli.parser import build_parser as build

    return build(command)


def command_word(argv: Sequence[str]) -> str | None:
    """The first word that is not a global option (``--library`` takes a value)."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == "--library":
            skip = True
        elif token == "--":
            return None
        elif not token.startswith("-"):
            return token
    return None


def _unknown_command(word: str) -> int:
    import difflib

    close = difflib.get_close_matches(word, list(COMMANDS), n=3, cutoff=0.5)
    hint = f"\n\ndid you mean: {', '.join(close)}?" if close else ""
    sys.stderr.write(f"alexandria: error: unknown command {word!r}{hint}\n"
                     "run `alexandria --help` for the list of commands\n")
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list == ["--version"]:  # what scripts probe most: not even argparse
        print(f"alexandria {__version__}")
        return EXIT_OK
    word = command_word(args_list)
    if word is not None and word not in COMMANDS:
        return _unknown_command(word)
    parser = build_parser(word or "")
    args = parser.parse_args(args_list)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # everything the CLI creates (keys, the library's directory and database with its -wal and
    # -shm files, configuration, exports) is its user's alone (alexandria/files.py:
    # PRIVATE_UMASK, kept literal here so that start-up imports nothing more)
    os.umask(0o077)
    if args.verbose:
        from alexandria.cli import terminal

        terminal.set_verbose(True)
    try:
        return _run(args)
    except BrokenPipeError:
        # `alexandria search x | head -3`: the reader left; say nothing, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from alexandria.errors import AlexandriaError

    try:
        result = args.func(args)
    except AlexandriaError as exc:
        from alexandria.cli.terminal import report_error

        report_error(exc, json_output=args.json, verbose=args.verbose)
        return exit_code(exc)
    except KeyboardInterrupt:
        print("alexandria: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return int(result or 0)
