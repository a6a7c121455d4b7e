"""The store: the append-only log, its typed writers and rules, typed reads, and chain verification.

``Store`` is assembled from one part per concept:

* ``append.AppendLog`` -- the one write path (``append``) and the Merkle head;
* ``writes.DomainWrites`` -- typed writers (``add_protocol``, ``add_evidence``, ...), with
  ``claim_writes.ClaimWrites`` for claims, statistical tests and outcomes;
* ``rules.StoreRules`` -- preregistration of evidence and the lineage rule;
* ``verification.ChainVerification`` -- ``verify_chain`` and ``verify_since_head``;
* ``lookups`` -- the typed read side (protocols, manifests, readings, checkpoints, claims);
* ``read_only.ReadOnlySQL`` -- ``query``, the auditor's read-only SQL.

See docs/schema.md for the chain construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from ledger.store.append import AppendResult
from ledger.store.engine import (
    StoreError,
    _sqlite_file,
    check_connection,
    default_db_url,
    display_url,
    ensure_schema,
    is_sqlite,
    make_engine,
    normalize_url,
)
from ledger.store.lookups import CheckpointReads, ClaimReads, EvidenceReads, ManifestReads, ProtocolReads
from ledger.store.read_only import (
    InvalidQuery,
    QueryResult,
    QueryTimeout,
    ReadOnlySQL,
    ReadOnlyViolation,
    check_read_only_sql,
)
from ledger.store.records import entry_hash, payload_leaf_hash, utc_now
from ledger.store.rules import ConflictError, LineageRefused, PreregistrationRequired
from ledger.store.schema_check import SchemaCheck
from ledger.store.verification import ChainProblem, ChainReport, ChainVerification, ConsistencyReport
from ledger.store.writes import DomainWrites

__all__ = [
    "AppendResult",
    "ChainProblem",
    "ChainReport",
    "ConflictError",
    "ConsistencyReport",
    "InvalidQuery",
    "LineageRefused",
    "PreregistrationRequired",
    "QueryResult",
    "QueryTimeout",
    "ReadOnlyViolation",
    "Store",
    "check_read_only_sql",
    "entry_hash",
    "open_store",
    "payload_leaf_hash",
    "utc_now",
]


class Store(
    DomainWrites,
    ChainVerification,
    SchemaCheck,
    ProtocolReads,
    ManifestReads,
    EvidenceReads,
    CheckpointReads,
    ClaimReads,
    ReadOnlySQL,
):
    """A ledger database. Create with ``open_store(url)``."""


@contextmanager
def open_other_ledgers(urls: Iterable[str]) -> Iterator[tuple[Store, ...]]:
    """Other ledgers (a team's tuning ledgers, ``--also-db``), read-only, closed on exit; a missing or unreadable
    one raises ``StoreError`` (or ``DatabaseUnavailable``) naming it."""
    opened: list[Store] = []
    try:
        for url in urls:
            try:
                opened.append(open_store(url, read_only=True))
            except StoreError as exc:
                raise StoreError(f"--also-db {display_url(url)}: {exc}") from None
        yield tuple(opened)
    finally:
        for store in opened:
            store.close()


def open_store(url: str | None = None, create: bool = True, *, read_only: bool = False) -> Store:
    """Open (and for a new database, create) the ledger at ``url`` (default ``default_db_url()``).

    A new database is migrated to the current schema; an existing one must already be at
    it, else ``SchemaVersionMismatch`` says what to run. With ``create=False`` a SQLite
    file that does not exist is refused before anything touches the disk. A URL that
    cannot be used or a server that cannot be reached raises ``DatabaseUnavailable``.
    ``read_only`` (implies ``create=False``): the engine cannot write (``make_engine``).
    """
    create = create and not read_only
    url = normalize_url(url) if url is not None else default_db_url()
    if not create and is_sqlite(url):
        path = _sqlite_file(url)
        if path is not None and not Path(path).is_file():
            shown = display_url(url)
            raise StoreError(f"no ledger database at {shown}: create one with `ledger db upgrade --db {shown}`")
    engine = make_engine(url, read_only=read_only)
    try:
        check_connection(engine, url)
        ensure_schema(engine, url=url, create=create)
    except DBAPIError as error:  # e.g. SQLite's "file is not a database"
        engine.dispose()
        reason = str(error.orig).splitlines()[0] if error.orig is not None else type(error).__name__
        raise StoreError(f"cannot be read as a ledger database: {reason}") from None
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, url)
