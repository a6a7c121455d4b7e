"""What every part of the store shares: the engine, its transactions, and row look-ups by key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Select, select, text
from sqlalchemy.engine import Connection, Engine

from ledger.store.engine import WRITE_OPTION, StoreError

try:
    import fcntl
except ImportError:  # not on Windows: SQLite registrations there are not serialised across processes
    fcntl = None  # type: ignore[assignment]
from ledger.store.models import ALL_TABLES, table

R = TypeVar("R")


class Database:
    """A ledger database's connection handling, shared by every part of ``Store`` (each holds it as ``db``)."""

    def __init__(self, engine: Engine, url: str):
        self.engine = engine
        self.url = url

    # ---- lifecycle

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction, writers one at a time: SQLite ``BEGIN IMMEDIATE``; PostgreSQL
        (READ COMMITTED) ``LOCK TABLE chain_entries IN EXCLUSIVE MODE`` first, so the writer
        then sees every entry committed before it and readers are never blocked."""
        with self.engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                if self.dialect == "postgresql":
                    conn.execute(text("LOCK TABLE chain_entries IN EXCLUSIVE MODE"))
                yield conn

    @contextmanager
    def exclusive(self, purpose: str) -> Iterator[None]:
        """Hold a ledger-wide lock across several write transactions (a registration is many appends, and
        two processes registering at once must produce one): an ``flock`` on the SQLite file (independent
        of SQLite's own byte-range locks, so its transactions go on underneath), a session advisory lock on
        PostgreSQL. Other writers are not blocked; only others taking the same lock wait."""
        if self.dialect == "postgresql":
            key = int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:7], "big")
            with self.engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                    conn.commit()
            return
        database = self.engine.url.database
        if self.dialect != "sqlite" or not database or database == ":memory:" or fcntl is None:
            yield  # an in-memory database has one process
            return
        with open(database, "rb") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(held.fileno(), fcntl.LOCK_UN)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One read transaction over one snapshot (SQLite's WAL read transaction; PostgreSQL
        REPEATABLE READ): a read of several tables never sees half of a concurrent append."""
        with self.engine.connect() as conn:
            if self.dialect == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def records(self, stmt: Select, record: type[R]) -> list[R]:
        """The rows of a Core select as typed records (the select's labels are the record's fields)."""
        with self.read() as conn:
            return [record(**row._mapping) for row in conn.execute(stmt)]

    def entry_data(self, kind: str) -> list[tuple[int, dict]]:
        """(seq, data) of every free chain entry of ``kind`` (e.g. ``registration``), in chain order."""
        c = table("chain_entries")
        stmt = select(c.c.seq, c.c.payload).where(c.c.kind == kind).order_by(c.c.seq)
        with self.read() as conn:
            return [(seq, json.loads(payload)["data"]) for seq, payload in conn.execute(stmt)]

    # ---- rows by key

    def fetch_one(self, conn: Connection, table_name: str, **where) -> dict | None:
        t = table(table_name)
        stmt = select(t)
        for column, value in where.items():
            stmt = stmt.where(t.c[column] == value)
        row = conn.execute(stmt.limit(1)).mappings().first()
        return dict(row) if row is not None else None

    def fetch_all(self, conn: Connection, table_name: str, **where) -> list[dict]:
        t = table(table_name)
        stmt = select(t)
        for column, value in where.items():
            stmt = stmt.where(t.c[column] == value)
        return [dict(row) for row in conn.execute(stmt).mappings()]

    def exists(self, conn: Connection, table_name: str, **where) -> bool:
        return self.fetch_one(conn, table_name, **where) is not None

    def require(self, conn: Connection, table_name: str, what: str, **where) -> dict:
        row = self.fetch_one(conn, table_name, **where)
        if row is None:
            raise StoreError(f"{what} {', '.join(map(str, where.values()))} is not in the ledger")
        return row

    def get(self, table_name: str, **where) -> dict | None:
        """The first row of ``table_name`` matching ``column=value`` filters, as a dict."""
        if table_name not in ALL_TABLES:
            raise ValueError(f"unknown ledger table {table_name!r}")
        with self.read() as conn:
            return self.fetch_one(conn, table_name, **where)

    def rows_of(self, table_name: str, **where) -> list[dict]:
        """All rows of ``table_name`` matching the filters, ordered by id (seq for chain_entries)."""
        if table_name not in ALL_TABLES:
            raise ValueError(f"unknown ledger table {table_name!r}")
        t = table(table_name)
        stmt = select(t)
        for column, value in where.items():
            stmt = stmt.where(t.c[column] == value)
        stmt = stmt.order_by(t.c.seq if table_name == "chain_entries" else t.c.id)
        with self.read() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]

    def get_checkpoint(self, sha256: str) -> dict | None:
        return self.get("checkpoints", sha256=sha256)
