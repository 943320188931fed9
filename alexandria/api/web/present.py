"""Signed records as a reader sees them: parsed values, readable text, diffs and safe links.

Functions without IO (and one bounded cache of diffs, which never change).  Everything here is
*untrusted* contributor text; it is returned as plain strings and escaped by the templates
(Jinja2 autoescape), never marked safe.  The only values that become ``href`` attributes are
our own paths built from 64-hex ids, and contributor URLs that pass :func:`safe_url` (``https``
or ``http`` with a host, nothing else).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from alexandria.api.web.diffs import Diff, DiffCache, line_diff
from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.keys import HEX64
from alexandria.core.search_text import SNIPPET_CHARACTERS, TEXT_FIELDS, human_text
from alexandria.core.timestamps import parse_ms
from alexandria.reads.pages import REFERENCE_FIELDS, Target

#: Kinds whose body is a JSON object (a reply's and a vote's body is a plain string).
OBJECT_BODY_KINDS = frozenset((
    "space", "discussion", "claim", "document", "evidence", "assessment", "relationship",
    "proposal",
))


@dataclass(frozen=True)
class Link:
    relation: str
    target: str


@dataclass(frozen=True)
class Revision:
    """One signed record, parsed for display."""

    id: str
    root: str
    kind: str
    title: str
    author: str
    authored_at: str
    body: Any  # the decoded body object, or the string of a reply or a vote
    links: tuple[Link, ...]
    previous: str
    sequence: int
    admitted_at: str
    signed: Mapping[str, Any] = field(repr=False, compare=False)

    def linked(self, *relations: str) -> list[str]:
        return [ln.target for ln in self.links if ln.relation in relations]

    def field(self, name: str, default: Any = None) -> Any:
        """A field of an object body (``default`` for a string body or a missing field)."""
        return self.body.get(name, default) if isinstance(self.body, dict) else default

    @property
    def snippet(self) -> str:
        """The start of the text the author wrote for readers (not its JSON encoding)."""
        if self.kind in TEXT_FIELDS and isinstance(self.body, dict):
            # each field (and each item of a list) apart: "statement · scope · assumption"
            parts = (" ".join(p.split()) for name in TEXT_FIELDS[self.kind]
                     if name in self.body for p in _text_parts(self.body[name]))
            text = " · ".join(p for p in parts if p)
        else:
            text = human_text(self.kind, self.signed["record"]["body"],
                              self.body if isinstance(self.body, dict) else None)
            text = " ".join(text.split())
        if len(text) > SNIPPET_CHARACTERS:
            return text[:SNIPPET_CHARACTERS - 1] + "…"
        return text


    @property
    def size(self) -> int:
        """Characters of the title and the body as signed (a history's size change)."""
        return len(self.title) + len(self.signed["record"]["body"])


#: Keys of nested values (sources, reproducibility, a proposed body) that are not prose.
_NOT_PROSE = frozenset(("method", "verdict", "relation", "status", "digest", "retrieved_at",
                        "url", "archive_url"))


def _text_parts(value: Any) -> Iterator[str]:
    """The strings of a body field a reader wrote, one per string (ids and codes left out)."""
    if isinstance(value, str):
        if not HEX64.match(value):
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _text_parts(item)
    elif isinstance(value, dict):
        for key in sorted(value):
            if key not in _NOT_PROSE:
                yield from _text_parts(value[key])


def revision(raw: bytes) -> Revision:
    """Parse a signed record (``{"id","root","record","signature","admission"}``)."""
    signed = orjson.loads(raw)
    record = signed["record"]
    body: Any = record["body"]
    if record["kind"] in OBJECT_BODY_KINDS:
        body = orjson.loads(body)
    return Revision(
        id=signed["id"],
        root=signed["root"],
        kind=record["kind"],
        title=record["title"],
        author=record["author"],
        authored_at=record["authored_at"],
        body=body,
        links=tuple(Link(ln["relation"], ln["target"]) for ln in record["links"]),
        previous=record["previous"],
        sequence=signed["admission"]["sequence"],
        admitted_at=signed["admission"]["admitted_at"],
        signed=signed,
    )


def revisions(raws: Sequence[bytes]) -> list[Revision]:
    return [revision(r) for r in raws]


def safe_url(url: Any) -> str | None:
    """``url`` if a browser may follow it from our page: ``https``/``http`` with a host and no
    credentials.  Anything else (``javascript:``, ``data:``, relative paths) is shown as text."""
    if not isinstance(url, str) or len(url) > 2000 or any(c.isspace() for c in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not parts.hostname or "@" in parts.netloc:
        return None
    return url


def is_revision_id(value: Any) -> bool:
    return isinstance(value, str) and HEX64.match(value) is not None


# --- readable text and diffs -----------------------------------------------------------------


def label(rev_id: str, targets: Mapping[str, Target]) -> str:
    """A revision id as a reader names it: ``claim "Title" (0123456789ab)``, or the id alone
    when the page did not resolve it."""
    found = targets.get(rev_id)
    if found is None:
        return rev_id
    return f'{found.kind} "{found.title}" ({rev_id[:12]})'


def _value_lines(name: str, value: Any, targets: Mapping[str, Target], indent: str = ""
                 ) -> Iterator[str]:
    if isinstance(value, dict):
        yield f"{indent}{name}:"
        for key in sorted(value):
            yield from _value_lines(key, value[key], targets, indent + "  ")
    elif isinstance(value, list):
        yield f"{indent}{name}:"
        for item in value:
            if isinstance(item, dict | list):
                yield from _value_lines("-", item, targets, indent + "  ")
            else:
                yield from _text_lines(f"{indent}  - ", _shown(item, targets))
    else:
        yield from _text_lines(f"{indent}{name}: ", _shown(value, targets))


def _shown(value: Any, targets: Mapping[str, Target]) -> str:
    return label(value, targets) if is_revision_id(value) else str(value)


def _text_lines(prefix: str, text: str) -> Iterator[str]:
    lines = text.split("\n")
    yield prefix + lines[0]
    pad = " " * len(prefix)
    for line in lines[1:]:
        yield pad + line


def text_lines(rev: Revision, targets: Mapping[str, Target] | None = None) -> list[str]:
    """A revision as lines of text, the unit of its diff: title, then the body's fields in a
    fixed order, then its links; revision ids named by ``targets`` are shown as kind and title
    (the exact revision's, which never changes) beside their start."""
    targets = targets or {}
    lines = list(_text_lines("title: ", rev.title))
    if isinstance(rev.body, dict):
        for key in sorted(rev.body):
            lines.extend(_value_lines(key, rev.body[key], targets))
    else:
        lines.extend(_text_lines("body: ", rev.body))
    lines.extend(f"link: {ln.relation} {label(ln.target, targets)}" for ln in rev.links)
    return lines


def _references(rev: Revision) -> Iterator[str]:
    for ln in rev.links:
        yield ln.target
    if isinstance(rev.body, dict):
        for name in REFERENCE_FIELDS:
            value = rev.body.get(name)
            for v in value if isinstance(value, list) else (value,):
                if is_revision_id(v):
                    yield str(v)
        for ln in rev.body.get("links") or ():
            if isinstance(ln, dict) and is_revision_id(ln.get("target")):
                yield ln["target"]


#: Diffs already computed, by (old revision id, new revision id): revisions never change.
DIFFS = DiffCache()


def diff(old: Revision, new: Revision, targets: Mapping[str, Target] | None = None) -> Diff:
    """The line diff from ``old`` to ``new`` over their ``text_lines`` (``diffs.line_diff``:
    bounded in time and size), computed once per pair of revisions.  Only a diff whose every
    revision id was named by ``targets`` is kept: its text is then the same whenever asked."""
    targets = targets or {}
    key = (old.id, new.id)
    cacheable = (is_revision_id(old.id) and is_revision_id(new.id)
                 and all(t in targets for t in (*_references(old), *_references(new))))
    found = DIFFS.get(key) if cacheable else None
    if found is None:
        found = line_diff(text_lines(old, targets), text_lines(new, targets))
        if cacheable:
            DIFFS.put(key, found)
    return found


@dataclass(frozen=True)
class HistoryEntry:
    revision: Revision
    number: int  # 1 for the object's first revision
    previous: Revision | None  # the revision before it (None for the first)
    diff: Diff | None  # from ``previous``
    delta: int | None  # the change in ``Revision.size`` from ``previous``


def history(items: Sequence[Revision], before: Revision | None, first_number: int,
            targets: Mapping[str, Target] | None = None) -> list[HistoryEntry]:
    """The revisions of a history page (``items`` oldest first, the first of them revision
    ``first_number``, ``before`` the one before it), newest first, each with its diff and size
    change from the one before it."""
    out = []
    prev = before
    for i, rev in enumerate(items):
        out.append(HistoryEntry(
            rev, first_number + i, prev, diff(prev, rev, targets) if prev is not None else None,
            rev.size - prev.size if prev is not None else None,
        ))
        prev = rev
    return out[::-1]


# --- times -----------------------------------------------------------------------------------

_UNITS = (("year", 365 * 86400), ("month", 30 * 86400), ("day", 86400), ("hour", 3600),
          ("minute", 60))


def ago(timestamp: str, now: datetime | None = None) -> str:
    """``timestamp`` (an RFC 3339 time) relative to ``now``: "3 hours ago", "in 2 days" (an
    author's clock may run ahead), "just now"; the text itself when it is not a timestamp."""
    ms = parse_ms(timestamp) if isinstance(timestamp, str) else None
    if ms is None:
        return str(timestamp)
    now = now or datetime.now(UTC)
    seconds = int(now.timestamp()) - ms // 1000
    span = abs(seconds)
    for unit, size in _UNITS:
        if span >= size:
            n = span // size
            text = f"{n} {unit}{'s' if n != 1 else ''}"
            return f"{text} ago" if seconds > 0 else f"in {text}"
    return "just now"


# --- threads ---------------------------------------------------------------------------------


@dataclass
class ThreadNode:
    revision: Revision
    relation: str  # how it joins its parent: replies_to, answers or branches_from
    children: list[ThreadNode] = field(default_factory=list)
    parent_elsewhere: str | None = None  # root of a parent that is not on this page


def thread(
    top_root: str, items: Sequence[Revision], roots: Mapping[str, str],
    relations: Sequence[str],
) -> list[ThreadNode]:
    """The conversation below ``top_root`` as a tree.  ``items`` come in creation order, so a
    parent always precedes its replies; an item whose parent is not on this page is placed at
    the top level with ``parent_elsewhere`` naming it."""
    nodes: dict[str, ThreadNode] = {}
    top: list[ThreadNode] = []
    for rev in items:
        targets = [(ln.relation, ln.target) for ln in rev.links if ln.relation in relations]
        relation, target = targets[0] if targets else ("", "")
        node = ThreadNode(rev, relation)
        nodes[rev.root] = node
        parent_root = roots.get(target, "")
        if parent_root in nodes:
            nodes[parent_root].children.append(node)
        else:
            if parent_root != top_root:
                node.parent_elsewhere = parent_root or None
            top.append(node)
    return top


def pretty_json(raw: bytes) -> str:
    """Stored JSON, indented for reading (the raw bytes stay one link away)."""
    return orjson.dumps(orjson.loads(raw), option=orjson.OPT_INDENT_2).decode()


# --- the log ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogEntry:
    sequence: int
    type: str
    admitted_at: str
    revision: str | None  # a contribution's revision id
    title: str
    key: str | None  # the key a certificate or revocation is about


def log_entries(page: bytes | None) -> list[LogEntry]:
    """The entries of a ``GET /api/log/entries`` page, newest first."""
    if page is None:
        return []
    out = []
    for entry in orjson.loads(page)["entries"]:
        leaf = entry["leaf"]  # {"admitted_at", "document"} (PROTOCOL §7)
        document = leaf["document"]
        rev = title = key = None
        if "record" in document:
            rev = sha256_hex(canonical(document["record"]))
            title = document["record"]["title"]
        else:
            payload = next(v for k, v in document.items() if k != "signatures")
            key = payload.get("key")
            title = ", ".join(payload.get("roles", ())) or payload.get("reason", "")
        out.append(LogEntry(entry["sequence"], entry["type"], leaf["admitted_at"], rev,
                            title or "", key))
    return out[::-1]
