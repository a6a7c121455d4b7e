"""`ledger register / deviate / verify / head / query`: preregistration, tamper evidence, external audit.

`ledger verify` only reads; `--record` records first outcomes and `--import` imports the
releases that external claim files name.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.cli.main import main
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference" / "recurrent-qwen-svgd"

PROTOCOL = """\
name: tiny-verify
version: 1
description: A small protocol whose evidence the test writes by hand.
seed: 7
bases:
  tiny: {source: ./weights/tiny, dtype: float32, num_layers: 4}
manifests:
  - {id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 4, seed: 7, split: train}
  - {id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 8, seed: 7, split: test}
arms:
  - id: A
    kind: recurrent
    base: tiny
    surgery: {split: [1, 3]}
    bridge: {kind: split}
    budget: {kind: full_block}
    evaluation: {manifests: [eval]}
  - id: B
    kind: dense
    base: tiny
    evaluation: {manifests: [eval]}
claims: [claims.yaml]
"""

CLAIMS = """\
protocol: tiny-verify
correction: holm
claims:
  - {id: A_beats_B, statement: A beats B., statistic: paired_exact, arms: [A, B], manifest: eval, direction: greater, alpha: 0.05}
  - {id: A_accurate, statement: A is accurate., statistic: accuracy, arm: A, manifest: eval, threshold: 0.9}
  - {id: B_deep, statement: B holds at depth 3 (it does not)., statistic: accuracy, arm: B, manifest: eval, rows: {depths: [3, 3]}, threshold: 0.9, direction: at_most, requires: [A_beats_B]}
