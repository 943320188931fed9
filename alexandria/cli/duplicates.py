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

``find_duplicate(home, record)`` answers one question; a batch builds a ``DuplicateIndex``
once and adds to it what it signs, so a file of 10,000 lines reads the directories once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from alexandria.cli.config import Home
from alexandria.core.keys import HEX64
from alexandria.core.records import PUBLIC_KINDS
from alexandria.errors import Conflict

#: the record fields that make two contributions the same
SAME = ("genesis", "kind", "title", "body", "links", "previous")


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
    return hashlib.sha256(data).hexdigest()


class DuplicateIndex:
    """What this home published (``published/``) and holds pending (``pending/``), by
    ``content_key``: the revision id, and whether it is still pending."""

    def __init__(self, home: Home) -> None:
        self._known: dict[str, tuple[str, bool]] = {}
        for folder, pending in ((home.published_dir, False), (home.pending_dir, True)):
            for rev, record in _records(folder):
                key = content_key(record)
                if key is not None:
                    self._known.setdefault(key, (rev, pending))

    def find(self, record: Mapping[str, Any]) -> tuple[str, bool] | None:
        """The revision id this home holds with the same content, and whether it is pending."""
        key = content_key(record)
        return None if key is None else self._known.get(key)

    def add(self, rev: str, record: Mapping[str, Any]) -> None:
        """``rev`` is signed and written to pending/: a later identical content is its
        duplicate."""
        key = content_key(record)
        if key is not None:
            self._known.setdefault(key, (rev, True))

    def refusal(self, record: Mapping[str, Any]) -> DuplicateContribution | None:
        found = self.find(record)
        return None if found is None else refusal(found[0], found[1])


def _records(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        rev = path.name[:-5]
        if not path.name.endswith(".json") or not HEX64.match(rev):
            continue
        try:
            record = orjson.loads(path.read_bytes())["record"]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            continue  # not an envelope or signed record this home wrote: not a duplicate
        if isinstance(record, dict):
            out.append((rev, record))
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
