"""The store: one append function, typed writers over it, chain and Merkle verification.

Chain construction (see docs/schema.md):

* Every write is ``Store.append(kind, payload, records)``: in ONE transaction (SQLite
  ``BEGIN IMMEDIATE``; PostgreSQL ``LOCK TABLE chain_entries IN EXCLUSIVE MODE``) it
  reads the last entry, assigns ids to the new domain rows, builds the entry payload
  ``{"kind", "seq", "ts", "data", "records": {table: [record, ...]}}``, stores its
  canonical JSON, ``leaf_hash = SHA-256(0x00 || payload_bytes)`` and
  ``entry_hash = SHA-256(prev_entry_hash || leaf_hash)`` (raw 32-byte digests,
  genesis ``prev_hash`` = 64 zeros), then inserts the domain rows, each tagged with
  ``entry_seq``.
* A *record* is the full domain row (every column but ``entry_seq``), so the chain
  alone reproduces the database and ``verify_chain`` compares each row with it.
* Bulk evidence: one chain entry per ``add_evidence`` call (or per ``batch_size`` rows),
  whose payload lists the full rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
import sqlite3
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping, Sequence

from sqlalchemy import Boolean, Float, Integer, func, select, text
from sqlalchemy.engine import Connection, Engine

from ledger.canonical import canonical_json, sha256_file, sha256_hex
from ledger.store import merkle
from ledger.store.engine import (
    WRITE_OPTION,
    StoreError,
    ensure_schema,
    make_engine,
    normalize_url,
    default_db_url,
)
from ledger.store.models import (
    ALL_TABLES,
    CHECKPOINT_STATUSES,
    CLAIM_OUTCOMES,
    DEVIATION_TIMINGS,
    DOMAIN_TABLES,
    GENESIS_HASH,
    table,
)


class PreregistrationRequired(StoreError):
    """Evidence or a run for a protocol that was never registered."""


class LineageRefused(StoreError):
    """A checkpoint would continue from a parent that is not promoted."""


class ConflictError(StoreError):
    """The same identity is already recorded with different content."""


# --------------------------------------------------------------------------- helpers


def utc_now() -> str:
    """UTC ISO-8601 with microseconds and a ``Z``: ``2026-01-02T03:04:05.123456Z``."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def entry_hash(prev_hash_hex: str, leaf_hash_hex: str) -> str:
    """``SHA-256(prev_entry_hash || leaf_hash)`` over the raw 32-byte digests."""
    return hashlib.sha256(bytes.fromhex(prev_hash_hex) + bytes.fromhex(leaf_hash_hex)).hexdigest()


def payload_leaf_hash(payload_text: str) -> str:
    return merkle.leaf_hash(payload_text.encode("utf-8")).hex()


def _column_kind(column) -> str:
    if isinstance(column.type, Boolean):
        return "bool"
    if isinstance(column.type, Integer):
        return "int"
    if isinstance(column.type, Float):
        return "float"
    return "str"


# table -> [(column, kind, nullable)] for the columns that go into a chained record
_COLUMNS: dict[str, list[tuple[str, str, bool]]] = {
    name: [
        (column.name, _column_kind(column), bool(column.nullable))
        for column in table(name).columns
        if column.name != "entry_seq"
    ]
    for name in DOMAIN_TABLES
}
_AUTO = {"id", "recorded_at"}
_KNOWN = {name: {column for column, _, _ in columns} - _AUTO for name, columns in _COLUMNS.items()}


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


def _build_record(table_name: str, values: Mapping[str, Any], *, row_id: int, ts: str, nan_as_null: bool = False) -> dict:
    columns = _COLUMNS[table_name]
    if not _KNOWN[table_name].issuperset(values):
        unknown = set(values) - _KNOWN[table_name]
        raise ValueError(f"{table_name}: unknown column(s) {sorted(unknown)}")
    record: dict[str, Any] = {"id": row_id, "recorded_at": ts}
    get = values.get
    for name, kind, nullable in columns:
        if name in _AUTO:
            continue
        value = _coerce(kind, get(name), (table_name, name), nan_as_null=nan_as_null)
        if value is None and not nullable:
            raise ValueError(f"{table_name}.{name} is required")
        record[name] = value
    return record


def _from_db(kind: str, raw: Any) -> Any:
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


def _json_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        json.loads(value)  # must already be JSON text
        return value
    return canonical_json(value)


def _to_plain(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return obj


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class AppendResult:
    seq: int
    entry_hash: str
    leaf_hash: str
    recorded_at: str
    ids: dict[str, list[int]] = field(default_factory=dict)


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


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple]

    def to_dataframe(self):
        import pandas as pd

        return pd.DataFrame.from_records(self.rows, columns=self.columns)

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


