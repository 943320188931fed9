"""C2SP ``signed-note`` and ``tlog-cosignature``: notes, verifier keys, signatures, cosignatures.

A signed note, byte for byte::

    TEXT                              non-empty lines, each ending in U+000A
    \\n
    — NAME BASE64(KEYID || SIG)\\n     one or more, em dash U+2014 and a space

Parsing follows golang.org/x/mod/sumdb/note ``Open``: the text is split from the signatures at
the *last* blank line, every signature line must be well formed, the whole note is valid UTF-8
without ASCII control characters other than newline, at most :data:`MAX_SIGNATURES` lines.
Verification ignores lines whose (name, key id) no trusted verifier claims; a line that a
trusted verifier claims but that does not verify rejects the whole note (signed-note
§Signatures), so a forged cosignature is an error, never a silent "not counted".

Key ids are ``SHA-256(NAME || 0x0A || TYPE || PUBLIC_KEY)[:4]``; a verifier key (vkey) is
``NAME+KEYID_HEX+BASE64(TYPE || PUBLIC_KEY)`` and a signer key
``PRIVATE+KEY+NAME+KEYID_HEX+BASE64(TYPE || SEED)``.  Two signature types are implemented:

* ``0x01`` Ed25519: ``SIG`` is the Ed25519 signature of ``TEXT`` (the log's own checkpoints);
* ``0x04`` ``cosignature/v1`` (C2SP tlog-cosignature): ``SIG`` is ``u64be(TIME) || ED25519SIG``
  of ``"cosignature/v1\\ntime TIME\\n" || TEXT``, where ``TEXT`` is a checkpoint.  It asserts:
  as of ``TIME`` (seconds since the epoch) the largest consistent tree the cosigner has
  observed for the origin has this root hash.

Bytes here are the only place that produces or reads note bytes; ``checkpoint.py`` builds the
checkpoint text on top of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from alexandria.core.keys import SigningKey, verify_raw
from alexandria.errors import Invalid, Malformed

__all__ = [
    "COSIGNATURE_V1",
    "ED25519",
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "Cosigned",
    "Note",
    "NoteError",
    "NoteKeyError",
    "Signature",
    "Verifier",
    "cosign",
    "cosignature_message",
    "format_signer_key",
    "key_id",
    "parse_note",
    "parse_signer_key",
    "parse_vkey",
    "sign",
    "signature_line",
    "verified",
]

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
SIGNATURE_PREFIX = "\u2014 "  # em dash, space
MAX_SIGNATURES = 100  # as golang.org/x/mod/sumdb/note; the spec requires accepting >= 16
MAX_NOTE_BYTES = 1 << 20
MAX_TIMESTAMP = (1 << 64) - 1
_KEY_ID_HEX = re.compile(r"[0-9a-f]{8}")
_PRIVATE_PREFIX = "PRIVATE+KEY+"


class NoteError(Invalid):
    """A signed note that is malformed, or whose trusted signature does not verify."""

    default_code = "NOTE_INVALID"

    def __init__(self, reason: str, code: str | None = None) -> None:
        super().__init__(f"signed note rejected: {reason}", code, reason=reason)
        self.reason = reason


class NoteKeyError(Malformed):
    """A verifier or signer key string that is not well formed (name, id, type, length)."""

    default_code = "NOTE_KEY_INVALID"


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def b64decode_strict(text: str) -> bytes | None:
    """Standard base64 with padding and canonical trailing bits, or None."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None
    return raw if _b64encode(raw) == text else None


