"""What the CLI prints, and where.

stdout carries the result: with ``--json`` one JSON document (stored signed bytes are printed as
the library sent them, but for the escapes below), otherwise readable lines whose first word is
the thing a script wants (an id, a key), so ``ID=$(alexandria publish claim.json)`` works
without ``--json``.  stderr carries everything else: notes, warnings and progress.

Text from a library (titles, bodies, names, counts, error messages) is anybody's, signed or
not: everything the CLI prints goes through this module, which makes control characters
visible, so a library or an author cannot clear the screen, move the cursor or forge a line of
output (a fake verdict, a fake next step):

- ``say`` and ``note`` print one line: every control character (C0, C1, DEL), line break and
  bidirectional override in it is printed as a visible escape (``\\x0a``, ``\\x9b``…);
- ``say_lines`` prints multi-line text (a body): line breaks and tabs kept, every other
  control made visible;
- ``emit_json`` and ``emit_raw`` print JSON whose strings carry every such character as a
  ``\\uXXXX`` escape, never raw (the same JSON value; JSON itself escapes only C0).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import re
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

if TYPE_CHECKING:
    from collections.abc import Iterator

    from alexandria.errors import AlexandriaError

# C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and isolates; a line
# break and a tab survive only in ``say``/``note`` (multi-line text is printed as such)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_INLINE_CONTROLS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# in JSON text: what JSON leaves raw (DEL, C1, the separators and bidirectional controls; and
# C0 but the whitespace between tokens, which valid JSON never holds raw inside a string)
_JSON_CONTROLS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e"
    "\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but line breaks and tabs made visible."""
    return _CONTROLS.sub(_escape, text)


def inline(text: str) -> str:
    """``text`` for the inside of a line: line breaks made visible too."""
    return _INLINE_CONTROLS.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def safe_json(text: str) -> str:
    """JSON ``text`` with no control character raw: each is a ``\\uXXXX`` escape (outside a
    string valid JSON has none of them, so the value is unchanged)."""
    return _JSON_CONTROLS.sub(_json_escape, text)


_VERBOSE = False
_STARTED = time.perf_counter()


def set_verbose(on: bool) -> None:
    """``-v``: debug lines on stderr (requests and their timings, tracebacks of errors)."""
    global _VERBOSE
    _VERBOSE = on
    if on:
        from alexandria import client

        client.TRACE = debug


def verbose() -> bool:
    return _VERBOSE


def debug(text: str) -> None:
    if _VERBOSE:
        ms = (time.perf_counter() - _STARTED) * 1000
        print(f"debug: {ms:7.1f} ms  {inline(text)}", file=sys.stderr, flush=True)


def emit_json(value: Any) -> None:
    _out(safe_json(orjson.dumps(value).decode("utf-8")))


def emit_raw(content: bytes) -> None:
    """A JSON document as the library sent it, control characters escaped (``safe_json``)."""
    print(safe_json(content.decode("utf-8", "replace")), flush=True)


def json_line(content: bytes) -> bytes:
    """One line of JSON for a terminal (``safe_json``): ``export`` to a terminal."""
    return safe_json(content.decode("utf-8", "replace")).encode("utf-8")


def say(text: str = "") -> None:
    """One line on stdout: line breaks and every other control character made visible."""
    _out(inline(text))


#: stdout lines held by ``lines_together``, or None
_held: list[str] | None = None


def _out(line: str) -> None:
    if _held is None:
        print(line, flush=True)
    else:
        _held.append(line)


def _write_held() -> None:
    if _held:
        sys.stdout.write("".join(f"{line}\n" for line in _held))
        sys.stdout.flush()
        _held.clear()


@contextlib.contextmanager
def lines_together() -> Iterator[None]:
    """The stdout lines of ``say`` and ``emit_json`` inside the block written with one write
    at its end (a batch's lines, a chunk at a time); a ``note`` on stderr first writes those
    held, so the two streams keep their order."""
    global _held
    _held = []
    try:
        yield
    finally:
        _write_held()
        _held = None