"""


def run(*argv: str) -> int:
    return main(list(argv))


def write_evidence(
    folder: Path,
    db: str,
    *,
    prefix: str = "eval",
    correct: Callable[[str, Any], bool] = lambda arm, row: arm == "A" or row.depth == 1,
    relative: bool = False,
) -> dict[str, Path]:
    """Readings for arms A and B of the registered PROTOCOL in ``folder`` (by default A always right, B right at
    depth 1 only), each on a checkpoint file of its own in runs named ``PREFIX-ARM``; returns the files by arm.
    ``relative``: the files are recorded by name (resolved beside the ledger), so a copied folder is whole."""
    protocol = load_protocol(folder / "protocol.yaml")
    manifest = build_manifests(protocol)["eval"]
    checkpoint_files = {}
    with open_store(db) as store:
        for arm in ("A", "B"):
            name = f"{arm}.safetensors" if prefix == "eval" else f"{arm}-{prefix}.safetensors"
            path = folder / name
            path.write_bytes(f"weights of {arm}".encode() * 64 if prefix == "eval" else f"{prefix} {arm}".encode() * 64)
            checkpoint_files[arm] = path
            run_id = store.add_run(run_id=f"{prefix}-{arm}", protocol_sha256=protocol.sha256, arm=arm)
            # by name: hashed from the working folder (the caller's), found beside the ledger by verify
            checkpoint = store.add_checkpoint(
                path=name if relative else str(path), arm=arm, status="promoted", run_id=run_id
            )
            store.add_evidence(
                [
                    {
                        "run_id": run_id,
                        "manifest_sha256": manifest.sha256,
                        "row_id": row.row_id,
                        "arm": arm,
                        "checkpoint_sha256": checkpoint,
                        "loop": row.depth if arm == "A" else 0,
                        "prediction": row.answer,
                        "correct": correct(arm, row),
                    }
                    for row in manifest.rows
                ]
            )
    return checkpoint_files


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A registered protocol with evidence for arms A (always right) and B (right at depth 1 only)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0
    return tmp_path, db, write_evidence(tmp_path, db)


def verify_json(db: str, *args: str, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = run("verify", *args, "--db", db, "--json")
    return code, json.loads(capsys.readouterr().out)


def by_id(report: dict) -> dict[str, dict]:
    return {claim["claim_id"]: claim for claim in report["claims"]}


def test_untouched_ledger_verifies_and_records_first_outcomes(project, capsys):
    _, db, _ = project
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    claims = by_id(report)
    assert code == 0, report
    assert claims["A_beats_B"]["outcome"] == "supported" and claims["A_beats_B"]["integrity"] == "verified"
    assert claims["A_beats_B"]["figures"]["helped"] == 16 and claims["A_beats_B"]["figures"]["hurt"] == 0
    assert claims["B_deep"]["figures"]["correct"] == 0
    assert all(claim["first_outcome"] is None for claim in report["claims"])
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 0
    assert {claim["first_outcome"] for claim in report["claims"]} == {"supported"}
    # The auditor's path: claim -> statistical test -> evidence -> checkpoint.
    with open_store(db) as store:
        linked = store.query_df("SELECT DISTINCT claim_id, arm, checkpoint_sha256 FROM v_claim_evidence")
        from ledger.store import views_as_dataframes

        frames = views_as_dataframes(store)
    pairs = set(zip(linked["claim_id"], linked["arm"]))
    assert {("tiny-verify/A_beats_B", "A"), ("tiny-verify/A_beats_B", "B"), ("tiny-verify/A_accurate", "A")} <= pairs
    assert {"v_accuracy_by_arm_depth", "v_lineage", "v_claim_evidence"} <= set(frames)


def test_a_new_claim_that_is_refuted_fails_verify(project, capsys):
    tmp_path, db, _ = project
    text = CLAIMS.replace("threshold: 0.9, direction: at_most", "threshold: 0.9")
    (tmp_path / "claims2.yaml").write_text(text.replace("B_deep", "B_deep2"), encoding="utf-8")
    code, report = verify_json(db, "claims2.yaml", capsys=capsys)
    # B_deep2 was never preregistered: unverifiable and 'unregistered', whatever its figures; and the registered
    # B_deep the file leaves out is tampered (exit 4 outranks 5).
    assert code == 4
    assert by_id(report)["B_deep2"]["integrity"] == "unverifiable"
    assert by_id(report)["B_deep2"]["outcome"] == "unregistered"
    assert "never preregistered" in by_id(report)["B_deep2"]["problems"][0]
    assert by_id(report)["B_deep"]["integrity"] == "tampered"


# ----------------------------------------------------------------------------- tamper matrix

TABLE_EDITS = {
    # table: an assignment that changes one field of the row it is applied to
    "protocols": "version = version || '9'",
    "manifests": "n_rows = n_rows + 1",
    "rows": "depth = depth + 1",
    "claims": "spec_json = spec_json || ' '",
    "runs": "arm = arm || 'Z'",
    "checkpoints": "status = CASE status WHEN 'promoted' THEN 'exploratory' ELSE 'promoted' END",
    "evidence": "correct = 1 - correct",
    "chain_entries": "kind = kind || 'x'",
}


@pytest.mark.parametrize("table", sorted(TABLE_EDITS))
def test_tamper_matrix_every_table(project, capsys, table):
    tmp_path, db, _ = project
    assignment = TABLE_EDITS[table]
    connection = sqlite3.connect(tmp_path / "ledger.db")
    for (trigger,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        connection.execute(f'DROP TRIGGER "{trigger}"')
    key = "seq" if table == "chain_entries" else "id"
    target = connection.execute(f"SELECT {key} FROM {table} ORDER BY {key} DESC LIMIT 1").fetchone()[0]
    assert connection.execute(f"UPDATE {table} SET {assignment} WHERE {key} = ?", (target,)).rowcount == 1
    connection.commit()
    connection.close()
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4, report
    assert any(table in problem for problem in report["chain_problems"]), report["chain_problems"]
    assert {claim["integrity"] for claim in report["claims"]} == {"tampered"}


def test_flipped_byte_in_a_checkpoint_file_is_tampered(project, capsys):
    _, db, files = project
    data = bytearray(files["B"].read_bytes())
    data[10] ^= 0x01
    files["B"].write_bytes(bytes(data))
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    claims = by_id(report)
    assert code == 4
    assert claims["A_beats_B"]["integrity"] == "tampered"
    assert any(str(files["B"]) in problem for problem in claims["A_beats_B"]["problems"])
    assert claims["A_accurate"]["integrity"] == "verified"  # A's evidence does not rest on B's file


def test_a_claim_without_all_its_evidence_records_no_first_outcome(project, capsys):
    """Arms run one at a time (`ledger run --arms A`, then `--arms B`): a verify in between
    records no first outcome for a claim whose arm has not run yet ("unverifiable" is not a
    result), so the verify after B is not held to it; evaluable claims are fixed at once."""
    tmp_path, _, checkpoint_files = project
    protocol = load_protocol(tmp_path / "protocol.yaml")
    manifest = build_manifests(protocol)["eval"]
    db = f"sqlite:///{tmp_path / 'one-arm-at-a-time.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0

    def arm_runs(arm: str) -> None:  # the same evidence the fixture writes, one arm at a time
        with open_store(db) as store:
            run_id = store.add_run(run_id=f"eval-{arm}", protocol_sha256=protocol.sha256, arm=arm)
            checkpoint = store.add_checkpoint(
                path=str(checkpoint_files[arm]), arm=arm, status="promoted", run_id=run_id
            )
            store.add_evidence(
                [
                    {
                        "run_id": run_id,
                        "manifest_sha256": manifest.sha256,
                        "row_id": row.row_id,
                        "arm": arm,
                        "checkpoint_sha256": checkpoint,
                        "loop": row.depth if arm == "A" else 0,
                        "prediction": row.answer,
                        "correct": arm == "A" or row.depth == 1,
                    }
                    for row in manifest.rows
                ]
            )

    def recorded() -> dict[str, str]:
        with open_store(db) as store:
            return {row["claim_id"].rsplit("/", 1)[-1]: row["outcome"] for row in store.rows_of("claim_outcomes")}

    arm_runs("A")
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    assert code != 0 and by_id(report)["A_beats_B"]["outcome"] == "unverifiable"
    assert by_id(report)["A_accurate"]["outcome"] == "supported"
    assert recorded() == {"A_accurate": "supported"}
    arm_runs("B")
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    assert code == 0, report
    assert by_id(report)["A_beats_B"]["outcome"] == "supported" and by_id(report)["A_beats_B"]["first_outcome"] is None
    assert recorded() == {"A_accurate": "supported", "A_beats_B": "supported", "B_deep": "supported"}
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 0 and {claim["first_outcome"] for claim in report["claims"]} == {"supported"}


def test_missing_checkpoint_file_is_unverifiable(project, capsys):
    _, db, files = project
    files["A"].unlink()
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 5
    assert by_id(report)["A_accurate"]["integrity"] == "unverifiable"


def test_edited_manifest_row_is_tampered(project, capsys):
    tmp_path, db, _ = project
    connection = sqlite3.connect(tmp_path / "ledger.db")
    for (trigger,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        connection.execute(f'DROP TRIGGER "{trigger}"')
    row = connection.execute("SELECT id, canonical_json FROM rows WHERE row_id = 'test_d02_00003'").fetchone()
    edited = json.loads(row[1])
    edited["answer"] = "Z"
    connection.execute("UPDATE rows SET canonical_json = ? WHERE id = ?", (json.dumps(edited), row[0]))
    connection.commit()
    connection.close()
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4
    problems = by_id(report)["A_accurate"]["problems"]
    assert any("row test_d02_00003" in problem for problem in problems), problems


def test_edited_protocol_file_is_tampered_and_register_refuses(project, capsys):
    tmp_path, db, _ = project
    edited = PROTOCOL.replace("rows_per_depth: 8", "rows_per_depth: 9")
    (tmp_path / "protocol.yaml").write_text(edited, encoding="utf-8")
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4
    assert any("edited after registration" in p for p in by_id(report)["A_beats_B"]["problems"])
    capsys.readouterr()
    assert run("register", "protocol.yaml", "--db", db) == 3
    assert "ledger deviate" in capsys.readouterr().err


def test_edited_claim_is_tampered(project, capsys):
    tmp_path, db, _ = project
    (tmp_path / "claims.yaml").write_text(CLAIMS.replace("threshold: 0.9}", "threshold: 0.5}"), encoding="utf-8")
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4
    assert any("differs from its preregistered spec" in p for p in by_id(report)["A_accurate"]["problems"])


def test_deviation_is_recorded_and_flags_dependent_claims(project, capsys):
    tmp_path, db, _ = project
    edited = PROTOCOL.replace("split: [1, 3]", "split: [1, 2]")
    (tmp_path / "protocol.yaml").write_text(edited, encoding="utf-8")
    assert run("deviate", "protocol.yaml", "--db", db, "--reason", "block too deep", "--timing", "after_data") == 0
    assert "arms.A.surgery.split" in capsys.readouterr().out
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    claims = by_id(report)
    assert code == 0, report
    assert any("arms.A.surgery.split" in flag for flag in claims["A_beats_B"]["flags"])
    assert any("after_data" in flag for flag in claims["A_accurate"]["flags"])
    # B's claim does not depend on arm A
    assert not [flag for flag in claims["B_deep"]["flags"] if flag.startswith("depends on")]
    with open_store(db) as store:
        (deviation,) = store.rows_of("deviations")
        assert deviation["item"] == "arms.A.surgery.split" and deviation["timing"] == "after_data"


def test_claim_files_are_verified_as_registered(tmp_path, capsys, monkeypatch):
    """Selective reporting, a changed correction, a changed field, a claim never registered: each is reported."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    # the paired claim in a Holm family (an accuracy claim has no p-value: it may be in no family)
    family = CLAIMS.replace("direction: greater, alpha: 0.05}", "direction: greater, alpha: 0.05, family: A}")
    claims = tmp_path / "claims.yaml"
    claims.write_text(family, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 0, report
    # the family's correction changed after registration: its members are tampered, the others are not
    claims.write_text(family.replace("correction: holm", "correction: none"), encoding="utf-8")
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    verdicts = by_id(report)
    assert code == 4 and verdicts["B_deep"]["integrity"] == "verified"
    assert verdicts["A_beats_B"]["integrity"] == "tampered"
    assert any("registered as 'holm'" in problem for problem in verdicts["A_beats_B"]["problems"])
    # a registered claim left out of the file (whatever its outcome): tampered, named
    claims.write_text("\n".join(line for line in family.splitlines() if "B_deep" not in line) + "\n", encoding="utf-8")
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4 and by_id(report)["B_deep"]["integrity"] == "tampered"
    assert any("left out of" in problem for problem in by_id(report)["B_deep"]["problems"])
    # a changed threshold is named with both values
    claims.write_text(family.replace("threshold: 0.9}", "threshold: 0.5}"), encoding="utf-8")
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4 and any("threshold: 0.9 -> 0.5" in p for p in by_id(report)["A_accurate"]["problems"])
    # a claim that was never registered is 'unregistered', never supported, even when its figures would be
    extra = "  - {id: A_also, statement: A again., statistic: accuracy, arm: A, manifest: eval, threshold: 0.5}\n"
    claims.write_text(family + extra, encoding="utf-8")
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 5 and by_id(report)["A_also"]["outcome"] == "unregistered"


def test_a_deviation_before_data_is_refused_once_the_protocol_has_data(project, capsys):
    tmp_path, db, _ = project
    with open_store(db) as store:
        head = store.head()
    (tmp_path / "protocol.yaml").write_text(PROTOCOL.replace("split: [1, 3]", "split: [1, 2]"), encoding="utf-8")
    capsys.readouterr()
    assert run("deviate", "protocol.yaml", "--db", db, "--reason", "r", "--timing", "before_data") == 3
    err = capsys.readouterr().err
    assert "already has" in err and "readings" in err and "--timing after_data" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    with open_store(db) as store:
        assert store.head() == head  # nothing written
    assert run("deviate", "protocol.yaml", "--db", db, "--reason", "r", "--timing", "after_data") == 0


def test_head_and_since_head(project, capsys):
    _tmp_path, db, _ = project
    capsys.readouterr()
    assert run("head", "--db", db) == 0
    head = capsys.readouterr().out.strip()
    root, size = head.split(":")
    assert len(root) == 64 and int(size) > 0
    assert run("verify", "claims.yaml", "--db", db, "--record", "--since-head", head) == 0  # recording grows the log
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db, "--since-head", f"{'0' * 64}:{size}") == 4
    assert run("verify", "claims.yaml", "--db", db, "--since-head", "nonsense") == 2
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db, "--since-head", f"{'z' * 64}:{size}") == 2  # not hex
    err = capsys.readouterr().err
    assert "--since-head wants ROOT:SIZE" in err and "Traceback" not in err


