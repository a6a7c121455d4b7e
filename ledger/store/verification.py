"""Checking the log: every hash recomputed, every row compared with its chain entry, the head's history.

``verify_chain`` walks the chain once and runs one named check per property (sequence,
hashes, payload header, the records of each table); each check adds what it finds to a
``ChainReport`` and never stops the walk, so one report lists every problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ledger.canonical import canonical_json
from ledger.store import merkle
from ledger.store.base import StoreBase
from ledger.store.models import DOMAIN_TABLES, GENESIS_HASH
from ledger.store.records import COLUMNS, entry_hash, value_from_db

# table -> entry seq -> row id -> the stored row as a record
StoredRows = dict[str, dict[int, dict[int, dict]]]
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ChainProblem:
    table: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.table} {self.key}: {self.message}"


@dataclass
class ChainReport:
    n_entries: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    root: str = merkle.EMPTY_ROOT.hex()
    problems: list[ChainProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def messages(self) -> list[str]:
        return [str(problem) for problem in self.problems]

    def add(self, table_name: str, key: str, message: str) -> None:
        self.problems.append(ChainProblem(table_name, key, message))

    def summary(self) -> str:
        head = f"{self.n_entries} chain entries, {sum(self.rows.values())} rows, root {self.root}"
        if self.ok:
            return f"chain OK: {head}"
        return f"chain BROKEN ({len(self.problems)} problems): {head}\n" + "\n".join(
            "  " + message for message in self.messages
        )


@dataclass(frozen=True)
class ConsistencyReport:
    ok: bool
    old_root: str
    old_size: int
    new_root: str
    new_size: int
    proof: tuple[str, ...]
    message: str


# --------------------------------------------------------------------------- the checks


def _raw_select(conn: Connection, table_name: str, names: list[str], order_by: str | None = None):
    """A plain-text SELECT (no parameters): values come back as the driver returns them, without
    SQLAlchemy's type processing (which would turn a tampered SQLite boolean 2 into True)."""
    prep = conn.dialect.identifier_preparer
    sql = f"SELECT {', '.join(prep.quote(name) for name in names)} FROM {prep.quote(table_name)}"
    if order_by is not None:
        sql += f" ORDER BY {prep.quote(order_by)}"
    return conn.execute(text(sql))


def load_stored_rows(conn: Connection, report: ChainReport) -> StoredRows:
    """Every domain row as a record, grouped by the entry that recorded it (duplicate ids reported)."""
    stored: StoredRows = {}
    for table_name in DOMAIN_TABLES:
        columns = COLUMNS[table_name]
        grouped: dict[int, dict[int, dict]] = {}
        count = 0
        for raw in _raw_select(conn, table_name, ["entry_seq"] + [name for name, _, _ in columns]):
            record = {name: value_from_db(kind, value) for (name, kind, _), value in zip(columns, raw[1:])}
            bucket = grouped.setdefault(raw[0], {})
            if record["id"] in bucket:
                report.add(table_name, f"row id={record['id']}", "duplicate id")
            bucket[record["id"]] = record
            count += 1
        stored[table_name] = grouped
        report.rows[table_name] = count
    return stored


@dataclass
class _Walk:
    """Where the walk along the chain stands: the hash to link to, the seq expected next, the leaves so far."""

    prev: str = GENESIS_HASH
    expected_seq: int = 1
    leaves: list[bytes] = field(default_factory=list)


def check_sequence(report: ChainReport, walk: _Walk, key: str, seq: Any) -> None:
    if seq != walk.expected_seq:
        report.add("chain_entries", key, f"expected seq {walk.expected_seq}: entries are missing or renumbered")
    walk.expected_seq = (seq if isinstance(seq, int) else walk.expected_seq) + 1