# --------------------------------------------------------------------------- read-only SQL

_READ_PRAGMAS_NO_ARG = {
    "integrity_check", "quick_check", "foreign_key_check", "journal_mode", "foreign_keys",
    "user_version", "schema_version", "application_id", "database_list", "compile_options",
    "page_count", "page_size", "freelist_count", "encoding", "busy_timeout", "query_only",
    "table_list", "collation_list", "function_list", "module_list", "pragma_list", "data_version",
    "synchronous", "auto_vacuum", "wal_autocheckpoint", "cache_size",
}
_READ_PRAGMAS_ARG = {
    "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "integrity_check", "quick_check", "foreign_key_check", "table_list",
}
_ALLOWED_FIRST = {"SELECT", "WITH", "EXPLAIN", "VALUES", "PRAGMA"}
_COMMENTS = re.compile(r"(--[^\n]*(\n|$))|(/\*.*?\*/)", re.S)


class ReadOnlyViolation(StoreError):
    """``Store.query`` refused a statement that could write."""


def check_read_only_sql(sql: str) -> str:
    """Refuse anything but one SELECT / WITH / EXPLAIN / VALUES / read-only PRAGMA statement."""
    stripped = _COMMENTS.sub(" ", sql).strip()
    body = stripped.rstrip(";").strip()
    if not body:
        raise ReadOnlyViolation("empty query")
    if ";" in _strip_strings(body):
        raise ReadOnlyViolation("only one statement per query")
    first = re.match(r"[A-Za-z]+", body)
    keyword = first.group(0).upper() if first else ""
    if keyword not in _ALLOWED_FIRST:
        raise ReadOnlyViolation(
            f"read-only query refused: statements starting with {keyword or body[:20]!r} may write; "
            "use SELECT, WITH, EXPLAIN or a read-only PRAGMA"
        )
    if keyword == "PRAGMA":
        match = re.fullmatch(r"PRAGMA\s+(?:\w+\.)?(\w+)\s*(\(\s*[\w\"']+\s*\))?", body, re.I)
        if not match:
            raise ReadOnlyViolation("read-only query refused: PRAGMA assignments are not allowed")
        name, arg = match.group(1).lower(), match.group(2)
        allowed = _READ_PRAGMAS_ARG if arg else _READ_PRAGMAS_NO_ARG
        if name not in allowed:
            raise ReadOnlyViolation(f"read-only query refused: PRAGMA {name} is not a read-only pragma here")
    return body


def _strip_strings(sql: str) -> str:
    return re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", sql)


_SQLITE_ALLOWED_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_TRANSACTION,  # the store's own BEGIN/COMMIT; the statement filter refuses user ones
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}


def _read_only_authorizer(action, arg1, arg2, dbname, source):
    if action in _SQLITE_ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if arg2 is None and name in _READ_PRAGMAS_NO_ARG | _READ_PRAGMAS_ARG:
            return sqlite3.SQLITE_OK
        if arg2 is not None and name in _READ_PRAGMAS_ARG:
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


# --------------------------------------------------------------------------- the store


