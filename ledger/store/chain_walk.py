"""Walking the chain: one named check per property of an entry (sequence, hashes, a canonical payload
that agrees with its columns, the records of each table) adding what it finds to a ``ChainReport``,
never stopping the walk, so one report lists every problem. A long chain is walked as consecutive
stretches (``plan_parts``), each its own walk, merged into one report (``merge_reports``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import bindparam, text
from sqlalchemy.engine import Connection

from ledger.canonical import canonical_json
from ledger.store import merkle
from ledger.store.chain_report import ChainReport
from ledger.store.chain_rows import (
    TableStream,
    check_entry_records,
    in_range,
    report_unchained_rows,
    stream_select,
)
from ledger.store.models import DOMAIN_TABLES, GENESIS_HASH
from ledger.store.records import entry_hash

_DIGEST = re.compile(r"[0-9a-f]{64}")


# --------------------------------------------------------------------------- the checks


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


def check_hashes(report: ChainReport, walk: _Walk, key: str, payload: bytes, stored: tuple[Any, Any, Any]) -> None:
    """The leaf from the payload, the link to the previous entry, the entry hash over both."""
    leaf_stored, prev_stored, entry_stored = stored
    leaf_bytes = merkle.leaf_hash(payload)
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


def parse_payload(report: ChainReport, key: str, payload: bytes) -> dict | None:
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:  # also what orjson does not take (integers past 64 bits): the standard parser
        try:
            body = json.loads(payload)
        except ValueError:
            report.add("chain_entries", key, "payload is not JSON")
            return None
    if not isinstance(body, dict):
        report.add("chain_entries", key, "payload is not a JSON object")
        return None
    return body


def is_canonical(body: dict, payload: bytes) -> bool:
    """The payload is the compact, sorted-key encoding of what it parses to: no spaces, no duplicate keys,
    one spelling of every value, so that every parser reads the same entry. orjson's encoding is checked
    first (ten times faster); where it spells a value otherwise (a float such as 1e-05), ``canonical_json``,
    which wrote it, decides."""
    try:
        if orjson.dumps(body, option=orjson.OPT_SORT_KEYS) == payload:
            return True
    except (orjson.JSONEncodeError, TypeError):
        pass
    try:
        return canonical_json(body).encode("utf-8") == payload
    except ValueError:
        return False


def check_payload_header(
    report: ChainReport, key: str, body: dict, payload: bytes, columns: tuple[Any, Any, Any]
) -> None:
    """The payload is canonical and agrees with the entry's own seq, kind and timestamp columns."""
    seq, kind, recorded_at = columns
    if not is_canonical(body, payload):
        report.add("chain_entries", key, "payload is not canonical JSON")
    if body.get("seq") != seq:
        report.add("chain_entries", key, f"payload seq {body.get('seq')} differs from the column")
    if body.get("kind") != kind:
        report.add("chain_entries", key, f"kind {kind!r} differs from the payload's {body.get('kind')!r}")
    if body.get("ts") != recorded_at:
        report.add("chain_entries", key, f"recorded_at {recorded_at!r} differs from the payload's {body.get('ts')!r}")


@dataclass(frozen=True)
class ChainPart:
    """A stretch of the chain: the entries after seq ``after`` through ``through`` (open where None), the
    rows of each table with ids in its ``ids`` range, and the stored entry hash its first entry links to."""

    after: int | None
    through: int | None
    ids: dict[str, tuple[int | None, int | None]]
    prev: str


def plan_parts(conn: Connection, written: dict[str, dict], parts: int) -> list[ChainPart]:
    """Cut the chain into ``parts`` stretches of about as many rows each (an entry counts as one row too)."""
    whole = ChainPart(None, None, dict.fromkeys(DOMAIN_TABLES, (None, None)), GENESIS_HASH)
    if parts <= 1:
        return [whole]
    seqs = [seq for (seq,) in conn.exec_driver_sql("SELECT seq FROM chain_entries ORDER BY seq")]
    weight = dict.fromkeys(seqs, 1)
    for table in written.values():
        for seq, (count, _, _) in table.items():
            if seq in weight:
                weight[seq] += count
    total, running = sum(weight.values()), 0
    cuts: list[int] = []
    for seq in seqs[:-1]:
        running += weight[seq]
        if running * parts >= total * (len(cuts) + 1):
            cuts.append(seq)
    if not cuts:
        return [whole]
    hashes: dict[int, str] = dict(
        conn.execute(
            text("SELECT seq, entry_hash FROM chain_entries WHERE seq IN :cuts").bindparams(
                bindparam("cuts", expanding=True)
            ),
            {"cuts": cuts},
        ).all()
    )
    bounds = [None, *cuts, None]
    plan = []
    for after, through in zip(bounds, bounds[1:]):
        ids = {name: (_last_id(written[name], after), _last_id(written[name], through)) for name in DOMAIN_TABLES}
        plan.append(ChainPart(after, through, ids, GENESIS_HASH if after is None else str(hashes.get(after))))
    return plan


def _last_id(table: dict, through: int | None) -> int | None:
    """The highest id written by entries up to ``through`` (None: no bound)."""
    if through is None:
        return None
    return max(
        (high for seq, (_, _, high) in table.items() if type(seq) is int and seq <= through and type(high) is int),
        default=0,
    )


def walk_part(conn: Connection, part: ChainPart, written: dict[str, dict]) -> ChainReport:
    report = ChainReport()
    walk = _Walk(prev=part.prev, expected_seq=(part.after or 0) + 1)
    streams = {name: TableStream(conn, name, written[name], part.ids[name]) for name in DOMAIN_TABLES}
    entries = stream_select(
        conn,
        "chain_entries",
        ["seq", "kind", "recorded_at", "payload", "leaf_hash", "prev_hash", "entry_hash"],
        order_by="seq",
        where=in_range("seq", part.after, part.through),
    )
    for seq, kind, recorded_at, payload_text, leaf_stored, prev_stored, entry_stored in entries:
        key = f"seq={seq}"
        report.n_entries += 1
        check_sequence(report, walk, key, seq)
        if not isinstance(payload_text, str):
            report.add("chain_entries", key, "payload is not text")
            payload_text = str(payload_text)
        payload = payload_text.encode("utf-8")
        check_hashes(report, walk, key, payload, (leaf_stored, prev_stored, entry_stored))
        body = parse_payload(report, key, payload)
        if body is None:
            continue
        check_payload_header(report, key, body, payload, (seq, kind, recorded_at))
        check_entry_records(report, key, seq, body, streams)
    report.leaves = walk.leaves
    report_unchained_rows(report, streams)
    return report


def merge_reports(reports: list[ChainReport]) -> ChainReport:
    merged = ChainReport()
    for report in reports:
        merged.n_entries += report.n_entries
        for table_name, count in report.rows.items():
            merged.rows[table_name] = merged.rows.get(table_name, 0) + count
        merged.problems.extend(report.problems)
        merged.leaves.extend(report.leaves)
    merged.root = merkle.merkle_root(merged.leaves).hex()
    return merged
