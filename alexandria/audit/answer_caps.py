"""The most bytes a copy of the log may answer per route (PROTOCOL §7), derived from the
constants the server pages by (``core/log_wire.py``): what a follower (a mirror, a restore's
catch-up, an export or a verification of a URL) reads of one answer before it stops reading
and refuses it (``ANSWER_TOO_LARGE``).  A copy that keeps to the protocol never comes near
them; a hostile one cannot make a follower hold more than a few MiB.

Every cap is one page's largest items plus the JSON around them (``FRAME_BYTES``: keys,
brackets, a ``next`` of up to 20 digits).
"""

from __future__ import annotations

from alexandria.core.checkpoint import MAX_NOTE_BYTES
from alexandria.core.log_wire import PAGE_BYTES, PAGE_CHECKPOINTS, PAGE_ENTRIES
from alexandria.core.records import MAX_ENVELOPE_BYTES

#: the JSON around a page's items, or around a proof's hashes, at most
FRAME_BYTES = 256
#: one entry object: the largest document a library admits (``JCS(envelope)`` of at most
#: 65,536 bytes; authority documents have the same request limit) inside its leaf (admission
#: time) and entry (sequence, type)
MAX_ENTRY_BYTES = MAX_ENVELOPE_BYTES + FRAME_BYTES
#: ``/api/log/entries``: at most ``PAGE_ENTRIES`` entries or ``PAGE_BYTES`` bytes of them (one
#: entry when a single one is larger), with a comma between two
ENTRIES_PAGE_BYTES = max(PAGE_BYTES, MAX_ENTRY_BYTES) + PAGE_ENTRIES + FRAME_BYTES
#: ``/api/log/checkpoint``: one signed note (``core.note`` refuses larger ones)
CHECKPOINT_BYTES = MAX_NOTE_BYTES
#: one checkpoint of ``/api/log/checkpoints`` as JSON: a note's bytes at most doubled by
#: escaping (a newline is ``\n``; notes hold no other control character) and its size
MAX_CHECKPOINT_ITEM_BYTES = 2 * MAX_NOTE_BYTES + FRAME_BYTES
#: ``/api/log/checkpoints``: at most ``PAGE_CHECKPOINTS`` or ``PAGE_BYTES`` bytes of them (one
#: when a single one is larger)
CHECKPOINTS_PAGE_BYTES = (max(PAGE_BYTES, MAX_CHECKPOINT_ITEM_BYTES) + PAGE_CHECKPOINTS
                          + FRAME_BYTES)
#: a proof of a tree of at most 2**64 leaves: at most 2 * 64 hashes (RFC 9162 §2.1.3-2.1.4),
#: each 64 hex digits, quoted, with a comma
PROOF_BYTES = 2 * 64 * (64 + 3) + FRAME_BYTES
#: ``/api/genesis``: the genesis document and its pin.  The protocol does not bound a genesis;
#: a signed note's limit is 100 times the size of a genesis with a dozen root keys
GENESIS_BYTES = MAX_NOTE_BYTES

ROUTE_CAPS: dict[str, int] = {
    "/api/genesis": GENESIS_BYTES,
    "/api/log/checkpoint": CHECKPOINT_BYTES,
    "/api/log/checkpoints": CHECKPOINTS_PAGE_BYTES,
    "/api/log/entries": ENTRIES_PAGE_BYTES,
    "/api/log/proof/inclusion": PROOF_BYTES,
    "/api/log/proof/consistency": PROOF_BYTES,
}


def answer_cap(target: str) -> int | None:
    """The cap for the route of ``target`` (a path, with or without its query); None for a
    route not listed (the client's own limit then applies)."""
    return ROUTE_CAPS.get(target.partition("?")[0].rstrip("/"))
