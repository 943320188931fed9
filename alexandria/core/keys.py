"""Ed25519 keys, signatures and key files (PROTOCOL §1).

A key's id is the lowercase hex of its 32 raw public bytes; a signature is lowercase hex of its
64 bytes; a private key file holds the hex of the 32-byte seed and a newline, mode 0600.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from alexandria.errors import Malformed

HEX64 = re.compile(r"^[0-9a-f]{64}\Z")  # \Z: "$" would also accept a trailing newline
HEX128 = re.compile(r"^[0-9a-f]{128}\Z")


@dataclass(frozen=True)
class SigningKey:
    seed: bytes = field(repr=False)
    _key: Ed25519PrivateKey = field(init=False, repr=False, compare=False)
    public_hex: str = field(init=False)

    def __post_init__(self) -> None:
        if len(self.seed) != 32:
            raise ValueError("an Ed25519 seed is 32 bytes")
        key = Ed25519PrivateKey.from_private_bytes(self.seed)
        object.__setattr__(self, "_key", key)
        raw = key.public_key().public_bytes_raw()  # not serialization: its import costs more
        object.__setattr__(self, "public_hex", raw.hex())

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(os.urandom(32))

    @classmethod
    def from_hex(cls, seed_hex: str) -> SigningKey:
        if not HEX64.match(seed_hex):
            raise Malformed("a private key is 64 lowercase hex characters", "BAD_KEY_FILE")
        return cls(bytes.fromhex(seed_hex))

    @property
    def public_bytes(self) -> bytes:
        return bytes.fromhex(self.public_hex)

    def sign(self, data: bytes) -> str:
        return self._key.sign(data).hex()

    def sign_raw(self, data: bytes) -> bytes:
        return self._key.sign(data)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the key file with mode 0600 from the start (never world-readable)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.seed.hex() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        text = Path(path).read_text()
        if not text.endswith("\n") or text.count("\n") != 1:
            raise Malformed(f"{path}: a key file is one line of hex and a newline", "BAD_KEY_FILE")
        return cls.from_hex(text.strip())


@lru_cache(maxsize=4096)
def _public_key(public_hex: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex))


def verify(public_hex: str, signature_hex: str, data: bytes) -> bool:
    """True when ``signature_hex`` is a valid Ed25519 signature of ``data`` by ``public_hex``."""
    if not HEX64.match(public_hex) or not HEX128.match(signature_hex):
        return False
    return verify_raw(public_hex, bytes.fromhex(signature_hex), data)


def verify_raw(public_hex: str, signature: bytes, data: bytes) -> bool:
    """OpenSSL's verdict (``cryptography``), reached through libsodium's where it can: every
    signature libsodium accepts OpenSSL accepts too (libsodium also refuses low-order and
    non-canonical points, which OpenSSL accepts), and libsodium checks in about half the time,
    so a valid signature costs one libsodium check and only one it refuses is asked of OpenSSL
    (docs/decisions/0012-ed25519-verification.md)."""
    try:
        public = bytes.fromhex(public_hex)
    except ValueError:
        return False
    # crypto_sign_open reads 32 bytes of key whatever it is given, and takes the first 64
    # bytes of what it is given as the signature
    if len(public) == 32 and len(signature) == 64:
        try:
            crypto_sign_open(signature + data, public)
        except BadSignatureError:
            pass
        else:
            return True
    try:
        _public_key(public_hex).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True
