"""Chained records: a domain row as exact Python values, the form hashed into the chain.

A record is every column of a domain row but ``entry_seq``. Values are coerced to the
column's kind once, on the way in (``build_record``), and read back without coercion
(``value_from_db``), so that a row read from any backend compares equal to its record.
A value is held to what every backend stores, whatever SQLite's type affinity would let
through: a string within its column's length, an integer within 32 bits (PostgreSQL's
INTEGER), so a ledger that SQLite accepts PostgreSQL accepts too.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Boolean, Float, Integer, String

from ledger.canonical import canonical_json
from ledger.store import merkle
from ledger.store.models import DOMAIN_TABLES, table


def utc_now() -> str:
    """UTC ISO-8601 with microseconds and a ``Z``: ``2026-01-02T03:04:05.123456Z``."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def entry_hash(prev_hash_hex: str, leaf_hash_hex: str) -> str:
    """``SHA-256(prev_entry_hash || leaf_hash)`` over the raw 32-byte digests."""
    return hashlib.sha256(bytes.fromhex(prev_hash_hex) + bytes.fromhex(leaf_hash_hex)).hexdigest()


def payload_leaf_hash(payload_text: str) -> str:
    return merkle.leaf_hash(payload_text.encode("utf-8")).hex()


def column_kind(column) -> str:
    if isinstance(column.type, Boolean):
        return "bool"
    if isinstance(column.type, Integer):
        return "int"
    if isinstance(column.type, Float):
        return "float"
    return "str"


# table -> [(column, kind, nullable)] for the columns that go into a chained record
COLUMNS: dict[str, list[tuple[str, str, bool]]] = {
    name: [
        (column.name, column_kind(column), bool(column.nullable))
        for column in table(name).columns
        if column.name != "entry_seq"
    ]
    for name in DOMAIN_TABLES
}
AUTO_COLUMNS = {"id", "recorded_at"}
INT_RANGE = (-(2**31), 2**31 - 1)  # INTEGER on PostgreSQL (SQLite's would be 64 bits)
# table -> column -> the most characters a String(n) column holds (Text: no limit)
MAX_LENGTH: dict[str, dict[str, int]] = {
    name: {
        column.name: column.type.length
        for column in table(name).columns
        if isinstance(column.type, String) and column.type.length is not None
    }
    for name in DOMAIN_TABLES
}
_KNOWN = {name: {column for column, _, _ in columns} - AUTO_COLUMNS for name, columns in COLUMNS.items()}


def _coerce(kind: str, value: Any, where: Any, *, nan_as_null: bool = False) -> Any:
    """Exact Python value for a column of ``kind`` (fast path for the common exact types).

    ``where`` names the column in error messages (a string, or a (table, column) pair).
    """
    if value is None:
        return None
    tp = type(value)
    if kind == "str":
        if tp is str:
            return value
    elif kind == "int":
        if tp is int:
            return value
    elif kind == "float":
        if tp is float and value - value == 0.0:  # finite
            return value
        if tp is int:
            return float(value)
    elif kind == "bool":
        if tp is bool:
            return value
    if isinstance(where, tuple):
        where = ".".join(where)
    return _coerce_slow(kind, value, where, nan_as_null)


def _coerce_slow(kind: str, value: Any, where: str, nan_as_null: bool) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        value = value.item()
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
        raise TypeError(f"{where}: expected a boolean, got {value!r}")
    if kind == "int":
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, float):
            if math.isnan(value) and nan_as_null:
                return None
            if value.is_integer():
                return int(value)
        raise TypeError(f"{where}: expected an integer, got {value!r}")
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{where}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            if nan_as_null and math.isnan(value):
                return None
            raise ValueError(f"{where}: {value} cannot be recorded (use None for a missing value)")
        return value
    if isinstance(value, str):
        return value
    raise TypeError(f"{where}: expected a string, got {type(value).__name__} {value!r}")


def build_record(
    table_name: str, values: Mapping[str, Any], *, row_id: int, ts: str, nan_as_null: bool = False
) -> dict:
    columns = COLUMNS[table_name]
    if not _KNOWN[table_name].issuperset(values):
        unknown = set(values) - _KNOWN[table_name]
        raise ValueError(f"{table_name}: unknown column(s) {sorted(unknown)}")
    record: dict[str, Any] = {"id": row_id, "recorded_at": ts}
    get = values.get
    lengths = MAX_LENGTH[table_name]
    low, high = INT_RANGE
    for name, kind, nullable in columns:
        if name in AUTO_COLUMNS:
            continue
        value = _coerce(kind, get(name), (table_name, name), nan_as_null=nan_as_null)
        if value is None:
            if not nullable:
                raise ValueError(f"{table_name}.{name} is required")
        elif kind == "str" and name in lengths and len(value) > lengths[name]:
            raise ValueError(f"{table_name}.{name}: at most {lengths[name]} characters, got {len(value)}")
        elif kind == "int" and not low <= value <= high:
            raise ValueError(f"{table_name}.{name}: {value} is outside the 32-bit integer range")
        record[name] = value
    return record


def value_from_db(kind: str, raw: Any) -> Any:
    """A raw driver value as it would appear in a chained record (no silent coercion)."""
    if raw is None:
        return None
    if kind == "bool" and type(raw) is int and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(raw).hex()}
    if isinstance(raw, (str, int, float, bool)):
        return raw
    return {"$repr": repr(raw)}


def json_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        json.loads(value)  # must already be JSON text
        return value
    return canonical_json(value)


def to_plain(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return obj
