"""Per-row seeds derived by hashing, never by arithmetic.

Every generated row draws its randomness from its own ``random.Random`` seeded with
:func:`derive_seed`: the first 8 bytes (big-endian) of the SHA-256 of the canonical
JSON of ``[generator, version, seed, split, depth, index]``. Two rows share a stream
only if all six coordinates are equal.

Why not ``seed + depth * 1000 + index`` (as the published code did)? Additive seeds
alias: ``(seed=1, index=0)`` and ``(seed=0, index=1)`` give the same stream, so two
datasets that were meant to differ by their seed silently shared rows. A hash has no
such neighbours. Python's Mersenne Twister (``random.Random``) gives the same stream
on every platform and Python 3 version for an ``int`` seed, and the methods used by
the generators (``sample``, ``choice``, ``shuffle``, ``randint``) are stable across
CPython 3.11+.
"""

from __future__ import annotations

import hashlib
import random

from ledger.canonical import canonical_bytes

__all__ = ["derive_seed", "row_rng"]


def _check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_str(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    return value


def derive_seed(generator: str, version: int, seed: int, split: str, depth: int, index: int) -> int:
    """The 64-bit seed of one row: SHA-256 of the canonical JSON of its coordinates.

    Returns an int in ``[0, 2**64)``: the first 8 bytes of the digest, big-endian.
    Types are checked strictly (``True`` is not an int here, ``"1"`` is not 1) so that
    a YAML quirk cannot silently move a dataset.
    """
    _check_str("generator", generator)
    _check_int("version", version)
    _check_int("seed", seed)
    _check_str("split", split)
    _check_int("depth", depth)
    _check_int("index", index)
    digest = hashlib.sha256(canonical_bytes([generator, version, seed, split, depth, index])).digest()
    return int.from_bytes(digest[:8], "big")


def row_rng(generator: str, version: int, seed: int, split: str, depth: int, index: int) -> random.Random:
    """A fresh ``random.Random`` seeded with :func:`derive_seed` of the same coordinates."""
    return random.Random(derive_seed(generator, version, seed, split, depth, index))
