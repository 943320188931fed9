"""Ed25519 verification (``core/keys.py``): libsodium's check first, OpenSSL's for whatever
libsodium refuses, so the verdict is always OpenSSL's (docs/decisions/0012) — also for the
signatures the two libraries disagree on: low-order and non-canonical points, which libsodium
refuses and OpenSSL accepts unless the encoding of R is non-canonical."""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from alexandria.core.keys import SigningKey, verify, verify_raw

#: the order of edwards25519's prime subgroup
L = 2**252 + 27742317777372353535851937790883648493
#: encodings of the low-order points of edwards25519, canonical and not (y ≥ p, x = -0)
LOW_ORDER = [bytes.fromhex(h) for h in (
    "0100000000000000000000000000000000000000000000000000000000000000",  # identity
    "0100000000000000000000000000000000000000000000000000000000000080",  # identity, x = -0
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # identity, y > p
    "0000000000000000000000000000000000000000000000000000000000000000",  # order 4
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # order 4, y > p
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # order 2
)]
IDENTITY, IDENTITY_Y_ABOVE_P = LOW_ORDER[0], LOW_ORDER[2]
ZERO_S = bytes(32)


def openssl(public: bytes, signature: bytes, data: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def libsodium(public: bytes, signature: bytes, data: bytes) -> bool:
    try:
        crypto_sign_open(signature + data, public)
    except (BadSignatureError, ValueError):
        return False
    return True


def test_a_signature_verifies_and_any_change_breaks_it() -> None:
    key = SigningKey(bytes(range(32)))
    data = b"a record's canonical bytes"
    sig = key.sign(data)
    assert verify(key.public_hex, sig, data)
    assert not verify(key.public_hex, sig, data + b" ")
    assert not verify(SigningKey(bytes(32)).public_hex, sig, data)
    flipped = bytes.fromhex(sig)
    flipped = bytes([flipped[0] ^ 1]) + flipped[1:]
    assert not verify_raw(key.public_hex, flipped, data)
    assert not verify_raw(key.public_hex, bytes.fromhex(sig)[:63], data)


def test_keys_and_signatures_of_the_wrong_length_are_refused() -> None:
    """libsodium reads 32 bytes of key whatever it is given, and takes the first 64 bytes of
    what it is given as the signature: keys and signatures of another length never reach it,
    and are refused."""
    key = SigningKey(bytes(range(32)))
    data = b"a record's canonical bytes"
    sig = bytes.fromhex(key.sign(data))
    for public in (key.public_hex[:62], key.public_hex + "00", "", "zz" * 32):
        assert not verify_raw(public, sig, data)
    for signature in (sig[:63], sig + b"\0", b""):
        assert not verify_raw(key.public_hex, signature, data)


def test_a_scalar_beyond_the_group_order_is_refused() -> None:
    """S + L satisfies the same equation as S; both libraries refuse it (RFC 8032 5.1.7)."""
    key = SigningKey(bytes(range(32)))
    data = b"malleable?"
    sig = bytes.fromhex(key.sign(data))
    s = int.from_bytes(sig[32:], "little") + L
    assert s < 2**256
    moved = sig[:32] + s.to_bytes(32, "little")
    assert not openssl(bytes.fromhex(key.public_hex), moved, data)
    assert not verify_raw(key.public_hex, moved, data)


def test_what_only_openssl_accepts_is_accepted() -> None:
    """The identity as the key and as R with S = 0 holds for every message: OpenSSL accepts
    it, libsodium refuses low-order points; the verdict stays OpenSSL's."""
    sig = IDENTITY + ZERO_S
    assert openssl(IDENTITY, sig, b"any message")
    assert not libsodium(IDENTITY, sig, b"any message")
    assert verify_raw(IDENTITY.hex(), sig, b"any message")


def test_a_non_canonical_r_is_refused_by_both() -> None:
    sig = IDENTITY_Y_ABOVE_P + ZERO_S
    assert not openssl(IDENTITY, sig, b"any message")
    assert not verify_raw(IDENTITY.hex(), sig, b"any message")


signatures = st.builds(lambda seed, data: (SigningKey(seed), data),
                       st.binary(min_size=32, max_size=32), st.binary(max_size=200))


@settings(max_examples=300, deadline=None)
@given(signatures, st.sampled_from(["honest", "key", "r", "both", "flip"]),
       st.sampled_from(LOW_ORDER), st.integers(0, 511), st.sampled_from([0, 1, 2, L - 1]))
def test_the_verdict_is_openssls(signed: tuple[SigningKey, bytes], change: str,
                                 low: bytes, bit: int, s: int) -> None:
    """Honest signatures, flipped bits, and low-order or non-canonical points as the key, as R,
    or both (with small scalars, which make some of them hold): ``verify_raw`` answers what
    OpenSSL answers, and libsodium never accepts what OpenSSL refuses (the premise that lets
    its acceptance stand)."""
    key, data = signed
    public, sig = bytes.fromhex(key.public_hex), bytes.fromhex(key.sign(data))
    scalar = s.to_bytes(32, "little")
    if change == "key":
        public = low
    elif change == "r":
        sig = low + sig[32:]
    elif change == "both":
        public, sig = low, low + scalar
    elif change == "flip":
        sig = bytearray(sig)
        sig[bit // 8] ^= 1 << (bit % 8)
        sig = bytes(sig)
    expected = openssl(public, sig, data)
    assert verify_raw(public.hex(), sig, data) == expected
    assert not libsodium(public, sig, data) or expected
