"""The auditor's web view (``ledger serve``): the ledger in Datasette, read-only, with the reports.

What is served is a snapshot: a consistent copy of the SQLite ledger taken through a read-only
connection (the SQLite backup API), opened by Datasette in immutable mode, so nothing an auditor
clicks can write to the ledger and a run that appends meanwhile changes nothing on the page (the
page names the head it shows). Every table and view is described (``web_descriptions``), and canned
queries follow a claim: ``claims`` -> ``claim`` (its tests and outcomes) -> ``test_rows`` (exactly the
evidence rows a test computed on) -> ``checkpoint`` (the lineage back to the base model); keys in
those pages are links (the plugin in ``datasette_plugins``). The HTML report of every registered
protocol and release is written beside the snapshot and served under ``/report/``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledger.report.html import report_for_protocol_name
from ledger.report.web_descriptions import describe
from ledger.store import Store, open_store

DATABASE = "ledger"  # the snapshot's file stem: Datasette serves it at /ledger
PLUGINS_DIR = Path(__file__).resolve().parent / "datasette_plugins"

CANNED_QUERIES = {
    "claims": {
        "title": "Every claim",
        "description": "Each preregistered claim with its first recorded outcome (its result). "
        "Click a claim to see its statistical tests.",
        "sql": """SELECT s.claim_id,
       json_extract(cl.spec_json, '$.statement') AS statement,
       json_extract(cl.spec_json, '$.statistic') AS statistic,
       s.first_outcome,
       s.latest_outcome,
       s.n_evaluations,
       p.name AS protocol,
       p.version,
       s.registered_at
FROM v_claim_status s
JOIN claims cl ON cl.claim_id = s.claim_id
LEFT JOIN protocols p ON p.sha256 = cl.protocol_sha256
ORDER BY cl.id""",
    },
    "claim": {
        "title": "One claim: its tests and outcomes",
        "description": "Every recorded outcome of the claim and the statistical test it rests on. "
        "Click a test to see exactly the evidence rows it computed on.",
        "sql": """SELECT cl.claim_id,
       json_extract(cl.spec_json, '$.statement') AS statement,
       o.outcome,
       o.reason,
       o.stat_test_id AS test_id,
       t.statistic,
       t.method,
       t.n,
       t.estimate,
       t.ci_low,
       t.ci_high,
       t.p_value,
       (SELECT COUNT(*) FROM stat_test_evidence s WHERE s.test_id = t.test_id) AS evidence_rows,
       o.recorded_at AS judged_at
FROM claims cl
LEFT JOIN claim_outcomes o ON o.claim_id = cl.claim_id
LEFT JOIN stat_tests t ON t.test_id = o.stat_test_id
WHERE cl.claim_id = :claim_id
ORDER BY o.id""",
    },
    "test_rows": {
        "title": "The evidence rows of one statistical test",
        "description": "Exactly the readings the test computed on, each with the checkpoint that read it. "
        "Click a checkpoint to see its lineage, an evidence id to see the whole row.",
        "sql": """SELECT evidence_id, arm, checkpoint_sha256, row_id, depth, loop, prediction, correct, role, claim_id
FROM v_claim_evidence
WHERE test_id = :test_id
ORDER BY arm, depth, row_id""",
    },
    "checkpoint": {
        "title": "One checkpoint and its lineage",
        "description": "The checkpoint (generation 0) and each ancestor back to the base model, with status "
        "and file. Gate results of the checkpoint are in the gate_results table.",
        "sql": """SELECT generation, ancestor_sha256, ancestor_arm, ancestor_stage, ancestor_status, ancestor_path,
       checkpoint_sha256
FROM v_lineage
WHERE checkpoint_sha256 = :checkpoint_sha256
ORDER BY generation""",
    },
}


class ServeError(Exception):
    """A ledger that cannot be served (not SQLite); the message says what to do."""


@dataclass(frozen=True)
class ServeFiles:
    database: Path
    metadata: Path
    reports: Path
    head: tuple[str, int]
    report_names: tuple[str, ...]


def snapshot(store: Store, path: Path) -> None:
    """A consistent copy of the ledger (the SQLite backup API over the store's read-only connection)."""
    if store.dialect != "sqlite":
        raise ServeError(
            f"`ledger serve` shows SQLite ledgers (Datasette reads SQLite); this one is {store.dialect}: "
            "query it with `ledger query`, or point an SQLite browser at a copy"
        )
    raw = store.engine.raw_connection()
    try:
        target = sqlite3.connect(path)
        try:
            raw.driver_connection.backup(target)  # type: ignore[union-attr]
            target.execute("PRAGMA journal_mode=DELETE")  # one file: immutable mode reads no -wal
        finally:
            target.close()
    finally:
        raw.close()


def metadata(database: Path, head: tuple[str, int], report_names: tuple[str, ...]) -> dict:
    """Datasette metadata: every table and view described, the canned queries, links to the reports."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        names = connection.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        tables = {}
        for (name,) in names:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')]
            description, described = describe(name, columns)
            tables[name] = {"description": description, "columns": described}
    finally:
        connection.close()
    reports = "".join(f'<li><a href="/report/{name}/report.html">{name}</a></li>' for name in report_names)
    root, size = head
    return {
        "title": "ledger: the auditor's view",
        "description_html": (
            f"<p>A read-only snapshot of the ledger at head <code>{root}</code> ({size} entries). "
            f'Start at <a href="/{DATABASE}/claims">every claim</a>: a claim leads to its statistical tests, a '
            "test to exactly the evidence rows it computed on, a row to the checkpoint that read it and its "
            "lineage. Check the snapshot against a published head with <code>ledger verify --trusted-head</code>."
            f"</p><p>Reports:</p><ul>{reports or '<li>none: no protocol has evidence yet</li>'}</ul>"
        ),
        "databases": {DATABASE: {"tables": tables, "queries": CANNED_QUERIES}},
    }


def prepare(store: Store, folder: Path, *, progress: Callable[[str], None] = lambda _: None) -> ServeFiles:
    """The snapshot of ``store``, its metadata and the reports in ``folder``: what ``datasette`` starts with."""
    database = folder / f"{DATABASE}.db"
    reports = folder / "report"
    snapshot(store, database)
    with open_store(f"sqlite:///{database}", create=False, read_only=True) as store:
        head = store.head()
        names = sorted({protocol.name for protocol in store.protocols()})
        written = []
        for name in names:
            progress(f"report: {name}")
            try:
                report_for_protocol_name(store, name, reports / name)
                written.append(name)
            except LookupError:  # a protocol without runs yet: nothing to report
                continue
    meta = metadata(database, head, tuple(written))
    meta_path = folder / "metadata.json"
    meta_path.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return ServeFiles(database, meta_path, reports, head, tuple(written))


def datasette_command(files: ServeFiles, *, host: str, port: int, open_browser: bool) -> list[str]:
    """The ``datasette serve`` command line: immutable, time-limited queries, the reports, the link plugin."""
    files.reports.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "datasette", "serve", "--immutable", str(files.database)]
    command += ["--metadata", str(files.metadata), "--plugins-dir", str(PLUGINS_DIR)]
    command += ["--static", f"report:{files.reports}", "--host", host, "--port", str(port)]
    command += ["--setting", "sql_time_limit_ms", "5000", "--setting", "max_returned_rows", "5000"]
    return command + (["--open"] if open_browser else [])
