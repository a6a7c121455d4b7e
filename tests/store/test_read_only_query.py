"""``Store.query``, the auditor's SQL, on both backends: only reads get through (the statement
filter, then SQLite's authorizer or PostgreSQL's READ ONLY transaction), and parameters bind
the same way on each."""

from __future__ import annotations

import pytest

from ledger.store import InvalidQuery, QueryTimeout, ReadOnlyViolation


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO chain_entries (seq) VALUES (999)",
        "insert into protocols default values",
        "UPDATE evidence SET correct = 1",
        "DELETE FROM evidence",
        "DROP TABLE evidence",
        "DROP VIEW v_lineage",
        "ATTACH DATABASE ':memory:' AS other",
        "DETACH DATABASE main",
        "CREATE TABLE x (y)",
        "ALTER TABLE evidence ADD COLUMN z",
        "REPLACE INTO runs (run_id) VALUES ('x')",
        "VACUUM",
        "BEGIN",
        "PRAGMA query_only = OFF",
        "PRAGMA query_only(0)",
        "PRAGMA journal_mode = DELETE",
        "SELECT 1; DELETE FROM evidence",
        "  /* comment */ -- another\n DELETE FROM evidence",
        "WITH x AS (SELECT 1) INSERT INTO chain_entries (seq) SELECT 999 FROM x",
        "WITH x AS (SELECT 1) DELETE FROM evidence",
        "SELECT * FROM pragma_table_info('evidence'); DROP TABLE evidence",
    ],
)
def test_query_refuses_writes(example, sql):
    store, _, _ = example
    head = store.head()
    with pytest.raises(ReadOnlyViolation):
        store.query(sql)
    assert store.head() == head
    # the pooled connection is writable again for the store itself
    store.append("note", {"after": sql})
    assert store.verify_chain().ok


POSTGRES_WRITES = [
    # statements the filter lets through (they start with SELECT, WITH or EXPLAIN): the server refuses them
    "EXPLAIN ANALYZE DELETE FROM evidence",
    "WITH gone AS (DELETE FROM evidence RETURNING id) SELECT COUNT(*) FROM gone",
    "SELECT * FROM evidence FOR UPDATE",
]  # set_config and the other server functions are refused by name: test_read_only_server_functions.py


@pytest.mark.parametrize("example_template", ["postgresql"], indirect=True)  # SQLite: its authorizer, above
@pytest.mark.parametrize("sql", POSTGRES_WRITES)
def test_query_refuses_writes_the_filter_lets_through_on_postgresql(example, sql):
    store, keys, _ = example
    assert store.dialect == "postgresql"
    head = store.head()
    with pytest.raises(ReadOnlyViolation, match="refused by the database"):
        store.query(sql)
    assert store.head() == head
    assert store.query("SELECT COUNT(*) FROM evidence").rows == [(keys["n_evidence"],)]
    store.append("note", {"after": sql})
    assert store.verify_chain().ok


def test_query_allows_reads_and_binds_parameters(example):
    store, keys, _ = example
    assert store.query("SELECT COUNT(*) AS n FROM evidence").records() == [{"n": keys["n_evidence"]}]
    assert store.query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT SUM(i) FROM n"
    ).rows == [(15,)]
    # named parameters are :name on every backend
    assert store.query("SELECT run_id FROM runs WHERE run_id = :r", {"r": keys["run"]}).rows == [(keys["run"],)]
    assert store.query("SELECT CAST(:n AS INTEGER) + 1 AS m", {"n": 41}).rows == [(42,)]
    # without parameters the statement is passed on verbatim: % and :word inside literals are text
    assert store.query("SELECT '12:00; not a statement' AS t").rows == [("12:00; not a statement",)]
    assert store.query("SELECT ':not_a_parameter' AS t").rows == [(":not_a_parameter",)]
    assert store.query("SELECT COUNT(*) FROM runs WHERE run_id LIKE 'run-%'").rows == [(1,)]
    # with parameters too
    like = store.query("SELECT COUNT(*) FROM runs WHERE run_id LIKE 'run-%' AND kind = :k", {"k": "eval"})
    assert like.rows == [(1,)]
    # views read the same on both: accuracy a float (PostgreSQL's NUMERIC is read as one), counts integers
    acc = store.query("SELECT n, correct, accuracy FROM v_accuracy_by_arm_depth").rows
    assert acc and all(type(n) is int and type(c) is int and type(a) is float for n, c, a in acc)
    # booleans as SQLite stores them, 0/1, on every backend; `WHERE correct` is portable SQL
    assert {c for (c,) in store.query("SELECT correct FROM evidence WHERE correct").rows} == {1}
    assert {type(c) for (c,) in store.query("SELECT correct FROM evidence").rows} == {int}
    if store.dialect == "sqlite":
        assert len(store.query("PRAGMA table_info(evidence)")) > 5
        assert store.query("PRAGMA integrity_check").rows == [("ok",)]
        assert len(store.query("EXPLAIN QUERY PLAN SELECT * FROM v_accuracy_by_arm_depth")) > 0
        assert store.query("SELECT row_id FROM evidence WHERE id = ?", [1]).rows  # the driver's positional style
    else:
        assert len(store.query("EXPLAIN SELECT * FROM v_accuracy_by_arm_depth")) > 0
        assert store.query("SELECT row_id FROM evidence WHERE id = %s", [1]).rows
        assert store.query("SELECT 2::integer * :n AS m", {"n": 21}).rows == [(42,)]  # casts are not parameters


@pytest.mark.parametrize("sql", ["SELEC 1", "", "  -- only a comment", "FOO bar"])
def test_what_is_not_a_statement_is_bad_input_not_a_refusal(example, sql):
    store, _, _ = example
    with pytest.raises(InvalidQuery) as caught:
        store.query(sql)
    assert not isinstance(caught.value, ReadOnlyViolation)


def test_comments_are_stripped_but_string_literals_are_left_alone(example):
    store, _, _ = example
    assert store.query("SELECT '--x' AS a, '/* y */' AS b -- a comment").rows == [("--x", "/* y */")]
    assert store.query("/* lead */ SELECT 'it''s -- text' AS t").rows == [("it's -- text",)]


def test_a_statement_past_its_time_limit_is_stopped(example):
    store, keys, _ = example
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    with pytest.raises(QueryTimeout, match=r"0\.5 s"):
        store.query(endless, timeout_s=0.5)
    # the connection is usable afterwards, with and without a limit
    assert store.query("SELECT COUNT(*) FROM evidence", timeout_s=5).rows == [(keys["n_evidence"],)]
    assert store.query("SELECT COUNT(*) FROM evidence").rows == [(keys["n_evidence"],)]
