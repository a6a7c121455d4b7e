"""A recorded file used only as the bytes its recorded SHA-256 vouches for.

Whatever states a recorded hash (``ledger export``'s README and provenance, a resumed run loading its last
checkpoint) must use the bytes it re-hashed, not a path that may have been swapped since: the file is copied
once into a private folder while it is hashed, the copy is used, and a mismatch is refused before anything
is written (``ArtifactMismatch``: exit 4, as a tampered claim).
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ledger.inputs import NotRegular, open_regular


class ArtifactMismatch(Exception):
    """A recorded file whose bytes no longer hash to what the ledger records (exit 4)."""


def _open_regular(file: Path) -> BinaryIO:
    try:
        return open_regular(file)  # a FIFO swapped in does not block
    except NotRegular:
        raise ArtifactMismatch(f"{file}: not a regular file where the ledger records a checkpoint: refused") from None


def check_in_place(file: Path, sha256: str, what: str) -> Path:
    """``file`` once it re-hashes to ``sha256``; ``ArtifactMismatch`` naming both hashes otherwise."""
    digest = hashlib.sha256()
    with _open_regular(file) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    _compare(file, digest.hexdigest(), sha256, what)
    return file


@contextlib.contextmanager
def checked_copy(file: Path, sha256: str, what: str) -> Iterator[Path]:
    """A private copy of ``file`` whose bytes hash to ``sha256``, removed on leaving the block."""
    with tempfile.TemporaryDirectory(prefix="ledger-checked-") as folder:
        copy = Path(folder) / file.name
        digest = hashlib.sha256()
        with _open_regular(file) as source, open(copy, "wb") as target:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                target.write(chunk)
        _compare(file, digest.hexdigest(), sha256, what)
        yield copy


def _compare(file: Path, actual: str, recorded: str, what: str) -> None:
    if actual != recorded:
        raise ArtifactMismatch(
            f"{what}: {file} hashes to {actual[:12]}, the ledger records {recorded[:12]}: refused (tampered)"
        )
