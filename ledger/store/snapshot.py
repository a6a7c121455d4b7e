"""A consistent copy of a SQLite ledger, for a reader that must not touch the ledger (``ledger serve``).

The copy is taken with the SQLite backup API over the store's own read-only connection, then switched to a
rollback journal so that the copy is one file (an immutable reader ignores a ``-wal`` file).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ledger.store.chain import Store


class SnapshotRefused(Exception):
    """The ledger is not SQLite; the message says what to do instead."""


def snapshot_sqlite(store: Store, path: Path) -> None:
    if store.dialect != "sqlite":
        raise SnapshotRefused(
            f"`ledger serve` shows SQLite ledgers (Datasette reads SQLite); this one is {store.dialect}: "
            "query it with `ledger query`, or point an SQLite browser at a copy"
        )
    raw = store.engine.raw_connection()
    try:
        target = sqlite3.connect(path)
        try:
            raw.driver_connection.backup(target)  # type: ignore[union-attr]
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
    finally:
        raw.close()


def schema_objects(path: Path) -> dict[str, list[str]]:
    """Every table and view of a SQLite file (SQLite's own excluded) with its columns, by name."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name"
            )
        ]
        return {name: [row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')] for name in names}
    finally:
        connection.close()
