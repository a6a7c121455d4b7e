"""Families through the ledger: no outcome is recorded against a smaller family than preregistered, and a
declared family's correction or members changed after registration is tampering."""

from __future__ import annotations

from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store
from tests.audit.test_verify import PROTOCOL, by_id, run, verify_json, write_evidence

THREE_ARMS = PROTOCOL.replace(
    "claims: [claims.yaml]",
    "  - id: C\n    kind: dense\n    base: tiny\n    evaluation: {manifests: [eval]}\nclaims: [claims.yaml]",
)

CLAIMS = """\
protocol: tiny-verify
correction: none
families:
  primary: {correction: bonferroni, members: [A_beats_B, A_beats_C]}
claims:
  - {id: A_beats_B, statement: A beats B., statistic: paired_exact, arms: [A, B], manifest: eval, family: primary}
  - {id: A_beats_C, statement: A beats C., statistic: paired_exact, arms: [A, C], manifest: eval, family: primary}
"""


def _evidence_of_c(folder, db) -> None:
    manifest = build_manifests(load_protocol(folder / "protocol.yaml"))["eval"]
    (folder / "C.safetensors").write_bytes(b"weights of C" * 64)
    with open_store(db) as store:
        run_id = store.add_run(run_id="eval-C", protocol_sha256=load_protocol(folder / "protocol.yaml").sha256, arm="C")
        checkpoint = store.add_checkpoint(path=str(folder / "C.safetensors"), arm="C", status="promoted", run_id=run_id)
        store.add_evidence(
            [
                {
                    "run_id": run_id,
                    "manifest_sha256": manifest.sha256,
                    "row_id": row.row_id,
                    "arm": "C",
                    "checkpoint_sha256": checkpoint,
                    "loop": 0,
                    "prediction": row.answer,
                    "correct": row.depth == 1,
                }
                for row in manifest.rows
            ]
        )


def test_no_outcome_is_recorded_until_every_member_is_measured(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(THREE_ARMS, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)  # arms A and B only

    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    claims = by_id(report)
    assert code == 5 and {claim["outcome"] for claim in claims.values()} == {"unverifiable"}
    assert "judged only when all 2 members are measured" in claims["A_beats_B"]["reason"]
    with open_store(db, read_only=True) as store:
        assert store.query("SELECT COUNT(*) AS n FROM claim_outcomes").records() == [{"n": 0}]

    _evidence_of_c(tmp_path, db)
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    claims = by_id(report)
    assert code == 0, report
    assert claims["A_beats_B"]["outcome"] == "supported"
    assert claims["A_beats_B"]["figures"]["correction"] == "bonferroni over 2 in family 'primary'"

    # the family's correction changed in the file after registration: tampered, naming the family
    (tmp_path / "claims.yaml").write_text(
        CLAIMS.replace("correction: bonferroni", "correction: holm"), encoding="utf-8"
    )
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4
    problems = " ".join(by_id(report)["A_beats_C"]["problems"])
    assert "family 'primary' changed since registration" in problems and "bonferroni" in problems
