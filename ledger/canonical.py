"""Canonical JSON and hashing: the one way ``ledger`` turns data into bytes.

Every hash in the ledger (rows, manifests, protocols, chain entries) is taken over
these bytes, so they must not depend on platform, dict order or line endings:
sorted keys, UTF-8 without escaping, no insignificant whitespace, LF only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value`` (sorted keys, compact, UTF-8 safe)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def sha256_canonical(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_bytes(value))


def sha256_file(path, chunk_size: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, streamed (checkpoints can be GBs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
