"""RFC 6962 / RFC 9162 §2.1 Merkle tree hashing, proofs and their verification (PROTOCOL §7).

Pure functions, no IO.  Hashes are raw 32-byte SHA-256 digests:

* leaf hash ``SHA-256(0x00 || data)``, interior node ``SHA-256(0x01 || left || right)``,
  empty tree ``SHA-256("")``;
* the tree over ``n`` leaves splits at ``k``, the largest power of two smaller than ``n``
  (RFC 9162 §2.1.1).

Storage model.  A log stores only *perfect* subtree hashes: node ``(level k, index i)`` is the
hash of the complete subtree over leaves ``[i * 2**k, (i + 1) * 2**k)``; level 0 holds the leaf
hashes.  Those nodes never change once complete, so they can be written once, append only.
Every RFC 6962 subtree, root and proof is computed from them with ``O(log n)`` reads through a
``get(level, index) -> bytes`` callable supplied by the caller (a dict lookup, a SQL query...).

Verification follows RFC 9162 §2.1.3.2 and §2.1.4.2 step by step and raises
:class:`MerkleError` on any failure.  Parameters that make a proof request meaningless (an index
beyond the tree, an old size above the new one) raise :class:`MerkleRangeError` from the
generators, so a server can map them to ``400`` without extra checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from alexandria.errors import Invalid, Malformed

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "GetNode",
    "MerkleError",
    "MerkleRangeError",
    "Node",
    "TreeBuilder",
    "append_leaves",
    "append_nodes",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_from_leaves",
    "root_hash",
    "subtree_hash",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32

EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()
"""Root hash of the tree with no leaves: ``SHA-256("")``."""

GetNode = Callable[[int, int], bytes]
"""``get(level, index)``: the stored perfect node over leaves ``[index * 2**level, ...)``."""

Node = tuple[int, int, bytes]
"""A perfect node as stored: ``(level, index, hash)``."""


class MerkleError(Invalid):
    """An inclusion or consistency proof does not verify (or is malformed)."""

    default_code = "MERKLE_PROOF_INVALID"

    def __init__(self, reason: str) -> None:
        super().__init__(f"Merkle proof rejected: {reason}", reason=reason)
        self.reason = reason


class MerkleRangeError(Malformed):
    """A proof or subtree was requested for sizes or indices that do not describe one."""

    default_code = "MERKLE_RANGE_INVALID"


# --------------------------------------------------------------------------------------------
# Hashing


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise ValueError(f"{what} must be {HASH_SIZE} bytes, got {len(value)}")


# --------------------------------------------------------------------------------------------
# Reference implementation and streaming builder


def root_from_leaves(leaf_hashes: Sequence[bytes]) -> bytes:
    """RFC 6962 ``MTH`` over already hashed leaves: the plain recursive definition.

    ``O(n)`` hashing, recursion depth ``O(log n)``; used as the reference in tests.  For a
    stream of leaves use :class:`TreeBuilder`.
    """

    def mth(start: int, end: int) -> bytes:
        n = end - start
        if n == 1:
            return leaf_hashes[start]
        k = _split(n)
        return node_hash(mth(start, start + k), mth(start + k, end))

    if not leaf_hashes:
        return EMPTY_ROOT
    return mth(0, len(leaf_hashes))


class TreeBuilder:
    """Streaming RFC 6962 tree: append leaf hashes one at a time, ask for the root at any size.

    Keeps only the perfect subtrees of the binary decomposition of ``size`` (at most
    ``log2(size) + 1`` hashes), so a verifier can stream millions of leaves in constant memory.
    """

    __slots__ = ("_size", "_stack")

    def __init__(self) -> None:
        self._size = 0
        # Perfect subtree hashes, largest (leftmost) first; their sizes are the 1-bits of _size.
        self._stack: list[bytes] = []

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    def append(self, leaf: bytes) -> None:
        """Append one leaf *hash* (see :func:`leaf_hash`)."""
        _check_hash(leaf, "leaf hash")
        stack = self._stack
        stack.append(leaf)
        n = self._size
        while n & 1:
            right = stack.pop()
            stack[-1] = node_hash(stack[-1], right)
            n >>= 1
        self._size += 1

    def append_data(self, data: bytes) -> None:
        """Append one leaf given its data: ``append(leaf_hash(data))``."""
        self.append(leaf_hash(data))

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Append several leaf hashes in order."""
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        """The RFC 6962 root hash of the leaves appended so far (``EMPTY_ROOT`` when none)."""
        if not self._stack:
            return EMPTY_ROOT
        h = self._stack[-1]
        for left in reversed(self._stack[:-1]):
            h = node_hash(left, h)
        return h


# --------------------------------------------------------------------------------------------
# Perfect-node storage


