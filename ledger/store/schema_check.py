"""The schema as the migrations made it: part of what ``ledger verify`` checks.

A ledger whose append-only triggers were dropped, or that holds a table or view the migrations did
not create, or that is stamped with another revision, may not have lost a byte of data, but its
guarantees are no longer the ones the chain was written under; verify reports each (``tampered``).
"""

from __future__ import annotations

from sqlalchemy import inspect, text

from ledger.store.base import Database
from ledger.store.engine import current_revision, head_revision
from ledger.store.models import ALL_TABLES
from ledger.store.views import VIEW_NAMES


def expected_triggers(dialect: str) -> set[str]:
    """The append-only triggers the initial migration creates on every table (none on other dialects)."""
    if dialect == "sqlite":
        return {f"{table}_no_{action}" for table in ALL_TABLES for action in ("update", "delete")}
    if dialect == "postgresql":
        return {f"{table}_{kind}" for table in ALL_TABLES for kind in ("append_only", "no_truncate")}
    return set()


class SchemaCheck:
    """What differs from the schema of this code's migrations."""

    def __init__(self, db: Database):
        self.db = db

    def schema_problems(self) -> list[str]:
        """What differs from the schema of this code's migrations: tables, views, triggers, revision."""
        problems: list[str] = []
        with self.db.read() as conn:
            inspector = inspect(conn)
            tables = set(inspector.get_table_names()) - {"alembic_version"}
            views = set(inspector.get_view_names())
            if self.db.dialect == "sqlite":
                triggers = {
                    row[0] for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
                }
            elif self.db.dialect == "postgresql":
                triggers = {
                    row[0] for row in conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"))
                }
            else:
                triggers = set()
            revision = current_revision(conn)
        for name in sorted(tables - set(ALL_TABLES)):
            problems.append(f"schema: table {name!r} is not one the migrations create")
        for name in sorted(set(ALL_TABLES) - tables):
            problems.append(f"schema: table {name!r} is missing")
        for name in sorted(views - set(VIEW_NAMES)):
            problems.append(f"schema: view {name!r} is not one the migrations create")
        for name in sorted(set(VIEW_NAMES) - views):
            problems.append(f"schema: view {name!r} is missing")
        expected = expected_triggers(self.db.dialect)
        for name in sorted(expected - triggers):
            problems.append(f"schema: append-only trigger {name!r} is missing (dropped: rows could be edited)")
        for name in sorted(triggers - expected):
            problems.append(f"schema: trigger {name!r} is not one the migrations create")
        if revision != head_revision():
            problems.append(f"schema: stamped revision {revision!r}, this code's migrations end at {head_revision()!r}")
        return problems
