"""A Datasette plugin for ``ledger serve``: a memory bound on what the auditor's SQL may build.

Datasette bounds a query's time and rows (``sql_time_limit_ms``, ``max_returned_rows``, ``max_csv_mb``: set on
its command line by ``web_view.datasette_command``), not its memory: within the time limit,
``group_concat(randomblob(1000000))`` over a recursive count to 900 builds a string of nearly a gigabyte, and each
of a page's rows can be one. So the Datasette process gets two ceilings:

* SQLite's hard heap limit (``PRAGMA hard_heap_limit``; one for the whole process, every connection's page
  cache, sorts and strings included): a statement that would pass it fails with "out of memory";
* on Linux, the process's address space (``RLIMIT_AS``): the rows fetched into Python and the page made of them.

A request past either fails alone, with an error page that says so (status 400); the server and the next
request go on. Loaded with ``datasette --plugins-dir``; imports only Datasette and the standard library.
"""

from __future__ import annotations

from datasette import hookimpl
from datasette.handle_exception import handle_exception as datasette_error_page
from datasette.utils.asgi import BadRequest

SQLITE_HEAP_LIMIT_BYTES = 512 * 2**20
ADDRESS_SPACE_LIMIT_BYTES = 4 * 2**30  # Datasette itself maps about 0.5 GiB


@hookimpl
def prepare_connection(conn, database, datasette):
    # before any SQL runs on the connection; the limit is process-wide, setting it again changes nothing
    conn.execute(f"PRAGMA hard_heap_limit = {SQLITE_HEAP_LIMIT_BYTES}")


@hookimpl
def startup(datasette):
    limit_address_space()


@hookimpl
def handle_exception(datasette, request, exception):
    if not isinstance(exception, MemoryError):
        return None
    message = (
        f"this query needs more memory than the web view allows (SQLite {SQLITE_HEAP_LIMIT_BYTES // 2**20} MiB, "
        f"the server {ADDRESS_SPACE_LIMIT_BYTES // 2**30} GiB): ask for fewer or smaller values"
    )
    return datasette_error_page(datasette, request, BadRequest(message))


def limit_address_space(limit: int = ADDRESS_SPACE_LIMIT_BYTES) -> None:
    """Lower this process's address-space limit to ``limit`` (never raise it); a no-op where there is none."""
    try:
        import resource
    except ImportError:  # not on Windows: SQLite's heap limit still holds
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
