"""``alexandria`` (and ``python cli.py``): the participant and operator command line.

Startup cost is the whole cost of a short command, so nothing is imported up front: ``COMMANDS``
names each command's module, group and summary; ``main`` finds the command word, imports only
that module and lets it ``register(subparsers)`` its commands (``cli/parser.py``).
``alexandria --version`` imports nothing but this module, and the top-level help no command
module at all.  Every ``AlexandriaError`` becomes one clear
message on stderr (with ``--json``, the typed error document on stdout) and the exit status of
``EXIT_CODES`` (documented in docs/cli.md).
"""

from __future__ import annotations

import os
import sys

from alexandria import __version__

#: ``typing.TYPE_CHECKING`` without importing ``typing``: ``--version`` imports nothing more
#: than this module (mypy treats any constant of this name so)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from alexandria.errors import AlexandriaError

#: command -> (module that registers it, group in the help, one-line summary)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "login": ("alexandria.cli.login", "start", "create your key and ask a library to approve it"),
    "whoami": ("alexandria.cli.participant", "start", "show your key, actor, scopes and library"),
    "worker": ("alexandria.cli.participant", "start",
               "set up a worker key by hand (init, import CERT)"),
    "publish": ("alexandria.cli.publish", "publish",
                "sign content and publish it (FILE…, or --jsonl)"),
    "revise": ("alexandria.cli.publish", "publish",
               "edit the current head of an object and publish the revision"),
    "validate": ("alexandria.cli.participant", "publish",
                 "ask the library whether it would admit content (dry run)"),
    "pending": ("alexandria.cli.participant", "publish",
                "list envelopes not yet admitted, and rejected ones"),
    "retry": ("alexandria.cli.participant", "publish", "resend pending envelopes, byte for byte"),
    "search": ("alexandria.cli.reading", "read", "search the library's catalogue"),
    "get": ("alexandria.cli.reading", "read",
            "fetch a signed record and check it against the pinned genesis"),
    "object": ("alexandria.cli.reading", "read", "show an object and what surrounds it"),
    "changes": ("alexandria.cli.reading", "read", "print what changed under a root, resuming"),
    "follow": ("alexandria.cli.personal", "lists", "follow objects"),
    "unfollow": ("alexandria.cli.personal", "lists", "stop following objects"),
    "save": ("alexandria.cli.personal", "lists", "save objects"),
    "unsave": ("alexandria.cli.personal", "lists", "remove objects from saved"),
    "lists": ("alexandria.cli.personal", "lists", "show what you follow and what you saved"),
    "serve": ("alexandria.cli.operator", "operate", "serve a library over HTTP"),
    "genesis": ("alexandria.cli.operator", "operate", "create a library's genesis"),
    "authority": ("alexandria.cli.operator", "operate",
                  "approve participants (requests, approve CODE), certify and revoke keys"),
    "demo": ("alexandria.cli.operator", "operate",
             "serve a fresh library seeded with the contract's worked example"),
    "export": ("alexandria.cli.log", "audit", "write a library's log as JSON Lines"),
    "verify": ("alexandria.cli.log", "audit", "check a log offline with only the genesis pin"),
    "backup": ("alexandria.cli.operations", "operate",
               "copy a library's database while it serves"),
    "restore": ("alexandria.cli.operations", "operate",
                "restore a backup, and catch up with a mirror or an export"),
    "migrate": ("alexandria.cli.operations", "operate", "copy a SQLite library into PostgreSQL"),
    "mirror": ("alexandria.cli.operations", "operate",
               "serve a verified read-only replica of a library"),
    "witness": ("alexandria.cli.witness", "operate",
                "run a C2SP witness that cosigns other logs' checkpoints"),
    "mcp": ("alexandria.cli.mcp", "more", "serve your library to an AI agent over MCP (stdio)"),
    "completion": ("alexandria.cli.completion", "more", "print a shell completion script"),
}

GROUPS = {
    "start": "Get started",
    "publish": "Publish",
    "read": "Read (no key needed)",
    "lists": "Personal lists",
    "operate": "Run a library (operators)",
    "audit": "Audit",
    "more": "More",
}

EXAMPLES = """\
examples:
  alexandria login http://127.0.0.1:8080 --name alice   # then the operator approves the code
  alexandria search arithmetic --library http://127.0.0.1:8080
  alexandria publish claim.json --name claim
  alexandria revise claim                                 # edit the head, publish the revision
  alexandria publish --jsonl many.jsonl                   # many contributions, one connection
  alexandria authority approve K7QF-2XMB                  # operator: approve a login request
"""

#: exit statuses, by the name of the exception class (or a base class); names rather than
#: classes so that mapping an error never imports the module that defines it
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_CONFLICT = 4
EXIT_PENDING = 5
EXIT_VERIFICATION = 6
EXIT_SETUP = 7
EXIT_INTERRUPTED = 130
EXIT_CODES: dict[str, int] = {
    "KeptPending": EXIT_PENDING,
    "SetupRequired": EXIT_SETUP,
    "VerificationFailed": EXIT_VERIFICATION,
    "RecordNotVerified": EXIT_VERIFICATION,
    "UsageError": EXIT_USAGE,
    "ContentRefused": EXIT_REFUSED,
    "ServerNotFound": EXIT_FAILURE,
    "ServerConflict": EXIT_CONFLICT,
    "DuplicateContribution": EXIT_CONFLICT,
    "ServerResyncRequired": EXIT_CONFLICT,
    "ServerError": EXIT_REFUSED,
}


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
