"""The backends the store runs on, for tests: a SQLite file, or a fresh PostgreSQL database.

The PostgreSQL cases need a server: `bash tests/run.sh` starts a throwaway one with `.ci/postgres.sh`,
which exports LEDGER_TEST_POSTGRES_URL. Each case
gets a database of its own (``CREATE DATABASE ledger_<random>``, dropped afterwards), so
xdist workers never share one. Without the variable the PostgreSQL cases fail and say how
to start the server: a backend that is not tested is a failure, not a skip.

``behind_the_stores_back(url)`` is the tamperer's connection, someone with the database's
own rights: on SQLite a plain connection (no foreign keys) with the append-only triggers
dropped; on PostgreSQL a transaction with ``session_replication_role = replica`` (no
triggers, so no append-only refusal and no foreign-key checks; the test server's user is
a superuser). Statements go through SQLAlchemy ``text()`` with bound parameters.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import NullPool

from ledger.store import ALL_TABLES

BACKENDS = ("sqlite", "postgresql")
ENV_VAR = "LEDGER_TEST_POSTGRES_URL"

_admin: Engine | None = None


def postgres_base_url() -> URL:
    """The server the PostgreSQL cases use (its database is only the admin connection's)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        pytest.fail(
            f"{ENV_VAR} is not set: the PostgreSQL cases of the store tests need a server. `bash tests/run.sh` "
            f'starts a throwaway one (`eval "$(bash .ci/postgres.sh)"` alone exports {ENV_VAR}), or point '
            f"{ENV_VAR} at a postgresql+psycopg:// URL whose user may CREATE DATABASE.",
            pytrace=False,
        )
    return make_url(value)


def _admin_engine() -> Engine:
    global _admin
    if _admin is None:
        _admin = create_engine(postgres_base_url(), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    return _admin


def postgres_url(name: str) -> str:
    return postgres_base_url().set(database=name).render_as_string(hide_password=False)


def create_postgres_database(template: str | None = None) -> str:
    """A new empty database (or a copy of ``template``'s database), as a URL."""
    name = f"ledger_{uuid.uuid4().hex[:16]}"
    statement = f'CREATE DATABASE "{name}"'
    if template is not None:
        statement += f' TEMPLATE "{make_url(template).database}"'
    with _admin_engine().connect() as conn:
        conn.execute(text(statement))
    return postgres_url(name)


def drop_postgres_database(url: str) -> None:
    with _admin_engine().connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))


def backend_of(url: str) -> str:
    return make_url(url).get_backend_name()


@contextmanager
def fresh_database(backend: str, folder: Path, template: str | None = None) -> Iterator[str]:
    """A database URL of ``backend`` for one test: empty, or a copy of ``template`` (a URL of the same backend)."""
    if backend == "sqlite":
        path = folder / f"ledger-{uuid.uuid4().hex[:8]}.db"
        if template is not None:
            source, target = sqlite3.connect(make_url(template).database), sqlite3.connect(path)
            source.backup(target)
            target.close()
            source.close()
        yield f"sqlite:///{path}"
        return
    url = create_postgres_database(template)
    try:
        yield url
    finally:
        drop_postgres_database(url)


# --------------------------------------------------------------------------- tampering


def drop_append_only_triggers(conn: Connection, tables=ALL_TABLES) -> None:
    for table in tables:
        if conn.dialect.name == "sqlite":
            for action in ("update", "delete"):
                conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_{action}"))
        else:
            conn.execute(text(f'DROP TRIGGER IF EXISTS {table}_append_only ON "{table}"'))


@contextmanager
def behind_the_stores_back(url: str) -> Iterator[Connection]:
    """A plain connection (not the store's) that may edit anything; committed on exit."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL session_replication_role = replica"))
            else:
                drop_append_only_triggers(conn)
            yield conn
    finally:
        engine.dispose()


def execute_sql(url: str, statement: str, params: dict | None = None) -> None:
    """One statement on a plain connection of its own (not the store's)."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement), params or {})
    finally:
        engine.dispose()
