"""`ledger serve`: the auditor's web view, opened in a real headless browser.

The ledger is the tiny verify project with readings no claim uses (``test_claim_selection``), its
outcomes recorded. Chromium (the distribution's package; `bash tests/run.sh` installs it) renders each page with
its scripts run, and the test follows the links a person would click: every claim -> one claim -> its
test's evidence rows -> the checkpoint that read them and its lineage; and the report.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ledger.cli.main import main
from ledger.report.web_view import CANNED_QUERIES, ServeError, prepare, snapshot
from ledger.store import open_store
from tests.audit.test_claim_selection import _extra_readings
from tests.audit.test_verify import CLAIMS, PROTOCOL, write_evidence
from tests.report.serving import stop, wait_until_answering

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def ledger(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert main(["register", "protocol.yaml", "--db", db]) == 0
    write_evidence(tmp_path, db)
    _extra_readings(tmp_path, db)
    assert main(["verify", "claims.yaml", "--record", "--db", db]) == 0
    return db


def _folder_bytes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_every_table_view_and_column_is_described(ledger, tmp_path):
    before = _folder_bytes(tmp_path)
    served = tmp_path / "served"
    served.mkdir()
    with open_store(ledger, create=False, read_only=True) as store:
        files = prepare(store, served)
        head = store.head()
    assert _folder_bytes(tmp_path) == before  # the ledger itself: not a byte changed, no side file
    assert files.head == head and files.report_names == ("tiny-verify",)
    assert (files.reports / "tiny-verify" / "report.html").is_file()
    meta = json.loads(files.metadata.read_text())
    tables = meta["databases"]["ledger"]["tables"]
    with open_store(f"sqlite:///{files.database}", create=False, read_only=True) as snap:
        assert snap.head() == head and snap.verify_chain().ok
    connection = sqlite3.connect(f"file:{files.database}?mode=ro", uri=True)
    try:
        listed = connection.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        assert {"stat_test_evidence", "v_claim_evidence"} <= {name for name, _ in listed}
        for name, kind in listed:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')]
            assert tables[name]["description"], f"{kind} {name} has no description"
            missing = [column for column in columns if column not in tables[name]["columns"]]
            assert not missing, f"{kind} {name}: columns without a description: {missing}"
    finally:
        connection.close()
    assert set(meta["databases"]["ledger"]["queries"]) == set(CANNED_QUERIES)


def test_serve_refuses_what_it_cannot_show(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["serve", "--db", f"sqlite:///{tmp_path / 'missing.db'}", "--port", "0"])
    assert code == 2 and "no ledger database" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing created

    with socket.socket() as taken:  # a port in use: said before any snapshot is taken
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--db", f"sqlite:///{tmp_path / 'missing.db'}", "--port", str(port)])
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err

    class PostgresStore:
        dialect = "postgresql"

    with pytest.raises(ServeError, match="SQLite ledgers"):
        snapshot(PostgresStore(), tmp_path / "x.db")  # type: ignore[arg-type]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            self.hrefs.extend(value for name, value in attrs if name == "href" and value)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "no Chromium found: `bash tests/run.sh` installs it (the distribution's package chromium)", pytrace=False
    )


def _render(browser: str, url: str) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran, as headless Chromium renders it, and its links."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "<html" in done.stdout, done.stderr[-2000:]
    links = _Links()
    links.feed(done.stdout)
    return done.stdout, links.hrefs


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_claim_followed_to_its_rows_and_checkpoint_in_a_browser(ledger, tmp_path):
    browser = _chromium()
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "serve", "--db", ledger, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(base, server, "ledger serve")

        home, links = _render(browser, base + "/")
        assert "read-only snapshot" in home
        claims_page = next(link for link in links if link.endswith("/ledger/claims"))
        page, links = _render(browser, base + claims_page)
        assert "_show_sql=1" in page and "<textarea" not in page  # the table first, the SQL on request
        claim_link = next(link for link in links if "claim_id=tiny-verify%2FA_beats_B" in link)

        page, links = _render(browser, base + claim_link)
        assert "supported" in page
        test_links = sorted({link for link in links if "/ledger/test_rows?test_id=" in link})
        assert len(test_links) == 1

        page, links = _render(browser, base + test_links[0])
        evidence_links = {link for link in links if re.search(r"/ledger/evidence/\d+$", link)}
        checkpoint_links = sorted({link for link in links if "/ledger/checkpoint?checkpoint_sha256=" in link})
        # exactly the 24 paired rows of each arm, not the 120 readings the two arms have
        assert len(evidence_links) == 48
        assert len(checkpoint_links) == 2
        with open_store(ledger, create=False, read_only=True) as store:
            a_checkpoint = store.query("SELECT DISTINCT checkpoint_sha256 FROM evidence WHERE arm = 'A'").rows[0][0]
            a_path = store.query("SELECT path FROM checkpoints WHERE sha256 = :s", {"s": a_checkpoint}).rows[0][0]
        link = next(link for link in checkpoint_links if link.endswith(a_checkpoint))

        page, links = _render(browser, base + link)
        assert a_checkpoint in page and a_path in page  # generation 0: the checkpoint itself, with its file

        row, _ = _render(browser, base + sorted(evidence_links)[0])
        assert "checkpoint_sha256" in row  # the evidence row's own page

        report, _ = _render(browser, base + "/report/tiny-verify/report.html")
        assert "tiny-verify" in report
    finally:
        stop(server)
