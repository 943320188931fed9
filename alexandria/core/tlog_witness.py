"""C2SP ``tlog-witness``: the ``add-checkpoint`` request body, both directions (no IO).

The body, every line ending in U+000A::

    old OLD_SIZE\\n             decimal, no leading zero ("0" for zero)
    BASE64(HASH)\\n             zero to MAX_PROOF_LINES consistency-proof hashes
    \\n
    CHECKPOINT                 a signed note, possibly with several signature lines

The witness answers ``200`` with cosignature lines, ``409`` with its latest size
(``text/x.tlog.size``), or ``400/403/404/422``; see ``service/witness.py``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass

from alexandria.core import note
from alexandria.errors import Malformed

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_PROOF_LINES",
    "SIZE_MEDIA_TYPE",
    "AddCheckpoint",
    "WitnessRequestError",
    "format_add_checkpoint",
    "parse_add_checkpoint",
    "parse_size_body",
]

MAX_PROOF_LINES = 63  # a consistency proof of a uint64 tree has at most 63 hashes (tlog-witness)
MAX_SIGNATURE_LINES = 16  # the spec requires a witness to accept at least 16; we accept no more
#: the old-size line, 63 proof lines of 45 bytes and a checkpoint of a long origin with 16
#: signature lines fit easily; anything larger is refused before it is read in full
MAX_BODY_BYTES = 16_384
SIZE_MEDIA_TYPE = "text/x.tlog.size"
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")
_MAX_SIZE = (1 << 64) - 1


class WitnessRequestError(Malformed):
    """An ``add-checkpoint`` body that is not well formed (400)."""

    default_code = "WITNESS_REQUEST_MALFORMED"


@dataclass(frozen=True)
class AddCheckpoint:
    old_size: int
    proof: tuple[bytes, ...]
    checkpoint: bytes  # the signed note, as received


def _size(text: str, what: str) -> int:
    if not _DECIMAL.fullmatch(text) or int(text) > _MAX_SIZE:
        raise WitnessRequestError(f"{what} is not a canonical decimal uint64")
    return int(text)


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse the request body; checks its shape and bounds only (the note is not parsed)."""
    if len(body) > MAX_BODY_BYTES:
        raise WitnessRequestError(f"the body is over {MAX_BODY_BYTES} bytes",
                                  "WITNESS_REQUEST_TOO_LARGE", limit=MAX_BODY_BYTES)
    head, sep, checkpoint = body.partition(b"\n\n")
    if not sep:
        raise WitnessRequestError("no empty line between the proof and the checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise WitnessRequestError("the old size and proof lines are not ASCII") from None
    first, proof_lines = lines[0], lines[1:]
    if not first.startswith("old "):
        raise WitnessRequestError('the body does not start with "old SIZE"')
    old_size = _size(first[4:], "the old size")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise WitnessRequestError(f"more than {MAX_PROOF_LINES} proof lines",
                                  limit=MAX_PROOF_LINES)
    proof = []
    for line in proof_lines:
        raw = note.b64decode_strict(line)
        if raw is None or len(raw) != 32:
            raise WitnessRequestError("a proof line is not the base64 of a 32-byte hash")
        proof.append(raw)
    if checkpoint.count(b"\n\xe2\x80\x94 ") > MAX_SIGNATURE_LINES:
        raise WitnessRequestError(f"the checkpoint has more than {MAX_SIGNATURE_LINES}"
                                  " signature lines", limit=MAX_SIGNATURE_LINES)
    return AddCheckpoint(old_size, tuple(proof), checkpoint)


def format_add_checkpoint(old_size: int, proof: Sequence[bytes], checkpoint: str) -> bytes:
    """The request body a log sends (the checkpoint note as it is served)."""
    lines = [f"old {old_size}\n"] + [base64.b64encode(h).decode() + "\n" for h in proof]
    return ("".join(lines) + "\n" + checkpoint).encode("utf-8")


def parse_size_body(body: bytes) -> int | None:
    """The size in a ``409`` answer (``SIZE\\n``), or None if it is not one."""
    text = body.decode("ascii", "replace")
    if not text.endswith("\n") or not _DECIMAL.fullmatch(text[:-1]):
        return None
    return int(text[:-1])