class Store:
    """A ledger database. Create with ``open_store(url)``."""

    def __init__(self, engine: Engine, url: str):
        self.engine = engine
        self.url = url

    # ---- lifecycle

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                if self.dialect == "postgresql":
                    conn.exec_driver_sql("LOCK TABLE chain_entries IN EXCLUSIVE MODE")
                yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn

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
        with self._write() as conn:
            return self._append_in(conn, kind, payload, records)

    def _append_in(
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
        last = conn.execute(
            text("SELECT seq, entry_hash FROM chain_entries ORDER BY seq DESC LIMIT 1")
        ).first()
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
                built.append(
                    _build_record(table_name, values, row_id=next_id + offset, ts=ts, nan_as_null=nan_as_null)
                )
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
        if self.dialect == "sqlite":
            # Plain executemany: the records already hold exact Python values.
            names = [name for name, _, _ in _COLUMNS[table_name]] + ["entry_seq"]
            sql = 'INSERT INTO "{}" ({}) VALUES ({})'.format(
                table_name, ", ".join(f'"{n}"' for n in names), ", ".join("?" * len(names))
            )
            conn.exec_driver_sql(sql, [tuple(rec[n] for n in names[:-1]) + (seq,) for rec in built])
        else:
            conn.execute(table(table_name).insert(), [dict(rec, entry_seq=seq) for rec in built])

    # ---- typed writers (all through _append_in)

    def add_protocol(
        self,
        protocol: Mapping[str, Any] | Any,
        *,
        name: str | None = None,
        version: str | None = None,
    ) -> str:
        """Register a protocol (dict or Pydantic model); returns its canonical SHA-256.

        Idempotent: registering the same canonical protocol again writes nothing.
        """
        data = _to_plain(protocol)
        if isinstance(data, str):
            data = json.loads(data)
        canonical = canonical_json(data)
        sha = sha256_hex(canonical)
        if not isinstance(data, Mapping):
            raise TypeError("a protocol is a mapping (or a Pydantic model, or its JSON text)")
        name = name or str(data.get("name") or "")
        version = version or str(data.get("version") or "")
        if not name:
            raise ValueError("a protocol needs a name (in the document or as name=)")
        with self._write() as conn:
            if self._exists(conn, "protocols", sha256=sha):
                return sha
            self._append_in(
                conn,
                "protocol",
                {"sha256": sha},
                {"protocols": [{"sha256": sha, "name": name, "version": version or "", "canonical_json": canonical}]},
            )
        return sha

    def add_deviation(
        self,
        protocol_sha256: str,
        *,
        item: str,
        planned: Any,
        actual: Any,
        reason: str,
        timing: str,
        new_protocol_sha256: str | None = None,
    ) -> int:
        """Record a deviation from a registered protocol; returns the deviation id."""
        if timing not in DEVIATION_TIMINGS:
            raise ValueError(f"timing must be one of {DEVIATION_TIMINGS}, got {timing!r}")
        record = {
            "protocol_sha256": protocol_sha256,
            "item": item,
            "planned": planned if isinstance(planned, str) else canonical_json(planned),
            "actual": actual if isinstance(actual, str) else canonical_json(actual),
            "reason": reason,
            "timing": timing,
            "new_protocol_sha256": new_protocol_sha256,
        }
        with self._write() as conn:
            self._require(conn, "protocols", "protocol", sha256=protocol_sha256)
            result = self._append_in(conn, "deviation", {}, {"deviations": [record]})
        return result.ids["deviations"][0]

    def add_manifest(self, manifest, *, protocol_sha256: str | None = None) -> str:
        """Register a ``ledger.rows.manifest.Manifest`` and all its rows in one chain entry.

        Idempotent on the manifest SHA-256.
        """
        sha = manifest.sha256
        rows = [
            {
                "manifest_sha256": sha,
                "position": position,
                "row_id": row.row_id,
                "sha256": row.sha256,
                "task": row.task,
                "surface": row.surface,
                "depth": row.depth,
                "canonical_json": row.canonical(),
            }
            for position, row in enumerate(manifest.rows)
        ]
        with self._write() as conn:
            if self._exists(conn, "manifests", sha256=sha):
                return sha
            self._append_in(
                conn,
                "manifest",
                {"sha256": sha},
                {
                    "manifests": [
                        {"sha256": sha, "name": manifest.name, "n_rows": len(rows), "protocol_sha256": protocol_sha256}
                    ],
                    "rows": rows,
                },
            )
        return sha

    def add_run(
        self,
        *,
        run_id: str | None = None,
        kind: str = "eval",
        protocol_sha256: str | None = None,
        arm: str | None = None,
        config: Any = None,
        environment: Any = None,
        rng: Any = None,
        note: str | None = None,
    ) -> str:
        """Record a run (training, evaluation, import...); returns its run id (uuid4 hex if not given)."""
        run_id = run_id or uuid.uuid4().hex
        record = {
            "run_id": run_id,
            "kind": kind,
            "protocol_sha256": protocol_sha256,
            "arm": arm,
            "config_json": canonical_json(_to_plain(config) if config is not None else {}),
            "environment_json": canonical_json(_to_plain(environment) if environment is not None else {}),
            "rng_json": canonical_json(_to_plain(rng) if rng is not None else {}),
            "note": note,
        }
        with self._write() as conn:
            if self._exists(conn, "runs", run_id=run_id):
                raise ConflictError(f"run {run_id!r} is already recorded")
            self._append_in(conn, "run", {}, {"runs": [record]})
        return run_id

    def add_checkpoint(
        self,
        *,
        arm: str,
        status: str,
        sha256: str | None = None,
        path: str | None = None,
        parent_sha256: str | None = None,
        run_id: str | None = None,
        stage: str | None = None,
        gate_results: Sequence[Mapping[str, Any]] | None = None,
        meta: Any = None,
    ) -> str:
        """Record a checkpoint (hash of the file bytes, computed from ``path`` if not given).

        ``gate_results`` (dicts with gate, passed, and optionally value, threshold,
        comparison, metric, detail) are written to ``gate_results`` in the same entry and
        summarised in ``checkpoints.gate_results_json``. A parent must be recorded and
        ``promoted``, and its whole ancestry clean (see ``_check_continuation``). The rule is
        the store's own: no caller flag can switch it off.
        """
        if status not in CHECKPOINT_STATUSES:
            raise ValueError(f"status must be one of {CHECKPOINT_STATUSES}, got {status!r}")
        if sha256 is None:
            if path is None:
                raise ValueError("give sha256= or a path= to hash")
            sha256 = sha256_file(path)
        gates = [dict(g) for g in (gate_results or [])]
        gate_rows = []
        for gate in gates:
            detail = gate.pop("detail", None)
            gate_rows.append(
                {
                    "checkpoint_sha256": sha256,
                    "run_id": gate.pop("run_id", run_id),
                    "gate": gate.pop("gate"),
                    "passed": gate.pop("passed"),
                    "metric": gate.pop("metric", None),
                    "value": gate.pop("value", None),
                    "threshold": gate.pop("threshold", None),
                    "comparison": gate.pop("comparison", None),
                    "action": _gate_action(gate.pop("action", "stop")),
                    "detail_json": _json_or_none(detail),
                }
            )
            if gate:
                raise ValueError(f"unknown gate result field(s) {sorted(gate)}")
        record = {
            "sha256": sha256,
            "path": str(path) if path is not None else None,
            "arm": arm,
            "parent_sha256": parent_sha256,
            "status": status,
            "run_id": run_id,
            "stage": stage,
            "gate_results_json": canonical_json(
                [{k: v for k, v in g.items() if k != "checkpoint_sha256"} for g in gate_rows]
            )
            if gate_results is not None
            else None,
            "meta_json": _json_or_none(_to_plain(meta)),
        }
        with self._write() as conn:
            existing = self._fetch_one(conn, "checkpoints", sha256=sha256)
            if existing is not None:
                if existing["status"] != status or existing["arm"] != arm:
                    raise ConflictError(
                        f"checkpoint {sha256} is already recorded as {existing['arm']}/{existing['status']}"
                    )
                return sha256
            if parent_sha256 is not None:
                self._check_continuation(conn, parent_sha256, child_status=status)
            records: dict[str, list] = {"checkpoints": [record]}
            if gate_rows:
                records["gate_results"] = gate_rows
            self._append_in(conn, "checkpoint", {"sha256": sha256}, records)
        return sha256

    def _require_registered_run(self, conn: Connection, run_id: str | None) -> None:
        """Evidence belongs to a run of a registered protocol: results never precede the plan."""
        run = self._fetch_one(conn, "runs", run_id=run_id) if run_id is not None else None
        if run is None:
            raise StoreError(f"evidence names run {run_id!r}, which is not in the ledger")
        if run["protocol_sha256"] is None:
            raise PreregistrationRequired(
                f"refusing evidence for run {run_id!r}: it belongs to no registered protocol "
                "(run `ledger register PROTOCOL` before any result)"
            )

    def _check_continuation(self, conn: Connection, parent_sha256: str, *, child_status: str) -> None:
        """Refuse to continue from a lineage that failed a hard gate or that is exploratory.

        Walks the parent's whole ancestry. Any ancestor with status ``failed``, or with a
        failed gate whose action is ``stop`` (a retention floor or guardrail), refuses the
        continuation, naming the ancestor and the gate. An ``exploratory`` ancestor refuses
        anything but an exploratory child: tuning runs may build on each other, but no
        promoted result descends from them.
        """
        seen: set[str] = set()
        current: str | None = parent_sha256
        generation = 1
        while current is not None:
            if current in seen:
                raise LineageRefused(f"checkpoint {current} appears twice in its own ancestry")
            seen.add(current)
            node = self._fetch_one(conn, "checkpoints", sha256=current)
            if node is None:
                raise LineageRefused(
                    f"refusing to continue: ancestor {current} (generation {generation}) is not in the ledger"
                )
            who = f"ancestor {current[:12]} ({node['arm']}/{node['stage'] or '-'}, generation {generation})"
            failed_gates = [
                gate
                for gate in self._fetch_all(conn, "gate_results", checkpoint_sha256=current)
                if not gate["passed"] and gate["action"] == "stop"
            ]
            if failed_gates:
                names = ", ".join(sorted({gate["gate"] for gate in failed_gates}))
                raise LineageRefused(f"refusing to continue: {who} failed gate {names}")
            if node["status"] == "failed":
                raise LineageRefused(f"refusing to continue: {who} has status 'failed'")
            if node["status"] == "exploratory" and child_status != "exploratory":
                raise LineageRefused(
                    f"refusing to continue: {who} is exploratory; only exploratory work may build on it"
                )
            current = node["parent_sha256"]
            generation += 1

    def _fetch_all(self, conn: Connection, table_name: str, **where) -> list[dict]:
        t = table(table_name)
        stmt = select(t)
        for column, value in where.items():
            stmt = stmt.where(t.c[column] == value)
        return [dict(row) for row in conn.execute(stmt).mappings()]

    def check_continuation(self, parent_sha256: str, *, child_status: str = "promoted") -> None:
        """Raise ``LineageRefused`` if a new checkpoint may not descend from ``parent_sha256``."""
        with self._read() as conn:
            self._check_continuation(conn, parent_sha256, child_status=child_status)

    def add_gate_result(
        self,
        checkpoint_sha256: str,
        gate: str,
        passed: bool,
        *,
        value: float | None = None,
        threshold: float | None = None,
        comparison: str | None = None,
        metric: str | None = None,
        run_id: str | None = None,
        detail: Any = None,
        action: str = "stop",
    ) -> int:
        """Record a gate result on a recorded checkpoint.

        A failed ``stop`` gate fails the checkpoint's lineage from then on: nothing may
        continue from it or its descendants (the record is appended; nothing is updated).
        """
        record = {
            "checkpoint_sha256": checkpoint_sha256,
            "run_id": run_id,
            "gate": gate,
            "passed": passed,
            "metric": metric,
            "value": value,
            "threshold": threshold,
            "comparison": comparison,
            "action": _gate_action(action),
            "detail_json": _json_or_none(detail),
        }
        with self._write() as conn:
            result = self._append_in(conn, "gate_result", {}, {"gate_results": [record]})
        return result.ids["gate_results"][0]

    _EVIDENCE_FIELDS = (
        "run_id", "manifest_sha256", "row_id", "arm", "checkpoint_sha256", "loop", "prediction",
        "correct", "score_margin", "latency_ms", "tokens_generated",
    )

    def add_evidence(
        self,
        records: Iterable[Mapping[str, Any]] | Any,
        *,
        run_id: str | None = None,
        batch_size: int | None = None,
    ) -> int:
        """Insert row-level evidence; one chain entry per call (or per ``batch_size`` rows).

        Each record: run_id (or the ``run_id`` argument), manifest_sha256, row_id, arm,
        checkpoint_sha256, loop, prediction, correct, and optionally score_margin,
        latency_ms, tokens_generated, detail (any JSON; or detail_json). A pandas
        DataFrame is accepted; NaN counts as missing. Returns the number of rows written.
        """
        if hasattr(records, "to_dict") and hasattr(records, "columns"):
            records = records.to_dict("records")
        rows = []
        for values in records:
            values = dict(values)
            detail = values.pop("detail", None)
            if detail is not None and not (isinstance(detail, float) and math.isnan(detail)):
                values["detail_json"] = _json_or_none(detail)
            if values.get("detail_json") is not None and isinstance(values["detail_json"], float):
                values["detail_json"] = None
            if run_id is not None:
                values.setdefault("run_id", run_id)
            rows.append(values)
        if not rows:
            return 0
        size = batch_size or len(rows)
        for start in range(0, len(rows), size):
            batch = rows[start : start + size]
            with self._write() as conn:
                for run in {values.get("run_id") for values in batch}:
                    self._require_registered_run(conn, run)
                self._append_in(conn, "evidence", {"n": len(batch)}, {"evidence": batch}, nan_as_null=True)
        return len(rows)

    def add_claim(self, claim_id: str, spec: Any, *, protocol_sha256: str | None = None) -> str:
        """Register (preregister) a claim; returns the SHA-256 of its canonical spec.

        Idempotent for the same spec; a different spec under the same id is refused
        (record a deviation and use a new claim id).
        """
        spec = _to_plain(spec)
        canonical = canonical_json(spec)
        sha = sha256_hex(canonical)
        with self._write() as conn:
            existing = self._fetch_one(conn, "claims", claim_id=claim_id)
            if existing is not None:
                if existing["spec_sha256"] != sha:
                    raise ConflictError(
                        f"claim {claim_id!r} is registered with spec {existing['spec_sha256']}, not {sha}: "
                        "a changed claim is a deviation; record it and register a new claim id"
                    )
                return sha
            self._append_in(
                conn,
                "claim",
                {},
                {
                    "claims": [
                        {"claim_id": claim_id, "protocol_sha256": protocol_sha256, "spec_sha256": sha, "spec_json": canonical}
                    ]
                },
            )
        return sha

    def add_stat_test(
        self,
        *,
        statistic: str,
        inputs: Sequence[Mapping[str, Any]],
        claim_id: str | None = None,
        test_id: str | None = None,
        method: str | None = None,
        n: int | None = None,
        estimate: float | None = None,
        ci_low: float | None = None,
        ci_high: float | None = None,
        p_value: float | None = None,
        params: Any = None,
        result: Any = None,
    ) -> str:
        """Record a statistical test and the evidence it consumed.

        ``inputs``: one dict per role, e.g. ``{"role": "a", "arm": "loop", "checkpoint_sha256": ...,
        "manifest_sha256": ..., "loop": 4}`` (manifest_sha256, run_id, loop optional =
        "all"). Returns the test id (uuid4 hex if not given).
        """
        test_id = test_id or uuid.uuid4().hex
        record = {
            "test_id": test_id,
            "claim_id": claim_id,
            "statistic": statistic,
            "method": method,
            "n": n,
            "estimate": estimate,
            "ci_low": ci_low,
            "ci_high": ci_high,
            "p_value": p_value,
            "params_json": _json_or_none(_to_plain(params)),
            "result_json": _json_or_none(_to_plain(result)),
        }
        input_rows = [dict(item, test_id=test_id) for item in inputs]
        with self._write() as conn:
            self._append_in(
                conn, "stat_test", {}, {"stat_tests": [record], "stat_test_inputs": input_rows}
            )
        return test_id

    def add_claim_outcome(
        self,
        claim_id: str,
        outcome: str,
        reason: str,
        *,
        stat_test_id: str | None = None,
        detail: Any = None,
    ) -> int:
        """Record an evaluation of a claim (supported / refuted / unverifiable).

        Outcomes accumulate; the first one recorded is the claim's "first recorded
        outcome" (``Store.first_outcome``, view ``v_claim_status``).
        """
        if outcome not in CLAIM_OUTCOMES:
            raise ValueError(f"outcome must be one of {CLAIM_OUTCOMES}, got {outcome!r}")
        record = {
            "claim_id": claim_id,
            "outcome": outcome,
            "reason": reason,
            "stat_test_id": stat_test_id,
            "detail_json": _json_or_none(_to_plain(detail)),
        }
        with self._write() as conn:
            result = self._append_in(conn, "claim_outcome", {}, {"claim_outcomes": [record]})
        return result.ids["claim_outcomes"][0]

    # ---- small readers

    def _fetch_one(self, conn: Connection, table_name: str, **where) -> dict | None:
        t = table(table_name)
        stmt = select(t)
        for column, value in where.items():
            stmt = stmt.where(t.c[column] == value)
        row = conn.execute(stmt.limit(1)).mappings().first()
        return dict(row) if row is not None else None

    def _exists(self, conn: Connection, table_name: str, **where) -> bool:
        return self._fetch_one(conn, table_name, **where) is not None

    def _require(self, conn: Connection, table_name: str, what: str, **where) -> dict:
        row = self._fetch_one(conn, table_name, **where)
        if row is None:
            raise StoreError(f"{what} {', '.join(map(str, where.values()))} is not in the ledger")
        return row

    def get(self, table_name: str, **where) -> dict | None:
        """The first row of ``table_name`` matching ``column=value`` filters, as a dict."""
        if table_name not in ALL_TABLES:
            raise ValueError(f"unknown ledger table {table_name!r}")
        with self._read() as conn:
            return self._fetch_one(conn, table_name, **where)

    def rows_of(self, table_name: str, **where) -> list[dict]:
        """All rows of ``table_name`` matching the filters, ordered by id (seq for chain_entries)."""
        if table_name not in ALL_TABLES:
            raise ValueError(f"unknown ledger table {table_name!r}")
        t = table(table_name)
        stmt = select(t)
        for column, value in where.items():
            stmt = stmt.where(t.c[column] == value)
        stmt = stmt.order_by(t.c.seq if table_name == "chain_entries" else t.c.id)
        with self._read() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]

    def get_checkpoint(self, sha256: str) -> dict | None:
        return self.get("checkpoints", sha256=sha256)

    def lineage(self, sha256: str) -> list[dict]:
        """The checkpoint and its ancestors, nearest first (generation 0 = itself)."""
        result = self.query(
            "SELECT * FROM v_lineage WHERE checkpoint_sha256 = :sha ORDER BY generation", {"sha": sha256}
        )
        return result.records()

    def first_outcome(self, claim_id: str) -> dict | None:
        rows = self.rows_of("claim_outcomes", claim_id=claim_id)
        return rows[0] if rows else None

    # ---- Merkle head and proofs

    def leaf_hashes(self) -> list[str]:
        with self._read() as conn:
            return [row[0] for row in conn.execute(text("SELECT leaf_hash FROM chain_entries ORDER BY seq"))]

    def _recomputed_leaves(self) -> list[bytes]:
        with self._read() as conn:
            return [
                merkle.leaf_hash(row[0].encode("utf-8"))
                for row in conn.execute(text("SELECT payload FROM chain_entries ORDER BY seq"))
            ]

    def head(self) -> tuple[str, int]:
        """(Merkle root hex, number of entries) of the log as stored."""
        leaves = self.leaf_hashes()
        return merkle.merkle_root_hex(leaves), len(leaves)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[str]:
        """RFC 6962 consistency proof (hex) between the first old_size and new_size entries."""
        leaves = self._recomputed_leaves()
        return [p.hex() for p in merkle.consistency_proof(leaves, old_size, new_size)]

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
                False, old_root, old_size, new_root, new_size, (),
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

    # ---- full verification

    def verify_chain(self) -> ChainReport:
        """Recompute every leaf and entry hash, the sequence, and compare every domain row with its entry."""
        report = ChainReport()
        domain: dict[str, dict[int, dict[int, dict]]] = {}
        with self._read() as conn:
            prep = conn.dialect.identifier_preparer
            for table_name in DOMAIN_TABLES:
                columns = _COLUMNS[table_name]
                names = ", ".join(prep.quote(name) for name, _, _ in columns)
                sql = f"SELECT entry_seq, {names} FROM {prep.quote(table_name)}"
                grouped: dict[int, dict[int, dict]] = {}
                count = 0
                for raw in conn.exec_driver_sql(sql):
                    record = {name: _from_db(kind, value) for (name, kind, _), value in zip(columns, raw[1:])}
                    seq = raw[0]
                    rid = record["id"]
                    bucket = grouped.setdefault(seq, {})
                    if rid in bucket:
                        report.add(table_name, f"row id={rid}", "duplicate id")
                    bucket[rid] = record
                    count += 1
                domain[table_name] = grouped
                report.rows[table_name] = count

            leaves: list[bytes] = []
            prev = GENESIS_HASH
            expected_seq = 1
            result = conn.exec_driver_sql(
                "SELECT seq, kind, recorded_at, payload, leaf_hash, prev_hash, entry_hash "
                "FROM chain_entries ORDER BY seq"
            )
            for seq, kind, recorded_at, payload_text, leaf_stored, prev_stored, entry_stored in result:
                key = f"seq={seq}"
                report.n_entries += 1
                if seq != expected_seq:
                    report.add("chain_entries", key, f"expected seq {expected_seq}: entries are missing or renumbered")
                expected_seq = (seq if isinstance(seq, int) else expected_seq) + 1
                if not isinstance(payload_text, str):
                    report.add("chain_entries", key, "payload is not text")
                    payload_text = str(payload_text)
                leaf_bytes = merkle.leaf_hash(payload_text.encode("utf-8"))
                leaves.append(leaf_bytes)
                leaf = leaf_bytes.hex()
                if leaf_stored != leaf:
                    report.add("chain_entries", key, "leaf_hash does not match SHA-256(0x00 || payload)")
                if prev_stored != prev:
                    report.add("chain_entries", key, f"prev_hash {prev_stored} does not link to the previous entry_hash {prev}")
                expected_entry = entry_hash(prev, leaf)
                if entry_stored != expected_entry:
                    report.add("chain_entries", key, "entry_hash does not match SHA-256(prev_hash || leaf_hash)")
                prev = entry_stored if isinstance(entry_stored, str) and len(entry_stored) == 64 else expected_entry
                try:
                    body = json.loads(payload_text)
                except ValueError:
                    report.add("chain_entries", key, "payload is not JSON")
                    continue
                if not isinstance(body, dict):
                    report.add("chain_entries", key, "payload is not a JSON object")
                    continue
                if canonical_json(body) != payload_text:
                    report.add("chain_entries", key, "payload is not canonical JSON")
                if body.get("seq") != seq:
                    report.add("chain_entries", key, f"payload seq {body.get('seq')} differs from the column")
                if body.get("kind") != kind:
                    report.add("chain_entries", key, f"kind {kind!r} differs from the payload's {body.get('kind')!r}")
                if body.get("ts") != recorded_at:
                    report.add("chain_entries", key, f"recorded_at {recorded_at!r} differs from the payload's {body.get('ts')!r}")
                chained = body.get("records") or {}
                if not isinstance(chained, dict):
                    report.add("chain_entries", key, "payload records are not an object")
                    continue
                for table_name, recs in chained.items():
                    if table_name not in domain:
                        report.add("chain_entries", key, f"payload names unknown table {table_name!r}")
                        continue
                    bucket = domain[table_name].get(seq, {})
                    if not isinstance(recs, list):
                        report.add("chain_entries", key, f"payload records of {table_name} are not a list")
                        continue
                    ids = [rec.get("id") if isinstance(rec, dict) and type(rec.get("id")) is int else None for rec in recs]
                    stored_rows = [bucket.get(rid) for rid in ids]
                    # fast path: the whole batch at once (one C-encoded JSON document per side)
                    if (
                        all(row is not None for row in stored_rows)
                        and len(set(ids)) == len(ids)
                        and canonical_json(stored_rows) == canonical_json(recs)
                    ):
                        for rid in ids:
                            del bucket[rid]
                        continue
                    for rid, rec in zip(ids, recs):
                        stored = bucket.pop(rid, None)
                        if stored is None:
                            report.add(table_name, f"row id={rid}", f"recorded by chain entry {seq} but missing from the table")
                            continue
                        if canonical_json(stored) != canonical_json(rec):
                            fields = sorted(
                                name for name in set(stored) | set(rec)
                                if canonical_json(stored.get(name)) != canonical_json(rec.get(name))
                            )
                            detail = "; ".join(
                                f"{name}: table has {stored.get(name)!r}, chain has {rec.get(name)!r}" for name in fields
                            )
                            report.add(table_name, f"row id={rid}", f"differs from chain entry {seq} ({detail})")

            report.root = merkle.merkle_root(leaves).hex()
            for table_name, grouped in domain.items():
                for seq, bucket in grouped.items():
                    for rid in bucket:
                        report.add(table_name, f"row id={rid}", f"not recorded in the chain (entry_seq={seq})")
        return report

    # ---- read-only SQL for auditors

    def query(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None, *, read_only: bool = True) -> QueryResult:
        """Run one SQL statement and return its rows.

        ``read_only=True`` (the default, and what ``ledger query`` uses): only SELECT /
        WITH / EXPLAIN / VALUES / read-only PRAGMA statements are accepted, and on SQLite
        the connection runs with ``PRAGMA query_only=ON`` and an authorizer that denies
        every write, ATTACH and DDL. Parameters use the driver's style (``:name`` on SQLite).
        """
        if read_only:
            sql = check_read_only_sql(sql)
        with self.engine.connect() as conn:
            if not read_only:
                with conn.begin():
                    result = conn.exec_driver_sql(sql, params) if params is not None else conn.exec_driver_sql(sql)
                    if result.returns_rows:
                        return QueryResult(list(result.keys()), [tuple(r) for r in result])
                    return QueryResult([], [])
            if self.dialect == "sqlite":
                dbapi = conn.connection.dbapi_connection
                dbapi.execute("PRAGMA query_only = ON")
                dbapi.set_authorizer(_read_only_authorizer)
                try:
                    with conn.begin():
                        result = conn.exec_driver_sql(sql, params) if params is not None else conn.exec_driver_sql(sql)
                        columns = list(result.keys()) if result.returns_rows else []
                        rows = [tuple(r) for r in result] if result.returns_rows else []
                except Exception as exc:
                    if "not authorized" in str(exc) or "readonly" in str(exc).lower():
                        raise ReadOnlyViolation(f"read-only query refused by the database: {exc}") from exc
                    raise
                finally:
                    dbapi.set_authorizer(None)
                    dbapi.execute("PRAGMA query_only = OFF")
                return QueryResult(columns, rows)
            trans = conn.begin()
            try:
                if self.dialect == "postgresql":
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                result = conn.exec_driver_sql(sql, params) if params is not None else conn.exec_driver_sql(sql)
                columns = list(result.keys()) if result.returns_rows else []
                rows = [tuple(r) for r in result] if result.returns_rows else []
            finally:
                trans.rollback()
            return QueryResult(columns, rows)

    def query_df(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None):
        """``query`` as a pandas DataFrame (read-only)."""
        return self.query(sql, params).to_dataframe()


def open_store(url: str | None = None, create: bool = True) -> Store:
    """Open (and for a new database, create) the ledger at ``url`` (default ``default_db_url()``).

    A new database is migrated to the current schema; an existing one must already be at
    it, else ``SchemaVersionMismatch`` says what to run.
    """
    url = normalize_url(url) if url is not None else default_db_url()
    engine = make_engine(url)
    try:
        ensure_schema(engine, url=url, create=create)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, url)


def _gate_action(action: str) -> str:
    if action not in ("stop", "flag"):
        raise ValueError(f"gate action must be 'stop' or 'flag', got {action!r}")
    return action
