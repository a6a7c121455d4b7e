"""Two processes registering one protocol at once produce one registration, and neither a traceback.

Measured before the lock: 3 of 7 trials of concurrent `ledger register` wrote duplicate registration
entries. Threads stand in for processes here (each opens its own store, so each holds its own SQLite
file descriptor or PostgreSQL session: the lock does not tell them apart from processes); one case
runs real processes through the CLI.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from ledger.audit.preregistration import register
from ledger.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "protocols" / "smoke.yaml"


def _registrations(url: str) -> list[dict]:
    with open_store(url) as store:
        return [entry for entry in store.rows_of("chain_entries") if entry["kind"] == "registration"]


def test_threads_registering_at_once_write_one_registration(db_url):
    with open_store(db_url):
        pass  # the schema exists before the race starts, as `ledger register` makes it
    workers = 6
    barrier = threading.Barrier(workers)
    results: list = [None] * workers

    def one(index: int) -> None:
        try:
            with open_store(db_url) as store:
                barrier.wait()
                results[index] = register(store, SMOKE)
        except BaseException as exc:  # the test reports any failure of any thread
            results[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert len({r.sha256 for r in results}) == 1
    assert sum(not r.already for r in results) == 1  # one wrote it; the others found it registered
    assert len(_registrations(db_url)) == 1
    with open_store(db_url) as store:
        assert len(store.protocols(name="smoke")) == 1


def test_processes_registering_at_once_write_one_registration(tmp_path):
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    command = [sys.executable, "-m", "ledger", "register", str(SMOKE), "--db", db]
    subprocess.run(command[:4] + ["--help"], capture_output=True, check=True)  # warm the imports' file cache
    processes = [
        subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
    ]
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, out + err
        assert "Traceback" not in err
    assert len(_registrations(db)) == 1
