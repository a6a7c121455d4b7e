"""Engine set-up and schema migrations.

* ``default_db_url()`` -- ``$LEDGER_DB`` or ``sqlite:///runs/ledger.db``.
* ``make_engine(url)`` -- a SQLite or PostgreSQL URL (any SQLAlchemy URL is tried). For
  SQLite every connection gets ``journal_mode=WAL``, ``foreign_keys=ON`` and a 30 s
  ``busy_timeout``; the driver's own transaction handling is switched off and the store
  emits ``BEGIN`` itself (``BEGIN IMMEDIATE`` for writes, so that concurrent writers queue
  on the busy timeout instead of failing on a stale snapshot). PostgreSQL goes through
  psycopg 3 (``postgresql://`` means ``postgresql+psycopg://``; ``pip install
  'ledger[postgres]'``), with a 10 s connect timeout and ``numeric`` results read as
  floats, as SQLite returns them. A URL that cannot be used (malformed, unknown dialect,
  driver not installed) raises ``DatabaseUnavailable`` with a one-line reason.
* ``check_connection(engine, url)`` -- connect once; ``DatabaseUnavailable`` says why not.
* ``display_url(url)`` -- the URL with its password hidden: every message uses it.
* ``upgrade(url)`` -- run the Alembic migrations to head (``ledger db upgrade``).
* ``check_revision(engine)`` -- raise ``SchemaVersionMismatch`` unless the database
  is at the revision this code expects.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import create_engine, event, exc, inspect, text
from sqlalchemy.engine import URL, Engine, make_url

DEFAULT_DB_URL = "sqlite:///runs/ledger.db"
BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

#: Execution option that makes the SQLite ``BEGIN`` an ``BEGIN IMMEDIATE``.
WRITE_OPTION = "ledger_begin_immediate"
#: PostgreSQL advisory lock taken by a migration ("ledger" in ASCII), the counterpart of BEGIN IMMEDIATE.
MIGRATION_LOCK_KEY = 0x6C6564676572


class StoreError(RuntimeError):
    """A ledger database cannot be used as asked."""


class DatabaseUnavailable(StoreError):
    """The database at a URL cannot be reached: a malformed URL, an unknown dialect, a driver that
    is not installed, or a server that refuses the connection. The message is one line and
    never shows the URL's password."""


def database_refusal(exc: BaseException) -> str | None:
    """The driver's one line when ``exc`` is the database refusing (locked, a damaged file, a dropped
    connection), without SQLAlchemy's statement, parameters and link; None for anything else."""
    from sqlalchemy.exc import DBAPIError

    if not isinstance(exc, DBAPIError):
        return None
    original = exc.orig if exc.orig is not None else exc
    text = str(original).strip()
    return text.splitlines()[0] if text else type(original).__name__


class SchemaVersionMismatch(StoreError):
    """The database is at another schema revision than this code expects."""

    def __init__(self, message: str, *, url: str, database_revision: str | None, expected_revision: str):
        super().__init__(message)
        self.url = url
        self.database_revision = database_revision
        self.expected_revision = expected_revision


def default_db_url() -> str:
    """``$LEDGER_DB`` if set (a URL, or a bare file path taken as SQLite), else ``sqlite:///runs/ledger.db``."""
    value = os.environ.get("LEDGER_DB", "").strip()
    if not value:
        return DEFAULT_DB_URL
    return normalize_url(value)


def normalize_url(url_or_path: str | os.PathLike) -> str:
    """Accept a SQLAlchemy URL or a plain file path (taken as a SQLite file)."""
    text = str(url_or_path)
    if "://" in text:
        return text
    return "sqlite:///" + text


_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def display_url(url: str | URL) -> str:
    """``url`` as messages show it: the password (if any) as ``***``."""
    try:
        return (url if isinstance(url, URL) else make_url(str(url))).render_as_string(hide_password=True)
    except (exc.ArgumentError, ValueError):
        return _PASSWORD.sub(r"\1***@", str(url))


