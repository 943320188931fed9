"""Hypothesis strategies for JSON values, weighted towards where canonical encoders differ."""

from __future__ import annotations

from hypothesis import strategies as st

from alexandria.core.canonical import MAX_SAFE_INTEGER

# every Unicode scalar value (no lone surrogates: they have no UTF-8 encoding), weighted towards
# the places where encoders differ: controls, the BMP's top, astral planes
CHARS = st.one_of(
    st.characters(codec="utf-8"),
    st.characters(max_codepoint=0x7F),
    st.characters(min_codepoint=0xD7F0, max_codepoint=0xFFFF, codec="utf-8"),
    st.characters(min_codepoint=0x10000),
    st.sampled_from(['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f",
                     "\u2028", "\u2029", "\ufeff", "\U0001f600", "\U0010ffff"]),
)

TEXT = st.text(CHARS, max_size=12)


KEYS = st.one_of(TEXT, st.sampled_from(["a", "b", "aa", "", "\ufb33", "\U0001f600", "\uffff",
                                        "\U00010000", "é", "E"]))


INTS = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.sampled_from([0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 2**31, -(2**31), 10**15]),
)


SCALARS = st.one_of(st.none(), st.booleans(), INTS, TEXT)


JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(KEYS, inner, max_size=6)),
    max_leaves=30,
)
