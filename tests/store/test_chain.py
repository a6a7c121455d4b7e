"""The hash chain and the Merkle log: construction, tamper detection on every table and
column, RFC 6962 Merkle tree hashes and consistency proofs, and 'only grew since head'.

The chain tests run on both backends (a SQLite file and a PostgreSQL database, each test on
a copy of one example ledger); the tamperer edits through ``behind_the_stores_back``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime

import pytest
from databases import BACKENDS, backend_of, behind_the_stores_back, fresh_database
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.engine import Connection
from store_helpers import populate_example

from ledger.canonical import canonical_json
from ledger.store import ALL_TABLES, Store, make_engine, open_store
from ledger.store.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    leaf_hash,
    merkle_root,
    node_hash,
    split_point,
    verify_consistency,
)
from ledger.store.models import table as model_table

# --------------------------------------------------------------------------- reference Merkle


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def ref_mth(entries: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, written straight from the text, over the *data* entries."""
    n = len(entries)
    if n == 0:
        return sha(b"")
    if n == 1:
        return sha(b"\x00" + entries[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return sha(b"\x01" + ref_mth(entries[:k]) + ref_mth(entries[k:]))


def leaves_of(entries: list[bytes]) -> list[bytes]:
    return [sha(b"\x00" + e) for e in entries]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=20))
def test_merkle_root_matches_reference(entries):
    assert merkle_root(leaves_of(entries)) == ref_mth(entries)
    assert merkle_root([leaf.hex() for leaf in leaves_of(entries)]) == ref_mth(entries)  # hex accepted


def test_merkle_structure_rfc6962():
    entries = [bytes([i]) * 3 for i in range(20)]
    leaves = [leaf_hash(e) for e in entries]
    assert merkle_root([]) == EMPTY_ROOT == sha(b"")
    assert merkle_root(leaves[:1]) == leaves[0] == sha(b"\x00" + entries[0])
    assert merkle_root(leaves[:2]) == sha(b"\x01" + leaves[0] + leaves[1])
    # n=3: the left subtree is the largest power of two (2), the right a single leaf
    assert merkle_root(leaves[:3]) == node_hash(node_hash(leaves[0], leaves[1]), leaves[2])
    # n=7, the RFC 6962 section 2.1.3 example tree
    a, b, c, d, e, f, j = leaves[:7]
    g, h, i = node_hash(a, b), node_hash(c, d), node_hash(e, f)
    k, l = node_hash(g, h), node_hash(i, j)  # noqa: E741 - the RFC's names
    assert merkle_root(leaves[:7]) == node_hash(k, l)
    # its consistency proofs, as listed in the RFC
    assert consistency_proof(leaves[:7], 3) == [c, d, g, l]
    assert consistency_proof(leaves[:7], 4) == [l]
    assert consistency_proof(leaves[:7], 6) == [i, j, k]
    for n in range(2, 21):
        split = split_point(n)
        assert split & (split - 1) == 0 and split < n <= 2 * split
        assert merkle_root(leaves[:n]) == node_hash(merkle_root(leaves[:split]), merkle_root(leaves[split:n]))


