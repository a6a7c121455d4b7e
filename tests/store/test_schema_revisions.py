"""Schema revisions on both backends: a database at another revision than this code is refused
with the command to run, and ``upgrade`` brings it to head."""

from __future__ import annotations

import shutil
import textwrap

import pytest
from databases import execute_sql

from ledger.store import SchemaVersionMismatch, head_revision, open_store, upgrade
from ledger.store import engine as engine_module

_execute = execute_sql


def test_database_stamped_at_unknown_revision_is_refused(db_url):
    open_store(db_url).close()
    _execute(db_url, "UPDATE alembic_version SET version_num = :v", {"v": "ffffffffffff"})
    with pytest.raises(SchemaVersionMismatch) as info:
        open_store(db_url)
    message = str(info.value)
    assert "ffffffffffff" in message and head_revision() in message
    assert f"ledger db upgrade --db {db_url}" in message
    assert info.value.database_revision == "ffffffffffff"


def test_older_revision_is_refused_until_upgraded(db_url, tmp_path, monkeypatch):
    """A database at the previous revision: refused with the command to run; upgrade() fixes it."""
    url = db_url
    with open_store(url) as store:
        store.add_protocol({"name": "p", "version": "1"})
    newer = tmp_path / "migrations"
    shutil.copytree(engine_module.MIGRATIONS_DIR, newer, ignore=shutil.ignore_patterns("__pycache__"))
    current = head_revision()
    (newer / "versions" / "9999_test.py").write_text(
        textwrap.dedent(
            f'''
            """test-only next revision"""
            from alembic import op

            revision = "9999"
            down_revision = "{current}"
            branch_labels = None
            depends_on = None


            def upgrade():
                op.execute("CREATE TABLE test_extra (x INTEGER)")


            def downgrade():
                op.execute("DROP TABLE test_extra")
            '''
        )
    )
    monkeypatch.setattr(engine_module, "MIGRATIONS_DIR", newer)
    assert head_revision() == "9999"
    with pytest.raises(SchemaVersionMismatch) as info:
        open_store(url)
    assert str(info.value) == (
        f"database {url} is at schema revision {current}, this ledger expects 9999: run `ledger db upgrade --db {url}`"
    )
    assert upgrade(url) == "9999"
    with open_store(url) as store:
        assert store.verify_chain().ok
        assert store.head()[1] == 1
