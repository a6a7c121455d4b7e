"""`ledger serve`: what one request of the auditor's SQL may cost, and that PostgreSQL is not served at all.

Datasette runs as `ledger serve` starts it (``datasette_command``) over a small SQLite file: its settings bound
time, rows and CSV size; the plugin ``ledger_limits`` bounds SQLite's heap and the process's address space, so a
query that builds 600 MB fails alone, with a message, and the next one is answered.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from databases import fresh_database

from ledger.cli.main import main
from ledger.report.web_view import PLUGINS_DIR, SETTINGS, ServeFiles, datasette_command
from ledger.store import open_store
from tests.report.serving import stop, wait_until_answering

sys.path.insert(0, str(PLUGINS_DIR))
from ledger_limits import ADDRESS_SPACE_LIMIT_BYTES  # the plugin, imported as Datasette loads it


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture()
def served(tmp_path):
    """Datasette started with `ledger serve`'s command line over a one-table file: (base URL, its process)."""
    database = tmp_path / "ledger.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
        connection.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    connection.close()
    metadata = tmp_path / "metadata.json"
    metadata.write_text("{}", encoding="utf-8")
    files = ServeFiles(database, metadata, tmp_path / "report", ("0" * 64, 0), ())
    port = _free_port()
    server = subprocess.Popen(
        datasette_command(files, host="127.0.0.1", port=port, open_browser=False),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(base, server, "datasette")
        yield base, server
    finally:
        stop(server)


def _sql(base: str, sql: str) -> tuple[int, Any]:
    status, body = _get(f"{base}/ledger.json?_shape=array&sql={urllib.parse.quote(sql)}")
    return status, json.loads(body)


def test_a_query_past_the_memory_bound_fails_alone_and_the_server_goes_on(served):
    base, server = served
    status, body = _sql(base, "SELECT length(randomblob(600000000)) AS n")  # 600 MB: past SQLite's heap limit
    assert status == 400 and "more memory than the web view allows" in body["error"]
    assert _sql(base, "SELECT COUNT(*) AS n FROM t") == (200, [{"n": 10}])
    assert _sql(base, "SELECT length(randomblob(1000000)) AS n") == (200, [{"n": 1000000}])
    limits = Path(f"/proc/{server.pid}/limits").read_text()
    address_space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert address_space.split()[3] == str(ADDRESS_SPACE_LIMIT_BYTES)


def test_the_settings_bound_time_rows_and_downloads(served):
    base, _ = served
    status, body = _get(base + "/-/settings.json")
    settings = json.loads(body)
    assert status == 200 and {name: settings[name] for name in SETTINGS} == SETTINGS
    assert SETTINGS["max_csv_mb"] > 0 and SETTINGS["sql_time_limit_ms"] <= 10_000


def test_the_address_space_limit_is_lowered_never_raised(tmp_path):
    script = f"""
import resource, sys
sys.path.insert(0, {str(PLUGINS_DIR)!r})
from ledger_limits import limit_address_space
limit_address_space(2 * 2**30)
print(resource.getrlimit(resource.RLIMIT_AS)[0])
try:
    bytearray(3 * 2**30)
except MemoryError:
    print("refused")
limit_address_space(8 * 2**30)
print(resource.getrlimit(resource.RLIMIT_AS)[0])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(2 * 2**30), "refused", str(2 * 2**30)]


def test_serve_does_not_serve_postgresql(tmp_path, capsys):
    # no Datasette, so no arbitrary-SQL endpoint, over a PostgreSQL ledger: ledger query is the way in
    with fresh_database("postgresql", tmp_path) as url:
        with open_store(url) as store:
            store.append("note", {"x": 1})
        assert main(["serve", "--db", url, "--port", "0"]) == 2
    assert "`ledger serve` shows SQLite ledgers" in capsys.readouterr().err
