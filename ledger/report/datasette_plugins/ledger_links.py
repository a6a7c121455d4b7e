"""A Datasette plugin for ``ledger serve``: keys in query results and views link to the page about them.

A claim id opens the claim (its tests and outcomes), a test id the exact evidence rows it computed on, a
checkpoint hash the checkpoint's lineage, an evidence id the evidence row: an auditor follows a claim to
its rows and checkpoints by clicking. Loaded with ``datasette --plugins-dir``; imports only Datasette.
"""

from urllib.parse import quote

from datasette import hookimpl
from markupsafe import Markup, escape

# column -> (canned query, its parameter); None: the table's row page
LINKS = {
    "claim_id": ("claim", "claim_id"),
    "test_id": ("test_rows", "test_id"),
    "stat_test_id": ("test_rows", "test_id"),
    "checkpoint_sha256": ("checkpoint", "checkpoint_sha256"),
    "ancestor_sha256": ("checkpoint", "checkpoint_sha256"),
    "parent_sha256": ("checkpoint", "checkpoint_sha256"),
    "evidence_id": ("evidence", None),
}


@hookimpl
def render_cell(value, column, table, database, datasette):
    # query results (table None) and views; a table's own pages keep Datasette's foreign-key links
    if column not in LINKS or value in (None, "") or not (table is None or table.startswith("v_")):
        return None
    target, parameter = LINKS[column]
    base = datasette.urls.database(database)
    href = (
        f"{base}/{target}/{quote(str(value))}"
        if parameter is None
        else f"{base}/{target}?{parameter}={quote(str(value), safe='')}"
    )
    return Markup(f'<a href="{escape(href)}">{escape(str(value))}</a>')
