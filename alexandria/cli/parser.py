"""The ``alexandria`` argument parser: did-you-mean, command groups in the help, and only the
module of the command being run (``cli/command_table.COMMANDS``) imported and registered."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from alexandria import __version__
from alexandria.cli.command_table import COMMANDS, EXAMPLES, EXIT_USAGE, GROUPS


def terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` gives it (``$COLUMNS``, else the
    terminal of stdout, else 80).  Here rather than through argparse's default: its help
    formatter imports ``shutil`` (and with it ``bz2``, ``lzma``, ``zlib``) at every start, for
    a width that only ``--help`` prints."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class Formatter(argparse.RawDescriptionHelpFormatter):
    """The description and examples kept as written, as wide as the terminal."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         terminal_columns() - 2 if width is None else width)


class Parser(argparse.ArgumentParser):
    """``argparse`` with did-you-mean for a mistyped command or choice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        import difflib
        import re

        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        close: list[str] = []
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            close = difflib.get_close_matches(match.group(1), choices, n=3, cutoff=0.5)
        elif unknown:
            options = {o for p in _parsers(self) for a in p._actions for o in a.option_strings}
            for word in unknown.group(1).split():
                option = word.split("=")[0]
                if option in options:  # a real option, of another command: no did-you-mean
                    message += f"\n\n{option} is not an option of this command:"
                    message += " see `alexandria COMMAND --help`"
                elif word.startswith("--"):
                    close += difflib.get_close_matches(option, options, n=1, cutoff=0.6)
        if close:
            message += "\n\ndid you mean: " + ", ".join(close) + "?"
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every parser below it (the commands loaded)."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


def command_list() -> str:
    lines = []
    for group, title in GROUPS.items():
        lines.append(f"{title}:")
        for name, (_module, g, summary) in COMMANDS.items():
            if g == group:
                lines.append(f"  {name:<11} {summary}")
        lines.append("")
    return "\n".join(lines)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: every command (``None``), only the module of ``command``, or none
    (``""``: the top-level help)."""
    import importlib

    parser = Parser(
        prog="alexandria",
        description="Alexandria: a signed, append-only contribution ledger for a public library."
        "\n\n" + command_list(),
        epilog=EXAMPLES + "\nexit statuses: 0 ok, 1 failure, 2 usage, 3 refused, 4 conflict,"
        " 5 kept pending, 6 verification failed, 7 not set up (docs/cli.md).",
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"alexandria {__version__}")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output (and typed errors) on stdout")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug output on stderr: requests, timings, tracebacks")
    parser.add_argument("--library", dest="global_library", metavar="URL",
                        help="library URL (default: $ALEXANDRIA_LIBRARY, else your config)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                help=argparse.SUPPRESS)
    if command is None:
        modules = list(dict.fromkeys(m for m, _g, _s in COMMANDS.values()))
    else:
        modules = [COMMANDS[command][0]] if command in COMMANDS else []
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser
