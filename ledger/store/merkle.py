"""RFC 6962 Merkle tree hashes and consistency proofs over the chain's leaf hashes.

The leaves of the ledger's Merkle log are the chain entries' ``leaf_hash`` values,
``SHA-256(0x00 || payload_bytes)``; interior nodes are ``SHA-256(0x01 || left || right)``;
a tree of n > 1 leaves splits at k, the largest power of two smaller than n
(RFC 6962 section 2.1). ``MTH({})`` is ``SHA-256("")``.

``consistency_proof`` follows RFC 6962 section 2.1.2 (PROOF/SUBPROOF);
``verify_consistency`` is the independent verifier of RFC 9162 section 2.1.4.2, which
uses only the two roots, the two sizes and the proof. ``inclusion_proof`` is RFC 6962's
PATH(m, D[n]) (section 2.1.1) and ``verify_inclusion`` the verifier of RFC 9162 section
2.1.3.2, which uses only the leaf hash, its index, the tree size, the proof and the root.

Hashes are passed as ``bytes`` (32 bytes) or hex strings; results are ``bytes`` unless
the function name ends in ``_hex``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()


def _b(value: bytes | str) -> bytes:
    if isinstance(value, str):
        return bytes.fromhex(value)
    return bytes(value)


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n >= 2)."""
    if n < 2:
        raise ValueError("split_point needs n >= 2")
    return 1 << ((n - 1).bit_length() - 1)


def _mth(leaves: Sequence[bytes], lo: int, hi: int) -> bytes:
    n = hi - lo
    if n == 1:
        return leaves[lo]
    k = split_point(n)
    return node_hash(_mth(leaves, lo, lo + k), _mth(leaves, lo + k, hi))


def merkle_root(leaves: Sequence[bytes | str]) -> bytes:
    """MTH over the given *leaf hashes* (already ``SHA-256(0x00 || d)``)."""
    hashes = [_b(leaf) for leaf in leaves]
    if not hashes:
        return EMPTY_ROOT
    return _mth(hashes, 0, len(hashes))


def merkle_root_hex(leaves: Sequence[bytes | str]) -> str:
    return merkle_root(leaves).hex()


def consistency_proof(leaves: Sequence[bytes | str], m: int, n: int | None = None) -> list[bytes]:
    """RFC 6962 PROOF(m, D[n]): proves the first ``m`` leaves are a prefix of the first ``n``.

    Empty for ``m == n`` and for ``m == 0`` (every log extends the empty log).
    """
    hashes = [_b(leaf) for leaf in leaves]
    if n is None:
        n = len(hashes)
    if not 0 <= m <= n <= len(hashes):
        raise ValueError(f"need 0 <= m <= n <= {len(hashes)}, got m={m}, n={n}")
    if m == 0 or m == n:
        return []
    return _subproof(hashes, m, 0, n, True)


def _subproof(leaves: Sequence[bytes], m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
    n = hi - lo
    if m == n:
        return [] if complete else [_mth(leaves, lo, hi)]
    k = split_point(n)
    if m <= k:
        return _subproof(leaves, m, lo, lo + k, complete) + [_mth(leaves, lo + k, hi)]
    return _subproof(leaves, m - k, lo + k, hi, False) + [_mth(leaves, lo, lo + k)]


def verify_consistency(
    old_root: bytes | str,
    old_size: int,
    new_root: bytes | str,
    new_size: int,
    proof: Sequence[bytes | str],
) -> bool:
    """True iff ``proof`` shows the tree (old_root, old_size) is a prefix of (new_root, new_size).

    RFC 9162 section 2.1.4.2; independent of the prover (uses no leaves).
    """
    first, second = _b(old_root), _b(new_root)
    path = [_b(p) for p in proof]
    if old_size < 0 or new_size < 0 or old_size > new_size:
        return False
    if old_size == 0:  # RFC 9162 proves 0 < m <= n only; Go's tlog.CheckTree refuses a tree of 0 too
        return False
    if old_size == new_size:
        return not path and first == second
    if not path:
        return False
    # 1. If first is an exact power of 2, prepend first_hash to the path.
    if old_size & (old_size - 1) == 0:
        path = [first] + path
    fn, sn = old_size - 1, new_size - 1
    # 3. Right-shift both while the LSB of fn is set.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first and sr == second and sn == 0


def inclusion_proof(leaves: Sequence[bytes | str], index: int, n: int | None = None) -> list[bytes]:
    """RFC 6962 PATH(index, D[n]): the audit path of leaf ``index`` in the tree of the first ``n`` leaves."""
    hashes = [_b(leaf) for leaf in leaves]
    if n is None:
        n = len(hashes)
    if not 0 <= index < n <= len(hashes):
        raise ValueError(f"need 0 <= index < n <= {len(hashes)}, got index={index}, n={n}")
    return _path(hashes, index, 0, n)


def _path(leaves: Sequence[bytes], m: int, lo: int, hi: int) -> list[bytes]:
    n = hi - lo
    if n == 1:
        return []
    k = split_point(n)
    if m < k:
        return _path(leaves, m, lo, lo + k) + [_mth(leaves, lo + k, hi)]
    return _path(leaves, m - k, lo + k, hi) + [_mth(leaves, lo, lo + k)]


def verify_inclusion(leaf: bytes | str, index: int, size: int, proof: Sequence[bytes | str], root: bytes | str) -> bool:
    """True iff ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree (``root``, ``size``).

    RFC 9162 section 2.1.3.2; independent of the prover (uses no other leaves)."""
    path = [_b(p) for p in proof]
    if index < 0 or index >= size:
        return False
    fn, sn = index, size - 1
    r = _b(leaf)
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == _b(root)
