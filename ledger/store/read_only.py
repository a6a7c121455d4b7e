"""``Store.query``: the auditor's own SQL (``ledger query``), held read-only.

Only one SELECT / WITH / EXPLAIN / VALUES / read-only PRAGMA statement is accepted;
on SQLite the connection also runs with ``PRAGMA query_only=ON`` and an authorizer that
denies every write, ATTACH and DDL, and on PostgreSQL in a READ ONLY transaction that
is rolled back (a write the statement filter let through, e.g. ``EXPLAIN ANALYZE DELETE``,
is refused by the server and reported as ``ReadOnlyViolation``). A READ ONLY transaction
does not stop server functions (advisory locks, settings, files, other sessions), so on
PostgreSQL those are refused by name first, on the server's own reading of the statement,
which also must be one statement (``pg_refusals``). The ledger's own code reads through
the typed read side instead (``ledger/store/lookups/``).

Rows read the same on every backend: PostgreSQL's booleans come back as 0/1 (SQLite has
no boolean type) and its NUMERIC as floats (``make_engine``).

Parameters: a mapping binds ``:name`` placeholders on every backend (SQLAlchemy's
``text()``); a sequence goes to the driver in its own positional style (``?`` on SQLite,
``%s`` on PostgreSQL); without parameters the statement reaches the driver verbatim, so
a literal ``%`` or ``':word'`` needs no escaping.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import DBAPIError

from ledger.store.base import Database
from ledger.store.engine import StoreError, database_refusal
from ledger.store.pg_refusals import postgres_refusal


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
# Statements that exist and may write (or change the session): refused (exit 3). Any other first word is
# not a statement at all, a typo such as SELEC: bad input (exit 2).
_WRITING_FIRST = {
    "INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT", "MERGE", "CREATE", "DROP", "ALTER", "TRUNCATE",
    "ATTACH", "DETACH", "VACUUM", "REINDEX", "ANALYZE", "ANALYSE", "BEGIN", "COMMIT", "END", "ROLLBACK",
    "SAVEPOINT", "RELEASE", "GRANT", "REVOKE", "COPY", "SET", "RESET", "CALL", "DO", "LOCK", "COMMENT",
    "CLUSTER", "REFRESH", "DISCARD", "LISTEN", "NOTIFY", "PREPARE", "EXECUTE", "DEALLOCATE", "DECLARE",
    "FETCH", "MOVE", "CLOSE", "SECURITY", "LOAD", "IMPORT", "CHECKPOINT", "ABORT", "START",
}  # fmt: skip
# A string literal (kept as it is), or a comment (dropped): one pass, so '--' inside a string is text.
_STRINGS_OR_COMMENTS = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|--[^\n]*(?:\n|$)|/\*.*?\*/", re.S)


class ReadOnlyViolation(StoreError):
    """``Store.query`` refused a statement that could write."""


class InvalidQuery(StoreError):
    """``Store.query`` was given something that is not one SQL statement it can run (bad input)."""


class QueryTimeout(StoreError):
    """A ``Store.query`` statement ran past its time limit and was stopped."""


def _strip_comments(sql: str) -> str:
    return _STRINGS_OR_COMMENTS.sub(lambda m: m.group(1) if m.group(1) is not None else " ", sql)


def check_read_only_sql(sql: str) -> str:
    """Refuse anything but one SELECT / WITH / EXPLAIN / VALUES / read-only PRAGMA statement."""
    stripped = _strip_comments(sql).strip()
    body = stripped.rstrip(";").strip()
    if not body:
        raise InvalidQuery("empty query")
    if ";" in _strip_strings(body):
        raise ReadOnlyViolation("only one statement per query")
    first = re.match(r"[A-Za-z]+", body)
    keyword = first.group(0).upper() if first else ""
    if keyword not in _ALLOWED_FIRST and keyword not in _WRITING_FIRST:
        raise InvalidQuery(
            f"not an SQL statement: {keyword or body[:20]!r} (ledger query runs one SELECT, WITH, EXPLAIN, VALUES "
            "or read-only PRAGMA statement)"
        )
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


# SQLSTATE 25006 read_only_sql_transaction (a write in the READ ONLY transaction), 25001
# active_sql_transaction (set_config('transaction_read_only', 'off') after the first query).
_PG_READ_ONLY_STATES = {"25006", "25001"}

Params = Mapping[str, Any] | Sequence[Any] | None


def _execute(conn: Connection, sql: str, params: Params) -> CursorResult:
    if params is None:
        return conn.exec_driver_sql(sql, execution_options={"no_parameters": True})
    if isinstance(params, Mapping):
        return conn.execute(text(sql), dict(params))
    return conn.exec_driver_sql(sql, tuple(params))  # positional: the driver's own style


def _result(result: CursorResult, *, booleans_as_int: bool = False) -> QueryResult:
    if not result.returns_rows:
        return QueryResult([], [])
    rows = [tuple(row) for row in result]
    if booleans_as_int:
        rows = [tuple(int(v) if type(v) is bool else v for v in row) for row in rows]
    return QueryResult(list(result.keys()), rows)


def _timed_out(timeout_s: float | None) -> QueryTimeout:
    return QueryTimeout(f"query stopped after {timeout_s:g} s, its time limit (raise it with --timeout SECONDS)")


class ReadOnlySQL:
    """The auditor's read-only SQL (``ledger query``)."""

    def __init__(self, db: Database):
        self.db = db

    def query(
        self, sql: str, params: Params = None, *, read_only: bool = True, timeout_s: float | None = None
    ) -> QueryResult:
        """Run one SQL statement and return its rows.

        ``read_only=True`` (the default, and what ``ledger query`` uses): only SELECT /
        WITH / EXPLAIN / VALUES / read-only PRAGMA statements are accepted, and on SQLite
        the connection runs with ``PRAGMA query_only=ON`` and an authorizer that denies
        every write, ATTACH and DDL; on PostgreSQL in a READ ONLY transaction, rolled back,
        with booleans returned as 0/1 as SQLite returns them, after refusing by name the server
        functions such a transaction does not stop (``pg_refusals``). Named parameters (a mapping)
        are ``:name`` on every backend. ``timeout_s``: a read-only statement running longer is stopped
        (SQLite: a progress handler; PostgreSQL: ``statement_timeout``) and raises ``QueryTimeout``.
        """
        if read_only:
            sql = check_read_only_sql(sql)
            if self.db.dialect == "postgresql" and (reason := postgres_refusal(sql)):
                raise ReadOnlyViolation(f"read-only query refused: {reason}")
        with self.db.engine.connect() as conn:
            if not read_only:
                with conn.begin():
                    return _result(_execute(conn, sql, params), booleans_as_int=self.db.dialect != "sqlite")
            if self.db.dialect == "sqlite":
                return self._sqlite_read_only(conn, sql, params, timeout_s)
            trans = conn.begin()
            try:
                if self.db.dialect == "postgresql":
                    conn.execute(text("SET TRANSACTION READ ONLY"))
                    # the strings pg_refusals read are the strings the server reads: no backslash escapes in '...'
                    conn.execute(text("SET LOCAL standard_conforming_strings = on"))
                    if timeout_s is not None:
                        conn.execute(text(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}"))
                # booleans as SQLite stores them (0/1): an auditor's query reads the same on every backend
                return _result(_execute(conn, sql, params), booleans_as_int=True)
            except DBAPIError as exc:
                state = getattr(exc.orig, "sqlstate", None)
                if state in _PG_READ_ONLY_STATES:
                    raise ReadOnlyViolation(
                        f"read-only query refused by the database: {database_refusal(exc)}"
                    ) from exc
                if state == "57014":  # query_canceled: the statement_timeout
                    raise _timed_out(timeout_s) from exc
                raise
            finally:
                trans.rollback()

    def _sqlite_read_only(self, conn: Connection, sql: str, params: Params, timeout_s: float | None) -> QueryResult:
        dbapi: Any = conn.connection.dbapi_connection  # sqlite3.Connection: set_authorizer
        dbapi.execute("PRAGMA query_only = ON")
        dbapi.set_authorizer(_read_only_authorizer)
        if timeout_s is not None:  # SQLite has no statement timeout: a handler called every 10k VM steps stops it
            deadline = time.monotonic() + timeout_s
            dbapi.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            with conn.begin():
                return _result(_execute(conn, sql, params))
        except Exception as exc:
            # the driver's own first line: SQLAlchemy's wrapper adds the statement and a link to its docs
            reason = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0]
            if "not authorized" in reason or "readonly" in reason.lower():
                raise ReadOnlyViolation(f"read-only query refused by the database: {reason}") from exc
            if timeout_s is not None and "interrupted" in str(exc):
                raise _timed_out(timeout_s) from exc
            raise
        finally:
            dbapi.set_progress_handler(None, 0)
            dbapi.set_authorizer(None)
            dbapi.execute("PRAGMA query_only = OFF")

    def query_df(self, sql: str, params: Params = None):
        """``query`` as a pandas DataFrame (read-only)."""
        return self.query(sql, params).to_dataframe()
