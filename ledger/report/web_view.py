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
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledger.report.html import report_for_protocol_name
from ledger.report.web_descriptions import describe
from ledger.store import Store, open_store
from ledger.store.snapshot import SnapshotRefused, schema_objects, snapshot_sqlite
from ledger.store.web_queries import CANNED_QUERIES

DATABASE = "ledger"  # the snapshot's file stem: Datasette serves it at /ledger
PLUGINS_DIR = Path(__file__).resolve().parent / "datasette_plugins"


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
    """A consistent copy of a SQLite ledger, or a one-line refusal for another database."""
    try:
        snapshot_sqlite(store, path)
    except SnapshotRefused as exc:
        raise ServeError(str(exc)) from None


def metadata(database: Path, head: tuple[str, int], report_names: tuple[str, ...]) -> dict:
    """Datasette metadata: every table and view described, the canned queries, links to the reports."""
    tables = {}
    for name, columns in schema_objects(database).items():
        description, described = describe(name, columns)
        tables[name] = {"description": description, "columns": described}
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
        # every canned page shows its table first, its SQL behind Datasette's "Show SQL" link
        "databases": {
            DATABASE: {"tables": tables, "queries": {n: {**q, "hide_sql": True} for n, q in CANNED_QUERIES.items()}}
        },
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


# What one request may take: its time, its rows, a CSV download's size, and at most three at once (each on one of
# Datasette's SQL threads). Memory is bounded by the plugin ledger_limits (SQLite's heap, the address space).
SETTINGS = {
    "sql_time_limit_ms": 5000,
    "max_returned_rows": 5000,
    "max_csv_mb": 100,
    "num_sql_threads": 3,
    "facet_time_limit_ms": 200,
}


def datasette_command(files: ServeFiles, *, host: str, port: int, open_browser: bool) -> list[str]:
    """The ``datasette serve`` command line: immutable, bounded queries, the reports, the plugins (links, limits)."""
    files.reports.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "datasette", "serve", "--immutable", str(files.database)]
    command += ["--metadata", str(files.metadata), "--plugins-dir", str(PLUGINS_DIR)]
    command += ["--static", f"report:{files.reports}", "--host", host, "--port", str(port)]
    for name, value in SETTINGS.items():
        command += ["--setting", name, str(value)]
    return command + (["--open"] if open_browser else [])