def test_consistency_proofs_all_sizes_and_rewritten_history():
    entries = [f"entry {i}".encode() for i in range(20)]
    leaves = leaves_of(entries)
    checked = 0
    for n in range(21):
        new_root = merkle_root(leaves[:n])
        for m in range(n + 1):
            old_root = merkle_root(leaves[:m])
            proof = consistency_proof(leaves, m, n)
            checked += 1
            if m == 0:  # RFC 9162 proves 0 < m <= n only: every tree extends the empty one, no proof says so
                assert proof == []
                assert not verify_consistency(old_root, m, new_root, n, proof), (m, n)
                continue
            assert verify_consistency(old_root, m, new_root, n, proof), (m, n)
            assert verify_consistency(old_root.hex(), m, new_root.hex(), n, [p.hex() for p in proof])
            if m == n:
                assert proof == []
                continue
            # a rewritten history: change one of the first m entries, keep everything else
            for changed in {0, m - 1, m // 2}:
                forged = list(entries[:n])
                forged[changed] = b"forged " + forged[changed]
                forged_leaves = leaves_of(forged)
                forged_root = merkle_root(forged_leaves)
                forged_proof = consistency_proof(forged_leaves, m, n)
                assert not verify_consistency(old_root, m, forged_root, n, forged_proof), (m, n, changed)
                assert not verify_consistency(old_root, m, forged_root, n, proof), (m, n, changed)
            # a damaged proof or wrong sizes do not verify
            for index in range(len(proof)):
                bad = list(proof)
                bad[index] = sha(b"bad" + bad[index])
                assert not verify_consistency(old_root, m, new_root, n, bad)
            assert not verify_consistency(old_root, m, new_root, n, proof[:-1])
            assert not verify_consistency(old_root, m, new_root, n, proof + [leaves[0]])
            assert not verify_consistency(new_root, n, old_root, m, proof)
            if n < 20:
                assert not verify_consistency(old_root, m, merkle_root(leaves[: n + 1]), n + 1, proof)
    assert checked == sum(n + 1 for n in range(21))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=20).flatmap(
        lambda n: st.tuples(
            st.just(n), st.integers(min_value=1, max_value=n), st.lists(st.binary(max_size=8), min_size=n, max_size=n)
        )
    )
)
def test_consistency_property(case):
    n, m, entries = case
    leaves = leaves_of(entries)
    proof = consistency_proof(leaves, m, n)
    assert verify_consistency(ref_mth(entries[:m]), m, ref_mth(entries), n, proof)


# --------------------------------------------------------------------------- the chain in a store


@pytest.fixture(scope="module", params=BACKENDS)
def template(request, tmp_path_factory) -> str:
    with fresh_database(request.param, tmp_path_factory.mktemp("chain")) as url:
        with open_store(url) as store:
            populate_example(store)
        yield url


