"""What ``ledger query`` refuses on PostgreSQL before the server sees it: server functions, and a second statement.

A READ ONLY transaction stops writes to tables, not a function that changes the server or reads its files:
``pg_advisory_lock`` (a session lock that outlives the rollback), ``set_config``, ``pg_terminate_backend``,
``pg_read_file``, ``lo_import``, ``pg_notify``, ``dblink``, ``pg_sleep``... So a statement that calls one is refused
by name, on the server's own reading of it (``pg_tokens``; a name inside a string literal or a comment is no call):

* every function whose name starts with ``pg_`` or ``lo_`` (server administration, files, backend signals,
  advisory locks, notifications, replication, statistics resets, sleeping, large objects), except the harmless
  ones in ``HARMLESS`` (``pg_typeof``, ``pg_column_size``, sizes, catalog definitions, visibility tests);
* ``loread``, ``lowrite``; ``set_config``; ``nextval``, ``setval``, ``currval``, ``lastval``; ``txid_*``;
  ``dblink*``; functions that run SQL given as text (``query_to_xml``, ``cursor_to_xml``, ``table_to_xml``,
  ``schema_to_xml``, ``database_to_xml`` and their variants, ``ts_stat``, ``ts_rewrite``, ``crosstab*``,
  ``connectby``); index maintenance (``brin_*``, ``gin_clean_pending_list``); ``binary_upgrade_*``.

A name counts as called when ``(`` follows it, schema-qualified or not (``pg_catalog . "PG_SLEEP" (1)``), and
also after a dot, since PostgreSQL reads ``x.f`` as ``f(x)``: ``('/etc/passwd'::text).pg_read_file`` reads the
file. A catalog table is therefore named without its schema (``pg_tables``, not ``pg_catalog.pg_tables``).
Identifiers spelt with Unicode escapes (``U&"..."``) are refused: they could spell any name.

One statement only, by the same reading: the driver runs ``SELECT 1; COMMIT; CREATE TABLE ...`` sent as one
text, and a ``;`` that a simpler reader takes for part of a string (``E'\\''``) would end the READ ONLY
transaction. Extension functions installed in the database are the database role's to bound (docs/guide.md).
"""

from __future__ import annotations

from ledger.store.pg_tokens import NAME, SYMBOL, UNICODE_NAME, Token, tokens

REFUSED_PREFIXES = (
    "pg_",
    "lo_",
    "txid_",
    "dblink",
    "query_to_xml",
    "cursor_to_xml",
    "table_to_xml",
    "schema_to_xml",
    "database_to_xml",
    "crosstab",
    "brin_",
    "binary_upgrade_",
)
REFUSED_NAMES = frozenset(
    {
        "loread",
        "lowrite",
        "set_config",
        "nextval",
        "setval",
        "currval",
        "lastval",
        "ts_stat",
        "ts_rewrite",
        "connectby",
        "gin_clean_pending_list",
    }
)
# pg_ functions that only read what the session may already see: types, sizes, catalog definitions
HARMLESS = frozenset(
    {
        "pg_typeof",
        "pg_column_size",
        "pg_column_compression",
        "pg_size_pretty",
        "pg_size_bytes",
        "pg_relation_size",
        "pg_total_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_database_size",
        "pg_get_viewdef",
        "pg_get_indexdef",
        "pg_get_constraintdef",
        "pg_get_triggerdef",
        "pg_get_functiondef",
        "pg_get_function_arguments",
        "pg_get_function_result",
        "pg_get_expr",
        "pg_get_userbyid",
        "pg_get_serial_sequence",
        "pg_get_keywords",
        "pg_table_is_visible",
        "pg_type_is_visible",
        "pg_function_is_visible",
        "pg_encoding_to_char",
        "pg_client_encoding",
        "pg_backend_pid",
        "pg_postmaster_start_time",
        "pg_is_in_recovery",
        "pg_input_is_valid",
        "pg_has_role",
        "pg_describe_object",
        "pg_identify_object",
    }
)


def is_refused_function(name: str) -> bool:
    """Whether ``ledger query`` refuses a call of the function ``name`` (lower case, without its schema)."""
    return name not in HARMLESS and (name in REFUSED_NAMES or name.startswith(REFUSED_PREFIXES))


def _is(token: Token | None, symbol: str) -> bool:
    return token is not None and token.kind == SYMBOL and token.text == symbol


def postgres_refusal(sql: str) -> str | None:
    """Why ``ledger query`` refuses ``sql`` on PostgreSQL (one line), or None."""
    found = tokens(sql)
    statement_end = max((k for k, token in enumerate(found) if not _is(token, ";")), default=-1)
    for k, token in enumerate(found):
        before = found[k - 1] if k > 0 else None
        after = found[k + 1] if k + 1 < len(found) else None
        if _is(token, ";") and k < statement_end:
            return "only one statement per query"
        if token.kind == UNICODE_NAME:
            return f"identifiers spelt with Unicode escapes ({token.text[:30]}) are not accepted"
        if token.kind != NAME or not is_refused_function(token.text):
            continue
        if _is(after, "("):
            return (
                f"{token.text}() is a PostgreSQL server function ledger query does not run (server administration, "
                "files, large objects, locks, notifications, sequences, settings, other sessions, dblink: "
                "docs/guide.md)"
            )
        if _is(before, "."):
            return (
                f".{token.text} may call the server function {token.text}() (PostgreSQL reads x.f as f(x)), which "
                f"ledger query does not run; name a catalog table without its schema ({token.text}, not "
                f"pg_catalog.{token.text})"
            )
    return None
