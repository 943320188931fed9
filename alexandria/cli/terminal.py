"""What the CLI prints, and where.

stdout carries the result: with ``--json`` one JSON document (stored signed bytes are printed as
the library sent them), otherwise readable lines whose first word is the thing a script wants
(an id, a key), so ``ID=$(alexandria publish claim.json)`` works without ``--json``.  stderr
carries everything else: notes, warnings and progress.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson


def emit_json(value: Any) -> None:
    print(orjson.dumps(value).decode("utf-8"), flush=True)


def emit_raw(content: bytes) -> None:
    """A JSON document exactly as the library sent it."""
    print(content.decode("utf-8"), flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def short(rev: str) -> str:
    return rev[:12]


def one_line(text: str, width: int = 72) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class Progress:
    """``[i/n] label`` on stderr: redrawn in place on a terminal, one line each otherwise."""

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.done = 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        width = 24
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (width - filled)
        line = f"{self.what} [{bar}] {self.done}/{self.total} {label}"
        if self.tty:
            end = "\n" if self.done >= self.total else ""
            sys.stderr.write("\r\x1b[2K" + line + end)
            sys.stderr.flush()
        else:
            note(line)