def parse_url(url: str) -> URL:
    """The parsed URL, or ``DatabaseUnavailable`` for one SQLAlchemy cannot parse."""
    try:
        return make_url(url)
    except (exc.ArgumentError, ValueError) as error:
        reason = "the port is not a number" if "invalid literal for int()" in str(error) else _first_line(error)
        raise DatabaseUnavailable(
            f"not a database URL: {display_url(url)!r} ({reason}); "
            "expected sqlite:///PATH or postgresql+psycopg://USER@HOST[:PORT]/DATABASE"
        ) from None


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(getattr(error, "orig", None) or error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def is_sqlite(url_or_engine) -> bool:
    if isinstance(url_or_engine, Engine):
        return url_or_engine.dialect.name == "sqlite"
    return parse_url(str(url_or_engine)).get_backend_name() == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    parsed = parse_url(url)
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _is_wal_file(path: Path) -> bool:
    """Bytes 18 and 19 of a SQLite header are 2 in WAL mode (1 for a rollback journal)."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"


def make_engine(url: str | None = None, *, read_only: bool = False, **kwargs) -> Engine:
    """Create an engine for ``url`` (default ``default_db_url()``) with the ledger's SQLite or PostgreSQL settings.

    Nothing is connected yet (``check_connection`` does); a URL that cannot be used at all
    raises ``DatabaseUnavailable``. ``read_only`` opens a SQLite file ``mode=ro`` (``immutable`` where it is in
    WAL mode with no writer), leaves its journal mode as it is and sets ``query_only``: not a byte of the folder
    changes; PostgreSQL sessions get ``default_transaction_read_only``.
    """
    url = normalize_url(url) if url is not None else default_db_url()
    if is_sqlite(url):
        path = _sqlite_file(url)
        target: str | URL = url
        if path is not None and path.exists() and not path.is_file():  # a FIFO or device would block the open
            raise DatabaseUnavailable(f"cannot use {display_url(url)}: {path} is not a regular file, not a database")
        if read_only and path is not None:
            # Read-only opens the file read-only and creates nothing beside it. A WAL-mode file with no -wal
            # beside it has no writer and nothing unmerged: immutable (no lock, no -shm). With a -wal there
            # (a run writing now) mode=ro reads through the writer's -wal and -shm, which already exist.
            query = {"mode": "ro", "uri": "true"}
            if _is_wal_file(path) and not Path(f"{path}-wal").exists():
                query["immutable"] = "1"
            target = URL.create("sqlite", database=f"file:{quote(str(path.resolve()))}", query=query)
        elif not read_only and path is not None and path.parent and not path.parent.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise DatabaseUnavailable(
                    f"cannot connect to the database at {display_url(url)}: "
                    f"cannot create its folder {path.parent}: {error.strerror or error}"
                ) from None
        connect_args = dict(kwargs.pop("connect_args", {}) or {})
        connect_args.setdefault("timeout", BUSY_TIMEOUT_MS / 1000)
        engine = _create(target, connect_args=connect_args, **kwargs)
        _install_sqlite_events(engine, read_only=read_only)
        return engine
    parsed = parse_url(url)
    if parsed.drivername == "postgresql":  # the ledger's PostgreSQL driver is psycopg 3, whatever SQLAlchemy's default
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "postgresql":
        connect_args = dict(kwargs.pop("connect_args", {}) or {})
        if "connect_timeout" not in parsed.query:
            connect_args.setdefault("connect_timeout", PG_CONNECT_TIMEOUT_S)
        if read_only:
            connect_args["options"] = (connect_args.get("options", "") + " -c default_transaction_read_only=on").strip()
        engine = _create(parsed, connect_args=connect_args, **kwargs)
        if engine.dialect.driver == "psycopg":
            _install_psycopg_events(engine)
        return engine
    return _create(parsed, **kwargs)


def _create(url: str | URL, **kwargs) -> Engine:
    """``create_engine``, with a one-line ``DatabaseUnavailable`` for a dialect or driver that is not there."""
    parsed = url if isinstance(url, URL) else parse_url(url)
    try:
        return create_engine(parsed, **kwargs)
    except exc.NoSuchModuleError:
        raise DatabaseUnavailable(
            f"unknown database {parsed.drivername!r} in {display_url(parsed)}: "
            "use sqlite:///PATH or postgresql+psycopg://USER@HOST[:PORT]/DATABASE"
        ) from None
    except ImportError as error:
        hint = (
            "pip install 'ledger[postgres]'"
            if parsed.get_backend_name() == "postgresql"
            else f"pip install {error.name or 'its DBAPI module'}"
        )
        raise DatabaseUnavailable(f"the database driver for {parsed.drivername!r} is not installed: {hint}") from None


def check_connection(engine: Engine, url: str) -> None:
    """Connect once (and give the connection back): ``DatabaseUnavailable`` with the driver's reason if that fails."""
    try:
        with engine.connect():
            pass
    except exc.DBAPIError as error:  # refused, timed out, no such database, bad credentials or options
        raise DatabaseUnavailable(
            f"cannot connect to the database at {display_url(url)}: {_first_line(error)}"
        ) from None


def _install_psycopg_events(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, connection_record):  # pragma: no cover - exercised via tests
        # NUMERIC results (``1.0 * SUM(...)`` in a view, AVG of integers) as floats, as SQLite gives them.
        from psycopg.types.numeric import FloatLoader

        dbapi_connection.adapters.register_loader("numeric", FloatLoader)


def _switch_to_wal(cursor) -> None:
    """``PRAGMA journal_mode = WAL``, waited for as the busy timeout waits for any lock. SQLite may answer a journal
    mode change "database is locked" at once, without its busy handler, while another process is creating the same
    new file or switching it to WAL (several first opens at once): the change is tried again until the timeout."""
    import sqlite3
    import time

    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _install_sqlite_events(engine: Engine, *, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, connection_record):  # pragma: no cover - exercised via tests
        # Let the store issue BEGIN itself (pysqlite's implicit transactions defer the lock).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if read_only:  # switching to WAL would rewrite the file's header
                cursor.execute("PRAGMA query_only = ON")
            else:
                _switch_to_wal(cursor)
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        if connection.get_execution_options().get(WRITE_OPTION):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            connection.exec_driver_sql("BEGIN")


# --------------------------------------------------------------------------- migrations


def alembic_config(url: str | None = None, connection=None):
    """An Alembic ``Config`` built in code (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", str(url).replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships a revision
        raise StoreError(f"no Alembic revisions found in {MIGRATIONS_DIR}")
    return head


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def current_revision(connection) -> str | None:
    """The revision stamped in the database (``None`` for a database without ``alembic_version``)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def user_tables(connection) -> list[str]:
    return [name for name in inspect(connection).get_table_names() if name != "alembic_version"]


def _run_upgrade(engine: Engine, target: str = "head") -> None:
    from alembic import command

    with engine.connect() as connection:
        # BEGIN IMMEDIATE (SQLite) or an advisory lock held to the end of the transaction
        # (PostgreSQL): two processes creating the same new database queue up; the second
        # one then finds it at head and does nothing.
        connection.execution_options(**{WRITE_OPTION: True})
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        command.upgrade(alembic_config(connection=connection), target)
        if connection.in_transaction():
            connection.commit()


def upgrade(url: str | None = None, target: str = "head") -> str:
    """Migrate the database at ``url`` to ``target`` (the ``ledger db upgrade`` command).

    Returns the revision the database is at afterwards.
    """
    url = normalize_url(url) if url is not None else default_db_url()
    engine = make_engine(url)
    try:
        check_connection(engine, url)
        _run_upgrade(engine, target)
        with engine.connect() as connection:
            return current_revision(connection) or ""
    finally:
        engine.dispose()


def ensure_schema(engine: Engine, *, url: str, create: bool = True) -> str:
    """Create the schema of a new database, or check an existing one is at head.

    Raises ``SchemaVersionMismatch`` (with the command to run) for another revision and
    ``StoreError`` for a database that is not a ledger or does not exist with ``create=False``.
    """
    expected = head_revision()
    url = display_url(url)  # messages never show a password
    with engine.connect() as connection:
        # tables first, then the revision: each statement sees what is committed by then, so a process that
        # creates the database between the two reads shows as at head, never as tables without a revision
        tables = user_tables(connection)
        revision = current_revision(connection)
    if revision is None and not tables:
        if not create:
            raise StoreError(f"no ledger database at {url}: create one with `ledger db upgrade --db {url}`")
        _run_upgrade(engine)
        with engine.connect() as connection:
            revision = current_revision(connection)
    if revision == expected:
        return revision
    if revision is None:
        raise StoreError(
            f"{url} holds tables ({', '.join(sorted(tables)[:5])}...) but no alembic_version: "
            "it is not a ledger database"
        )
    if revision in known_revisions():
        message = (
            f"database {url} is at schema revision {revision}, this ledger expects {expected}: "
            f"run `ledger db upgrade --db {url}`"
        )
    else:
        message = (
            f"database {url} is at schema revision {revision}, which this ledger (expecting {expected}) "
            "does not know: it was written by a newer ledger; install that version (or run "
            f"`ledger db upgrade --db {url}` with it)"
        )
    raise SchemaVersionMismatch(message, url=url, database_revision=revision, expected_revision=expected)
