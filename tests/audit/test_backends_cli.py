"""The `ledger` commands on PostgreSQL give what they give on SQLite.

One session of commands (db upgrade, register, verify --record, verify, head, query,
deviate, verify --since-head, a refused write, a tamper) runs against a SQLite file and
against a fresh PostgreSQL database; every exit code and every line of output must be the
same, but for what differs by construction: the head's Merkle root (the chain entries hold
their timestamps), the URL and the session's folder. Then the external audit (`verify
--import` of the released rows) on PostgreSQL, with the figures the SQLite test pins.

The protocol and claims are test_verify.py's tiny ones.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

from databases import behind_the_stores_back, fresh_database
from sqlalchemy import text
from test_verify import (  # the same hand-written ledger as the SQLite tests
    CLAIMS,
    PROTOCOL,
    REFERENCE,
    ROOT,
    write_evidence,
)

from ledger.cli.main import main

QUERIES = [
    "SELECT arm, COUNT(*) AS n FROM evidence GROUP BY arm ORDER BY arm",
    "SELECT arm, depth, loop, n, correct, accuracy FROM v_accuracy_by_arm_depth ORDER BY arm, depth, loop",
    "SELECT claim_id, first_outcome, latest_outcome, n_evaluations FROM v_claim_status ORDER BY claim_id",
    "SELECT row_id, depth, loop, correct FROM v_final_readings WHERE arm = 'B' ORDER BY row_id",
    "SELECT checkpoint_sha256, generation, ancestor_sha256 FROM v_lineage ORDER BY checkpoint_sha256, generation",
]


def _evidence(folder: Path, db: str) -> None:
    write_evidence(folder, db)


def _session(folder: Path, db: str, capsys, monkeypatch) -> list[tuple[str, int, str]]:
    """(command, exit code, output) of one session against ``db``, run in ``folder``."""
    folder.mkdir()
    monkeypatch.chdir(folder)
    # the checkpoint files lie in the session's folder: its artifacts root on both backends (a server database has
    # no folder of its own, and a recorded path outside the root is never opened)
    monkeypatch.setenv("LEDGER_ARTIFACTS", str(folder))
    (folder / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (folder / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    seen: list[tuple[str, int, str]] = []
    roots: set[str] = set()

    def ledger(*args: str) -> str:
        capsys.readouterr()
        code = main([*args, "--db", db])
        out, err = capsys.readouterr()
        output = out + err
        roots.update(re.findall(r"\b[0-9a-f]{64}(?=:\d+\b)", output))  # Merkle heads: ROOT:SIZE
        roots.update(re.findall(r'"root": "([0-9a-f]{64})"', output))  # and in --json
        for root in roots:
            output = output.replace(root, "<root>")
        output = output.replace(db, "<db>").replace(str(folder), "<dir>")
        seen.append((" ".join(args), code, output))
        return out

    ledger("db", "upgrade")
    ledger("register", "protocol.yaml")
    _evidence(folder, db)
    ledger("verify", "claims.yaml", "--record", "--json")
    ledger("verify", "claims.yaml")
    head = ledger("head").strip()
    for sql in QUERIES:
        ledger("query", sql, "--format", "json")
    ledger("query", "DELETE FROM evidence")  # refused: exit 3
    (folder / "protocol.yaml").write_text(PROTOCOL.replace("split: [1, 3]", "split: [1, 2]"), encoding="utf-8")
    ledger("deviate", "protocol.yaml", "--reason", "block too deep", "--timing", "after_data")
    ledger("verify", "claims.yaml", "--json", "--since-head", head)
    with behind_the_stores_back(db) as conn:  # a tamperer flips the latest reading
        conn.execute(text("UPDATE evidence SET correct = NOT correct WHERE id = (SELECT MAX(id) FROM evidence)"))
    ledger("verify", "claims.yaml", "--json")
    return seen


def _without_schema_lines(output: str) -> str:
    """A verify report without its schema findings (they differ by how each backend's tamperer works)."""
    try:
        report = json.loads(output)
    except ValueError:
        return output
    if isinstance(report, dict) and "chain_problems" in report:
        report["chain_problems"] = [p for p in report["chain_problems"] if not p.startswith("schema:")]
        return json.dumps(report, indent=2, sort_keys=True)
    return output


def test_a_session_of_commands_is_the_same_on_postgresql_as_on_sqlite(tmp_path, capsys, monkeypatch):
    sessions = {}
    for backend in ("sqlite", "postgresql"):
        with fresh_database(backend, tmp_path) as db:
            sessions[backend] = _session(tmp_path / backend, db, capsys, monkeypatch)
    sqlite, postgresql = sessions["sqlite"], sessions["postgresql"]
    assert [code for _, code, _ in sqlite] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 4], sqlite
    for (command, code, output), (_, pg_code, pg_output) in zip(sqlite, postgresql, strict=True):
        output, pg_output = _without_schema_lines(output), _without_schema_lines(pg_output)
        diff = "\n".join(difflib.unified_diff(output.splitlines(), pg_output.splitlines(), "sqlite", "postgresql"))
        assert (pg_code, pg_output) == (code, output), f"`ledger {command}`:\n{diff}"
    # and the outputs say what they should
    first, _ = json.loads(sqlite[2][2]), json.loads(sqlite[-1][2])
    assert {claim["outcome"] for claim in first["claims"]} == {"supported"}
    tampered = json.loads(sqlite[-1][2])
    assert any("evidence" in problem for problem in tampered["chain_problems"])
    # the SQLite tamperer had to drop the append-only triggers, and verify says so; the PostgreSQL one switched
    # them off for its session only (session_replication_role), which leaves the schema as it was
    assert any("trigger 'evidence_no_update' is missing" in problem for problem in tampered["chain_problems"])
    assert not any(problem.startswith("schema:") for problem in json.loads(postgresql[-1][2])["chain_problems"])
    assert {claim["integrity"] for claim in tampered["claims"]} == {"tampered"}
    assert "consistent" in json.loads(sqlite[-2][2])["since_head"]


def test_the_external_audit_on_postgresql(tmp_path, capsys, monkeypatch):
    """`verify --import` of the released rows into an empty PostgreSQL database: the figures of the SQLite test."""
    assert REFERENCE.is_dir(), f"the released reference data is missing: expected it at {REFERENCE}"
    monkeypatch.chdir(ROOT)
    with fresh_database("postgresql", tmp_path) as db:
        capsys.readouterr()
        code = main(["verify", "claims/external/", "--import", "--db", db, "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0, [claim for claim in report["claims"] if not claim["ok"]]
        claims = {claim["claim_id"]: claim for claim in report["claims"]}
        a_vs_b = claims["phaseA_A_vs_B"]["figures"]
        assert (a_vs_b["helped"], a_vs_b["hurt"], a_vs_b["ties"]) == (1048, 38, 706)
        assert f"{a_vs_b['p_value']:.2e}" == "5.72e-257"
        assert claims["phaseA_B_total"]["figures"]["correct"] == 496
        assert round(claims["n24_support12_frontier"]["figures"]["frontier"], 2) == 17.93
        assert main(["import", "releases/recurrent-qwen-svgd.yaml", "--db", db]) == 0  # imported once only
        assert "already imported" in capsys.readouterr().out
        assert main(["head", "--db", db]) == 0
        assert capsys.readouterr().out.strip().endswith(f":{report['head']['size']}")
