"""Reading a file a user names: a regular file, within a size budget, or one line saying why not.

A FIFO, a device or a socket given where a protocol, claim file, proof, head or key is expected would block a
plain ``open`` forever (or read without end); a 50 MB "protocol" would be parsed, printed and stored. Every file
argument is read here: ``stat`` first, refused unless it is a regular file, then opened without blocking and read
up to its budget.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

# The budgets: the committed protocols and claim files are 4-15 KB, their longest string about 1,200 characters.
MAX_DOCUMENT_BYTES = 1 << 20  # a protocol, claim file, release mapping or proof file
MAX_NOTE_BYTES = 64 << 10  # a signed tree head or a public key
MAX_STRING_CHARS = 16 << 10  # any one string of a protocol or claim file (a description, a statement)
MAX_DATA_BYTES = 1 << 30  # a data file: released rows (after decompression), a benchmark's questions


class InputFileError(ValueError):
    """A named file that cannot be read as asked; the message names the file and the reason."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class NotRegular(Exception):
    """A path that is not a regular file; ``kind`` says what it is ("a FIFO", "a device", ...)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """A binary handle on ``path`` (links followed), a regular file: ``stat`` first, then opened without blocking
    and checked again, so that a path swapped for a FIFO after the stat does not block the open. ``NotRegular``
    for anything else; ``OSError`` as the system says (not found, no permission)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegular(_kind(mode))
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise NotRegular("not a regular file")
    return os.fdopen(descriptor, "rb")


def read_bytes(path: str | os.PathLike, what: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; ``InputFileError`` otherwise."""
    name = str(path)
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        raise InputFileError(f"{name}: file not found") from None
    except NotRegular as found:
        raise InputFileError(f"{name}: is {found.kind}, not a {what} file") from None
    except OSError as error:
        raise InputFileError(f"{name}: cannot read: {error.strerror or error}") from None
    with handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputFileError(f"{name}: larger than the {limit:,}-byte budget of a {what} file: refused")
    return data


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8; a file that is not UTF-8 is an ``InputFileError`` naming the byte."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputFileError(f"{Path(path)}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def parse_json(text: str, where: str) -> object:
    """``json.loads`` of a named file's text; anything unusable is one ``InputFileError`` line naming ``where``.

    Beyond malformed JSON, valid JSON can still not be read: nested past Python's recursion limit, or an
    integer past its digit limit; both are refused the same way, never a traceback."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputFileError(f"{where}: not valid JSON ({error.msg}, line {error.lineno})") from None
    except RecursionError:
        raise InputFileError(f"{where}: not usable JSON (nested too deeply)") from None
    except ValueError as error:  # an integer past Python's digit limit
        raise InputFileError(f"{where}: not usable JSON ({str(error).splitlines()[0]})") from None