def position(level: int, index: int) -> int:
    """The in-order position of the perfect node ``(level, index)``: leaf ``i`` at ``2i``, every
    node between its two halves.  The nodes a new leaf completes all sit just before the leaf's
    own position, so a table keyed by position grows at its end (one page written per batch
    of leaves, not one per level)."""
    return (index << (level + 1)) | ((1 << level) - 1)


def append_nodes(size_before: int, leaf: bytes, get: GetNode) -> list[Node]:
    """The perfect nodes that become complete when ``leaf`` (a leaf *hash*) is appended.

    The new leaf gets index ``size_before``.  Returns ``[(0, size_before, leaf), ...]`` followed
    by one node per level for as long as the new node is a right child, i.e. ``1 +`` the number
    of trailing 1-bits of ``size_before`` nodes, lowest level first.  All of them must be stored.

    ``get`` is called only for the left siblings ``(level, index - 1)`` of the new nodes, which
    were complete before this leaf.

    Batches: when appending several leaves before persisting anything, the left siblings needed
    by a later leaf may be nodes returned for an earlier leaf of the same batch.  Feed them back
    by making ``get`` consult the nodes produced so far in the batch before the store, e.g. a
    ``dict[(level, index)] -> hash`` filled from each result, and call with ``size_before``
    increasing by one per leaf.  :func:`append_leaves` does exactly that.
    """
    if size_before < 0:
        raise MerkleRangeError("tree size cannot be negative", size=size_before)
    _check_hash(leaf, "leaf hash")
    out: list[Node] = [(0, size_before, leaf)]
    level, index, h = 0, size_before, leaf
    while index & 1:
        h = node_hash(get(level, index - 1), h)
        level += 1
        index >>= 1
        out.append((level, index, h))
    return out


def append_leaves(size_before: int, leaves: Iterable[bytes], get: GetNode) -> list[Node]:
    """:func:`append_nodes` for a batch of leaf hashes appended at ``size_before``, ``+1``...

    Nodes produced earlier in the batch are served from memory; only nodes complete before the
    batch are fetched through ``get``.  Returns every new node, in production order.
    """
    produced: dict[tuple[int, int], bytes] = {}

    def batch_get(level: int, index: int) -> bytes:
        found = produced.get((level, index))
        return found if found is not None else get(level, index)

    out: list[Node] = []
    for offset, leaf in enumerate(leaves):
        for level, index, h in append_nodes(size_before + offset, leaf, batch_get):
            produced[(level, index)] = h
            out.append((level, index, h))
    return out


def _perfect(start: int, width: int, get: GetNode) -> bytes:
    """The stored perfect node over ``[start, start + width)`` (``width`` a power of two)."""
    level = width.bit_length() - 1
    return get(level, start >> level)


def subtree_hash(start: int, end: int, get: GetNode) -> bytes:
    """RFC 6962 ``MTH(D[start:end])`` for a subtree range, from at most ``log2`` perfect nodes.

    The range must be one the RFC recursion produces: ``0 <= start < end`` and ``start`` a
    multiple of the smallest power of two ``>= end - start``.  (Any such range is a subtree of
    every tree of size ``>= end`` whose split points align with it.)
    """
    n = end - start
    if start < 0 or n <= 0:
        raise MerkleRangeError(f"empty or negative subtree range [{start}, {end})")
    if start % (1 << (n - 1).bit_length()):
        raise MerkleRangeError(f"[{start}, {end}) is not an RFC 6962 subtree range")
    # Binary decomposition of n, largest piece first; every piece is aligned to its width.
    pieces: list[bytes] = []
    pos = start
    while pos < end:
        width = 1 << ((end - pos).bit_length() - 1)
        pieces.append(_perfect(pos, width, get))
        pos += width
    h = pieces[-1]
    for left in reversed(pieces[:-1]):
        h = node_hash(left, h)
    return h


def root_hash(size: int, get: GetNode) -> bytes:
    """Root of the tree of the first ``size`` leaves (``EMPTY_ROOT`` for ``size == 0``)."""
    if size < 0:
        raise MerkleRangeError("tree size cannot be negative", size=size)
    if size == 0:
        return EMPTY_ROOT
    return subtree_hash(0, size, get)


# --------------------------------------------------------------------------------------------
# Proof generation (RFC 9162 §2.1.3.1 and §2.1.4.1)


