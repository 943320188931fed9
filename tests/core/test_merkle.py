"""RFC 6962 / RFC 9162 Merkle tree: transparency-dev/merkle vectors and property tests."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alexandria.api.status import status_of
from alexandria.core import merkle
from alexandria.core.merkle import (
    EMPTY_ROOT,
    MerkleError,
    MerkleRangeError,
    TreeBuilder,
    append_leaves,
    append_nodes,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_leaves,
    root_hash,
    subtree_hash,
    verify_consistency,
    verify_inclusion,
)
from alexandria.errors import Invalid, Malformed

# transparency-dev/merkle's vectors, copied with their licence (testdata/merkle/README.md)
VECTOR_DIR = Path(__file__).resolve().parents[1] / "testdata" / "merkle"
VECTORS = sorted(VECTOR_DIR.rglob("*.json"))

# RFC 6962 leaf inputs of transparency-dev/merkle (testonly.LeafInputs): the trees the vectors'
# happy paths were computed over.
LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]

Store = dict[tuple[int, int], bytes]


def b64(text: str) -> bytes:
    return base64.b64decode(text)


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def proof_of(vector: dict[str, Any]) -> list[bytes]:
    return [b64(p) for p in vector["proof"] or []]


def check_vector(vector: dict[str, Any]) -> None:
    if "leafIdx" in vector:
        verify_inclusion(
            vector["leafIdx"],
            vector["treeSize"],
            b64(vector["leafHash"]),
            proof_of(vector),
            b64(vector["root"]),
        )
    else:
        verify_consistency(
            vector["size1"],
            vector["size2"],
            b64(vector["root1"]),
            b64(vector["root2"]),
            proof_of(vector),
        )


def build_store(hashes: Sequence[bytes]) -> Store:
    """Perfect nodes produced by append_nodes, one leaf at a time."""
    store: Store = {}
    for i, h in enumerate(hashes):
        for level, index, node in append_nodes(i, h, lambda lv, ix: store[(lv, ix)]):
            assert (level, index) not in store, "a perfect node is written once"
            store[(level, index)] = node
    return store


def getter(store: Store) -> merkle.GetNode:
    return lambda level, index: store[(level, index)]


def flip(value: bytes, bit: int) -> bytes:
    out = bytearray(value)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


# --------------------------------------------------------------------------------------------
# transparency-dev/merkle vectors


def test_vectors_are_present() -> None:
    assert VECTOR_DIR.is_dir(), f"missing test vectors at {VECTOR_DIR}"
    kinds = {p.relative_to(VECTOR_DIR).parts[0] for p in VECTORS}
    assert kinds == {"inclusion", "consistency"}
    assert len(VECTORS) >= 190


@pytest.mark.parametrize("path", VECTORS, ids=[str(p.relative_to(VECTOR_DIR)) for p in VECTORS])
def test_vector(path: Path) -> None:
    vector = load(path)
    if vector["wantErr"]:
        with pytest.raises(MerkleError) as info:
            check_vector(vector)
        assert info.value.code == "MERKLE_PROOF_INVALID"
        assert status_of(info.value) == 422
        assert info.value.reason
    else:
        check_vector(vector)


def test_generated_proofs_match_vector_happy_paths() -> None:
    """Our generators reproduce the reference proofs and roots, not only our own verifier."""
    hashes = [leaf_hash(x) for x in LEAF_INPUTS]
    get = getter(build_store(hashes))
    checked = 0
    for path in VECTORS:
        vector = load(path)
        if vector["wantErr"] or vector["desc"] != "happy path":
            continue
        if "leafIdx" in vector:
            index, size = vector["leafIdx"], vector["treeSize"]
            assert b64(vector["leafHash"]) == hashes[index]
            assert root_hash(size, get) == b64(vector["root"])
            assert inclusion_proof(index, size, get) == proof_of(vector)
        else:
            old, new = vector["size1"], vector["size2"]
            assert root_hash(old, get) == b64(vector["root1"])
            assert root_hash(new, get) == b64(vector["root2"])
            assert consistency_proof(old, new, get) == proof_of(vector)
        checked += 1
    assert checked >= 10


# --------------------------------------------------------------------------------------------
# Hashing and the reference implementation


def test_hash_definitions() -> None:
    import hashlib

    assert hashlib.sha256(b"").digest() == EMPTY_ROOT
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    assert (
        node_hash(b"L" * 32, b"R" * 32) == hashlib.sha256(b"\x01" + b"L" * 32 + b"R" * 32).digest()
    )
    assert root_from_leaves([]) == EMPTY_ROOT
    one = leaf_hash(b"x")
    assert root_from_leaves([one]) == one
    assert root_hash(0, getter({})) == EMPTY_ROOT
    assert TreeBuilder().root() == EMPTY_ROOT


def test_rfc6962_shape_of_seven_leaves() -> None:
    h = [leaf_hash(bytes([i])) for i in range(7)]
    n = node_hash
    want = n(n(n(h[0], h[1]), n(h[2], h[3])), n(n(h[4], h[5]), h[6]))
    assert root_from_leaves(h) == want
    assert root_hash(7, getter(build_store(h))) == want


def test_tree_builder_streams_100k_leaves_in_log_space() -> None:
    count = 100_003
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(count)]
    builder = TreeBuilder()
    for i, h in enumerate(hashes):
        builder.append(h)
        if i in (0, 1, 2, 4094, 65535):
            assert builder.root() == root_from_leaves(hashes[: i + 1])
    assert builder.size == count
    assert len(builder._stack) == bin(count).count("1")
    assert builder.root() == root_from_leaves(hashes)
    streamed = TreeBuilder()
    streamed.append_data((0).to_bytes(4, "big"))
    assert streamed.root() == hashes[0]


def test_append_nodes_counts_and_batches() -> None:
    hashes = [leaf_hash(i.to_bytes(2, "big")) for i in range(37)]
    one_by_one = build_store(hashes)
    # 1 leaf node + one node per trailing 1-bit of the size before the append.
    store: Store = {}
    for i, h in enumerate(hashes):
        nodes = append_nodes(i, h, getter(store))
        trailing_ones = (i ^ (i + 1)).bit_length() - 1
        assert len(nodes) == 1 + trailing_ones
        assert nodes[0] == (0, i, h)
        store.update({(lv, ix): node for lv, ix, node in nodes})
    assert store == one_by_one
    # Batches of any split, fed back through append_leaves' overlay, give the same nodes.
    for cut in (0, 1, 5, 16, 37):
        batched: Store = {}
        for lv, ix, node in append_leaves(0, hashes[:cut], getter(batched)):
            batched[(lv, ix)] = node
        for lv, ix, node in append_leaves(cut, hashes[cut:], getter(batched)):
            batched[(lv, ix)] = node
        assert batched == one_by_one
    # Within a batch, the store is read only for nodes complete before the batch.
    reads: list[tuple[int, int]] = []

    def counting_get(level: int, index: int) -> bytes:
        reads.append((level, index))
        return one_by_one[(level, index)]

    append_leaves(16, hashes[16:32], counting_get)
    assert reads == [(4, 0)]


def test_ranges_are_refused() -> None:
    get = getter(build_store([leaf_hash(bytes([i])) for i in range(8)]))
    for start, end in ((0, 0), (3, 2), (-1, 1), (1, 3), (2, 5), (4, 9)):
        with pytest.raises(MerkleRangeError):
            subtree_hash(start, end, get)
    assert subtree_hash(4, 7, get) == node_hash(subtree_hash(4, 6, get), subtree_hash(6, 7, get))
    with pytest.raises(MerkleRangeError):
        inclusion_proof(8, 8, get)
    with pytest.raises(MerkleRangeError):
        inclusion_proof(-1, 8, get)
    with pytest.raises(MerkleRangeError):
        consistency_proof(5, 4, get)
    with pytest.raises(MerkleRangeError):
        consistency_proof(0, 4, get)
    with pytest.raises(MerkleRangeError):
        root_hash(-1, get)
    assert consistency_proof(0, 0, get) == []
    assert consistency_proof(4, 4, get) == []
    assert issubclass(MerkleRangeError, Malformed)
    assert issubclass(MerkleError, Invalid)


def test_verify_edge_cases() -> None:
    h = [leaf_hash(bytes([i])) for i in range(5)]
    get = getter(build_store(h))
    r4, r5 = root_hash(4, get), root_hash(5, get)
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    verify_consistency(5, 5, r5, r5, [])
    with pytest.raises(MerkleError):
        verify_consistency(0, 5, EMPTY_ROOT, r5, [])  # from the empty tree: meaningless
    with pytest.raises(MerkleError):
        verify_consistency(4, 5, r4, r5, [])
    with pytest.raises(MerkleError):
        verify_consistency(5, 4, r5, r4, consistency_proof(4, 5, get))
    with pytest.raises(MerkleError):
        verify_inclusion(0, 0, h[0], [], EMPTY_ROOT)
    with pytest.raises(MerkleError):
        verify_inclusion(-1, 5, h[0], inclusion_proof(0, 5, get), r5)
    with pytest.raises(MerkleError):  # a 31-byte proof hash
        verify_inclusion(4, 5, h[4], [r4[:-1]], r5)
    verify_inclusion(4, 5, h[4], [r4], r5)


# --------------------------------------------------------------------------------------------
# Properties over random trees


@st.composite
def trees(draw: st.DrawFn) -> list[bytes]:
    size = draw(st.integers(min_value=1, max_value=300))
    salt = draw(st.binary(max_size=8))
    return [leaf_hash(salt + i.to_bytes(2, "big")) for i in range(size)]


@settings(max_examples=50, deadline=None, database=None)
@given(hashes=trees(), data=st.data())
def test_proofs_verify_and_detect_every_flip(hashes: list[bytes], data: st.DataObject) -> None:
    size = len(hashes)
    get = getter(build_store(hashes))
    roots: dict[int, bytes] = {}

    def root(n: int) -> bytes:
        if n not in roots:
            roots[n] = root_from_leaves(hashes[:n])
            assert root_hash(n, get) == roots[n]
        return roots[n]

    # Inclusion: sampled (index, tree size) pairs, plus the last leaf of the whole tree.
    sampled = st.integers(1, size).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n)))
    pairs = [*data.draw(st.lists(sampled, min_size=1, max_size=12)), (size - 1, size)]
    for index, n in pairs:
        proof = inclusion_proof(index, n, get)
        verify_inclusion(index, n, hashes[index], proof, root(n))
        for i in range(len(proof)):
            bit = data.draw(st.integers(0, 255))
            bad = [*proof[:i], flip(proof[i], bit), *proof[i + 1 :]]
            with pytest.raises(MerkleError):
                verify_inclusion(index, n, hashes[index], bad, root(n))
        bit = data.draw(st.integers(0, 255))
        with pytest.raises(MerkleError):
            verify_inclusion(index, n, hashes[index], proof, flip(root(n), bit))
        with pytest.raises(MerkleError):
            verify_inclusion(index, n, flip(hashes[index], bit), proof, root(n))
        with pytest.raises(MerkleError):
            verify_inclusion(index, n, hashes[index], [*proof, root(n)], root(n))
        if proof:
            with pytest.raises(MerkleError):
                verify_inclusion(index, n, hashes[index], proof[:-1], root(n))
        if n > 1:
            other = (index + 1) % n
            with pytest.raises(MerkleError):
                verify_inclusion(other, n, hashes[index], proof, root(n))

    # Consistency: sampled (old, new) pairs, plus (1, size) and (size, size).
    sampled = st.integers(1, size).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n)))
    pairs = [*data.draw(st.lists(sampled, min_size=1, max_size=12)), (1, size), (size, size)]
    for old, new in pairs:
        proof = consistency_proof(old, new, get)
        verify_consistency(old, new, root(old), root(new), proof)
        if old == new:
            assert proof == []
            continue
        for i in range(len(proof)):
            bit = data.draw(st.integers(0, 255))
            bad = [*proof[:i], flip(proof[i], bit), *proof[i + 1 :]]
            with pytest.raises(MerkleError):
                verify_consistency(old, new, root(old), root(new), bad)
        bit = data.draw(st.integers(0, 255))
        with pytest.raises(MerkleError):
            verify_consistency(old, new, flip(root(old), bit), root(new), proof)
        with pytest.raises(MerkleError):
            verify_consistency(old, new, root(old), flip(root(new), bit), proof)
        with pytest.raises(MerkleError):
            verify_consistency(old, new, root(old), root(new), [*proof, root(new)])
        with pytest.raises(MerkleError):
            verify_consistency(old, new, root(old), root(new), proof[:-1])
        if old + 1 < new:
            with pytest.raises(MerkleError):
                verify_consistency(old + 1, new, root(old), root(new), proof)


@settings(max_examples=20, deadline=None, database=None)
@given(hashes=trees())
def test_every_prefix_root_agrees(hashes: list[bytes]) -> None:
    get = getter(build_store(hashes))
    builder = TreeBuilder()
    for n, h in enumerate(hashes, start=1):
        builder.append(h)
        assert builder.size == n
        want = builder.root()
        assert root_hash(n, get) == want
        if n % 17 == 0 or n == len(hashes):
            assert root_from_leaves(hashes[:n]) == want


@settings(max_examples=15, deadline=None, database=None)
@given(hashes=trees())
def test_exhaustive_small_trees(hashes: list[bytes]) -> None:
    """Every (index, size) and (old, new) pair of the first 24 leaves."""
    hashes = hashes[:24]
    get = getter(build_store(hashes))
    roots = [root_from_leaves(hashes[:n]) for n in range(len(hashes) + 1)]
    for n in range(1, len(hashes) + 1):
        for index in range(n):
            verify_inclusion(index, n, hashes[index], inclusion_proof(index, n, get), roots[n])
        for old in range(1, n + 1):
            verify_consistency(old, n, roots[old], roots[n], consistency_proof(old, n, get))


def test_node_positions_are_in_order_unique_and_grow_at_the_end() -> None:
    """Stored nodes are keyed by in-order position: distinct for every node, invertible, and
    the nodes each leaf completes sit between the previous end and the leaf's own position."""
    stored: dict[tuple[int, int], bytes] = {}
    seen: set[int] = set()
    for n in range(600):
        new = merkle.append_nodes(n, merkle.leaf_hash(str(n).encode()),
                                  lambda lv, i: stored[(lv, i)])
        for level, index, h in new:
            stored[(level, index)] = h
            pos = merkle.position(level, index)
            assert pos not in seen
            seen.add(pos)
            ones = (~pos & (pos + 1)).bit_length() - 1  # trailing 1-bits
            assert (ones, pos >> (ones + 1)) == (level, index)
            assert 2 * n - (1 << level) < pos <= 2 * n
    assert seen == {merkle.position(lv, i) for lv, i in stored}


