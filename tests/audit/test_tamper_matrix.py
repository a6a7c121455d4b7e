"""The tamper matrix of issue 18: every edit that once passed `ledger verify` with exit 0, and every bad input
that once ended in a traceback or wrote something, each now caught with the right exit code and a message
naming what was wrong.

Each case starts from a fresh copy of one small ledger (a registered protocol with claims in a Holm family,
hand-written evidence for arms A and B on checkpoint files beside it, first outcomes recorded) and a head
signed before the edit, as a researcher publishes it. Cases covered elsewhere, on larger ledgers: a flipped
byte in an earlier stage of A and in the base model file (tests/run/test_rehash_lineage.py), claim-file edits
in claims/external/ (tests/audit/test_verify.py, the external audit), every field of every table
(tests/store/test_chain.py), the read-only journal mode (tests/audit/test_verify.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger.store import open_store
from tests.audit.test_verify import CLAIMS, PROTOCOL, run, write_evidence

# the paired claim in a Holm family (an accuracy claim has no p-value, so it may be in no family)
FAMILY_CLAIMS = CLAIMS.replace("direction: greater, alpha: 0.05}", "direction: greater, alpha: 0.05, family: A}")


def _build(folder: Path) -> None:
    """The template: checkpoint files recorded relative to the ledger's folder, so a copy is self-contained."""
    (folder / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (folder / "claims.yaml").write_text(FAMILY_CLAIMS, encoding="utf-8")
    db = f"sqlite:///{folder / 'ledger.db'}"
    assert run("register", str(folder / "protocol.yaml"), "--db", db) == 0
    write_evidence(folder, db, relative=True)
    assert run("verify", str(folder / "claims.yaml"), "--db", db, "--record") == 0
    with open_store(db) as store:  # two free notes last (what the reordering case swaps)
        store.append("note", {"n": 1})
        store.append("note", {"n": 2})
    assert run("key", "generate", "example.org/lab", "--out", str(folder)) == 0
    assert (
        run("head", "--db", db, "--sign", str(folder / "example.org_lab.key"), "--out", str(folder / "head.signed"))
        == 0
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("template")
    before = Path.cwd()
    os.chdir(folder)  # checkpoint paths are recorded as given: relative, beside the ledger
    try:
        _build(folder)
    finally:
        os.chdir(before)
    return folder


@pytest.fixture()
def ledger(template, tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "ledger"
    shutil.copytree(template, folder)
    monkeypatch.chdir(folder)
    return folder


def _edit(folder: Path, change: Callable[[sqlite3.Connection], object]) -> None:
    """Change the database behind the store's back as a careful tamperer would: drop the append-only
    triggers, edit, put the triggers back as they were (only the schema cases leave them out)."""
    connection = sqlite3.connect(folder / "ledger.db")
    triggers = connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        connection.execute(f'DROP TRIGGER "{name}"')
    change(connection)
    for _, sql in triggers:
        connection.execute(sql)
    connection.commit()
    connection.close()


def _rehash(connection: sqlite3.Connection) -> None:
    """Recompute every leaf, link and entry hash: the chain is internally consistent again."""
    prev = "0" * 64
    for seq, payload in connection.execute("SELECT seq, payload FROM chain_entries ORDER BY seq").fetchall():
        leaf = hashlib.sha256(b"\x00" + payload.encode()).hexdigest()
        entry = hashlib.sha256(bytes.fromhex(prev) + bytes.fromhex(leaf)).hexdigest()
        connection.execute(
            "UPDATE chain_entries SET leaf_hash = ?, prev_hash = ?, entry_hash = ? WHERE seq = ?",
            (leaf, prev, entry, seq),
        )
        prev = entry


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _rewrite_evidence(connection: sqlite3.Connection) -> None:
    """Every evidence row's latency changed in the table and in the chain, every hash recomputed."""
    connection.execute("UPDATE evidence SET latency_ms = 9.25")
    for seq, payload in connection.execute("SELECT seq, payload FROM chain_entries").fetchall():
        body = json.loads(payload)
        for record in (body.get("records") or {}).get("evidence", []):
            record["latency_ms"] = 9.25
        connection.execute("UPDATE chain_entries SET payload = ? WHERE seq = ?", (_canonical(body), seq))
    _rehash(connection)


def _drop_last_entry(connection: sqlite3.Connection) -> None:
    (last,) = connection.execute("SELECT MAX(seq) FROM chain_entries").fetchone()
    for (table,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('chain_entries', 'alembic_version')"
    ).fetchall():
        connection.execute(f'DELETE FROM "{table}" WHERE entry_seq = ?', (last,))
    connection.execute("DELETE FROM chain_entries WHERE seq = ?", (last,))
    _rehash(connection)


def _swap_last_two(connection: sqlite3.Connection) -> None:
    """The last two entries (records-free notes here) exchange places, seqs and timestamps renumbered."""
    rows = connection.execute("SELECT seq, kind, payload FROM chain_entries ORDER BY seq DESC LIMIT 2").fetchall()
    (b_seq, b_kind, b_payload), (a_seq, a_kind, a_payload) = rows
    a_body, b_body = json.loads(a_payload), json.loads(b_payload)
    a_body["seq"], b_body["seq"] = b_seq, a_seq
    a_ts, b_ts = a_body["ts"], b_body["ts"]
    a_body["ts"], b_body["ts"] = b_ts, a_ts
    for seq, kind, body in ((a_seq, b_kind, b_body), (b_seq, a_kind, a_body)):
        connection.execute(
            "UPDATE chain_entries SET kind = ?, payload = ?, recorded_at = ? WHERE seq = ?",
            (kind, _canonical(body), body["ts"], seq),
        )
    _rehash(connection)


def _append_forged_entry(connection: sqlite3.Connection) -> None:
    (last,) = connection.execute("SELECT MAX(seq) FROM chain_entries").fetchone()
    body = {
        "data": {"forged": True},
        "kind": "note",
        "records": {},
        "seq": last + 1,
        "ts": "2026-12-02T00:00:00.000000Z",
    }
    connection.execute(
        "INSERT INTO chain_entries (seq, kind, recorded_at, payload, leaf_hash, prev_hash, entry_hash) "
        "VALUES (?, 'note', ?, ?, '', '', ?)",
        (last + 1, body["ts"], _canonical(body), "f" * 64),
    )
    _rehash(connection)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


TRUSTED = ["--trusted-head", "head.signed", "--key", "example.org_lab.pub"]

# name -> (what the tamperer does to the copy, extra verify arguments, exit code, a fragment of the output)
CASES: dict[str, tuple[Callable[[Path], object], list[str], int, str]] = {
    # history: internally consistent rewrites, caught by the head published before them
    "evidence rewritten wholesale, every hash recomputed": (
        lambda f: _edit(f, _rewrite_evidence),
        TRUSTED,
        4,
        "does NOT extend the head",
    ),
    "truncated chain tail": (lambda f: _edit(f, _drop_last_entry), TRUSTED, 4, "fewer than the"),
    "reordered chain tail": (
        lambda f: _edit(f, _swap_last_two),
        TRUSTED,
        4,
        "does NOT extend the head",
    ),
    "without a trusted head, verify says what it did not prove": (
        lambda f: _edit(f, _rewrite_evidence),
        [],
        0,
        "history: checked for internal consistency only",
    ),
    "a forged entry appended: the log grew past the published head": (
        lambda f: _edit(f, _append_forged_entry),
        ["--since-head", "HEAD"],
        0,
        "entries without rewriting history",
    ),
    # files behind the claims
    "a flipped byte in arm B's checkpoint (read by A_beats_B only)": (
        lambda f: _flip(f / "B.safetensors"),
        [],
        4,
        "B.safetensors",
    ),
    "a flipped byte in arm A's checkpoint": (lambda f: _flip(f / "A.safetensors"), [], 4, "A.safetensors"),
    # the claim file after registration
    "a preregistered claim deleted from the claims file": (
        lambda f: (f / "claims.yaml").write_text(
            "\n".join(line for line in FAMILY_CLAIMS.splitlines() if "B_deep" not in line) + "\n", encoding="utf-8"
        ),
        [],
        4,
        "left out of",
    ),
    "a family's correction changed from holm to none": (
        lambda f: (f / "claims.yaml").write_text(FAMILY_CLAIMS.replace("holm", "none"), encoding="utf-8"),
        [],
        4,
        "registered as 'holm'",
    ),
    "a family's correction changed from holm to bonferroni": (
        lambda f: (f / "claims.yaml").write_text(FAMILY_CLAIMS.replace("holm", "bonferroni"), encoding="utf-8"),
        [],
        4,
        "registered as 'holm'",
    ),
    # the schema
    "append-only triggers dropped, no data changed": (lambda f: _edit_schema(f, drop_triggers=True), [], 4, "trigger"),
    "an extra table": (lambda f: _edit_schema(f, extra="CREATE TABLE shadow (x)"), [], 4, "shadow"),
    "an extra view": (lambda f: _edit_schema(f, extra="CREATE VIEW v_shadow AS SELECT 1"), [], 4, "v_shadow"),
}


def _edit_schema(folder: Path, *, drop_triggers: bool = False, extra: str | None = None) -> None:
    connection = sqlite3.connect(folder / "ledger.db")
    if drop_triggers:
        for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            connection.execute(f'DROP TRIGGER "{name}"')
    if extra:
        connection.execute(extra)
    connection.commit()
    connection.close()


@pytest.mark.parametrize("case", list(CASES))
def test_each_tamper_is_caught_with_its_exit_code_and_named(ledger, case, capsys):
    tamper, extra, code, fragment = CASES[case]
    db = f"sqlite:///{ledger / 'ledger.db'}"
    if "HEAD" in extra:  # a head written down before the edit
        capsys.readouterr()
        assert run("head", "--db", db) == 0
        extra = [capsys.readouterr().out.strip() if a == "HEAD" else a for a in extra]
    assert run("verify", "claims.yaml", "--db", db, *extra) == 0, "the copy verifies before the edit"
    tamper(ledger)
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db, *extra) == code
    captured = capsys.readouterr()
    assert fragment in captured.out + captured.err, captured.out + captured.err
    assert "Traceback" not in captured.err


# argv (DB: the copy's URL), exit code, a fragment of the one-line message; nothing may be created
BAD_INPUT: dict[str, tuple[list[str], int, str]] = {
    "--db names a file that is not a database": (["query", "SELECT 1", "--db", "claims.yaml"], 2, "claims.yaml"),
    "an unknown dialect": (["head", "--db", "nosuch://host/db"], 2, "unknown database"),
    "a driver that is not installed": (["head", "--db", "mysql+mysqldb://u@localhost/db"], 2, "not installed"),
    "a mistyped URL is not a folder": (["head", "--db", "sqlite:/missing/ledger.db"], 2, "no ledger database"),
    "head on a missing file": (["head", "--db", "sqlite:///missing.db"], 2, "no ledger database"),
    "query on a missing file": (["query", "SELECT 1", "--db", "sqlite:///missing.db"], 2, "no ledger database"),
    "verify on a missing database": (
        ["verify", "claims.yaml", "--db", "sqlite:///missing.db"],
        2,
        "no ledger database",
    ),
    "a misspelt statement": (["query", "SELEC 1", "--db", "DB"], 2, "not an SQL statement"),
    "an endless query": (
        [
            "query",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
            "--db",
            "DB",
            "--timeout",
            "0.3",
        ],
        2,
        "query stopped after 0.3 s",
    ),
    "a non-hex --since-head": (
        ["verify", "claims.yaml", "--db", "DB", "--since-head", "z" * 64 + ":3"],
        2,
        "ROOT:SIZE",
    ),
    "report of an unknown protocol": (["report", "nope", "--db", "DB", "--out", "out"], 2, "nope"),
    "history of an unknown protocol": (["history", "nope", "--db", "DB"], 2, "nope"),
    "a claim file that does not exist": (["verify", "claims/nope.yaml", "--db", "DB"], 2, "nope.yaml"),
    "a claim file with a typo": (["verify", "typo.yaml", "--db", "DB"], 2, "typo.yaml"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_and_creates_nothing(ledger, case, capsys):
    argv, code, fragment = BAD_INPUT[case]
    (ledger / "typo.yaml").write_text(FAMILY_CLAIMS.replace("threshold: 0.9", "treshold: 0.9"), encoding="utf-8")
    db = f"sqlite:///{ledger / 'ledger.db'}"
    before = sorted(path.relative_to(ledger) for path in ledger.rglob("*"))
    database = (ledger / "ledger.db").read_bytes()
    capsys.readouterr()
    assert run(*[db if a == "DB" else a for a in argv]) == code
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert sorted(path.relative_to(ledger) for path in ledger.rglob("*")) == before
    assert (ledger / "ledger.db").read_bytes() == database
    assert not Path("/missing").exists()


# issue 40: a checkpoint row whose path leads outside the artifacts root. The target outside is a FIFO: had
# verify opened it to hash it, it would wait for a writer forever (the subprocess's timeout), so a prompt
# "tampered" shows it was never opened.
ESCAPES: dict[str, Callable[[Path, Path], str]] = {
    "an absolute path elsewhere": lambda ledger, outside: str(outside),
    "a relative path climbing out": lambda ledger, outside: os.path.relpath(outside, ledger),
    "a link inside the root to a file outside": lambda ledger, outside: _link(ledger, outside),
}


def _link(ledger: Path, outside: Path) -> str:
    (ledger / "escape.safetensors").symlink_to(outside)
    return "escape.safetensors"


@pytest.mark.parametrize("case", list(ESCAPES))
def test_a_checkpoint_path_outside_the_artifacts_root_is_tampered_and_never_opened(ledger, tmp_path, case):
    import subprocess
    import sys

    outside = tmp_path / "elsewhere" / "secret"
    outside.parent.mkdir()
    os.mkfifo(outside)
    recorded = ESCAPES[case](ledger, outside)
    _edit(ledger, lambda c: c.execute("UPDATE checkpoints SET path = ? WHERE arm = 'A'", (recorded,)))
    done = subprocess.run(
        [sys.executable, "-m", "ledger", "verify", "claims.yaml", "--db", f"sqlite:///{ledger / 'ledger.db'}"],
        capture_output=True,
        text=True,
        cwd=ledger,
        timeout=120,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "outside the artifacts root" in done.stdout + done.stderr and "not opened" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def _drop_from(connection: sqlite3.Connection, first: int) -> None:
    """Every chain entry from ``first`` on, and the rows they wrote, gone; the rest re-hashed."""
    tables = connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('chain_entries', 'alembic_version')"
    ).fetchall()
    for (table,) in tables:
        connection.execute(f'DELETE FROM "{table}" WHERE entry_seq >= ?', (first,))
    connection.execute("DELETE FROM chain_entries WHERE seq >= ?", (first,))
    _rehash(connection)


@pytest.mark.parametrize("cut", ["the last outcome", "the last outcome and its test"])
def test_a_chain_cut_after_a_claims_test_or_beside_other_outcomes_is_flagged_without_a_trusted_head(
    ledger, cut, capsys
):
    """Truncation cannot be proved without a published head, but the ledger knows a run writes a claim's test and
    its outcome together, and every judgeable claim of a file at once: such a claim is "(missing)", not "(new)"."""
    db = f"sqlite:///{ledger / 'ledger.db'}"
    connection = sqlite3.connect(ledger / "ledger.db")
    outcome_seq, test_seq = connection.execute(
        "SELECT o.entry_seq, t.entry_seq FROM claim_outcomes o JOIN stat_tests t ON t.claim_id = o.claim_id "
        "ORDER BY o.entry_seq DESC LIMIT 1"
    ).fetchone()
    connection.close()
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db) == 0
    assert "(missing)" not in capsys.readouterr().out
    _edit(ledger, lambda c: _drop_from(c, outcome_seq if cut == "the last outcome" else test_seq))
    capsys.readouterr()
    code = run("verify", "claims.yaml", "--db", db, "--json")
    report = json.loads(capsys.readouterr().out)
    flagged = [claim for claim in report["claims"] if claim.get("first_outcome_missing")]
    assert code == 0 and len(flagged) == 1, report  # a flag: only a trusted head proves it
    reason = "its statistical test is recorded" if cut == "the last outcome" else "other claim(s) of this file"
    assert any(reason in flag for flag in flagged[0]["flags"]), flagged[0]["flags"]
    assert run("verify", "claims.yaml", "--db", db) == 0
    assert "(missing)" in capsys.readouterr().out
    # --record does not write a new "first" outcome over the trace of the cut
    with open_store(db) as store:
        size = store.head()[1]
    run("verify", "claims.yaml", "--db", db, "--record")
    with open_store(db) as store:
        assert store.head()[1] == size
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db) == 0 and "(missing)" in capsys.readouterr().out