def say_lines(text: str) -> None:
    """Multi-line text on stdout (a body, a script): line breaks and tabs kept."""
    print(printable(text), flush=True)


def note(text: str) -> None:
    """One line on stderr, as ``say``."""
    _write_held()
    print(inline(text), file=sys.stderr, flush=True)


def short(rev: str) -> str:
    return rev[:12]


def one_line(text: str, width: int = 72) -> str:
    flat = inline(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


#: details shown in text mode, in this order, with the label they are shown under
_DETAIL_LABELS = (("head", "current head"), ("root", "object"), ("pointer", "at"),
                  ("expected", "expected"), ("allowed", "allowed"), ("limit", "limit"))


def _links_text(value: Any) -> str | None:
    """``allowed`` of a link refusal (``rules/state.allowed_links``) as a line: each relation
    with how many and what it targets."""
    if not isinstance(value, dict) or not isinstance(value.get("relations"), list):
        return None
    parts = []
    for entry in value["relations"]:
        if isinstance(entry, dict):
            targets = "/".join(str(t) for t in entry.get("targets", []))
            parts.append(f"{entry.get('relation')} ({entry.get('count')}, to {targets})")
    if value.get("citations"):
        parts.append("citations (any other relation name)")
    return f"a {value.get('kind')} takes " + ("; ".join(parts) or "no links")


def next_step(exc: AlexandriaError) -> str | None:
    """What to do about a typed error, when the error alone says it."""
    head = exc.details.get("head")
    name = exc.details.get("revise_as")  # publish: the name the user knows the object by
    target = name if isinstance(name, str) else head
    if exc.code in ("HEAD_CONFLICT", "STALE_BASE") and isinstance(head, str):
        return f"edit the current head instead: `alexandria revise {target}`"
    if exc.code == "DUPLICATE_VOTE" and isinstance(head, str):
        return f"you voted already: run `alexandria revise {target}` to change that vote"
    step = exc.details.get("next")  # a refusal that names its command (rules, duplicates)
    if isinstance(step, str) and step.startswith("alexandria "):
        return f"`{step}`"
    return None


def report_error(exc: AlexandriaError, json_output: bool, verbose: bool = False) -> None:
    """One error: the typed document on stdout with ``--json``; on stderr the message, its
    code (once), the details that help and the next step."""
    from alexandria.client import redact_url

    if json_output:
        emit_json(exc.to_json())
    # a library's error text can quote contributors' input: control characters made visible
    message = inline(redact_url(exc.message))
    tag = f"[{inline(exc.code)}]"
    lines = [f"alexandria: error: {message}" + ("" if message.endswith(tag) else f" {tag}")]
    for key, label in _DETAIL_LABELS:
        value = exc.details.get(key)
        if value is not None:
            text = (value if isinstance(value, str) else _links_text(value)
                    or orjson.dumps(value).decode())
            lines.append(f"  {label + ':':<13} {one_line(redact_url(text), 200)}")
    step = next_step(exc)
    if step:
        lines.append(f"  next: {step}")
    sys.stderr.write("\n".join(lines) + "\n")
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)


class Progress:
    """``what [####----] i/n label`` on stderr, redrawn in place, only when stderr is a
    terminal: a log file or a pipe gets no progress lines."""

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
            sys.stderr.write("\r\x1b[2K" + inline(line) + end)
            sys.stderr.flush()


def is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.cache  # once per library and command
def warn_plain_http(url: str) -> None:
    """On plain ``http://`` anything between this machine and the library can read what is
    sent and change what comes back (a genesis, a certificate, a page of entries): say so,
    unless the library is on this machine."""
    if urlsplit(url).scheme == "http" and not is_loopback(url):
        note(f"warning: {url} is plain http: anyone on the network path can read and alter this"
             " exchange; use the library's https:// address (docs/deployment.md)")