def check_text(text: str, what: str) -> None:
    """Valid UTF-8 (no lone surrogates) and no ASCII control character but newline."""
    for ch in text:
        if ch < " " and ch != "\n":
            raise NoteError(f"{what} contains the control character {ord(ch):#04x}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise NoteError(f"{what} is not valid UTF-8") from None


def check_name(name: str, what: str) -> None:
    """A key name: non-empty, no Unicode space, no ``+`` (signed-note)."""
    if not name:
        raise NoteError(f"{what} is empty")
    if "+" in name or any(ch.isspace() for ch in name):
        raise NoteError(f"{what} contains a space or '+'")
    check_text(name, what)


def key_id(name: str, key_type: int, public_key: bytes) -> bytes:
    """``SHA-256(name || 0x0A || type || public_key)[:4]``."""
    data = name.encode("utf-8") + b"\n" + bytes([key_type]) + public_key
    return hashlib.sha256(data).digest()[:4]


@dataclass(frozen=True)
class Signature:
    """One signature line: the key name, its 4-byte key id, the bytes after the key id."""

    name: str
    key_id: bytes
    blob: bytes

    def line(self) -> str:
        return f"{SIGNATURE_PREFIX}{self.name} {_b64encode(self.key_id + self.blob)}\n"


@dataclass(frozen=True)
class Note:
    """A parsed (not verified) signed note: the signed text and its signature lines."""

    text: bytes
    signatures: tuple[Signature, ...]

    def render(self) -> str:
        return self.text.decode("utf-8") + "\n" + "".join(s.line() for s in self.signatures)


def _as_text(note: str | bytes) -> str:
    if len(note) > MAX_NOTE_BYTES:
        raise NoteError("note is too large")
    if isinstance(note, bytes):
        try:
            return note.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("note is not valid UTF-8") from None
    return note


def parse_note(note: str | bytes) -> Note:
    """Split a signed note into its text and signature lines; checks syntax only."""
    text = _as_text(note)
    check_text(text, "note")
    if len(text.encode("utf-8")) > MAX_NOTE_BYTES:
        raise NoteError("note is too large")
    split = text.rfind("\n\n")
    if split < 0:
        raise NoteError("no blank line between the note text and its signatures")
    body, block = text[: split + 1], text[split + 2 :]
    if not block or not block.endswith("\n"):
        raise NoteError("the signature block is empty or does not end in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signature lines")
    return Note(body.encode("utf-8"), tuple(parse_signature_line(line) for line in lines))


def parse_signature_line(line: str) -> Signature:
    """One ``— NAME BASE64`` line, without its newline."""
    if not line.startswith(SIGNATURE_PREFIX):
        raise NoteError("a line after the blank line is not a signature line")
    name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not space:
        raise NoteError("a signature line has no signature")
    check_name(name, "signature key name")
    raw = b64decode_strict(encoded)
    if raw is None:
        raise NoteError("a signature is not canonical base64")
    if len(raw) < 5:
        raise NoteError("a signature is shorter than a key id and one byte")
    return Signature(name, raw[:4], raw[4:])


def _check_note_text(text: bytes) -> str:
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("note text is not valid UTF-8") from None
    check_text(decoded, "note text")
    if not decoded.endswith("\n") or decoded.startswith("\n") or "\n\n" in decoded:
        raise NoteError("note text must be non-empty lines, each ending in a newline")
    return decoded


# --- keys ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    """A trusted key: name, type (:data:`ED25519` or :data:`COSIGNATURE_V1`), public key."""

    name: str
    key_type: int
    public_key: bytes

    def __post_init__(self) -> None:
        if self.key_type not in (ED25519, COSIGNATURE_V1):
            raise NoteKeyError(f"unknown signature type {self.key_type:#04x}",
                               key_type=self.key_type)
        if len(self.public_key) != 32:
            raise NoteKeyError("an Ed25519 public key is 32 bytes")
        try:
            check_name(self.name, "key name")
        except NoteError as exc:
            raise NoteKeyError(exc.reason) from None

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.key_type, self.public_key)

    @property
    def vkey(self) -> str:
        encoded = _b64encode(bytes([self.key_type]) + self.public_key)
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    def claims(self, sig: Signature) -> bool:
        return sig.name == self.name and sig.key_id == self.key_id

    def check(self, text: bytes, sig: Signature) -> int | None:
        """Verify ``sig`` (which this verifier claims) over ``text``; the cosignature's
        timestamp (None for a plain Ed25519 signature); raises :class:`NoteError` if it fails."""
        if self.key_type == ED25519:
            message, signature, timestamp = text, sig.blob, None
        else:
            if len(sig.blob) != 8 + 64:
                raise NoteError(f"the cosignature by {self.name} is not 72 bytes")
            (timestamp,) = struct.unpack(">Q", sig.blob[:8])
            message, signature = cosignature_message(text, timestamp), sig.blob[8:]
        if len(signature) != 64:
            raise NoteError(f"the signature by {self.name} is not 64 bytes")
        if not verify_raw(self.public_key.hex(), signature, message):
            raise NoteError(f"invalid signature by {self.name}", "NOTE_SIGNATURE")
        return timestamp


