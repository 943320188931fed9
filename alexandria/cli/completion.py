"""``alexandria completion bash|zsh|fish``: a shell completion script, generated from the parser
by shtab.

The script is static (commands, subcommands and options are written into it), so completing a
word costs the shell nothing: no Python starts on every TAB.  Where a command takes a revision
(REV, ``--root``, ``--entry``) it also offers the names of your names file
(``$ALEXANDRIA_HOME/names``, else ``${XDG_CONFIG_HOME:-~/.config}/alexandria/names``), read
when you press TAB.  Regenerate it after an upgrade::

    alexandria completion bash > ~/.local/share/bash-completion/completions/alexandria
    alexandria completion zsh > "${fpath[1]}/_alexandria"
    alexandria completion fish > ~/.config/fish/completions/alexandria.fish
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import shtab

from alexandria.cli import build_parser
from alexandria.cli.participant import command
from alexandria.cli.terminal import say_lines

if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[argparse.ArgumentParser]

SHELLS = ("bash", "zsh", "fish")
#: the metavars of the arguments that take a revision id or a name of the names file
NAME_METAVARS = frozenset(("REV", "R"))

#: the names of the names file (comments and blank lines skipped), one a line
_NAMES_AWK = "awk '!/^#/ && NF == 2 {print $1}'"
#: the names file, as bash and zsh expand it
_NAMES_FILE = '"${ALEXANDRIA_HOME:-${XDG_CONFIG_HOME:-$HOME/.config}/alexandria}/names"'

#: shtab's ``complete`` of an argument that takes a revision: the names of the names file
NAMES: dict[str, Any] = {
    "bash": "_alexandria_names_compgen",
    "zsh": "($(_alexandria_names))",
    "fish": "(__alexandria_names)",
    "preamble": {
        "bash": "\n".join([
            "_alexandria_names_compgen() {",
            f"  local file={_NAMES_FILE}",
            f'  [[ -r "$file" ]] && compgen -W "$({_NAMES_AWK} "$file")" -- "$1"',
            "}",
        ]),
        "zsh": "\n".join([
            "_alexandria_names() {",
            f"  local file={_NAMES_FILE}",
            f'  [[ -r "$file" ]] && {_NAMES_AWK} "$file"',
            "}",
        ]),
        "fish": "\n".join([
            "function __alexandria_names",
            "    set -l home $ALEXANDRIA_HOME",
            '    if test -z "$home"',
            "        set -q XDG_CONFIG_HOME; and set home $XDG_CONFIG_HOME/alexandria;"
            " or set home $HOME/.config/alexandria",
            "    end",
            f"    test -r $home/names; and {_NAMES_AWK} $home/names",
            "end",
        ]),
    },
}


def register(sub: Sub) -> None:
    p = command(sub, "completion", "print a shell completion script", cmd_completion,
                __doc__.split("\n\n", 1)[1] if __doc__ else None, library=False,
                examples="  alexandria completion bash > ~/.local/share/bash-completion/"
                "completions/alexandria\n  source <(alexandria completion bash)")
    p.add_argument("shell", choices=SHELLS)


def mark_names(parser: argparse.ArgumentParser) -> None:
    """Every argument of ``parser`` and its commands that takes a revision completes the
    names of the names file (shtab reads an action's ``complete``).  The commands, which the
    help lists in groups of its own rather than as argparse's, are shown to shtab."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if action.help == argparse.SUPPRESS:
                action.help = "command"
            for child in action.choices.values():
                mark_names(child)
        elif action.metavar in NAME_METAVARS:
            action.complete = NAMES  # type: ignore[attr-defined]


def script(shell: str) -> str:
    parser = build_parser()
    mark_names(parser)
    text: str = shtab.complete(parser, shell)
    return text


def cmd_completion(args: argparse.Namespace) -> int:
    say_lines(script(args.shell).rstrip("\n"))
    return 0
