"""The log on the wire (PROTOCOL §7, docs/log.md): an entry object's bytes, how much one page
of entries or of checkpoints holds, and the lines of an export.

The server's read models (``reads/log.py``), the export of a database (``reads/export.py``)
and the offline side (``audit/``: the export of a server, ``verify``, the caps on a copy's
answers) all make or check these bytes with this module.
"""

from __future__ import annotations

from typing import Any

from alexandria.core.canonical import canonical

#: ``GET /api/log/entries`` answers at most this many entries …
PAGE_ENTRIES = 50
#: … and at most this many bytes of entries (or of checkpoints), one item when a single one
#: is larger
PAGE_BYTES = 393_216
#: ``GET /api/log/checkpoints`` answers at most this many checkpoints
PAGE_CHECKPOINTS = 1000

ENTRY_HEAD = b'{"leaf":'
"""Every entry object (and export line) starts with these bytes, then the leaf."""

EXPORT_FORMAT = "alexandria.log-export/1"


def entry_bytes(sequence: int, kind: str, leaf: bytes) -> bytes:
    """``JCS({"leaf", "sequence", "type"})`` with the stored leaf spliced in.

    The leaf is ``JCS({"admitted_at", "document"})`` (``core.leaf``), so the result is
    canonical and the leaf's bytes are a verbatim slice of it: re-canonicalising the parsed
    ``leaf`` gives back exactly the bytes that were hashed.  The admission time is inside the
    leaf only, so no second copy can disagree with it.
    """
    return b"".join((
        ENTRY_HEAD, leaf, b',"sequence":', str(sequence).encode(), b',"type":"', kind.encode(),
        b'"}',
    ))


def header_line(genesis_document: Any, size: int) -> bytes:
    """An export's first line: its format, the genesis document and the number of leaves."""
    return canonical({"format": EXPORT_FORMAT, "genesis": genesis_document, "size": size}) + b"\n"


def checkpoint_line(note: str) -> bytes:
    """An export's line for the signed checkpoint ``note``, right after the leaf it covers."""
    return canonical({"checkpoint": note}) + b"\n"