def test_nodes_read_together_give_what_nodes_read_one_by_one() -> None:
    """``merkle_nodes.read_together`` (one statement for every node a root or proof reads) gives
    exactly the root and proofs of ``node_reader`` (one statement per node), and names a
    missing node as ``node_reader`` does."""
    import sqlite3

    from alexandria.store.merkle_nodes import LogCorrupt, node_reader, read_together

    hashes = [leaf_hash(str(i).encode()) for i in range(77)]
    store = build_store(hashes)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE merkle_nodes(position INTEGER PRIMARY KEY, hash BLOB)")
    conn.executemany("INSERT INTO merkle_nodes VALUES (?, ?)",
                     [(merkle.position(lv, ix), h) for (lv, ix), h in store.items()])
    one_by_one = node_reader(conn)
    for size in range(1, len(hashes) + 1):
        assert read_together(conn, lambda get, n=size: root_hash(n, get)) == \
            root_hash(size, one_by_one) == root_from_leaves(hashes[:size])
        for index in range(0, size, 7):
            assert read_together(
                conn, lambda get, i=index, n=size: inclusion_proof(i, n, get)) == \
                inclusion_proof(index, size, one_by_one)
        for old in range(1, size + 1, 5):
            assert read_together(
                conn, lambda get, m=old, n=size: consistency_proof(m, n, get)) == \
                consistency_proof(old, size, one_by_one)
    conn.execute("DELETE FROM merkle_nodes WHERE position = ?", (merkle.position(6, 0),))
    with pytest.raises(LogCorrupt):
        read_together(conn, lambda get: root_hash(77, get))
