"""Log checkpoints: C2SP ``tlog-checkpoint`` text signed as a C2SP ``signed-note`` (PROTOCOL §7).

A checkpoint note, byte for byte::

    ORIGIN\\n
    SIZE\\n                          decimal, no leading zero (``0`` for the empty tree)
    BASE64(ROOT)\\n                  standard alphabet, padded, 32-byte RFC 6962 root
    \\n
    — NAME BASE64(KEYID || SIG)\\n    one line per signature, em dash U+2014 and a space

The body is exactly the three lines (no extension lines); ``NAME`` is the origin; ``KEYID`` is
``SHA-256(NAME || 0x0A || 0x01 || ed25519 public key)[:4]``; ``SIG`` is the Ed25519 signature
of the body bytes, final newline included.  Parsing follows golang.org/x/mod/sumdb/note
``Open``: the body is split from the signatures at the *last* blank line, every signature line
must be well formed, the whole note is valid UTF-8 without ASCII control characters other than
newline (all of it in ``note.py``, the generic signed-note module).  It is stricter in
places: base64 must be canonical and the body must be a checkpoint
with no extension lines.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import NamedTuple

from alexandria.core import note
from alexandria.core.keys import HEX64, SigningKey, verify_raw
from alexandria.errors import Invalid

__all__ = [
    "ED25519_SIGNATURE_TYPE",
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "Checkpoint",
    "CheckpointError",
    "NoteSignature",
    "key_id",
    "parse_checkpoint",
    "parse_signed_note",
    "sign_checkpoint",
    "sign_note",
    "verify_checkpoint",
]

ED25519_SIGNATURE_TYPE = bytes([note.ED25519])
MAX_SIGNATURES = note.MAX_SIGNATURES
MAX_NOTE_BYTES = note.MAX_NOTE_BYTES
MAX_TREE_SIZE = (1 << 64) - 1  # tree sizes are uint64 everywhere else in the ecosystem
ROOT_SIZE = 32

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


class CheckpointError(Invalid):
    """A checkpoint or signed note that is malformed, mis-signed or for another log."""

    default_code = "CHECKPOINT_INVALID"

    def __init__(self, reason: str) -> None:
        super().__init__(f"checkpoint rejected: {reason}", reason=reason)
        self.reason = reason


class NoteSignature(NamedTuple):
    """One signature line of a signed note."""

    name: str
    key_id: bytes  # 4 bytes, big-endian uint32 on the wire
    signature: bytes


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    raw = note.b64decode_strict(text)
    if raw is None:
        raise CheckpointError(f"{what} is not canonical base64")
    return raw


def _check_name(name: str, what: str) -> None:
    try:
        note.check_name(name, what)
    except note.NoteError as exc:
        raise CheckpointError(exc.reason) from None


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: origin line, tree size, RFC 6962 root hash (32 bytes)."""

    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        _check_name(self.origin, "origin")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise CheckpointError("tree size is not an integer")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointError("tree size is out of range")
        if not isinstance(self.root, bytes) or len(self.root) != ROOT_SIZE:
            raise CheckpointError(f"root hash is not {ROOT_SIZE} bytes")

    def body(self) -> bytes:
        """The note text that is signed: three lines, each ending in a newline."""
        return f"{self.origin}\n{self.size}\n{_b64encode(self.root)}\n".encode()


def key_id(name: str, public_key: bytes) -> bytes:
    """Ed25519 signed-note key id: ``SHA-256(name || 0x0A || 0x01 || public_key)[:4]``."""
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return note.key_id(name, note.ED25519, public_key)


def sign_note(text: bytes, name: str, key: SigningKey) -> str:
    """A signed note with one Ed25519 signature line by ``key`` under ``name``.

    ``text`` must be non-empty, end in a newline and hold no blank line, so that the note parses
    back to exactly ``text``.
    """
    try:
        return note.sign(text, name, key)
    except note.NoteError as exc:
        raise CheckpointError(exc.reason) from None


def sign_checkpoint(cp: Checkpoint, key: SigningKey) -> str:
    """The whole signed checkpoint note, signed by ``key`` under the name ``cp.origin``."""
    return sign_note(cp.body(), cp.origin, key)


def parse_signed_note(text: str | bytes) -> tuple[bytes, list[NoteSignature]]:
    """Split a signed note into its text (the signed bytes) and its signature lines.

    Checks syntax only, like ``note.Open`` before verification: nothing is verified here.
    """
    try:
        parsed = note.parse_note(text)
    except note.NoteError as exc:
        raise CheckpointError(exc.reason) from None
    return parsed.text, [NoteSignature(s.name, s.key_id, s.blob) for s in parsed.signatures]


def _parse_body(body: bytes) -> Checkpoint:
    lines = body.decode("utf-8").split("\n")
    # body ends in "\n", so the last element is always "".
    if len(lines) < 4:
        raise CheckpointError("checkpoint body has fewer than three lines")
    if len(lines) > 4:
        raise CheckpointError("checkpoint body has extension lines, which this log never signs")
    origin, size_text, root_text, _ = lines
    _check_name(origin, "origin")
    if not _DECIMAL.fullmatch(size_text):
        raise CheckpointError("tree size is not a canonical decimal")
    size = int(size_text)
    if size > MAX_TREE_SIZE:
        raise CheckpointError("tree size is out of range")
    root = _b64decode(root_text, "root hash")
    if len(root) != ROOT_SIZE:
        raise CheckpointError(f"root hash is not {ROOT_SIZE} bytes")
    return Checkpoint(origin, size, root)


def parse_checkpoint(text: str | bytes) -> tuple[Checkpoint, list[tuple[bytes, bytes]]]:
    """Parse a signed checkpoint strictly; return it with its ``(key id, signature)`` pairs.

    Nothing is verified: use :func:`verify_checkpoint` for that.
    """
    body, signatures = parse_signed_note(text)
    return _parse_body(body), [(s.key_id, s.signature) for s in signatures]


def verify_checkpoint(text: str | bytes, origin: str, public_key_hex: str) -> Checkpoint:
    """Parse ``text`` and check it is ``origin``'s checkpoint signed by ``public_key_hex``.

    Signature lines of other keys (another name or key id: witnesses, a rotated key) are
    ignored.  Every line that names this key (``origin`` and its key id) must verify, and there
    must be at least one; otherwise the whole note is rejected (signed-note §Signatures).
    """
    if not HEX64.fullmatch(public_key_hex):
        raise CheckpointError("the log public key is not 64 lowercase hex characters")
    body, signatures = parse_signed_note(text)
    cp = _parse_body(body)
    if cp.origin != origin:
        raise CheckpointError(f"checkpoint is for origin {cp.origin!r}, not {origin!r}")
    kid = key_id(origin, bytes.fromhex(public_key_hex))
    mine = [s for s in signatures if s.name == origin and s.key_id == kid]
    if not mine:
        raise CheckpointError("no signature by the log key")
    for s in mine:
        if len(s.signature) != 64 or not verify_raw(public_key_hex, s.signature, body):
            raise CheckpointError("invalid signature by the log key")
    return cp
