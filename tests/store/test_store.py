"""The store on both backends (SQLite and PostgreSQL: the ``db_url`` and ``example`` fixtures of
tests/conftest.py and tests/store/conftest.py): migrations, append-only triggers, writers
and views. SQLite's own settings (WAL, pragmas) and what only a database file has are
tested on SQLite alone.

Schema revisions: test_schema_revisions.py; read-only queries: test_read_only_query.py;
crashes and concurrent writers: test_concurrent_writers.py; unusable URLs:
test_database_urls.py."""

from __future__ import annotations

import os
import sqlite3

import pytest
import sqlalchemy
import sqlalchemy.exc
from databases import execute_sql
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from store_helpers import example_manifest

from ledger.store import (
    ALL_TABLES,
    DOMAIN_TABLES,
    VIEW_NAMES,
    ConflictError,
    StoreError,
    default_db_url,
    head_revision,
    open_store,
    views_as_dataframes,
)

_execute = execute_sql


# --------------------------------------------------------------------------- schema & engine


def test_default_url_honours_env(monkeypatch):
    monkeypatch.delenv("LEDGER_DB", raising=False)
    assert default_db_url() == "sqlite:///runs/ledger.db"
    monkeypatch.setenv("LEDGER_DB", "postgresql://u@h/db")
    assert default_db_url() == "postgresql://u@h/db"
    monkeypatch.setenv("LEDGER_DB", "/tmp/x.db")
    assert default_db_url() == "sqlite:////tmp/x.db"


def test_migrations_create_tables_views_and_triggers(db_url):
    with open_store(db_url) as store:
        inspector = sqlalchemy.inspect(store.engine)
        assert set(ALL_TABLES) | {"alembic_version"} <= set(inspector.get_table_names())
        assert set(VIEW_NAMES) <= set(inspector.get_view_names())
        if store.dialect == "sqlite":
            triggers = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'trigger'").rows}
            expected = {f"{t}_no_{a}" for t in ALL_TABLES for a in ("update", "delete")}
        else:
            triggers = {r[0] for r in store.query("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal").rows}
            expected = {f"{t}_{kind}" for t in ALL_TABLES for kind in ("append_only", "no_truncate")}
        assert expected <= triggers
        assert store.query("SELECT version_num FROM alembic_version").rows == [(head_revision(),)]


