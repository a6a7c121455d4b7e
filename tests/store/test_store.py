"""The store: migrations, SQLite settings, schema revisions, append-only triggers,
writers, views, read-only queries, crash safety and concurrent writers."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import sqlalchemy.exc
from store_helpers import example_manifest, populate_example

from ledger.store import (
    ALL_TABLES,
    DOMAIN_TABLES,
    VIEW_NAMES,
    ConflictError,
    ReadOnlyViolation,
    SchemaVersionMismatch,
    StoreError,
    default_db_url,
    head_revision,
    open_store,
    upgrade,
    views_as_dataframes,
)
from ledger.store import engine as engine_module

REPO = Path(__file__).resolve().parents[2]


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _copy_db(src: Path, dst: Path) -> Path:
    source = sqlite3.connect(src)
    target = sqlite3.connect(dst)
    source.backup(target)
    target.close()
    source.close()
    return dst


@pytest.fixture(scope="module")
def example_db(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("ledger") / "example.db"
    with open_store(_url(path)) as store:
        keys = populate_example(store)
    return path, keys


@pytest.fixture()
def example(example_db, tmp_path):
    path = _copy_db(example_db[0], tmp_path / "ledger.db")
    store = open_store(_url(path))
    yield store, example_db[1], path
    store.close()


# --------------------------------------------------------------------------- schema & engine


def test_default_url_honours_env(monkeypatch):
    monkeypatch.delenv("LEDGER_DB", raising=False)
    assert default_db_url() == "sqlite:///runs/ledger.db"
    monkeypatch.setenv("LEDGER_DB", "postgresql://u@h/db")
    assert default_db_url() == "postgresql://u@h/db"
    monkeypatch.setenv("LEDGER_DB", "/tmp/x.db")
    assert default_db_url() == "sqlite:////tmp/x.db"


def test_migrations_create_schema_with_wal_and_foreign_keys(tmp_path):
    path = tmp_path / "sub" / "ledger.db"  # parent folder is created
    with open_store(_url(path)) as store:
        names = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'").rows}
        assert set(ALL_TABLES) | {"alembic_version"} <= names
        views = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'view'").rows}
        assert set(VIEW_NAMES) <= views
        triggers = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'trigger'").rows}
        assert {f"{t}_no_{a}" for t in ALL_TABLES for a in ("update", "delete")} <= triggers
        assert store.query("PRAGMA journal_mode").rows == [("wal",)]
        assert store.query("PRAGMA foreign_keys").rows == [(1,)]
        assert store.query("PRAGMA busy_timeout").rows[0][0] >= 30000
        assert store.query("SELECT version_num FROM alembic_version").rows == [(head_revision(),)]
        # the pragmas hold on every pooled connection, including writers
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    # the file itself is in WAL mode
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_models_match_migrated_schema(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from ledger.store.models import Base

    with open_store(_url(tmp_path / "l.db")) as store, store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_second_open_of_same_db(tmp_path):
    url = _url(tmp_path / "l.db")
    with open_store(url) as first:
        sha = first.add_protocol({"name": "p", "version": "1"})
        with open_store(url) as second:
            assert second.get("protocols", sha256=sha)["name"] == "p"
            second.append("note", {"from": "second"})
        assert first.head()[1] == 2
        assert first.verify_chain().ok


def test_create_false_refuses_missing_database(tmp_path):
    with pytest.raises(StoreError, match="ledger db upgrade"):
        open_store(_url(tmp_path / "nowhere" / "missing.db"), create=False)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its folder was created


def test_not_a_ledger_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE something (x)")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="not a ledger database"):
        open_store(_url(path))


def test_database_stamped_at_unknown_revision_is_refused(tmp_path):
    path = tmp_path / "l.db"
    url = _url(path)
    open_store(url).close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    raw.commit()
    raw.close()
    with pytest.raises(SchemaVersionMismatch) as info:
        open_store(url)
    message = str(info.value)
    assert "ffffffffffff" in message and head_revision() in message
    assert f"ledger db upgrade --db {url}" in message
    assert info.value.database_revision == "ffffffffffff"


def test_older_revision_is_refused_until_upgraded(tmp_path, monkeypatch):
    """A database at the previous revision: refused with the command to run; upgrade() fixes it."""
    url = _url(tmp_path / "l.db")
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


# --------------------------------------------------------------------------- append-only


@pytest.mark.parametrize("table_name", ALL_TABLES)
def test_update_and_delete_blocked_by_triggers(example, table_name):
    store, _, path = example
    raw = sqlite3.connect(path)
    try:
        assert raw.execute(f'SELECT COUNT(*) FROM "{table_name}"').fetchone()[0] > 0
        column = "seq" if table_name == "chain_entries" else "id"
        with pytest.raises(sqlite3.DatabaseError, match=f"append-only: UPDATE on {table_name}"):
            raw.execute(f'UPDATE "{table_name}" SET {column} = {column} + 1000')
        with pytest.raises(sqlite3.DatabaseError, match=f"append-only: DELETE on {table_name}"):
            raw.execute(f'DELETE FROM "{table_name}"')
    finally:
        raw.close()
    # and through SQLAlchemy on the store's own engine
    with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"), store.engine.begin() as conn:
        conn.exec_driver_sql(f'DELETE FROM "{table_name}"')
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


def test_checkpoint_hash_from_file(tmp_path):
    from ledger.canonical import sha256_file

    weights = tmp_path / "w.safetensors"
    weights.write_bytes(os.urandom(1000))
    with open_store(_url(tmp_path / "l.db")) as store:
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
    with pytest.raises(sqlalchemy.exc.IntegrityError, match="FOREIGN KEY"):
        store.add_evidence([bad])
    duplicate = dict(bad, row_id=store.rows_of("rows")[0]["row_id"], loop=1)
    with pytest.raises(sqlalchemy.exc.IntegrityError, match="UNIQUE"):
        store.add_evidence([duplicate])
    with pytest.raises(ValueError, match="required"):
        store.add_evidence([{k: v for k, v in bad.items() if k != "arm"}])
    with pytest.raises(ValueError, match="unknown column"):
        store.add_evidence([dict(bad, colour="red")])
    with pytest.raises(ValueError, match="None for a missing value"):
        store.add_evidence([dict(bad, score_margin=float("inf"))])
    assert store.head() == head
    assert store.verify_chain().ok


def test_evidence_for_an_unregistered_run_is_refused(tmp_path):
    from ledger.store import PreregistrationRequired

    with open_store(_url(tmp_path / "l.db")) as store:
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


def test_bulk_evidence_is_fast(tmp_path):
    import numpy as np
    import pandas as pd

    with open_store(_url(tmp_path / "l.db")) as store:
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


# --------------------------------------------------------------------------- views and queries


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
        'SELECT COUNT(*), SUM(e.correct) FROM evidence e JOIN "rows" r '
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


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO chain_entries (seq) VALUES (999)",
        "insert into protocols default values",
        "UPDATE evidence SET correct = 1",
        "DELETE FROM evidence",
        "DROP TABLE evidence",
        "DROP VIEW v_lineage",
        "ATTACH DATABASE ':memory:' AS other",
        "DETACH DATABASE main",
        "CREATE TABLE x (y)",
        "ALTER TABLE evidence ADD COLUMN z",
        "REPLACE INTO runs (run_id) VALUES ('x')",
        "VACUUM",
        "BEGIN",
        "PRAGMA query_only = OFF",
        "PRAGMA query_only(0)",
        "PRAGMA journal_mode = DELETE",
        "SELECT 1; DELETE FROM evidence",
        "  /* comment */ -- another\n DELETE FROM evidence",
        "WITH x AS (SELECT 1) INSERT INTO chain_entries (seq) SELECT 999 FROM x",
        "WITH x AS (SELECT 1) DELETE FROM evidence",
        "SELECT * FROM pragma_table_info('evidence'); DROP TABLE evidence",
    ],
)
def test_query_refuses_writes(example, sql):
    store, _, _ = example
    head = store.head()
    with pytest.raises(ReadOnlyViolation):
        store.query(sql)
    assert store.head() == head
    # the pooled connection is writable again for the store itself
    store.append("note", {"after": sql})
    assert store.verify_chain().ok


def test_query_allows_reads(example):
    store, keys, _ = example
    assert store.query("SELECT COUNT(*) AS n FROM evidence").records() == [{"n": keys["n_evidence"]}]
    assert len(store.query("PRAGMA table_info(evidence)")) > 5
    assert store.query("PRAGMA integrity_check").rows == [("ok",)]
    assert len(store.query("EXPLAIN QUERY PLAN SELECT * FROM v_accuracy_by_arm_depth")) > 0
    assert store.query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT SUM(i) FROM n"
    ).rows == [(15,)]
    assert store.query("SELECT run_id FROM runs WHERE run_id = :r", {"r": keys["run"]}).rows == [(keys["run"],)]
    assert store.query("SELECT '12:00; not a statement' AS t").rows == [("12:00; not a statement",)]


# --------------------------------------------------------------------------- processes

_WRITER = textwrap.dedent(
    """
    import sys
    from ledger.store import open_store
    url, tag, count, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "wait"
    manifest, run, ck, rows = sys.argv[5:9]
    rows = rows.split(",")
    store = open_store(url, create=False)
    print("ready", flush=True)
    if wait:
        sys.stdin.readline()  # wait for the go signal, so both writers start together
    if tag == "hang":  # stop inside an open write transaction, rows and entry already inserted
        import time
        batch = [
            {"run_id": run, "manifest_sha256": manifest, "row_id": row, "arm": tag, "checkpoint_sha256": ck,
             "loop": 0, "prediction": "A", "correct": True}
            for row in rows
        ]
        with store._write() as conn:
            store._append_in(conn, "evidence", {}, {"evidence": batch})
            print("inside", flush=True)
            time.sleep(120)
    i = 0
    while count < 0 or i < count:
        batch = [
            {"run_id": run, "manifest_sha256": manifest, "row_id": row, "arm": tag, "checkpoint_sha256": ck,
             "loop": i, "prediction": "A", "correct": True, "score_margin": 0.5, "latency_ms": 1.0}
            for row in rows
        ]
        store.add_evidence(batch)
        store.append("note", {"tag": tag, "i": i})
        i += 1
    print("done", i, flush=True)
    """
)


ROWS_PER_BATCH = 50


def _prepare_for_writers(path: Path) -> list[str]:
    with open_store(_url(path)) as store:
        manifest = example_manifest(ROWS_PER_BATCH)
        protocol = store.add_protocol({"name": "writers", "version": 1})
        m = store.add_manifest(manifest, protocol_sha256=protocol)
        run = store.add_run(run_id="writers", protocol_sha256=protocol)
        ck = store.add_checkpoint(sha256="c" * 64, arm="loop", status="promoted")
        return [m, run, ck, ",".join(row.row_id for row in manifest.rows)]


def _spawn(path: Path, tag: str, count: int, args: list[str], wait: bool = True) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, _url(path), tag, str(count), "wait" if wait else "nowait", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def test_sigkill_mid_transaction_leaves_a_valid_ledger(tmp_path):
    path = tmp_path / "l.db"
    args = _prepare_for_writers(path)
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    sizes = []
    for attempt in range(2):
        proc = _spawn(path, f"crash{attempt}", -1, args, wait=False)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        delay = rng.uniform(0.05, 0.6)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        raw.close()
        with open_store(_url(path)) as store:
            report = store.verify_chain()
            assert report.ok, f"after SIGKILL at {delay:.3f}s: {report.summary()}"
            sizes.append(report.n_entries)
            # evidence and its chain entries appear together or not at all
            assert report.rows["evidence"] == ROWS_PER_BATCH * len(store.rows_of("chain_entries", kind="evidence"))
    print("chain sizes after each kill:", sizes)
    assert sizes[-1] > 3  # the writer did write before being killed

    # deterministic variant: killed while holding an open write transaction
    proc = _spawn(path, "hang", 1, args, wait=False)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    assert proc.stdout.readline().strip() == "inside", proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    raw.close()
    with open_store(_url(path)) as store:
        report = store.verify_chain()
        assert report.ok, report.summary()
        assert report.n_entries == sizes[-1]  # the half-written entry is gone, with its rows
        assert store.query("SELECT COUNT(*) FROM evidence WHERE arm = 'hang'").rows == [(0,)]
        store.append("note", {"after": "crash"})  # and the database is writable again
        assert store.verify_chain().ok


def test_two_processes_writing_at_once(tmp_path):
    path = tmp_path / "l.db"
    args = _prepare_for_writers(path)
    count = 10
    procs = [_spawn(path, tag, count, args) for tag in ("alpha", "beta")]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == f"done {count}"
    with open_store(_url(path)) as store:
        report = store.verify_chain()
        assert report.ok, report.summary()
        assert report.n_entries == 4 + 2 * 2 * count  # protocol, manifest, run, checkpoint + both writers
        notes = store.query(
            "SELECT json_extract(payload, '$.data.tag') AS tag, COUNT(*) FROM chain_entries "
            "WHERE kind = 'note' GROUP BY tag ORDER BY tag"
        ).rows
        assert notes == [("alpha", count), ("beta", count)]
        per_arm = store.query("SELECT arm, COUNT(*) FROM evidence GROUP BY arm ORDER BY arm").rows
        assert per_arm == [("alpha", ROWS_PER_BATCH * count), ("beta", ROWS_PER_BATCH * count)]
        # the writes interleaved (both waited on the other's lock at some point)
        kinds = [e["payload"] for e in store.rows_of("chain_entries", kind="note")]
        tags = ["alpha" if '"tag":"alpha"' in p else "beta" for p in kinds]
        print("note order:", "".join(t[0] for t in tags))