@pytest.fixture()
def copy_of_template(template, tmp_path) -> Callable[[], str]:
    """Each call: the URL of a fresh copy of the example ledger (dropped after the test)."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(fresh_database(backend_of(template), tmp_path, template=template))


def _store(url: str) -> Store:
    # the schema is known to be at head: skip the Alembic check to keep these tests fast
    return Store(make_engine(url), url)


def test_chain_construction_by_hand(template):
    with _store(template) as store:
        entries = store.rows_of("chain_entries")
        prev = "0" * 64
        for expected_seq, entry in enumerate(entries, start=1):
            payload = entry["payload"]
            body = json.loads(payload)
            assert canonical_json(body) == payload
            assert body["seq"] == entry["seq"] == expected_seq and body["kind"] == entry["kind"]
            ts = datetime.fromisoformat(body["ts"].replace("Z", "+00:00"))
            assert ts.tzinfo is not None and ts.utcoffset() == UTC.utcoffset(None)
            leaf = hashlib.sha256(b"\x00" + payload.encode("utf-8")).hexdigest()
            assert entry["leaf_hash"] == leaf
            assert entry["prev_hash"] == prev
            assert entry["entry_hash"] == hashlib.sha256(bytes.fromhex(prev) + bytes.fromhex(leaf)).hexdigest()
            prev = entry["entry_hash"]
        root, size = store.head()
        assert size == len(entries)
        assert root == ref_mth([e["payload"].encode("utf-8") for e in entries]).hex()
        report = store.verify_chain()
        assert report.ok, report.summary()
        assert report.root == root and report.n_entries == size
        # every domain row is in exactly one entry's payload, verbatim
        evidence = store.query("SELECT id, row_id, correct, score_margin FROM evidence ORDER BY id LIMIT 1").records()[
            0
        ]
        entry = next(e for e in entries if e["kind"] == "evidence")
        chained = json.loads(entry["payload"])["records"]["evidence"][0]
        assert chained["id"] == evidence["id"] and chained["row_id"] == evidence["row_id"]
        assert chained["correct"] is bool(evidence["correct"]) and chained["score_margin"] == evidence["score_margin"]


def _kind(table_name: str, column: str) -> str:
    from ledger.store.records import column_kind as _column_kind

    return _column_kind(model_table(table_name).c[column])


ENUMS = {
    "timing": ("before_data", "after_data", "after_analysis"),
    "status": ("promoted", "exploratory", "failed"),
    "outcome": ("supported", "refuted", "unverifiable"),
}


def _mutate(value, kind, column):
    if column in ENUMS and value in ENUMS[column]:  # stay within the CHECK constraint
        allowed = ENUMS[column]
        return allowed[(allowed.index(value) + 1) % len(allowed)]
    if value is None:
        return {"int": 7, "float": 0.5, "bool": True, "str": "x"}[kind]
    if kind == "bool":
        return not value
    if kind == "int":
        return value + 1000
    if kind == "float":
        return value + 0.5
    return value[:-1] + ("y" if value.endswith("x") else "x")  # the same length: within String(n) everywhere


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("table_name", ALL_TABLES)
def test_tampering_any_field_of_any_table_is_reported(copy_of_template, table_name, parts):
    """Alter one field of one row behind the store's back, for every column; put it back before the next.
    ``parts`` 3: the chain walked as three stretches (as a long ledger is, one process each) finds the same."""
    url = copy_of_template()
    pk = "seq" if table_name == "chain_entries" else "id"
    columns = [c.name for c in model_table(table_name).columns]
    for column in columns:
        with behind_the_stores_back(url) as conn:
            key, value = conn.execute(text(f'SELECT {pk}, "{column}" FROM "{table_name}" ORDER BY {pk} LIMIT 1')).one()
            new = _mutate(value, _kind(table_name, column), column)
            update = text(f'UPDATE "{table_name}" SET "{column}" = :new WHERE {pk} = :key')
            assert conn.execute(update, {"new": new, "key": key}).rowcount == 1
        with _store(url) as store:
            report = store.verify_chain(parts=parts)
        assert not report.ok, f"{table_name}.{column}: {value!r} -> {new!r} not detected"
        if table_name == "chain_entries":
            names = {f"seq={key}", f"seq={key + 1000 if column == 'seq' else key}"}
        else:
            names = {f"row id={key}", f"row id={key + 1000 if column == 'id' else key}"}
        hits = [p for p in report.problems if p.table == table_name and p.key in names]
        assert hits, f"{table_name}.{column}: problems do not name the row: {report.messages}"
        if table_name != "chain_entries" and column not in ("id", "entry_seq"):
            assert any(column in p.message for p in hits), report.messages
        with behind_the_stores_back(url) as conn:  # put it back
            conn.execute(update, {"new": value, "key": new if column == pk else key})
    with _store(url) as store:
        whole, split = store.verify_chain(), store.verify_chain(parts=parts)
    assert whole.ok and split.ok
    assert (split.root, split.n_entries, split.rows) == (whole.root, whole.n_entries, whole.rows)


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_inserted_and_deleted_rows_are_reported(copy_of_template, parts):
    url = copy_of_template()
    with behind_the_stores_back(url) as conn:
        conn.execute(text("DELETE FROM evidence WHERE id = 3"))
        # a row slipped in behind the store's back, tagged with an existing entry
        values = dict(
            conn.execute(text("SELECT * FROM gate_results WHERE id = 1")).mappings().one(), id=99, gate="forged"
        )
        conn.execute(
            text(f"INSERT INTO gate_results ({', '.join(values)}) VALUES ({', '.join(':' + k for k in values)})"),
            values,
        )
    with _store(url) as store:
        messages = store.verify_chain(parts=parts).messages
    assert any(m.startswith("evidence row id=3: recorded by chain entry") and "missing" in m for m in messages)
    assert any(m.startswith("gate_results row id=99: not recorded in the chain") for m in messages)


def _forge_chain(url: str, rewrite: Callable[[Connection], object]) -> None:
    """Rewrite chain payloads consistently (recomputing every leaf and entry hash)."""
    with behind_the_stores_back(url) as conn:
        rewrite(conn)
        prev = "0" * 64
        for seq, payload in conn.execute(text("SELECT seq, payload FROM chain_entries ORDER BY seq")).all():
            leaf = hashlib.sha256(b"\x00" + payload.encode()).hexdigest()
            entry = hashlib.sha256(bytes.fromhex(prev) + bytes.fromhex(leaf)).hexdigest()
            conn.execute(
                text(
                    "UPDATE chain_entries SET leaf_hash = :leaf, prev_hash = :prev, entry_hash = :entry WHERE seq = :seq"
                ),
                {"leaf": leaf, "prev": prev, "entry": entry, "seq": seq},
            )
            prev = entry


def test_verify_since_head(copy_of_template):
    url = copy_of_template()
    with _store(url) as store:
        empty_root = hashlib.sha256(b"").hexdigest()
        old_root, old_size = store.head()
        store.append("note", {"text": "later 1"})
        store.append("note", {"text": "later 2"})
        new_root, new_size = store.head()
        assert new_size == old_size + 2
        result = store.verify_since_head(old_root, old_size)
        assert result.ok, result.message
        assert result.new_root == new_root and result.new_size == new_size
        assert verify_consistency(old_root, old_size, new_root, new_size, result.proof)
        assert store.consistency_proof(old_size) == list(result.proof)
        assert store.verify_since_head(new_root, new_size).ok
        assert store.verify_since_head(empty_root, 0).ok
        assert (
            store.verify_since_head(empty_root.upper(), 0).ok and store.verify_since_head(old_root.upper(), old_size).ok
        )
        for size in range(1, new_size + 1):
            leaves = [bytes.fromhex(h) for h in store.leaf_hashes()[:size]]
            assert store.verify_since_head(merkle_root(leaves).hex(), size).ok
        wrong = store.verify_since_head("ab" * 32, old_size)
        assert not wrong.ok and "history was rewritten" in wrong.message
        assert not store.verify_since_head(new_root, new_size + 1).ok


def test_rewritten_history_passes_the_chain_but_not_the_head(copy_of_template):
    """A forger who recomputes every hash fools verify_chain, not a head written down earlier."""
    url = copy_of_template()
    with _store(url) as store:
        old_root, old_size = store.head()
        note_seq = store.rows_of("chain_entries", kind="note")[0]["seq"]

    def rewrite(conn):
        payload = conn.execute(text("SELECT payload FROM chain_entries WHERE seq = :s"), {"s": note_seq}).scalar_one()
        body = json.loads(payload)
        body["data"]["text"] = "a different history"
        conn.execute(
            text("UPDATE chain_entries SET payload = :p WHERE seq = :s"), {"p": canonical_json(body), "s": note_seq}
        )

    _forge_chain(url, rewrite)
    with _store(url) as store:
        assert store.verify_chain().ok  # internally consistent forgery
        assert store.head() != (old_root, old_size)
        result = store.verify_since_head(old_root, old_size)
        assert not result.ok and "history was rewritten" in result.message

    # truncating the log (dropping the last entry) is caught too
    url2 = copy_of_template()
    _forge_chain(url2, lambda conn: conn.execute(text("DELETE FROM chain_entries WHERE seq = :s"), {"s": old_size}))
    with _store(url2) as store:
        assert store.verify_chain().ok
        result = store.verify_since_head(old_root, old_size)
        assert not result.ok and "fewer" in result.message


def test_payload_edit_with_recomputed_hashes_is_caught_by_the_rows(copy_of_template):
    """Editing a record inside a payload (hashes recomputed) no longer matches the domain row."""
    url = copy_of_template()

    def rewrite(conn):
        seq, payload = conn.execute(text("SELECT seq, payload FROM chain_entries WHERE kind = 'evidence'")).one()
        body = json.loads(payload)
        body["records"]["evidence"][0]["correct"] = not body["records"]["evidence"][0]["correct"]
        conn.execute(
            text("UPDATE chain_entries SET payload = :p WHERE seq = :s"), {"p": canonical_json(body), "s": seq}
        )

    _forge_chain(url, rewrite)
    with _store(url) as store:
        messages = store.verify_chain().messages
    assert any(m.startswith("evidence row id=1: differs from chain entry") and "correct" in m for m in messages)


def test_a_chain_walked_in_parts_is_cut_into_that_many_stretches(copy_of_template):
    """The stretches cover every entry once, in order, each linked to the stored hash before it."""
    from ledger.store.chain_rows import entries_written
    from ledger.store.chain_walk import plan_parts
    from ledger.store.models import DOMAIN_TABLES

    with _store(copy_of_template()) as store, store.db.read() as conn:
        written = {name: entries_written(conn, name) for name in DOMAIN_TABLES}
        n_entries = conn.execute(text("SELECT COUNT(*) FROM chain_entries")).scalar_one()
        plan = plan_parts(conn, written, 3)
        hashes = dict(conn.execute(text("SELECT seq, entry_hash FROM chain_entries")).all())
    assert len(plan) == 3 and plan[0].after is None and plan[-1].through is None
    assert [part.after for part in plan[1:]] == [part.through for part in plan[:-1]]
    assert all(0 < part.through < n_entries for part in plan[:-1])
    assert [part.prev for part in plan[1:]] == [hashes[part.after] for part in plan[1:]]
