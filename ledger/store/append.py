"""The one write path: ``append`` builds a chain entry and its domain rows in one transaction.

Chain construction (see docs/schema.md):

* ``Store.append(kind, payload, records)``: in ONE transaction (SQLite ``BEGIN
  IMMEDIATE``; PostgreSQL ``LOCK TABLE chain_entries IN EXCLUSIVE MODE``) it reads the
  last entry, assigns ids to the new domain rows, builds the entry payload ``{"kind",
  "seq", "ts", "data", "records": {table: [record, ...]}}``, stores its canonical JSON,
  ``leaf_hash = SHA-256(0x00 || payload_bytes)`` and ``entry_hash = SHA-256(prev_entry_hash
  || leaf_hash)`` (raw 32-byte digests, genesis ``prev_hash`` = 64 zeros), then inserts the
  domain rows, each tagged with ``entry_seq``.
* A *record* is the full domain row (every column but ``entry_seq``), so the chain alone
  reproduces the database and ``verify_chain`` compares each row with it.

The Merkle head is read here too: it is the log this path writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection

from ledger.canonical import canonical_json
from ledger.store import merkle
from ledger.store.base import Database
from ledger.store.models import DOMAIN_TABLES, GENESIS_HASH, table
from ledger.store.records import build_record, entry_hash, payload_leaf_hash, utc_now


@dataclass(frozen=True)
class AppendResult:
    seq: int
    entry_hash: str
    leaf_hash: str
    recorded_at: str
    ids: dict[str, list[int]] = field(default_factory=dict)


class AppendLog:
    """The hash-chained log and its Merkle head."""

    def __init__(self, db: Database):
        self.db = db

    # ---- the one write path

    def append(
        self,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        records: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> AppendResult:
        """Append one chain entry (and its domain rows) in one transaction.

        ``payload`` is free JSON data kept in the entry (``data``); ``records`` maps
        domain table names to rows to insert (in the given order, which must respect
        foreign keys). Ids and ``recorded_at`` are assigned here.
        """
        with self.db.write() as conn:
            return self.append_in(conn, kind, payload, records)

    def append_in(
        self,
        conn: Connection,
        kind: str,
        payload: Mapping[str, Any] | None,
        records: Mapping[str, Sequence[Mapping[str, Any]]] | None,
        *,
        nan_as_null: bool = False,
    ) -> AppendResult:
        if not kind or not isinstance(kind, str) or len(kind) > 64:
            raise ValueError("kind must be a non-empty string of at most 64 characters")
        ts = utc_now()
        last = conn.execute(text("SELECT seq, entry_hash FROM chain_entries ORDER BY seq DESC LIMIT 1")).first()
        seq = int(last[0]) + 1 if last else 1
        prev = str(last[1]) if last else GENESIS_HASH

        chained: dict[str, list[dict]] = {}
        for table_name, rows in (records or {}).items():
            if table_name not in DOMAIN_TABLES:
                raise ValueError(f"unknown ledger table {table_name!r}")
            t = table(table_name)
            next_id = int(conn.execute(select(func.coalesce(func.max(t.c.id), 0))).scalar_one()) + 1
            built = []
            for offset, values in enumerate(rows):
                built.append(build_record(table_name, values, row_id=next_id + offset, ts=ts, nan_as_null=nan_as_null))
            chained[table_name] = built

        body = {
            "kind": kind,
            "seq": seq,
            "ts": ts,
            "data": dict(payload or {}),
            "records": chained,
        }
        payload_text = canonical_json(body)
        leaf = payload_leaf_hash(payload_text)
        entry = entry_hash(prev, leaf)
        conn.execute(
            table("chain_entries").insert(),
            [
                {
                    "seq": seq,
                    "kind": kind,
                    "recorded_at": ts,
                    "payload": payload_text,
                    "leaf_hash": leaf,
                    "prev_hash": prev,
                    "entry_hash": entry,
                }
            ],
        )
        ids: dict[str, list[int]] = {}
        for table_name, built in chained.items():
            if built:
                self._insert_many(conn, table_name, built, seq)
            ids[table_name] = [rec["id"] for rec in built]
        return AppendResult(seq=seq, entry_hash=entry, leaf_hash=leaf, recorded_at=ts, ids=ids)

    def _insert_many(self, conn: Connection, table_name: str, built: list[dict], seq: int) -> None:
        # One Core INSERT, executed for many rows (the driver's executemany; psycopg pipelines it).
        conn.execute(table(table_name).insert(), [dict(rec, entry_seq=seq) for rec in built])

    # ---- Merkle head

    def leaf_hashes(self) -> list[str]:
        with self.db.read() as conn:
            return [row[0] for row in conn.execute(text("SELECT leaf_hash FROM chain_entries ORDER BY seq"))]

    def head(self) -> tuple[str, int]:
        """(Merkle root hex, number of entries) of the log as stored."""
        leaves = self.leaf_hashes()
        return merkle.merkle_root_hex(leaves), len(leaves)