def test_a_published_signed_head_is_verified_and_one_entry_proved_against_it(project, capsys):
    tmp_path, db, _ = project
    assert run("key", "generate", "example.org/lab", "--out", str(tmp_path)) == 0
    private, public = tmp_path / "example.org_lab.key", tmp_path / "example.org_lab.pub"
    assert private.stat().st_mode & 0o777 == 0o600
    assert run("key", "generate", "example.org/lab", "--out", str(tmp_path)) == 2  # never overwritten
    head_file = tmp_path / "head.signed"
    assert run("head", "--db", db, "--sign", str(private), "--out", str(head_file)) == 0
    capsys.readouterr()
    # plain verify says what it did not prove; against the signed head it proves the log extends it
    assert run("verify", "claims.yaml", "--db", db) == 0
    assert "history: checked for internal consistency only" in capsys.readouterr().out
    assert run("verify", "claims.yaml", "--db", db, "--trusted-head", str(head_file), "--key", str(public)) == 0
    assert "history: extends the head" in capsys.readouterr().out
    with open_store(db) as store:
        store.append("note", {"later": True})  # the log grows: still an extension
    assert run("verify", "claims.yaml", "--db", db, "--trusted-head", str(head_file), "--key", str(public)) == 0
    # a head whose root was changed does not carry a valid signature: tampered, before anything is read
    text = head_file.read_text(encoding="utf-8").split("\n")
    text[2] = ("B" if text[2][0] != "B" else "C") + text[2][1:]
    forged = tmp_path / "forged.signed"
    forged.write_text("\n".join(text), encoding="utf-8")
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db, "--trusted-head", str(forged), "--key", str(public)) == 4
    assert "does not verify" in capsys.readouterr().err
    assert run("verify", "claims.yaml", "--db", db, "--trusted-head", str(head_file)) == 2  # no key
    # one entry proved against the published head, checked with no database
    proof = tmp_path / "proof.json"
    assert run("prove", "3", "--db", db, "--head", str(head_file), "--out", str(proof)) == 0
    capsys.readouterr()
    assert run("verify-proof", str(proof), "--key", str(public)) == 0
    assert "included: entry 3" in capsys.readouterr().out
    document = json.loads(proof.read_text(encoding="utf-8"))
    document["payload"] = document["payload"].replace('"seq":3', '"seq":3 ')
    (tmp_path / "bad.json").write_text(json.dumps(document), encoding="utf-8")
    assert run("verify-proof", str(tmp_path / "bad.json"), "--key", str(public)) == 4
    assert run("verify-proof", str(proof)) == 2  # a signed head needs its key


