"""The table side of the chain check: every stored domain row against the record its chain entry holds.

The store gives every row of an entry ids above those of all earlier entries, so read in id order
the rows of a table arrive entry by entry. ``TableStream`` reads them off the driver's cursor as
plain tuples (no SQLAlchemy row per row) and hands each entry its next rows: memory holds one
entry's rows at a time however long the ledger is. An entry whose next rows are exactly its
records (same values, same ids) and all the rows whose ``entry_seq`` names it (their count and
id range, from one grouped query) is settled by comparing tuples in C; anything else is compared
row by row by id and reported field by field. A row met before the entry that records it, or
recorded by none, waits in ``pending`` and is reported at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ledger.canonical import canonical_json
from ledger.store.records import COLUMNS, value_from_db

if TYPE_CHECKING:
    from ledger.store.chain_report import ChainReport


def select_sql(conn: Connection, table_name: str, names: list[str], order_by: str | None, where: str = "") -> str:
    prep = conn.dialect.identifier_preparer
    sql = f"SELECT {', '.join(prep.quote(name) for name in names)} FROM {prep.quote(table_name)}"
    sql += f" WHERE {where}" if where else ""
    return sql + (f" ORDER BY {prep.quote(order_by)}" if order_by is not None else "")


def in_range(column: str, after: int | None, through: int | None) -> str:
    """SQL for ``after < column <= through`` (an open end where None). The first range also takes NULL
    and the last everything above (SQLite sorts text after numbers): every row is in exactly one."""
    if after is None and through is None:
        return ""
    if after is None:
        return f"({column} <= {int(through or 0)} OR {column} IS NULL)"
    if through is None:
        return f"{column} > {int(after)}"
    return f"{column} > {int(after)} AND {column} <= {int(through)}"


def entries_written(conn: Connection, table_name: str) -> dict[Any, tuple[int, Any, Any]]:
    """entry seq -> (rows, first id, last id) of one table: one pass over its entry_seq index."""
    quoted = conn.dialect.identifier_preparer.quote(table_name)
    sql = f"SELECT entry_seq, COUNT(*), MIN(id), MAX(id) FROM {quoted} GROUP BY entry_seq"
    return {seq: (count, low, high) for seq, count, low, high in conn.exec_driver_sql(sql)}


def open_cursor(conn: Connection, table_name: str, names: list[str], order_by: str, where: str = "") -> Any:
    """A DBAPI cursor over the SELECT, in this connection's transaction (its snapshot): a server-side
    cursor on PostgreSQL, SQLite's own (which streams) else. Rows come back as the driver's tuples,
    without SQLAlchemy's type processing (which would turn a tampered SQLite boolean 2 into True) and
    without a Python object per row beyond the tuple."""
    dbapi: Any = conn.connection.dbapi_connection  # sqlite3 or psycopg
    if conn.dialect.name == "postgresql":
        cursor = dbapi.cursor(name=f"ledger_verify_{table_name}")
        cursor.itersize = 10_000
    else:
        cursor = dbapi.cursor()
    cursor.execute(select_sql(conn, table_name, names, order_by, where))
    return cursor


def stream_select(
    conn: Connection, table_name: str, names: list[str], order_by: str, where: str = ""
) -> Iterator[tuple]:
    cursor = open_cursor(conn, table_name, names, order_by, where)
    try:
        yield from cursor
    finally:
        cursor.close()


class TableStream:
    """One domain table's rows (its chained columns) in id order, those with ids in ``ids`` (after, through]
    when the chain is checked in parts; ``written`` is ``entries_written`` of the table."""

    def __init__(
        self,
        conn: Connection,
        table_name: str,
        written: dict[Any, tuple[int, Any, Any]],
        ids: tuple[int | None, int | None] = (None, None),
    ) -> None:
        self.table_name = table_name
        self.names = [name for name, _, _ in COLUMNS[table_name]]
        self.kinds = [kind for _, kind, _ in COLUMNS[table_name]]
        self._id_at = self.names.index("id")
        self._record_values = itemgetter(*self.names)  # a chained record's values, in column order
        prep = conn.dialect.identifier_preparer
        self._conn, self._quoted = conn, prep.quote(table_name)
        self.written = written
        self._cursor = open_cursor(conn, table_name, self.names, order_by="id", where=in_range("id", *ids))
        self._next: tuple | None = None  # a row read ahead by ``take_through``
        self.pending: dict[Any, tuple] = {}
        self.duplicates: list[Any] = []
        self.count = 0

    def matches(self, seq: int, records: list) -> bool:
        """The next ``len(records)`` rows are exactly these records and all the rows entry ``seq`` wrote
        (consumed if so; kept in ``pending`` for the row-by-row comparison if not)."""
        if self._next is not None or self.pending or not records:
            return False
        rows = self._cursor.fetchmany(len(records))
        self.count += len(rows)
        try:
            ok = (
                len(rows) == len(records)
                and self.written.get(seq) == (len(rows), rows[0][self._id_at], rows[-1][self._id_at])
                and set(map(len, records)) == {len(self.names)}
                and list(map(self._record_values, records)) == rows
            )
        except (KeyError, TypeError):  # a record that is not an object, or lacks a column
            ok = False
        if not ok:
            self.count -= len(rows)
            for row in rows:
                self._keep(row)
        return ok

    def take_through(self, last_id: int) -> None:
        """Move every row with an id up to ``last_id`` into ``pending``."""
        row = self._next if self._next is not None else self._cursor.fetchone()
        at = self._id_at
        while row is not None and not (type(row[at]) is int and row[at] > last_id):  # a tampered id: kept
            self._keep(row)
            row = self._cursor.fetchone()
        self._next = row

    def drain(self) -> None:
        if self._next is not None:
            self._keep(self._next)
        for row in self._cursor:
            self._keep(row)
        self._next = None
        self._cursor.close()

    def entry_seq_of(self, rid: Any) -> Any:
        """The stored entry_seq of one row (the row-by-row path only)."""
        return self._conn.execute(text(f"SELECT entry_seq FROM {self._quoted} WHERE id = :id"), {"id": rid}).scalar()

    def _keep(self, row: tuple) -> None:
        self.count += 1
        rid = row[self._id_at]
        if rid in self.pending:  # only where the primary key was dropped
            self.duplicates.append(rid)
        self.pending[rid] = tuple(row)

    def as_record(self, row: tuple) -> dict:
        return {name: value_from_db(kind, value) for name, kind, value in zip(self.names, self.kinds, row)}


def check_entry_records(report: ChainReport, key: str, seq: int, body: dict, streams: dict[str, TableStream]) -> None:
    """Every record the entry lists matches the stored row (and the row names this entry)."""
    chained = body.get("records") or {}
    if not isinstance(chained, dict):
        report.add("chain_entries", key, "payload records are not an object")
        return
    for table_name, records in chained.items():
        if table_name not in streams:
            report.add("chain_entries", key, f"payload names unknown table {table_name!r}")
            continue
        if not isinstance(records, list):
            report.add("chain_entries", key, f"payload records of {table_name} are not a list")
            continue
        if not streams[table_name].matches(seq, records):
            compare_row_by_row(report, streams[table_name], seq, records)


def compare_row_by_row(report: ChainReport, stream: TableStream, seq: int, records: list) -> None:
    ids: list[Any] = [
        rec.get("id") if isinstance(rec, dict) and type(rec.get("id")) is int else None for rec in records
    ]
    known = [rid for rid in ids if rid is not None]
    if known:
        stream.take_through(max(known))
    table_name = stream.table_name
    for rid, rec in zip(ids, records):
        row = stream.pending.pop(rid, None)
        if row is None:
            report.add(table_name, f"row id={rid}", f"recorded by chain entry {seq} but missing from the table")
            continue
        stored_seq = stream.entry_seq_of(rid)
        if stored_seq != seq:
            report.add(table_name, f"row id={rid}", f"entry_seq is {stored_seq!r}, but chain entry {seq} records it")
        stored = stream.as_record(row)
        if canonical_json(stored) != canonical_json(rec):
            detail = _field_differences(stored, rec if isinstance(rec, dict) else {})
            report.add(table_name, f"row id={rid}", f"differs from chain entry {seq} ({detail})")


def _field_differences(row: dict, rec: dict) -> str:
    names = set(row) | set(rec)
    fields = sorted(name for name in names if canonical_json(row.get(name)) != canonical_json(rec.get(name)))
    return "; ".join(f"{name}: table has {row.get(name)!r}, chain has {rec.get(name)!r}" for name in fields)


def report_unchained_rows(report: ChainReport, streams: dict[str, TableStream]) -> None:
    """Rows left after the walk were recorded by no entry."""
    for table_name, stream in streams.items():
        stream.drain()
        report.rows[table_name] = stream.count
        for rid in stream.duplicates:
            report.add(table_name, f"row id={rid}", "duplicate id")
        for rid in stream.pending:
            report.add(table_name, f"row id={rid}", f"not recorded in the chain (entry_seq={stream.entry_seq_of(rid)})")
