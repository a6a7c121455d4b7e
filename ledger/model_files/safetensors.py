"""A safetensors file's header checked against the file: its length, its JSON, every tensor's extent."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from ledger.model_files.errors import ModelFileError
from ledger.model_files.regular import open_regular

# the safetensors library's own limit on a header (its Rust reader refuses a longer one)
MAX_HEADER_BYTES = 100_000_000

DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8,
}  # fmt: skip


def check_safetensors(path: Path) -> None:
    """Refuse a safetensors file whose header is longer than the file or its budget, is not a JSON object of
    tensors, or names a tensor whose bytes lie outside the file or do not match its shape and dtype."""
    with open_regular(path, "safetensors file") as handle:
        size = handle.seek(0, 2)
        handle.seek(0)
        if size < 8:
            raise ModelFileError(f"{path}: {size} bytes, shorter than a safetensors header: refused")
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ModelFileError(
                f"{path}: its header claims {length:,} bytes, past the file ({size:,} bytes) or the "
                f"{MAX_HEADER_BYTES:,}-byte budget: refused"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelFileError(f"{path}: its header is not a JSON object (not a safetensors file?): refused") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: its header is not a JSON object: refused")
    data_bytes = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        _check_tensor(path, entry, data_bytes)


def _check_tensor(path: Path, entry: object, data_bytes: int) -> None:
    if not isinstance(entry, dict):
        raise ModelFileError(f"{path}: a tensor entry of its header is not an object: refused")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise ModelFileError(f"{path}: a tensor of unknown dtype: refused")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ModelFileError(f"{path}: a tensor whose shape is not a list of sizes: refused")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise ModelFileError(f"{path}: a tensor without its two data offsets: refused")
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes:
        raise ModelFileError(f"{path}: a tensor's bytes [{begin:,}, {end:,}) lie outside the file's data: refused")
    if math.prod(shape) * DTYPE_BYTES[str(dtype)] != end - begin:
        raise ModelFileError(f"{path}: a tensor's shape and dtype do not match its {end - begin:,} bytes: refused")
