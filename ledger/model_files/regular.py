"""A model file opened only if it is a regular file within its byte budget: a FIFO, a device or a link to
one would block or read without end."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from ledger import inputs
from ledger.model_files.errors import ModelFileError


def regular_size(path: Path, what: str, budget: int | None = None) -> int:
    """The size of ``path`` (links followed), a regular file of at most ``budget`` bytes."""
    try:
        status = os.stat(path)
    except OSError as error:
        raise ModelFileError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    if not stat.S_ISREG(status.st_mode):
        raise ModelFileError(f"{path}: the {what} is not a regular file (a FIFO, device or socket): refused")
    if budget is not None and status.st_size > budget:
        raise ModelFileError(f"{path}: the {what} is {status.st_size:,} bytes, past its budget of {budget:,}: refused")
    return status.st_size


def open_regular(path: Path, what: str) -> BinaryIO:
    """A binary handle on ``path``, checked again after opening (a swap to a FIFO does not block the open)."""
    regular_size(path, what)
    try:
        return inputs.open_regular(path)
    except (inputs.NotRegular, OSError):
        raise ModelFileError(f"{path}: the {what} is not a regular file: refused") from None
