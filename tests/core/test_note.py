"""C2SP signed-note and tlog-cosignature (``core/note.py``): Go's note vectors byte for byte,
and cosignature/v1 vectors checked by an independent computation."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from alexandria.core import note
from alexandria.core.checkpoint import Checkpoint, sign_checkpoint
from alexandria.core.keys import SigningKey

# golang.org/x/mod/sumdb/note, note_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
TEXT = (b"If you think cryptography is the answer to your problem,\n"
        b"then you don't know what your problem is.\n")
PETER_LINE = ("\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSN"
              "XgKvqfqdngotpRZb6KE6RyyBwJnAM=\n")
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
ENOCH_LINE = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG"
              "01oOTGwnWLox33WWd1RvMc+QQ=\n")


def test_go_sign_vector() -> None:
    verifier, key = note.parse_signer_key(PETER_SKEY)
    assert verifier.vkey == PETER_VKEY
    assert note.format_signer_key("PeterNeumann", note.ED25519, key) == PETER_SKEY
    assert note.sign(TEXT, "PeterNeumann", key) == TEXT.decode() + "\n" + PETER_LINE


def test_go_vkeys_parse_and_round_trip() -> None:
    for vkey in (PETER_VKEY, ENOCH_VKEY):
        v = note.parse_vkey(vkey)
        assert v.vkey == vkey and v.key_type == note.ED25519


def test_go_open_with_two_signatures() -> None:
    signed = TEXT.decode() + "\n" + PETER_LINE + ENOCH_LINE
    parsed = note.parse_note(signed)
    assert parsed.text == TEXT and parsed.render() == signed
    peter, enoch = note.parse_vkey(PETER_VKEY), note.parse_vkey(ENOCH_VKEY)
    assert [c.verifier for c in note.verified(parsed, [peter, enoch])] == [peter, enoch]
    # unknown keys are ignored
    assert [c.verifier for c in note.verified(parsed, [enoch])] == [enoch]
    assert note.verified(parsed, []) == []


def test_a_trusted_signature_that_fails_rejects_the_note() -> None:
    _v, key = note.parse_signer_key(PETER_SKEY)
    forged = note.Signature("PeterNeumann", note.parse_vkey(PETER_VKEY).key_id, bytes(64))
    parsed = note.Note(TEXT, (forged,))
    with pytest.raises(note.NoteError):
        note.verified(parsed, [note.parse_vkey(PETER_VKEY)])
    assert key  # the real key signs fine: see test_go_sign_vector


def _mutations(vkey: str) -> list[str]:
    out = [vkey[:i] for i in range(len(vkey))]
    for i in range(len(vkey)):
        b = bytearray(vkey.encode())
        b[i] = (b[i] + 1) % 256
        out.append(b.decode("utf-8", "replace"))
    return out


@pytest.mark.parametrize("bad", [
    *_mutations(PETER_VKEY),
    "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
    "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
])
def test_go_bad_vkeys_refused(bad: str) -> None:
    with pytest.raises(note.NoteKeyError):
        note.parse_vkey(bad)


_BAD_NOTES = {
    "text alone": TEXT,
    "text and a blank line": TEXT + b"\n",
    "no final newline": TEXT + b"\n" + PETER_LINE.encode()[:-1],
    "control character": b"\x01" + TEXT + b"\n" + PETER_LINE.encode(),
    "invalid UTF-8": b"\xff" + TEXT + b"\n" + PETER_LINE.encode(),
    "name with a space": TEXT + b"\n\xe2\x80\x94 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcEl"
                         b"ZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
    "line after the signatures": TEXT + b"\n" + PETER_LINE.encode() + b"Unexpected line.\n",
    "101 signatures": TEXT + b"\n" + PETER_LINE.encode() * 101,
}


@pytest.mark.parametrize("name", sorted(_BAD_NOTES))
def test_go_malformed_notes_refused(name: str) -> None:
    with pytest.raises(note.NoteError):
        note.parse_note(_BAD_NOTES[name])


def test_up_to_100_signatures_accepted() -> None:
    assert len(note.parse_note(TEXT + b"\n" + PETER_LINE.encode() * 100).signatures) == 100


# --- cosignature/v1 (C2SP tlog-cosignature), checked independently ------------------------------

WITNESS_SEED = bytes(range(32))
CHECKPOINT = b"example.com/log\n42\n" + base64.b64encode(hashlib.sha256(b"root").digest()) + b"\n"
COSIGNED_AT = 1_700_000_000
# fixed seed, checkpoint and time: the line is fixed bytes (Ed25519 is deterministic)
WITNESS_VKEY = "witness.example/w1+e75f6532+BAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
COSIGNATURE_LINE = (
    "\u2014 witness.example/w1 519lMgAAAABlU/EAR1rgmePmUwQ2Nn02uIxinL5NnvxrL5h9c4L0pz4LSOI7o4Ow"
    "FiF0xdOK4B0XozgNIGIHOndT0U4bf+ZzCcQrAA==\n"
)


def test_cosignature_vector_is_independent() -> None:
    key = SigningKey(WITNESS_SEED)
    sig = note.cosign(CHECKPOINT, "witness.example/w1", key, COSIGNED_AT)
    # independent: hashlib + cryptography, no alexandria code
    private = Ed25519PrivateKey.from_private_bytes(WITNESS_SEED)
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    kid = hashlib.sha256(b"witness.example/w1\n\x04" + public).digest()[:4]
    message = b"cosignature/v1\ntime 1700000000\n" + CHECKPOINT
    blob = kid + struct.pack(">Q", COSIGNED_AT) + private.sign(message)
    expected = "\u2014 witness.example/w1 " + base64.b64encode(blob).decode() + "\n"
    assert sig.line() == expected
    assert expected == COSIGNATURE_LINE
    vkey = f"witness.example/w1+{kid.hex()}+" + base64.b64encode(b"\x04" + public).decode()
    assert vkey == WITNESS_VKEY
    verifier = note.parse_vkey(vkey)
    assert verifier.key_type == note.COSIGNATURE_V1
    got = note.verified(note.parse_note(CHECKPOINT.decode() + "\n" + expected), [verifier])
    assert [(c.verifier, c.timestamp) for c in got] == [(verifier, COSIGNED_AT)]
    Ed25519PublicKey.from_public_bytes(public).verify(blob[12:], message)


def test_cosignature_over_another_checkpoint_or_time_fails() -> None:
    key = SigningKey(WITNESS_SEED)
    verifier = note.Verifier("witness.example/w1", note.COSIGNATURE_V1, key.public_bytes)
    sig = note.cosign(CHECKPOINT, "witness.example/w1", key, COSIGNED_AT)
    other = CHECKPOINT.replace(b"42", b"43")
    with pytest.raises(note.NoteError):
        note.verified(note.Note(other, (sig,)), [verifier])
    moved = note.Signature(sig.name, sig.key_id, struct.pack(">Q", COSIGNED_AT + 1) + sig.blob[8:])
    with pytest.raises(note.NoteError):
        note.verified(note.Note(CHECKPOINT, (moved,)), [verifier])
    # an Ed25519 (0x01) verifier of the same name and key has another key id: not claimed
    plain = note.Verifier("witness.example/w1", note.ED25519, key.public_bytes)
    assert note.verified(note.Note(CHECKPOINT, (sig,)), [plain]) == []


def test_checkpoint_bytes_unchanged_by_the_generalisation() -> None:
    """``sign_checkpoint`` still makes the note it made before ``note.py`` (an independent
    computation of the single Ed25519 line)."""
    key = SigningKey(bytes([7]) * 32)
    cp = Checkpoint("example.org/alexandria/log", 3, hashlib.sha256(b"x").digest())
    private = Ed25519PrivateKey.from_private_bytes(key.seed)
    kid = hashlib.sha256(b"example.org/alexandria/log\n\x01" + key.public_bytes).digest()[:4]
    body = cp.body()
    line = "\u2014 example.org/alexandria/log " + base64.b64encode(
        kid + private.sign(body)).decode()
    assert sign_checkpoint(cp, key) == body.decode() + "\n" + line + "\n"
