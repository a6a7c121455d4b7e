"""A GGUF file's metadata read by a walk that checks every count and length against the file's size.

A GGUF header states how many key-value pairs and tensors follow, and every string and array its own length;
a 110-byte file claiming an array of 2^60 items makes ``gguf.GGUFReader`` (and so transformers' loader) grow
without bound. Here nothing is allocated from a stated size: each is compared with the bytes that remain
first, and each tensor's extent with the data the file holds. The scalar and string values are returned;
arrays (the tokenizer's vocabulary) are stepped over and counted.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ledger.model_files.errors import ModelFileError
from ledger.model_files.regular import open_regular

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 8  # ggml's tensors have at most 4
# GGUF value types: fixed sizes and struct formats (little-endian), 8 string, 9 array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass
class GGUFMetadata:
    """What a GGUF file says of itself: its scalar and string values, its arrays' lengths, its tensor count."""

    values: dict[str, object] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: int = 0

    def string(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None


class _Cursor:
    """Reads from a mapped file, refusing any read past its end (the file's size is the only budget)."""

    def __init__(self, data: mmap.mmap | bytes, path: Path):
        self.data, self.path, self.at = data, path, 0

    def left(self) -> int:
        return len(self.data) - self.at

    def refuse(self, what: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what} at byte {self.at:,} of {len(self.data):,}: not a usable GGUF file")

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if size > self.left():
            raise self.refuse("the file ends inside a value")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += size
        return value

    def count(self, item_bytes: int, what: str) -> int:
        """A stated count, refused if that many items of at least ``item_bytes`` each cannot fit what remains."""
        value = self.unpack("Q")
        if value * item_bytes > self.left():
            raise self.refuse(f"{what} of {value:,} cannot fit the {self.left():,} bytes left")
        return value

    def string(self) -> str:
        length = self.count(1, "a string")
        raw = bytes(self.data[self.at : self.at + length])
        self.at += length
        return raw.decode("utf-8", "replace")


def read_gguf_metadata(path: Path) -> GGUFMetadata:
    """The metadata of the GGUF file at ``path``; ``ModelFileError`` for anything that does not fit the file."""
    with open_regular(path, "GGUF file") as handle:
        size = handle.seek(0, 2)
        if size < 24:
            raise ModelFileError(f"{path}: {size} bytes, shorter than a GGUF header: not a usable GGUF file")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _walk(_Cursor(data, path))


def _walk(cursor: _Cursor) -> GGUFMetadata:
    if bytes(cursor.data[:4]) != MAGIC:
        raise cursor.refuse("no GGUF magic")
    cursor.at = 4
    version = cursor.unpack("I")
    if version not in (2, 3):
        raise cursor.refuse(f"GGUF version {version} (2 and 3 are read)")
    tensors = cursor.count(24, "a tensor count")  # a tensor's info: name, dims, type, offset
    pairs = cursor.count(13, "a key-value count")  # a pair: key length, key, type, value
    metadata = GGUFMetadata(tensors=tensors)
    for _ in range(pairs):
        key = cursor.string()
        kind = cursor.unpack("I")
        if kind == _ARRAY:
            metadata.array_lengths[key] = _skip_array(cursor)
        else:
            metadata.values[key] = _value(cursor, kind)
    alignment = metadata.values.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise cursor.refuse("general.alignment is not a power of two")
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # gguf's own table of ggml block sizes

    extents = [_tensor_info(cursor, GGML_QUANT_SIZES, GGMLQuantizationType) for _ in range(tensors)]
    data_start = -(-cursor.at // alignment) * alignment
    data_bytes = len(cursor.data) - data_start
    for offset, nbytes in extents:
        if offset + nbytes > data_bytes:
            raise cursor.refuse(f"a tensor's bytes [{offset:,}, {offset + nbytes:,}) lie past the file's data")
    return metadata


def _value(cursor: _Cursor, kind: int) -> object:
    if kind == _STRING:
        return cursor.string()
    if kind not in _SCALARS:
        raise cursor.refuse(f"value type {kind}")
    return cursor.unpack(_SCALARS[kind])


def _skip_array(cursor: _Cursor) -> int:
    kind = cursor.unpack("I")
    if kind == _ARRAY:
        raise cursor.refuse("an array of arrays")
    if kind == _STRING:
        length = cursor.count(8, "an array")  # each string at least its 8-byte length
        for _ in range(length):
            skipped = cursor.count(1, "a string")  # read first: it moves the cursor past the length itself
            cursor.at += skipped
        return length
    if kind not in _SCALARS:
        raise cursor.refuse(f"array item type {kind}")
    item = struct.calcsize("<" + _SCALARS[kind])
    length = cursor.count(item, "an array")
    cursor.at += length * item
    return length


def _tensor_info(cursor: _Cursor, sizes, types) -> tuple[int, int]:
    """(offset, bytes) of one tensor, from its dims and ggml type (``sizes``: type -> (block, bytes))."""
    cursor.string()
    dims = cursor.unpack("I")
    if not 1 <= dims <= MAX_DIMS:
        raise cursor.refuse(f"a tensor of {dims} dimensions")
    shape = [cursor.unpack("Q") for _ in range(dims)]
    kind = cursor.unpack("I")
    offset = cursor.unpack("Q")
    try:
        block, type_bytes = sizes[types(kind)]
    except (ValueError, KeyError):
        raise cursor.refuse(f"tensor type {kind}") from None
    elements = math.prod(shape)
    if elements % block:
        raise cursor.refuse("a tensor whose size is not a whole number of blocks")
    return offset, elements // block * type_bytes
