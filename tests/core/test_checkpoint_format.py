"""C2SP tlog-checkpoint / signed-note: golden bytes, interop vectors, strict parsing, tampering."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alexandria.api.status import status_of
from alexandria.core.checkpoint import (
    MAX_SIGNATURES,
    Checkpoint,
    CheckpointError,
    key_id,
    parse_checkpoint,
    parse_signed_note,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)
from alexandria.core.keys import SigningKey

KEY = SigningKey(bytes(range(32)))
OTHER = SigningKey(bytes(range(1, 33)))
ORIGIN = "library.example.org/log"
ROOT = hashlib.sha256(b"alexandria").digest()
CP = Checkpoint(ORIGIN, 1234, ROOT)

GOLDEN_PUBLIC = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
GOLDEN_KEY_ID = "41effe2c"
GOLDEN_BODY = "library.example.org/log\n1234\n+M6FWRwx+flJohDonhM3upAnRdo4NWgtEU9VunIJlck=\n"
GOLDEN_NOTE = (
    GOLDEN_BODY + "\n"
    "— library.example.org/log "
    "Qe/+LJsQCkui3cuzq+QFJvJJalhIAEEwVz3xLGAdj56UxkGvNzh+ZxIAUApqyVZbMwMH6YAdk4QnJKP7lInZ7uH47wE=\n"
)


def reject(text: str | bytes, origin: str = ORIGIN, key: SigningKey = KEY) -> CheckpointError:
    with pytest.raises(CheckpointError) as info:
        verify_checkpoint(text, origin, key.public_hex)
    assert info.value.code == "CHECKPOINT_INVALID"
    assert status_of(info.value) == 422
    return info.value


def signature_line(body: bytes, key: SigningKey, name: str = ORIGIN) -> str:
    """Only the signature line of a note over ``body``."""
    return sign_note(body, name, key).split("\n\n")[-1]


# --------------------------------------------------------------------------------------------
# Golden bytes and interoperability


def test_golden_bytes() -> None:
    assert KEY.public_hex == GOLDEN_PUBLIC
    assert CP.body() == GOLDEN_BODY.encode()
    assert key_id(ORIGIN, KEY.public_bytes).hex() == GOLDEN_KEY_ID
    assert (
        key_id(ORIGIN, KEY.public_bytes)
        == hashlib.sha256(ORIGIN.encode() + b"\n\x01" + KEY.public_bytes).digest()[:4]
    )
    note = sign_checkpoint(CP, KEY)
    assert note == GOLDEN_NOTE
    assert "\u2014 library" in note  # an em dash, not a hyphen
    blob = base64.b64decode(note.rsplit(" ", 1)[1])
    assert blob[:4].hex() == GOLDEN_KEY_ID and len(blob) == 68


def test_round_trip() -> None:
    cp, sigs = parse_checkpoint(GOLDEN_NOTE)
    assert cp == CP
    blob = base64.b64decode(GOLDEN_NOTE.rsplit(" ", 1)[1])
    assert sigs == [(bytes.fromhex(GOLDEN_KEY_ID), blob[4:])]
    assert verify_checkpoint(GOLDEN_NOTE, ORIGIN, KEY.public_hex) == CP
    assert verify_checkpoint(GOLDEN_NOTE.encode(), ORIGIN, KEY.public_hex) == CP
    empty = Checkpoint(ORIGIN, 0, hashlib.sha256(b"").digest())
    assert verify_checkpoint(sign_checkpoint(empty, KEY), ORIGIN, KEY.public_hex) == empty


def test_go_sumdb_note_vector() -> None:
    """golang.org/x/mod/sumdb/note TestSign: key PeterNeumann+c74f20a3 (BSD-3-Clause)."""
    skey = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")
    vkey = base64.b64decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
    assert skey[0] == vkey[0] == 1  # Ed25519 signature type
    peter = SigningKey(skey[1:])
    assert peter.public_bytes == vkey[1:]
    assert key_id("PeterNeumann", peter.public_bytes).hex() == "c74f20a3"
    text = (
        b"If you think cryptography is the answer to your problem,\n"
        b"then you don't know what your problem is.\n"
    )
    peter_sig = (
        "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZ"
        "SNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
    )
    enoch_sig = (
        "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ov"
        "TG01oOTGwnWLox33WWd1RvMc+QQ=\n"
    )
    assert sign_note(text, "PeterNeumann", peter) == text.decode() + "\n" + peter_sig
    body, sigs = parse_signed_note(text.decode() + "\n" + peter_sig + enoch_sig)
    assert body == text
    assert [(s.name, s.key_id.hex()) for s in sigs] == [
        ("PeterNeumann", "c74f20a3"),
        ("EnochRoot", "af0cfe78"),
    ]
    # Go's malformed notes are malformed here too.
    t = text.decode()
    for bad in (
        t,
        t + "\n",
        t + "\n" + peter_sig[:-1],
        "\x01" + t + "\n" + peter_sig,
        t + "\n" + peter_sig.replace("PeterNeumann", "Bad Name"),
        t + "\n" + peter_sig + "Unexpected line.\n",
        t + "\n" + peter_sig * (MAX_SIGNATURES + 1),
    ):
        with pytest.raises(CheckpointError):
            parse_signed_note(bad)
    with pytest.raises(CheckpointError):
        parse_signed_note(b"\xff" + text + b"\n" + peter_sig.encode())


def test_c2sp_example_parses() -> None:
    example = (
        "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
        "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5"
        "/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    )
    cp, sigs = parse_checkpoint(example)
    assert (cp.origin, cp.size, len(cp.root)) == ("example.com/behind-the-sofa", 20852163, 32)
    assert len(sigs) == 1 and sigs[0][0].hex() == "033de0ae" and len(sigs[0][1]) == 64
    reject(example, origin="example.com/behind-the-sofa")  # not signed by our key


# --------------------------------------------------------------------------------------------
# Tampering and strict parsing


def test_tampered_notes_are_rejected() -> None:
    body, sig = GOLDEN_NOTE.split("\n\n")
    root_b64 = body.split("\n")[2]
    flipped_root = base64.b64encode(bytes([ROOT[0] ^ 1]) + ROOT[1:]).decode()
    assert reject(GOLDEN_NOTE.replace(root_b64, flipped_root)).reason.startswith("invalid sig")
    assert reject(GOLDEN_NOTE.replace("\n1234\n", "\n1235\n")).reason.startswith("invalid sig")
    assert "origin" in reject(GOLDEN_NOTE, origin="library.example.org/other").reason
    assert reject(GOLDEN_NOTE, key=OTHER).reason == "no signature by the log key"
    reject(GOLDEN_NOTE + "garbage\n")
    reject(GOLDEN_NOTE + "garbage")
    reject(GOLDEN_NOTE + "\n")
    reject(GOLDEN_NOTE[:-1])
    reject(GOLDEN_NOTE.replace("\n\n", "\n"))
    reject(GOLDEN_NOTE.replace("\n", "\r\n"))
    reject(GOLDEN_NOTE.replace("\u2014", "--"))
    reject(GOLDEN_NOTE.replace("\u2014 ", "\u2014"))
    reject(body + "\n\n\n" + sig)


def test_extension_lines_are_refused_even_when_signed() -> None:
    body = GOLDEN_BODY.encode() + b"extension\n"
    note = sign_note(body, ORIGIN, KEY)
    assert parse_signed_note(note)[0] == body  # a valid signed note...
    with pytest.raises(CheckpointError, match="extension"):
        parse_checkpoint(note)  # ...but not a checkpoint this log signs
    assert "extension" in reject(note).reason


@pytest.mark.parametrize(
    ("size", "root"),
    [
        ("01234", None),
        ("+1234", None),
        (" 1234", None),
        ("1234 ", None),
        ("1_234", None),
        ("", None),
        ("١٢٣٤", None),  # Arabic-Indic digits: int() accepts them, the spec does not
        ("18446744073709551616", None),  # 2**64
        (None, "+M6FWRwx+flJohDonhM3upAnRdo4NWgtEU9VunIJlck"),  # unpadded
        (None, "+M6FWRwx+flJohDonhM3upAnRdo4NWgtEU9VunIJlcl="),  # non-canonical last bits
        (None, "-M6FWRwx-flJohDonhM3upAnRdo4NWgtEU9VunIJlck="),  # URL-safe alphabet
        (None, "+M6FWRwx+flJohDonhM3upAnRdo4NWgtEU9VunIJ"),  # 30 bytes
        (None, base64.b64encode(ROOT + b"\x00").decode()),  # 33 bytes
        (None, ""),
    ],
)
def test_body_fields_are_strict(size: str | None, root: str | None) -> None:
    lines = GOLDEN_BODY.split("\n")
    if size is not None:
        lines[1] = size
    if root is not None:
        lines[2] = root
    note = "\n".join(lines) + "\n" + GOLDEN_NOTE.split("\n\n")[1]
    with pytest.raises(CheckpointError):
        parse_checkpoint(note)
    assert parse_checkpoint(GOLDEN_NOTE)[0] == CP


def test_largest_size_and_zero_are_canonical() -> None:
    for size in (0, 1, (1 << 64) - 1):
        cp = Checkpoint(ORIGIN, size, ROOT)
        assert parse_checkpoint(sign_checkpoint(cp, KEY))[0] == cp


def test_several_signatures() -> None:
    body = CP.body()
    witness = signature_line(body, OTHER, "witness.example.org")
    same_name_other_key = signature_line(body, OTHER)
    garbage_unknown = "— unknown.example " + base64.b64encode(b"\x00" * 9).decode() + "\n"
    for extra in (witness, same_name_other_key, garbage_unknown):
        # Unknown keys are ignored wherever their line is.
        assert verify_checkpoint(GOLDEN_NOTE + extra, ORIGIN, KEY.public_hex) == CP
        assert (
            verify_checkpoint(
                GOLDEN_BODY + "\n" + extra + GOLDEN_NOTE.split("\n\n")[1], ORIGIN, KEY.public_hex
            )
            == CP
        )
        reject(GOLDEN_BODY + "\n" + extra)  # but one line must be by the log key
    # A second line by our key (same name and key id) that does not verify rejects the note.
    kid = bytes.fromhex(GOLDEN_KEY_ID)
    forged = f"— {ORIGIN} " + base64.b64encode(kid + b"\x00" * 64).decode() + "\n"
    assert reject(GOLDEN_NOTE + forged).reason == "invalid signature by the log key"
    short = f"— {ORIGIN} " + base64.b64encode(kid + b"\x00" * 10).decode() + "\n"
    reject(GOLDEN_NOTE + short)
    # Up to MAX_SIGNATURES lines are accepted.
    assert (
        verify_checkpoint(GOLDEN_NOTE + witness * (MAX_SIGNATURES - 1), ORIGIN, KEY.public_hex)
        == CP
    )
    reject(GOLDEN_NOTE + witness * MAX_SIGNATURES)


def test_every_bit_flip_is_detected() -> None:
    raw = GOLDEN_NOTE.encode()
    for bit in range(len(raw) * 8):
        tampered = bytearray(raw)
        tampered[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CheckpointError):
            verify_checkpoint(bytes(tampered), ORIGIN, KEY.public_hex)


@pytest.mark.parametrize(
    "origin", ["", "has space", "a+b", "tab\there", "nl\nhere", "nbsp\u00a0x", "\ud800"]
)
def test_bad_origins_are_refused(origin: str) -> None:
    with pytest.raises(CheckpointError):
        Checkpoint(origin, 1, ROOT)


def test_checkpoint_fields_are_validated() -> None:
    for size in (-1, 1 << 64, True):
        with pytest.raises(CheckpointError):
            Checkpoint(ORIGIN, size, ROOT)
    for root in (b"", ROOT[:31], ROOT + b"\x00"):
        with pytest.raises(CheckpointError):
            Checkpoint(ORIGIN, 1, root)
    with pytest.raises(CheckpointError):
        verify_checkpoint(GOLDEN_NOTE, ORIGIN, KEY.public_hex.upper())
    with pytest.raises(CheckpointError):
        sign_note(b"no final newline", ORIGIN, KEY)
    with pytest.raises(CheckpointError):
        sign_note(b"blank\n\nline\n", ORIGIN, KEY)


@settings(max_examples=25, deadline=None, database=None)
@given(
    origin=st.text(
        st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
        min_size=1,
        max_size=40,
    ).filter(lambda s: "+" not in s and not any(c.isspace() for c in s)),
    size=st.integers(0, (1 << 64) - 1),
    root=st.binary(min_size=32, max_size=32),
)
def test_round_trip_property(origin: str, size: int, root: bytes) -> None:
    cp = Checkpoint(origin, size, root)
    note = sign_checkpoint(cp, KEY)
    assert parse_checkpoint(note)[0] == cp
    assert verify_checkpoint(note, origin, KEY.public_hex) == cp
    assert verify_checkpoint(note.encode(), origin, KEY.public_hex) == cp