def check_hashes(report: ChainReport, walk: _Walk, key: str, payload_text: str, stored: tuple[Any, Any, Any]) -> None:
    """The leaf from the payload, the link to the previous entry, the entry hash over both."""
    leaf_stored, prev_stored, entry_stored = stored
    leaf_bytes = merkle.leaf_hash(payload_text.encode("utf-8"))
    walk.leaves.append(leaf_bytes)
    leaf = leaf_bytes.hex()
    if leaf_stored != leaf:
        report.add("chain_entries", key, "leaf_hash does not match SHA-256(0x00 || payload)")
    if prev_stored != walk.prev:
        report.add(
            "chain_entries", key, f"prev_hash {prev_stored} does not link to the previous entry_hash {walk.prev}"
        )
    expected_entry = entry_hash(walk.prev, leaf)
    if entry_stored != expected_entry:
        report.add("chain_entries", key, "entry_hash does not match SHA-256(prev_hash || leaf_hash)")
    # link the next entry to what is stored (one edit is reported once, not at every later entry),
    # unless what is stored is no digest at all
    walk.prev = entry_stored if isinstance(entry_stored, str) and _DIGEST.fullmatch(entry_stored) else expected_entry


def parse_payload(report: ChainReport, key: str, payload_text: str) -> dict | None:
    try:
        body = json.loads(payload_text)
    except ValueError:
        report.add("chain_entries", key, "payload is not JSON")
        return None
    if not isinstance(body, dict):
        report.add("chain_entries", key, "payload is not a JSON object")
        return None
    return body


def check_payload_header(
    report: ChainReport, key: str, body: dict, payload_text: str, columns: tuple[Any, Any, Any]
) -> None:
    """The payload is canonical and agrees with the entry's own seq, kind and timestamp columns."""
    seq, kind, recorded_at = columns
    if canonical_json(body) != payload_text:
        report.add("chain_entries", key, "payload is not canonical JSON")
    if body.get("seq") != seq:
        report.add("chain_entries", key, f"payload seq {body.get('seq')} differs from the column")
    if body.get("kind") != kind:
        report.add("chain_entries", key, f"kind {kind!r} differs from the payload's {body.get('kind')!r}")
    if body.get("ts") != recorded_at:
        report.add("chain_entries", key, f"recorded_at {recorded_at!r} differs from the payload's {body.get('ts')!r}")


def check_entry_records(report: ChainReport, key: str, seq: int, body: dict, stored: StoredRows) -> None:
    """Every record the entry lists matches the stored row; matched rows are removed from ``stored``."""
    chained = body.get("records") or {}
    if not isinstance(chained, dict):
        report.add("chain_entries", key, "payload records are not an object")
        return
    for table_name, records in chained.items():
        if table_name not in stored:
            report.add("chain_entries", key, f"payload names unknown table {table_name!r}")
            continue
        if not isinstance(records, list):
            report.add("chain_entries", key, f"payload records of {table_name} are not a list")
            continue
        compare_table_records(report, table_name, seq, records, stored[table_name].get(seq, {}))


def compare_table_records(
    report: ChainReport, table_name: str, seq: int, records: list, bucket: dict[int, dict]
) -> None:
    ids: list[Any] = [
        rec.get("id") if isinstance(rec, dict) and type(rec.get("id")) is int else None for rec in records
    ]
    stored_rows = [bucket.get(rid) for rid in ids]
    # fast path: the whole batch at once (one C-encoded JSON document per side)
    if (
        all(row is not None for row in stored_rows)
        and len(set(ids)) == len(ids)
        and canonical_json(stored_rows) == canonical_json(records)
    ):
        for rid in ids:
            del bucket[rid]
        return
    for rid, rec in zip(ids, records):
        row = bucket.pop(rid, None)
        if row is None:
            report.add(table_name, f"row id={rid}", f"recorded by chain entry {seq} but missing from the table")
        elif canonical_json(row) != canonical_json(rec):
            detail = _field_differences(row, rec)
            report.add(table_name, f"row id={rid}", f"differs from chain entry {seq} ({detail})")


