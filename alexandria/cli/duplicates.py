"""Duplicates: content this home already published, or holds pending, is not signed again.

Two contributions are the same when they agree on what a reader sees and what the rules
check — ``kind``, ``title``, ``body`` (the record's JSON-encoded string), ``links`` (in
order) and ``previous`` — for the same library (``genesis``).  ``authored_at`` and the
signature differ on every signing, so without this check publishing one file twice, or
publishing offline twice and then running ``retry``, makes two permanent log entries.

What this home has sent is on disk (``cli/pending.py``): ``published/ID.json`` holds each
signed record the library admitted, ``pending/ID.json`` each envelope not confirmed yet.  Both
carry the record under ``"record"``.  Personal lists (``follow``, ``save``…) are not checked:
following, unfollowing and following again is meant to repeat itself.

So that a home with 100,000 contributions does not read 100,000 files on every publish,
``content-index`` in the home lists ``KEY REV`` lines: the content key (``content_key``) of
each envelope written to pending/, appended by ``Outbox.write``/``write_many`` (``record``).
The index is a hint, the files are the truth: a candidate counts only when its file is still
in pending/ or published/ with the same content (a dropped or rejected envelope does not), and
a home without an index (or with an unreadable one) is scanned once and the index written.
It is appended without an fsync: a line lost in a crash only lets a duplicate through.

``find_duplicate(home, record)`` answers one question; a batch builds a ``DuplicateIndex``
once and adds to it what it signs, so twins within one batch are caught before they are
written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from alexandria.cli.config import Home
from alexandria.core.keys import HEX64
from alexandria.core.records import PUBLIC_KINDS
from alexandria.errors import Conflict
from alexandria.files import FILE_MODE, atomic_write

#: the record fields that make two contributions the same
SAME = ("genesis", "kind", "title", "body", "links", "previous")
#: the index of content keys, in the config home
INDEX_FILE = "content-index"


class DuplicateContribution(Conflict):
    """Content identical to a revision this home published or holds pending (HTTP 409 where
    an HTTP answer carries it; exit status 4 on the command line)."""

    default_code = "DUPLICATE_CONTRIBUTION"


def content_key(record: Mapping[str, Any]) -> str | None:
    """A digest of the fields of ``SAME``; ``None`` for a record that is not checked (a
    personal list's, or one whose fields are not there)."""
    if record.get("kind") not in PUBLIC_KINDS:
        return None
    try:
        fields = [record[name] for name in SAME]
    except KeyError:
        return None
    try:
        data = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return hashlib.sha256(data).hexdigest()[:32]


class DuplicateIndex:
    """What this home published (``published/``) and holds pending (``pending/``), by
    ``content_key`` (read from ``content-index``), and what this session signed since."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._known: dict[str, list[str]] = {}
        self._signed: dict[str, str] = {}
        path = home.root / INDEX_FILE
        try:
            text = path.read_text() if path.is_file() and not path.is_symlink() else None
        except (OSError, UnicodeDecodeError):
            text = None
        if text is None:
            self._rebuild(path)
            return
        for line in text.splitlines():
            key, _, rev = line.partition(" ")
            if HEX64.match(rev):
                self._known.setdefault(key, []).append(rev)

    def _rebuild(self, path: Path) -> None:
        lines = []
        for folder in (self.home.published_dir, self.home.pending_dir):
            for rev, record in _records(folder):
                key = content_key(record)
                if key is not None:
                    self._known.setdefault(key, []).append(rev)
                    lines.append(f"{key} {rev}\n")
        if self.home.root.is_dir():
            with contextlib.suppress(OSError):
                atomic_write(path, "".join(lines).encode())

    def find(self, record: Mapping[str, Any]) -> tuple[str, bool] | None:
        """The revision id this home holds with the same content, and whether it is pending."""
        key = content_key(record)
        if key is None:
            return None
        if key in self._signed:
            return self._signed[key], True
        for rev in self._known.get(key, []):
            for folder, pending in ((self.home.published_dir, False),
                                    (self.home.pending_dir, True)):
                held = _record(folder / f"{rev}.json")
                if held is not None and content_key(held) == key:
                    return rev, pending
        return None

    def add(self, rev: str, record: Mapping[str, Any]) -> None:
        """``rev`` is signed by this session: a later identical content is its duplicate."""
        key = content_key(record)
        if key is not None:
            self._signed.setdefault(key, rev)

    def refusal(self, record: Mapping[str, Any]) -> DuplicateContribution | None:
        found = self.find(record)
        return None if found is None else refusal(found[0], found[1])


def record(home: Home, written: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Index envelopes just written to pending/ (``Outbox``).  Without an index nothing is
    appended: the first ``DuplicateIndex`` scans the directories, these files included."""
    path = home.root / INDEX_FILE
    lines = "".join(f"{key} {rev}\n" for rev, rec in written
                    if (key := content_key(rec)) is not None)
    if not lines or not path.is_file():
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)


def _record(path: Path) -> dict[str, Any] | None:
    try:
        value = orjson.loads(path.read_bytes())["record"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None  # absent, or not an envelope or signed record this home wrote
    return value if isinstance(value, dict) else None


def _records(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        rev = path.name[:-5]
        if not path.name.endswith(".json") or not HEX64.match(rev):
            continue
        value = _record(path)
        if value is not None:
            out.append((rev, value))
    return out


def find_duplicate(home: Home, record: Mapping[str, Any]) -> str | None:
    """The id of a revision this home published, or an envelope it holds pending, whose
    content is ``record``'s (the fields of ``SAME``); ``None`` when there is none."""
    found = DuplicateIndex(home).find(record)
    return None if found is None else found[0]


def refusal(rev: str, pending: bool) -> DuplicateContribution:
    """The typed refusal naming the existing revision (or pending envelope) and the ways on."""
    if pending:
        return DuplicateContribution(
            f"this content is already pending as {rev} (not confirmed yet): `alexandria retry`"
            f" sends it, `alexandria pending --drop {rev}` drops it; pass --allow-duplicate to"
            " publish a second copy", "DUPLICATE_CONTRIBUTION", pending=rev,
            next="alexandria retry", allow="--allow-duplicate",
        )
    return DuplicateContribution(
        f"this content is already published as {rev}: change it (`alexandria revise {rev}`"
        " edits that revision), or pass --allow-duplicate to publish a second copy",
        "DUPLICATE_CONTRIBUTION", revision=rev, next=f"alexandria revise {rev}",
        allow="--allow-duplicate",
    )