def test_query_is_read_only_and_formats(project, capsys):
    _, db, _ = project
    capsys.readouterr()
    assert (
        run("query", "SELECT arm, COUNT(*) AS n FROM evidence GROUP BY arm ORDER BY arm", "--db", db, "--format", "csv")
        == 0
    )
    assert capsys.readouterr().out.splitlines() == ["arm,n", "A,24", "B,24"]
    assert (
        run(
            "query",
            "SELECT arm, depth, accuracy FROM v_accuracy_by_arm_depth ORDER BY arm, depth",
            "--db",
            db,
            "--format",
            "json",
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert {(row["arm"], row["depth"], row["accuracy"]) for row in rows} >= {
        ("A", 3, 1.0),
        ("B", 1, 1.0),
        ("B", 3, 0.0),
    }
    for statement in ("DELETE FROM evidence", "INSERT INTO runs(run_id) VALUES ('x')", "DROP TABLE rows"):
        assert run("query", statement, "--db", db) == 3
    assert "refused" in capsys.readouterr().err
    # a typo is bad input (2), not a refusal; an endless statement stops at --timeout (2)
    assert run("query", "SELEC 1", "--db", db) == 2
    assert "not an SQL statement: 'SELEC'" in capsys.readouterr().err
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    assert run("query", endless, "--db", db, "--timeout", "0.5") == 2
    assert "query stopped after 0.5 s" in capsys.readouterr().err
    # cells are plain text: brackets in data are neither markup errors nor terminal styles
    assert run("query", "SELECT '[/x]' AS a, '[bold red]hi' AS b", "--db", db) == 0
    shown = capsys.readouterr().out
    assert "[/x]" in shown and "[bold red]hi" in shown


def test_evidence_for_unregistered_protocol_is_refused(tmp_path):
    from ledger.store import PreregistrationRequired

    with open_store(f"sqlite:///{tmp_path / 'l.db'}") as store:
        manifest = build_manifests(load_protocol_text(tmp_path))["eval"]
        sha = store.add_manifest(manifest)
        run_id = store.add_run(run_id="r")
        store.add_checkpoint(sha256="c" * 64, arm="A", status="promoted")
        with pytest.raises(PreregistrationRequired):
            store.add_evidence(
                [
                    {
                        "run_id": run_id,
                        "manifest_sha256": sha,
                        "row_id": manifest.rows[0].row_id,
                        "arm": "A",
                        "checkpoint_sha256": "c" * 64,
                        "loop": 1,
                        "prediction": "A",
                        "correct": True,
                    }
                ]
            )


def load_protocol_text(folder: Path):
    (folder / "p.yaml").write_text(PROTOCOL, encoding="utf-8")
    return load_protocol(folder / "p.yaml")


# ----------------------------------------------------------------------------- verify only reads


def test_verify_leaves_the_database_byte_identical(project, capsys):
    tmp_path, db, _ = project
    files = sorted(tmp_path.glob("ledger.db*"))
    with open_store(db) as store:
        size = store.head()[1]
    before = {path.name: path.read_bytes() for path in sorted(tmp_path.glob("ledger.db*"))}
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 0, report
    assert {path.name: path.read_bytes() for path in sorted(tmp_path.glob("ledger.db*"))} == before, files
    with open_store(db) as store:
        assert store.head()[1] == size
        assert store.rows_of("claim_outcomes") == [] and store.rows_of("stat_tests") == []
    code, _ = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    assert code == 0
    with open_store(db) as store:
        assert store.head()[1] > size
        assert {row["outcome"] for row in store.rows_of("claim_outcomes")} == {"supported"}


def test_verify_on_a_missing_database_is_one_line_exit_2_and_creates_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", f"sqlite:///{tmp_path / 'runs' / 'missing.db'}") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "no ledger database" in error, error
    assert sorted(path.name for path in tmp_path.iterdir()) == ["claims.yaml"]


def test_an_external_claim_file_whose_release_is_not_imported_says_how(tmp_path, capsys, monkeypatch):
    require_reference()
    monkeypatch.chdir(ROOT)
    db = f"sqlite:///{tmp_path / 'external.db'}"
    with open_store(db):
        pass  # an empty ledger
    code, report = verify_json(db, "claims/external/", capsys=capsys)
    assert code == 5
    reasons = {claim["reason"] for claim in report["claims"]}
    assert len(reasons) == 1 and "--import" in reasons.pop()
    with open_store(db) as store:
        assert store.head()[1] == 0  # nothing was imported


# ----------------------------------------------------------------------------- external audit


def require_reference() -> None:
    """The external audit's data must be there: a missing copy is a failure, not a skip."""
    assert REFERENCE.is_dir(), f"the released reference data is missing: expected it at {REFERENCE}"


@pytest.mark.long  # a minute of subprocesses: the long call
def test_external_audit_verifies_from_an_empty_database(tmp_path, capsys, monkeypatch):
    require_reference()
    monkeypatch.chdir(ROOT)
    db = f"sqlite:///{tmp_path / 'external.db'}"
    code, report = verify_json(db, "claims/external/", "--import", capsys=capsys)
    assert code == 0, [c for c in report["claims"] if not c["ok"]]
    claims = by_id(report)
    a_vs_b = claims["phaseA_A_vs_B"]["figures"]
    assert (a_vs_b["helped"], a_vs_b["hurt"], a_vs_b["ties"]) == (1048, 38, 706)
    assert f"{a_vs_b['p_value']:.2e}" == "5.72e-257"
    assert claims["phaseA_B_total"]["figures"]["correct"] == 496
    assert round(claims["n24_support12_frontier"]["figures"]["frontier"], 2) == 17.93
    with open_store(db) as store:
        size = store.head()[1]
    code, report = verify_json(db, "claims/external/", "--import", capsys=capsys)  # imported once only
    assert code == 0 and report["head"]["size"] == size
    # The external claim file edited after its claims were registered: a claim left out and the families'
    # correction changed are both reported against the registration.
    import yaml

    edited = yaml.safe_load((ROOT / "claims" / "external" / "recurrent-qwen-svgd.yaml").read_text(encoding="utf-8"))
    edited["release"] = str(ROOT / "releases" / "recurrent-qwen-svgd.yaml")
    edited["correction"] = "bonferroni"
    edited["claims"] = [claim for claim in edited["claims"] if claim["id"] != "phaseA_B_total"]
    members = {claim["id"] for claim in edited["claims"] if claim.get("family")}
    assert members
    (tmp_path / "edited.yaml").write_text(yaml.safe_dump(edited, sort_keys=False), encoding="utf-8")
    code, report = verify_json(db, str(tmp_path / "edited.yaml"), capsys=capsys)
    claims = by_id(report)
    assert code == 4 and claims["phaseA_B_total"]["integrity"] == "tampered"
    assert all(claims[member]["integrity"] == "tampered" for member in members)
    assert report["head"]["size"] == size  # verify wrote nothing
    # Tamper with an imported release file's evidence behind the store's back: caught.
    connection = sqlite3.connect(tmp_path / "external.db")
    for (trigger,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        connection.execute(f'DROP TRIGGER "{trigger}"')
    connection.execute(
        "UPDATE evidence SET correct = 1 WHERE arm = 'B' AND correct = 0 AND id = (SELECT MIN(id) FROM evidence WHERE arm = 'B' AND correct = 0)"
    )
    connection.commit()
    connection.close()
    code, report = verify_json(db, "claims/external/", capsys=capsys)
    assert code == 4
    assert any("evidence" in problem for problem in report["chain_problems"])
    # An imported file's recorded path pointed at a file of the auditor's: verify never opens it (the release
    # scope re-hashes the release's files where the auditor's claim file names them).
    planted = tmp_path / "auditors-secret"
    planted.write_text("not the ledger's business", encoding="utf-8")
    connection = sqlite3.connect(tmp_path / "external.db")
    connection.execute("UPDATE checkpoints SET path = ? WHERE stage = 'external'", (str(planted),))
    connection.commit()
    connection.close()
    opened: list[str] = []
    listening = [True]  # an audit hook cannot be removed: it stops listening after this verify
    sys.addaudithook(
        lambda event, args: opened.append(str(args[0])) if listening[0] and event == "open" and args else None
    )
    code, report = verify_json(db, "claims/external/", "--all", capsys=capsys)
    listening[0] = False
    assert code == 4 and any("checkpoints" in problem for problem in report["chain_problems"])
    assert str(planted) not in opened and len(opened) > 10  # the hook saw the files verify did open


def test_verify_names_the_table_for_a_tamper_in_every_table(tmp_path, capsys):
    """Every domain table, populated by the store's example writer, then one field altered behind its back."""
    from store_helpers import populate_example

    from ledger.store import DOMAIN_TABLES

    db_path = tmp_path / "example.db"
    with open_store(f"sqlite:///{db_path}") as store:
        populate_example(store)
    (tmp_path / "noclaims").mkdir()
    pristine = db_path.read_bytes()
    for table in DOMAIN_TABLES:
        db_path.write_bytes(pristine)
        for suffix in ("-wal", "-shm"):
            Path(str(db_path) + suffix).unlink(missing_ok=True)
        connection = sqlite3.connect(db_path)
        for (trigger,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            connection.execute(f'DROP TRIGGER "{trigger}"')
        # recorded_at is in every domain table and in the chain payload: any change must show.
        changed = connection.execute(
            f"UPDATE {table} SET recorded_at = recorded_at || 'x' WHERE id = (SELECT MAX(id) FROM {table})"
        ).rowcount
        connection.commit()
        connection.close()
        assert changed == 1, f"the example writer left {table} empty"
        code, report = verify_json(f"sqlite:///{db_path}", str(tmp_path / "noclaims"), capsys=capsys)
        assert code == 4, table
        assert any(
            problem.startswith(f"{table} ") or f" {table} " in problem for problem in report["chain_problems"]
        ), (table, report["chain_problems"])


def test_verify_and_the_statistics_import_without_the_heavy_libraries():
    """statsmodels, pandas, scipy and matplotlib load when a test, a table or a figure needs them, not on import."""
    import subprocess
    import sys

    code = (
        "import sys, ledger.judge.stats, ledger.audit.verify, ledger.report.html, ledger.store.views\n"
        "heavy = [m for m in ('statsmodels', 'pandas', 'scipy', 'matplotlib', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_read_only_commands_leave_a_rollback_journal_database_byte_for_byte(project, capsys):
    """`query`, `head`, `prove`, `report` and `verify` (without --record) open SQLite with mode=ro: a database kept
    in rollback-journal mode is not switched to WAL (which rewrites its header), and nothing is written."""
    folder, db, _ = project
    path = folder / "ledger.db"
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    connection.close()
    before = path.read_bytes()
    assert run("query", "SELECT COUNT(*) FROM evidence", "--db", db) == 0
    assert run("head", "--db", db) == 0
    assert run("prove", "1", "--db", db) == 0
    assert run("report", "tiny-verify", "--db", db, "--out", str(folder / "report")) == 0
    assert run("verify", "claims.yaml", "--db", db) == 0
    assert path.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("ledger.db")) == ["ledger.db"]
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("delete",)
    capsys.readouterr()


def test_verify_names_a_support_nothing_learnt_would_give_and_tallies_it(tmp_path, monkeypatch, capsys):
    """B_deep ("B's deep accuracy at most ...") without its precondition, in a ledger registered before the
    acquisition rule (`register` now refuses it): verify keeps its outcome and says beside it that an arm which
    learnt nothing would support it; the tally counts it."""
    from ledger.audit.preregistration import _write
    from ledger.store import open_store

    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS.replace(", requires: [A_beats_B]", ""), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 2  # refused: B_deep holds without acquisition
    with open_store(db) as store:
        _write(store, tmp_path / "protocol.yaml", load_protocol(tmp_path / "protocol.yaml"), acquisition=False)
    write_evidence(tmp_path, db)
    _code, report = verify_json(db, "claims.yaml", capsys=capsys)
    claims = by_id(report)
    assert any(flag.startswith("no acquisition precondition: B_deep") for flag in claims["B_deep"]["flags"])
    assert not any(flag.startswith("no acquisition precondition") for flag in claims["A_accurate"]["flags"])
    tally = report["tally"]
    assert tally["claims"] == len(report["claims"])
    assert tally["supported"] == sum(claim["outcome"] == "supported" for claim in report["claims"])
    # B_deep for its own arm; A_beats_B for the arms it compares, which declare no acquisition
    assert claims["B_deep"]["outcome"] == "supported" and tally["vacuous_risk"] == ["A_beats_B", "B_deep"]
    assert any(flag.startswith("no acquisition of A, B: A_beats_B") for flag in claims["A_beats_B"]["flags"])
