"""Every ``alexandria`` command the README shows exists: its command path is listed by
``--help`` and the whole command line, options included, parses; and the tour runs, as
written, against ``alexandria demo`` (the embedded SQLite default, as a reader of the README
runs it; the README's PostgreSQL commands are parsed like every other)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from alexandria.cli import build_parser
from tests.support.readme import README, tour_after_demo


def readme_commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            tokens = shlex.split(line, comments=True)
            for i, token in enumerate(tokens):
                if re.fullmatch(r"(?:[A-Z_]+=)?(?:\$\()?alexandria", token):
                    commands.append([t.removesuffix(")") for t in tokens[i + 1:]])
                    break
    return commands


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return out.getvalue()


def test_readme_shows_commands() -> None:
    assert len(readme_commands()) >= 15
    assert README.read_text().startswith("# Alexandria\n\n```sh\nmake run")


@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_readme_command_exists(argv: list[str]) -> None:
    words = [t for t in argv if t != "--json"]
    path: list[str] = []
    for word in words:  # the command path: leading words that --help lists as commands
        if word.startswith("-") or not re.search(rf"^\s+{re.escape(word)}\b", _help(path), re.M):
            break
        path.append(word)
    assert path, f"`alexandria {' '.join(argv)}`: no such command in `alexandria --help`"
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`alexandria {' '.join(argv)}` does not parse (see the usage above)")


@pytest.mark.slow
def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    """`alexandria demo` (what `make run` starts), then the tour pasted into bash in the same
    directory, with `set -euo pipefail`: every command must succeed as written."""
    with tour_after_demo(tmp_path) as (_port, r):
        home = tmp_path / "alexandria-alice"
        assert (home / "certificate.json").exists() and (home / "worker.key").exists()
        assert "logged in" in r.stderr and "every signature" in r.stdout
        signed = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"adm')]
        assert signed[-1]["record"]["title"] == "Which successor, exactly?"  # revised, then read
        assert not (tmp_path / "home").exists()  # the tour wrote only where it said