def test_sqlite_runs_with_wal_foreign_keys_and_a_busy_timeout(tmp_path):
    """SQLite only: its connection settings and the file's journal mode."""
    path = tmp_path / "sub" / "ledger.db"  # parent folder is created
    with open_store(f"sqlite:///{path}") as store:
        assert store.query("PRAGMA journal_mode").rows == [("wal",)]
        assert store.query("PRAGMA foreign_keys").rows == [(1,)]
        assert store.query("PRAGMA busy_timeout").rows[0][0] >= 30000
        # the pragmas hold on every pooled connection, including writers
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    # the file itself is in WAL mode
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_models_match_migrated_schema(db_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from ledger.store.models import Base

    with open_store(db_url) as store, store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_second_open_of_same_db(db_url):
    with open_store(db_url) as first:
        sha = first.add_protocol({"name": "p", "version": "1"})
        with open_store(db_url) as second:
            assert second.get("protocols", sha256=sha)["name"] == "p"
            second.append("note", {"from": "second"})
        assert first.head()[1] == 2
        assert first.verify_chain().ok


def test_create_false_refuses_a_database_without_a_ledger(db_url):
    with pytest.raises(StoreError, match="ledger db upgrade"):
        open_store(db_url, create=False)
    engine = create_engine(db_url, poolclass=NullPool)
    try:
        assert sqlalchemy.inspect(engine).get_table_names() == []  # nothing was created
    finally:
        engine.dispose()


def test_create_false_refuses_a_missing_sqlite_file(tmp_path):
    """SQLite only: a file that does not exist is refused before anything touches the disk."""
    with pytest.raises(StoreError, match="ledger db upgrade"):
        open_store(f"sqlite:///{tmp_path / 'nowhere' / 'missing.db'}", create=False)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its folder was created


def test_not_a_ledger_database_is_refused(db_url):
    _execute(db_url, "CREATE TABLE something (x INTEGER)")
    with pytest.raises(StoreError, match="not a ledger database"):
        open_store(db_url)


# --------------------------------------------------------------------------- append-only


@pytest.mark.parametrize("table_name", ALL_TABLES)
def test_update_and_delete_blocked_by_triggers(example, table_name):
    store, _, url = example
    column = "seq" if table_name == "chain_entries" else "id"
    statements = {
        "UPDATE": f'UPDATE "{table_name}" SET {column} = {column} + 1000',
        "DELETE": f'DELETE FROM "{table_name}"',
    }
    if store.dialect == "postgresql":
        statements["TRUNCATE"] = f'TRUNCATE "{table_name}" CASCADE'  # per statement: no row needed
    with store.engine.connect() as conn:
        assert conn.execute(text(f'SELECT COUNT(*) FROM "{table_name}"')).scalar() > 0
    for action, statement in statements.items():
        # the store's own engine, and a plain connection of another client
        for engine in (store.engine, create_engine(url, poolclass=NullPool)):
            with pytest.raises(sqlalchemy.exc.DBAPIError, match=f"append-only: {action} on"), engine.begin() as conn:
                conn.execute(text(statement))
    if store.dialect == "sqlite":  # and the driver itself, outside SQLAlchemy
        raw = sqlite3.connect(store.engine.url.database)
        try:
            with pytest.raises(sqlite3.DatabaseError, match=f"append-only: DELETE on {table_name}"):
                raw.execute(statements["DELETE"])
        finally:
            raw.close()
    assert store.verify_chain().ok


# --------------------------------------------------------------------------- writers


def test_example_ledger_writes_every_table(example):
    store, keys, _ = example
    report = store.verify_chain()
    assert report.ok, report.summary()
    for name in DOMAIN_TABLES:
        assert report.rows[name] > 0, name
    assert report.rows["evidence"] == keys["n_evidence"]
    assert report.n_entries == store.head()[1]
    entries = store.rows_of("chain_entries")
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert entries[0]["prev_hash"] == "0" * 64
    evidence_entries = [e for e in entries if e["kind"] == "evidence"]
    assert len(evidence_entries) == 1  # one chain entry per evidence batch


def test_idempotent_and_conflicting_writes(example):
    store, keys, _ = example
    size = store.head()[1]
    assert (
        store.add_protocol(
            {"version": "1.0", "name": "example", "arms": ["loop", "dense"], "claims": ["loop-beats-dense"]}
        )
        == keys["protocol"]
    )
    assert store.add_manifest(example_manifest()) == keys["manifest"]
    assert (
        store.add_claim("loop-beats-dense", {"statistic": "accuracy_difference", "direction": ">", "threshold": 0.0})
        is not None
    )
    assert store.head()[1] == size  # nothing new was written
    with pytest.raises(ConflictError, match="deviation"):
        store.add_claim("loop-beats-dense", {"statistic": "accuracy_difference", "threshold": 0.5})
    with pytest.raises(ConflictError):
        store.add_run(run_id=keys["run"])
    with pytest.raises(ConflictError):
        store.add_checkpoint(sha256=keys["checkpoint"], arm="loop", status="failed")
    assert store.head()[1] == size


def test_lineage_view_lists_ancestry(example):
    store, keys, _ = example
    explo = store.add_checkpoint(sha256="e" * 64, arm="loop", status="exploratory", parent_sha256=keys["checkpoint"])
    store.add_checkpoint(sha256="2" * 64, arm="loop", status="exploratory", parent_sha256=explo)
    lineage = store.lineage("2" * 64)
    assert [row["ancestor_sha256"] for row in lineage] == ["2" * 64, explo, keys["checkpoint"], keys["base"]]
    assert [row["generation"] for row in lineage] == [0, 1, 2, 3]
    assert store.verify_chain().ok


def test_checkpoint_hash_from_file(db_url, tmp_path):
    from ledger.canonical import sha256_file

    weights = tmp_path / "w.safetensors"
    weights.write_bytes(os.urandom(1000))
    with open_store(db_url) as store:
        sha = store.add_checkpoint(path=str(weights), arm="base", status="promoted")
        assert sha == sha256_file(weights)
        assert store.get_checkpoint(sha)["path"] == str(weights)


def test_foreign_keys_enforced_and_failed_write_leaves_no_entry(example):
    store, keys, _ = example
    head = store.head()
    bad = {
        "run_id": keys["run"],
        "manifest_sha256": keys["manifest"],
        "row_id": "no-such-row",
        "arm": "loop",
        "checkpoint_sha256": keys["checkpoint"],
        "loop": 9,
        "prediction": "A",
        "correct": True,
    }
    with pytest.raises(sqlalchemy.exc.IntegrityError, match=r"(?i)foreign key"):
        store.add_evidence([bad])
    duplicate = dict(bad, row_id=store.rows_of("rows")[0]["row_id"], loop=1)
    with pytest.raises(sqlalchemy.exc.IntegrityError, match=r"(?i)unique"):
        store.add_evidence([duplicate])
    with pytest.raises(ValueError, match="required"):
        store.add_evidence([{k: v for k, v in bad.items() if k != "arm"}])
    with pytest.raises(ValueError, match="unknown column"):
        store.add_evidence([dict(bad, colour="red")])
    with pytest.raises(ValueError, match="None for a missing value"):
        store.add_evidence([dict(bad, score_margin=float("inf"))])
    # what one backend would store and another refuse is refused on every backend
    with pytest.raises(ValueError, match=r"evidence.arm: at most 100 characters"):
        store.add_evidence([dict(bad, arm="x" * 101)])
    with pytest.raises(ValueError, match="32-bit"):
        store.add_evidence([dict(bad, loop=2**31)])
    assert store.head() == head
    assert store.verify_chain().ok


def test_evidence_for_an_unregistered_run_is_refused(db_url):
    from ledger.store import PreregistrationRequired

    with open_store(db_url) as store:
        manifest = example_manifest(3)
        m = store.add_manifest(manifest)
        run = store.add_run(kind="eval")  # no protocol
        ck = store.add_checkpoint(sha256="c" * 64, arm="loop", status="promoted")
        size = store.head()[1]
        record = {
            "run_id": run,
            "manifest_sha256": m,
            "row_id": manifest.rows[0].row_id,
            "arm": "loop",
            "checkpoint_sha256": ck,
            "loop": 1,
            "prediction": "A",
            "correct": True,
        }
        with pytest.raises(PreregistrationRequired, match="ledger register"):
            store.add_evidence([record])
        assert store.head()[1] == size


def test_bulk_evidence_is_fast(db_url):
    import numpy as np
    import pandas as pd

    with open_store(db_url) as store:
        manifest = example_manifest(1250)
        protocol = store.add_protocol({"name": "bulk", "version": 1})
        m = store.add_manifest(manifest, protocol_sha256=protocol)
        run = store.add_run(kind="eval", protocol_sha256=protocol)
        ck = store.add_checkpoint(sha256="c" * 64, arm="loop", status="promoted")
        records = [
            {
                "run_id": run,
                "manifest_sha256": m,
                "row_id": row.row_id,
                "arm": "loop",
                "checkpoint_sha256": ck,
                "loop": loop,
                "prediction": "A",
                "correct": bool((i + loop) % 2),
                "score_margin": 0.5,
                "latency_ms": 2.0,
                "tokens_generated": 1,
            }
            for i, row in enumerate(manifest.rows)
            for loop in (1, 2, 4, 8)
        ]
        assert store.add_evidence(records) == 5000  # one batched insert (its speed: bench/, not here)
        # a DataFrame with numpy types and NaN for missing values
        frame = pd.DataFrame(records[::4][:100]).assign(loop=16, score_margin=np.nan, tokens_generated=np.nan)
        assert store.add_evidence(frame, batch_size=40) == 100
        row = store.query("SELECT score_margin, tokens_generated, correct FROM evidence WHERE loop = 16 LIMIT 1").rows
        assert row == [(None, None, 0)] or row == [(None, None, 1)]
        entries = store.query("SELECT COUNT(*) FROM chain_entries WHERE kind = 'evidence'").rows[0][0]
        assert entries == 1 + 3  # one entry for the 5000 rows, three batches of <= 40
        assert store.verify_chain().ok


# --------------------------------------------------------------------------- views


def test_views_and_dataframes(example):
    store, keys, _ = example
    frames = views_as_dataframes(store)
    assert set(frames) == set(VIEW_NAMES)
    assert len(frames["v_evidence_by_checkpoint"]) == keys["n_evidence"]
    acc = frames["v_accuracy_by_arm_depth"]
    assert set(acc.columns) >= {"arm", "manifest", "depth", "loop", "n", "correct", "accuracy"}
    assert acc["n"].sum() == keys["n_evidence"]
    assert ((acc["accuracy"] - acc["correct"] / acc["n"]).abs() < 1e-12).all()
    # recompute one cell straight from the tables
    direct = store.query(
        'SELECT COUNT(*), SUM(CASE WHEN e.correct THEN 1 ELSE 0 END) FROM evidence e JOIN "rows" r '
        "ON r.manifest_sha256 = e.manifest_sha256 AND r.row_id = e.row_id "
        "WHERE e.arm = 'loop' AND e.loop = 2 AND r.depth = 1"
    ).rows[0]
    cell = acc[(acc.arm == "loop") & (acc.loop == 2) & (acc.depth == 1)].iloc[0]
    assert (cell.n, cell.correct) == direct
    lineage = frames["v_lineage"]
    assert set(lineage[lineage.checkpoint_sha256 == keys["checkpoint"]].ancestor_sha256) == {
        keys["checkpoint"],
        keys["base"],
    }
    claim_ev = frames["v_claim_evidence"]
    # inputs select loop 2 of the loop arm and loop 0 of the dense arm: one row each per manifest row
    assert len(claim_ev) == 2 * 8
    assert set(claim_ev.role) == {"a", "b"}
    status = frames["v_claim_status"].iloc[0]
    assert status.first_outcome == "unverifiable" and status.n_evaluations == 1
    store.add_claim_outcome("loop-beats-dense", "supported", "rerun")
    status = store.query_df("SELECT * FROM v_claim_status").iloc[0]
    assert (status.first_outcome, status.latest_outcome, status.n_evaluations) == ("unverifiable", "supported", 2)
    assert store.first_outcome("loop-beats-dense")["outcome"] == "unverifiable"


def test_verify_sees_a_schema_that_is_not_the_migrated_one(db_url):
    """Dropped append-only triggers, an extra table or view: no data changed, and still not the ledger's schema."""
    with open_store(db_url) as store:
        assert store.schema_problems() == []
        drop = (
            "DROP TRIGGER evidence_no_update"
            if store.dialect == "sqlite"
            else 'DROP TRIGGER evidence_append_only ON "evidence"'
        )
        store.query(drop, read_only=False)
        store.query("CREATE TABLE extra_table (x INTEGER)", read_only=False)
        store.query("CREATE VIEW v_extra AS SELECT 1 AS one", read_only=False)
        problems = store.schema_problems()
    trigger = "evidence_no_update" if "sqlite" in db_url else "evidence_append_only"
    assert any(f"trigger '{trigger}' is missing" in problem for problem in problems), problems
    assert any("table 'extra_table'" in problem for problem in problems)
    assert any("view 'v_extra'" in problem for problem in problems)
    assert len(problems) == 3