def inclusion_proof(index: int, size: int, get: GetNode) -> list[bytes]:
    """RFC 9162 ``PATH(index, D[size])``: sibling hashes from the leaf up to the root.

    Requires ``0 <= index < size`` (``size`` at most the stored tree size).  ``O(log n)`` gets:
    every sibling is a stored perfect node except at most one right-border subtree.
    """
    if not 0 <= index < size:
        raise MerkleRangeError("inclusion proof needs 0 <= index < size", index=index, size=size)
    path: list[bytes] = []  # built root-first, reversed at the end
    m, start, end = index, 0, size
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            path.append(subtree_hash(start + k, end, get))
            end = start + k
        else:
            path.append(_perfect(start, k, get))
            m -= k
            start += k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, get: GetNode) -> list[bytes]:
    """RFC 9162 ``PROOF(old_size, D[new_size])``.

    Requires ``0 < old_size <= new_size`` (an empty proof when they are equal), or
    ``old_size == new_size == 0`` (empty proof).  A proof from the empty tree to a non-empty
    one is meaningless (RFC 9162 defines none) and is refused.
    """
    if old_size < 0 or new_size < old_size:
        raise MerkleRangeError(
            "consistency proof needs 0 <= old <= new", old=old_size, new=new_size
        )
    if old_size == new_size:
        return []
    if old_size == 0:
        raise MerkleRangeError(
            "no consistency proof exists from the empty tree", old=old_size, new=new_size
        )
    proof: list[bytes] = []  # built root-first, reversed at the end
    m, start, end, complete = old_size, 0, new_size, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(subtree_hash(start + k, end, get))
            end = start + k
        else:
            proof.append(_perfect(start, k, get))
            m -= k
            start += k
            complete = False
    if not complete:
        proof.append(subtree_hash(start, end, get))
    proof.reverse()
    return proof


# --------------------------------------------------------------------------------------------
# Verification (RFC 9162 §2.1.3.2 and §2.1.4.2)


def _check_proof_hashes(proof: Sequence[bytes]) -> None:
    for i, p in enumerate(proof):
        if len(p) != HASH_SIZE:
            raise MerkleError(f"proof hash {i} is {len(p)} bytes, not {HASH_SIZE}")


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 §2.1.3.2: check that ``leaf_hash`` is leaf ``index`` of the tree ``root``.

    Raises :class:`MerkleError` unless the proof is valid.
    """
    if index < 0 or size < 0:
        raise MerkleError("negative index or size")
    # 1. leaf_index >= tree_size fails.
    if index >= size:
        raise MerkleError(f"leaf index {index} is not below tree size {size}")
    if len(leaf_hash) != HASH_SIZE:
        raise MerkleError(f"leaf hash is {len(leaf_hash)} bytes, not {HASH_SIZE}")
    if len(root) != HASH_SIZE:
        raise MerkleError(f"root hash is {len(root)} bytes, not {HASH_SIZE}")
    _check_proof_hashes(proof)
    # 2.-3.
    fn, sn = index, size - 1
    r = leaf_hash
    # 4.
    for p in proof:
        if sn == 0:
            raise MerkleError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            # If LSB(fn) is not set, shift both until LSB(fn) is set or fn is 0.
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    # 5.
    if sn != 0:
        raise MerkleError("inclusion proof is too short")
    if r != root:
        raise MerkleError("inclusion proof does not lead to the root hash")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2: check that the tree ``new_root`` extends the tree ``old_root``.

    Edge cases (RFC 9162 defines only ``0 < old_size < new_size``):

    * ``old_size == new_size``: the proof must be empty and the roots equal; for size 0 both
      must also be ``EMPTY_ROOT``.
    * ``old_size == 0 < new_size``: rejected, a proof from the empty tree proves nothing.  Every
      tree extends the empty tree: a caller that meets this case needs no proof, only
      ``old_root == EMPTY_ROOT``.

    Raises :class:`MerkleError` unless the proof is valid.
    """
    if old_size < 0 or new_size < 0:
        raise MerkleError("negative tree size")
    if new_size < old_size:
        raise MerkleError(f"new size {new_size} is below old size {old_size}")
    if old_size == new_size:
        if proof:
            raise MerkleError("sizes are equal but the proof is not empty")
        if old_root != new_root:
            raise MerkleError("sizes are equal but the roots differ")
        if old_size == 0 and old_root != EMPTY_ROOT:
            raise MerkleError("the root of the empty tree is not SHA-256 of the empty string")
        return
    if old_size == 0:
        raise MerkleError("a consistency proof from the empty tree is meaningless")
    # 1. An empty consistency path fails.
    if not proof:
        raise MerkleError("consistency proof is empty")
    _check_proof_hashes(proof)
    path = list(proof)
    # 2. If first is an exact power of 2, prepend first_hash.
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    # 3.
    fn, sn = old_size - 1, new_size - 1
    # 4. Right-shift both while LSB(fn) is set.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # 5.
    fr = sr = path[0]
    # 6.
    for c in path[1:]:
        if sn == 0:
            raise MerkleError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            # If LSB(fn) is not set, shift both until LSB(fn) is set or fn is 0.
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # 7.
    if sn != 0:
        raise MerkleError("consistency proof is too short")
    if fr != old_root:
        raise MerkleError("consistency proof does not lead to the old root hash")
    if sr != new_root:
        raise MerkleError("consistency proof does not lead to the new root hash")
