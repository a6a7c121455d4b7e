"""``ledger query`` on PostgreSQL refuses server functions by name, as the server reads the statement.

A READ ONLY transaction lets ``pg_advisory_lock`` take a session lock that outlives its rollback, lets
``set_config`` and ``pg_terminate_backend`` run and ``pg_read_file`` read the server's files. Each tricky spelling
below is checked twice: with a refused function it is refused, and with the harmless ``pg_typeof`` in its place the
server runs it and returns the function's result, which proves the server read the name as a call where the
check did (not as part of a string or a comment).
"""

from __future__ import annotations

import pytest

from ledger.cli.main import main
from ledger.store import ReadOnlyViolation
from ledger.store.pg_refusals import postgres_refusal

# {f}: the function's name; each, with pg_typeof, is a statement PostgreSQL runs and whose last column is 'integer'
SPELLINGS = [
    "SELECT {f}(1)",
    "SELECT pg_catalog.{F}(7)",  # schema-qualified, upper case
    'SELECT "pg_catalog" . "{f}" -- a comment between the name and its bracket\n (1)',
    "SELECT {F}/* hidden */ (1)",
    "SELECT x FROM (SELECT {f}(1) AS x) AS sub",  # in a subquery
    "SELECT (1).{f}",  # attribute notation: x.f is f(x)
    "SELECT E'\\'', {f}(1)",  # E'\'' is one quote: a reader without E strings sees one long string
    "SELECT E'a'\n'\\'', {f}(1)",  # a string continued on the next line stays an E string
    "SELECT 1 AS a$b$, {f}(1) AS z$b$",  # $b$ inside names opens no dollar quote
    "SELECT $q$ ' $q$, {f}(1)",  # the quote is inside the dollar quote
]
REFUSED = [
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_lock(1)",
    "SELECT set_config('statement_timeout', '0', false)",
    "SELECT set_config('transaction_read_only', 'off', true)",
    "SELECT pg_terminate_backend(pg_backend_pid())",
    "SELECT pg_cancel_backend(1)",
    "SELECT pg_reload_conf()",
    "SELECT pg_notify('channel', 'payload')",
    "SELECT lo_import('/etc/hostname')",
    "SELECT lo_export(1, '/tmp/x')",
    "SELECT lo_create(0)",
    "SELECT loread(0, 1)",
    "SELECT pg_read_file('PG_VERSION')",
    "SELECT pg_read_binary_file('PG_VERSION')",
    "SELECT * FROM pg_ls_dir('.')",
    "SELECT (pg_stat_file('PG_VERSION')).size",
    "SELECT dblink('dbname=postgres', 'SELECT 1')",
    "SELECT nextval('s')",
    "SELECT setval('s', 1)",
    "SELECT pg_sleep(60)",
    "SELECT txid_current()",
    "SELECT query_to_xml('SELECT pg_read_file(''PG_VERSION'')', true, true, '')",
    "SELECT s.pg_read_file FROM unnest(ARRAY['PG_VERSION']) AS s",
    'SELECT U&"pg_sl\\0065ep"(1)',  # an identifier spelt with escapes could spell any name
]
ACCEPTED = [
    "SELECT 'pg_read_file' AS name",
    "SELECT 'pg_read_file(''/etc/passwd'')' AS name",
    "SELECT 1 AS one -- pg_read_file('/etc/passwd')",
    "SELECT /* pg_sleep(60) */ 1 AS one",
    "SELECT $$pg_sleep(60)$$ AS t",
    "SELECT $tag$ it's pg_ls_dir('.') $tag$ AS t",
    "SELECT E'it\\'s pg_read_file(' AS t",
    'SELECT "pg_sleep" FROM (SELECT 1 AS "pg_sleep") AS t',  # a column named like one is not a call
    "SELECT pg_typeof(1), pg_column_size('abc'), pg_size_pretty(1024::bigint)",
    "SELECT COUNT(*) FROM pg_class",
    "SELECT COUNT(*) FROM evidence;",
    "SELECT 'a;b' AS t",
]


# PostgreSQL's block comments nest; the statement filter before this check strips comments the SQLite way, so
# this one never reaches the server whole and is checked here only
NESTED_COMMENT = "SELECT /* a /* nested */ comment */ {f}(1)"


@pytest.mark.parametrize("spelling", [*SPELLINGS, NESTED_COMMENT])
def test_every_spelling_of_a_call_is_refused(spelling):
    for name in ("pg_advisory_lock", "pg_read_file", "set_config", "lo_import"):
        sql = spelling.format(f=name, F=name.upper())
        assert postgres_refusal(sql) is not None, sql
    assert postgres_refusal(spelling.format(f="pg_typeof", F="PG_TYPEOF")) is None


@pytest.mark.parametrize("sql", REFUSED)
def test_server_functions_are_refused_by_name(sql):
    reason = postgres_refusal(sql)
    assert reason is not None and "\n" not in reason


@pytest.mark.parametrize("sql", ACCEPTED)
def test_names_in_strings_comments_and_columns_are_no_calls(sql):
    assert postgres_refusal(sql) is None


def test_a_second_statement_is_refused_where_a_simpler_reader_sees_a_string():
    # E'\'' ends after one quote: the rest is two more statements, the first of which ends the READ ONLY transaction
    assert postgres_refusal("SELECT E'\\'' ; COMMIT; CREATE TABLE pwned (x int) --'") == "only one statement per query"
    assert postgres_refusal("SELECT 1;;") is None


POSTGRESQL = pytest.mark.parametrize("example_template", ["postgresql"], indirect=True)


@POSTGRESQL
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_server_reads_each_spelling_as_the_check_does(example, spelling):
    store, _, _ = example
    lock = spelling.format(f="pg_advisory_lock", F="PG_ADVISORY_LOCK")
    with pytest.raises(ReadOnlyViolation, match="pg_advisory_lock"):
        store.query(lock)
    # a session lock outlives the rollback: had the statement run, the pooled connection would still hold it (in
    # this test's own database: tests beside it on the same server take advisory locks of their own)
    held = "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
    held += "WHERE l.locktype = 'advisory' AND d.datname = current_database()"
    assert store.query(held).rows == [(0,)]
    harmless = store.query(spelling.format(f="pg_typeof", F="PG_TYPEOF"))
    assert harmless.rows[0][-1] == "integer", harmless.rows


@POSTGRESQL
def test_ledger_query_refuses_server_functions_in_one_line_exit_3(example, capsys):
    _, keys, url = example
    hidden = "select /* x */ PG_CATALOG.Pg_Read_File -- y\n ('PG_VERSION')"
    for sql in ("SELECT pg_catalog.PG_ADVISORY_LOCK(7)", hidden, "SELECT n FROM (SELECT pg_sleep(30) AS n) AS s"):
        assert main(["query", sql, "--db", url]) == 3
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("refused: read-only query refused: ") and "()" in lines[0]
    assert main(["query", "SELECT 'pg_read_file' AS s, pg_typeof(1) AS t", "--db", url, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["s,t", "pg_read_file,integer"]
    assert main(["query", "SELECT COUNT(*) AS n FROM evidence", "--db", url, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", str(keys["n_evidence"])]


@POSTGRESQL
def test_a_second_statement_cannot_end_the_read_only_transaction(example):
    store, _, _ = example
    head = store.head()
    with pytest.raises(ReadOnlyViolation, match="only one statement"):
        store.query("SELECT E'\\'' ; COMMIT; CREATE TABLE pwned (x int) --'")
    assert store.query("SELECT to_regclass('pwned') IS NULL AS absent").rows == [(1,)]
    assert store.head() == head
