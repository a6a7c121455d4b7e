"""Writers in other processes, on both backends: killed in the middle of a write, or two at once.

On PostgreSQL writers queue on ``LOCK TABLE chain_entries``, on SQLite on ``BEGIN IMMEDIATE``;
either way the chain stays one line. Killing a writer at random moments is a test of the
SQLite file's crash safety and stays SQLite-only (a PostgreSQL server outlives its clients).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from store_helpers import example_manifest

from ledger.store import open_store

REPO = Path(__file__).resolve().parents[2]

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
        with store.db.write() as conn:
            store.log.append_in(conn, "evidence", {}, {"evidence": batch})
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


_OPENER = textwrap.dedent(
    """
    import sys
    from ledger.store import open_store
    print("ready", flush=True)
    sys.stdin.readline()  # all start together
    with open_store(sys.argv[1]) as store:  # the first open of a new database creates its schema
        store.append("note", {"opened": sys.argv[2]})
    print("done", flush=True)
    """
)

ROWS_PER_BATCH = 50


def _prepare_for_writers(url: str) -> list[str]:
    with open_store(url) as store:
        manifest = example_manifest(ROWS_PER_BATCH)
        protocol = store.add_protocol({"name": "writers", "version": 1})
        m = store.add_manifest(manifest, protocol_sha256=protocol)
        run = store.add_run(run_id="writers", protocol_sha256=protocol)
        ck = store.add_checkpoint(sha256="c" * 64, arm="loop", status="promoted")
        return [m, run, ck, ",".join(row.row_id for row in manifest.rows)]


def _spawn(url: str, tag: str, count: int, args: list[str], wait: bool = True) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, tag, str(count), "wait" if wait else "nowait", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def _integrity_ok(path: Path) -> bool:
    raw = sqlite3.connect(path)
    try:
        return raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        raw.close()


def test_sigkill_at_random_moments_leaves_a_valid_sqlite_file(tmp_path):
    """SQLite only: the file's own crash safety (WAL), killed wherever the writer happens to be."""
    path = tmp_path / "l.db"
    url = f"sqlite:///{path}"
    args = _prepare_for_writers(url)
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    sizes = []
    for attempt in range(2):
        proc = _spawn(url, f"crash{attempt}", -1, args, wait=False)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        delay = rng.uniform(0.05, 0.6)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        assert _integrity_ok(path)
        with open_store(url) as store:
            report = store.verify_chain()
            assert report.ok, f"after SIGKILL at {delay:.3f}s: {report.summary()}"
            sizes.append(report.n_entries)
            # evidence and its chain entries appear together or not at all
            assert report.rows["evidence"] == ROWS_PER_BATCH * len(store.rows_of("chain_entries", kind="evidence"))
    print("chain sizes after each kill:", sizes)
    assert sizes[-1] > 3  # the writer did write before being killed


def test_killed_inside_a_write_transaction_leaves_a_valid_ledger(db_url):
    """Killed while holding an open write transaction, rows and entry already inserted: none of it stays."""
    args = _prepare_for_writers(db_url)
    with open_store(db_url) as store:
        size = store.head()[1]
    proc = _spawn(db_url, "hang", 1, args, wait=False)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    assert proc.stdout.readline().strip() == "inside", proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    if db_url.startswith("sqlite"):
        assert _integrity_ok(Path(db_url.removeprefix("sqlite:///")))
    with open_store(db_url) as store:
        report = store.verify_chain()
        assert report.ok, report.summary()
        assert report.n_entries == size  # the half-written entry is gone, with its rows
        assert store.query("SELECT COUNT(*) FROM evidence WHERE arm = 'hang'").rows == [(0,)]
        store.append("note", {"after": "crash"})  # and the ledger is writable again (the lock went with the writer)
        assert store.verify_chain().ok


def test_two_processes_writing_at_once(db_url):
    args = _prepare_for_writers(db_url)
    count = 10
    procs = [_spawn(db_url, tag, count, args) for tag in ("alpha", "beta")]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == f"done {count}"
    with open_store(db_url) as store:
        report = store.verify_chain()
        assert report.ok, report.summary()
        assert report.n_entries == 4 + 2 * 2 * count  # protocol, manifest, run, checkpoint + both writers
        tags = [json.loads(entry["payload"])["data"]["tag"] for entry in store.rows_of("chain_entries", kind="note")]
        assert sorted(tags) == ["alpha"] * count + ["beta"] * count
        assert [
            json.loads(e["payload"])["data"]["i"]
            for e in store.rows_of("chain_entries", kind="note")
            if '"tag":"alpha"' in e["payload"]
        ] == list(range(count))  # each writer's own order kept
        per_arm = store.query("SELECT arm, COUNT(*) FROM evidence GROUP BY arm ORDER BY arm").rows
        assert per_arm == [("alpha", ROWS_PER_BATCH * count), ("beta", ROWS_PER_BATCH * count)]
        # the writes interleaved (both waited on the other's lock at some point)
        print("note order:", "".join(tag[0] for tag in tags))


def test_processes_creating_the_same_new_database_at_once(db_url):
    """The first opens of a new database queue on the migration (SQLite BEGIN IMMEDIATE, PostgreSQL an
    advisory lock): one creates the schema, the others find it at head."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, db_url, str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for i in range(3)
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "done", err
    with open_store(db_url) as store:
        report = store.verify_chain()
        assert report.ok and report.n_entries == 3, report.summary()


def test_verify_while_another_process_writes(db_url):
    """Each read is one snapshot (SQLite's WAL read transaction, PostgreSQL REPEATABLE READ): a chain
    walk beside a writer never sees an entry without its rows, or rows without their entry."""
    args = _prepare_for_writers(db_url)
    proc = _spawn(db_url, "busy", -1, args)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        with open_store(db_url) as store:
            sizes = []
            while len(sizes) < 8 or sizes[-1] == sizes[0]:
                report = store.verify_chain()
                assert report.ok, report.summary()
                sizes.append(report.n_entries)
                assert len(sizes) < 200, "the writer wrote nothing"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    print("chain sizes seen while writing:", sizes)