def parse_vkey(vkey: str) -> Verifier:
    """``NAME+KEYID+BASE64(TYPE || KEY)``; refuses a key id that is not the key's."""
    name, plus1, rest = vkey.partition("+")
    hex_id, plus2, encoded = rest.partition("+")
    if not (plus1 and plus2) or not _KEY_ID_HEX.fullmatch(hex_id):
        raise NoteKeyError("a verifier key is NAME+KEYID+BASE64KEY (8 lowercase hex digits of id)")
    raw = b64decode_strict(encoded)
    if raw is None or len(raw) != 33:
        raise NoteKeyError("a verifier key's key is base64 of a type byte and 32 bytes")
    verifier = Verifier(name, raw[0], raw[1:])
    if verifier.key_id.hex() != hex_id:
        raise NoteKeyError(f"the key id {hex_id} is not the id of this name and key",
                        expected=verifier.key_id.hex())
    return verifier


def format_signer_key(name: str, key_type: int, key: SigningKey) -> str:
    """``PRIVATE+KEY+NAME+KEYID+BASE64(TYPE || SEED)`` (Go's ``note.GenerateKey`` format)."""
    verifier = Verifier(name, key_type, key.public_bytes)
    encoded = _b64encode(bytes([key_type]) + key.seed)
    return f"{_PRIVATE_PREFIX}{name}+{verifier.key_id.hex()}+{encoded}"


def parse_signer_key(skey: str) -> tuple[Verifier, SigningKey]:
    """The verifier and the signing key of a signer key string."""
    if not skey.startswith(_PRIVATE_PREFIX):
        raise NoteKeyError("a signer key starts with PRIVATE+KEY+")
    name, _p1, rest = skey[len(_PRIVATE_PREFIX):].partition("+")
    hex_id, _p2, encoded = rest.partition("+")
    raw = b64decode_strict(encoded)
    if raw is None or len(raw) != 33 or not _KEY_ID_HEX.fullmatch(hex_id):
        raise NoteKeyError("a signer key is PRIVATE+KEY+NAME+KEYID+BASE64(TYPE || SEED)")
    key = SigningKey(raw[1:])
    verifier = Verifier(name, raw[0], key.public_bytes)
    if verifier.key_id.hex() != hex_id:
        raise NoteKeyError(f"the key id {hex_id} is not the id of this name and key")
    return verifier, key


# --- signing ---------------------------------------------------------------------------------


def cosignature_message(text: bytes, timestamp: int) -> bytes:
    """What a ``cosignature/v1`` signs: a header line, a time line, the checkpoint text."""
    return b"cosignature/v1\ntime " + str(timestamp).encode() + b"\n" + text


def signature_line(text: bytes, name: str, key: SigningKey) -> Signature:
    """An Ed25519 (type 0x01) signature of ``text`` under ``name``."""
    _check_note_text(text)
    verifier = Verifier(name, ED25519, key.public_bytes)
    return Signature(name, verifier.key_id, key.sign_raw(text))


def cosign(text: bytes, name: str, key: SigningKey, timestamp: int) -> Signature:
    """A ``cosignature/v1`` (type 0x04) of the checkpoint ``text`` at ``timestamp``."""
    _check_note_text(text)
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError("a cosignature timestamp is a uint64")
    verifier = Verifier(name, COSIGNATURE_V1, key.public_bytes)
    signed = key.sign_raw(cosignature_message(text, timestamp))
    return Signature(name, verifier.key_id, struct.pack(">Q", timestamp) + signed)


def sign(text: bytes, name: str, key: SigningKey) -> str:
    """A signed note with one Ed25519 signature line (Go's ``note.Sign`` with one signer)."""
    decoded = _check_note_text(text)
    return decoded + "\n" + signature_line(text, name, key).line()


# --- verification ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cosigned:
    """A signature that verified: by whom, and the cosignature's timestamp (None for 0x01)."""

    verifier: Verifier
    timestamp: int | None


def verified(note: Note, verifiers: Iterable[Verifier]) -> list[Cosigned]:
    """The signatures of ``note`` by ``verifiers``, each verified, at most one per verifier.

    Lines no verifier claims are ignored; a claimed line that does not verify raises
    :class:`NoteError` (the whole note is rejected, as Go's ``note.Open``)."""
    trusted: Sequence[Verifier] = list(verifiers)
    out: dict[bytes, Cosigned] = {}
    for sig in note.signatures:
        for v in trusted:
            if v.claims(sig):
                timestamp = v.check(note.text, sig)
                out.setdefault(v.key_id + v.name.encode(), Cosigned(v, timestamp))
    return list(out.values())