def _field_differences(row: dict, rec: dict) -> str:
    names = set(row) | set(rec)
    fields = sorted(name for name in names if canonical_json(row.get(name)) != canonical_json(rec.get(name)))
    return "; ".join(f"{name}: table has {row.get(name)!r}, chain has {rec.get(name)!r}" for name in fields)


def report_unchained_rows(report: ChainReport, stored: StoredRows) -> None:
    """Rows left after the walk were recorded by no entry."""
    for table_name, grouped in stored.items():
        for seq, bucket in grouped.items():
            for rid in bucket:
                report.add(table_name, f"row id={rid}", f"not recorded in the chain (entry_seq={seq})")


# --------------------------------------------------------------------------- on the store


class ChainVerification(StoreBase):
    def verify_chain(self) -> ChainReport:
        """Recompute every leaf and entry hash, the sequence, and compare every domain row with its entry."""
        report = ChainReport()
        walk = _Walk()
        with self._read() as conn:
            stored = load_stored_rows(conn, report)
            entries = _raw_select(
                conn,
                "chain_entries",
                ["seq", "kind", "recorded_at", "payload", "leaf_hash", "prev_hash", "entry_hash"],
                order_by="seq",
            )
            for seq, kind, recorded_at, payload_text, leaf_stored, prev_stored, entry_stored in entries:
                key = f"seq={seq}"
                report.n_entries += 1
                check_sequence(report, walk, key, seq)
                if not isinstance(payload_text, str):
                    report.add("chain_entries", key, "payload is not text")
                    payload_text = str(payload_text)
                check_hashes(report, walk, key, payload_text, (leaf_stored, prev_stored, entry_stored))
                body = parse_payload(report, key, payload_text)
                if body is None:
                    continue
                check_payload_header(report, key, body, payload_text, (seq, kind, recorded_at))
                check_entry_records(report, key, seq, body, stored)
            report.root = merkle.merkle_root(walk.leaves).hex()
            report_unchained_rows(report, stored)
        return report

    def verify_since_head(self, old_root: str, old_size: int) -> ConsistencyReport:
        """Prove the log only grew since a head (root, size) written down earlier.

        Leaves are recomputed from the stored payloads; the proof is built from them
        and checked with the independent verifier against the old and the new root.
        """
        leaves = self._recomputed_leaves()
        new_size = len(leaves)
        new_root = merkle.merkle_root(leaves).hex()
        if old_size > new_size:
            return ConsistencyReport(
                False,
                old_root,
                old_size,
                new_root,
                new_size,
                (),
                f"the log has {new_size} entries, fewer than the {old_size} of the earlier head: history was removed",
            )
        proof = merkle.consistency_proof(leaves, old_size, new_size)
        ok = merkle.verify_consistency(old_root, old_size, new_root, new_size, proof)
        if ok:
            message = f"consistent: the log grew from {old_size} to {new_size} entries without rewriting history"
        elif merkle.merkle_root(leaves[:old_size]).hex() != old_root:
            message = (
                f"INCONSISTENT: the first {old_size} entries now hash to "
                f"{merkle.merkle_root(leaves[:old_size]).hex()}, not {old_root}: history was rewritten"
            )
        else:
            message = "INCONSISTENT: the consistency proof does not verify"
        return ConsistencyReport(ok, old_root, old_size, new_root, new_size, tuple(p.hex() for p in proof), message)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[str]:
        """RFC 6962 consistency proof (hex) between the first old_size and new_size entries."""
        leaves = self._recomputed_leaves()
        return [p.hex() for p in merkle.consistency_proof(leaves, old_size, new_size)]

    def _recomputed_leaves(self) -> list[bytes]:
        """Leaves from the stored payloads, not the stored leaf hashes: a proof must not trust them."""
        with self._read() as conn:
            return [
                merkle.leaf_hash(row[0].encode("utf-8"))
                for row in conn.execute(text("SELECT payload FROM chain_entries ORDER BY seq"))
            ]
