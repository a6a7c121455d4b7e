"""``Store.query``: the auditor's own SQL (``ledger query``), held read-only.

Only one SELECT / WITH / EXPLAIN / VALUES / read-only PRAGMA statement is accepted;
on SQLite the connection also runs with ``PRAGMA query_only=ON`` and an authorizer that
denies every write, ATTACH and DDL, and on PostgreSQL in a READ ONLY transaction that
is rolled back. The ledger's own code reads through the typed read side instead
(``ledger/store/reads/``).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.store.base import StoreBase
from ledger.store.engine import StoreError


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


_READ_PRAGMAS_NO_ARG = {
    "integrity_check",
    "quick_check",
    "foreign_key_check",
    "journal_mode",
    "foreign_keys",
    "user_version",
    "schema_version",
    "application_id",
    "database_list",
    "compile_options",
    "page_count",
    "page_size",
    "freelist_count",
    "encoding",
    "busy_timeout",
    "query_only",
    "table_list",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "data_version",
    "synchronous",
    "auto_vacuum",
    "wal_autocheckpoint",
    "cache_size",
}
_READ_PRAGMAS_ARG = {
    "table_info",
    "table_xinfo",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "integrity_check",
    "quick_check",
    "foreign_key_check",
    "table_list",
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


class ReadOnlySQL(StoreBase):
    def query(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None, *, read_only: bool = True
    ) -> QueryResult:
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
                dbapi: Any = conn.connection.dbapi_connection  # sqlite3.Connection: set_authorizer
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
