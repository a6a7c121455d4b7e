"""Claim rules through the ledger: registration refuses what rules 2 refuse, a comparison against a control that
learnt nothing is recorded unverifiable, an older file verifies under its own rules with the current rules'
tally beside, and the rules a file registered under cannot be changed afterwards."""

from __future__ import annotations

from tests.audit.test_verify import CLAIMS, PROTOCOL, by_id, run, verify_json, write_evidence

RULES_2 = """\
protocol: tiny-verify
correction: holm
rules: 2
primary: [A_beats_B]
acquisition:
  A: [A_answers]
  B: [B_answers_depth_1]
claims:
  - {id: A_beats_B, statement: A beats B., statistic: paired_exact, arms: [A, B], manifest: eval, direction: greater, alpha: 0.05}
  - {id: A_answers, statement: A answers its rows., statistic: accuracy, arm: A, manifest: eval, threshold: 0.7}
  - {id: B_answers_depth_1, statement: B answers depth 1 (its task), statistic: accuracy, arm: B, manifest: eval, rows: {depths: [1, 1]}, threshold: 0.7}
"""


def _project(tmp_path, monkeypatch, claims: str) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(claims, encoding="utf-8")
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_registration_refuses_a_comparator_without_an_acquisition(tmp_path, monkeypatch, capsys):
    db = _project(tmp_path, monkeypatch, RULES_2.replace("  B: [B_answers_depth_1]\n", ""))
    assert run("register", "protocol.yaml", "--db", db) == 2
    err = capsys.readouterr().err
    assert "compares arm B, which declares no acquisition" in err and "claims.yaml" in err
    assert not (tmp_path / "ledger.db").exists() or run("verify", "claims.yaml", "--db", db) != 0


def test_check_refuses_what_registration_would(tmp_path, monkeypatch, capsys):
    _project(tmp_path, monkeypatch, RULES_2.replace("  B: [B_answers_depth_1]\n", ""))
    assert run("check", "protocol.yaml") == 2
    assert "compares arm B, which declares no acquisition" in capsys.readouterr().err
    _project(tmp_path, monkeypatch, RULES_2)
    assert run("check", "protocol.yaml") == 0


def test_registration_refuses_a_threshold_its_rows_cannot_clear(tmp_path, monkeypatch, capsys):
    # 8 depth-1 rows: even 8 of 8 gives a one-sided 95% lower bound of 0.747
    db = _project(
        tmp_path,
        monkeypatch,
        RULES_2.replace("rows: {depths: [1, 1]}, threshold: 0.7", "rows: {depths: [1, 1]}, threshold: 0.8"),
    )
    assert run("register", "protocol.yaml", "--db", db) == 2
    assert "one-sided 95% lower bound of 0.747" in capsys.readouterr().err


def test_a_comparison_against_a_control_that_learnt_nothing_is_recorded_unverifiable(tmp_path, monkeypatch, capsys):
    db = _project(tmp_path, monkeypatch, RULES_2)
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db, correct=lambda arm, row: arm == "A")  # B answers nothing, depth 1 included
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    claims = by_id(report)
    assert claims["B_answers_depth_1"]["outcome"] == "refuted"
    beats = claims["A_beats_B"]
    assert beats["outcome"] == "unverifiable" and beats["rules"] == 2
    assert "comparator B did not show it learnt its own task: claim B_answers_depth_1 is refuted" in beats["reason"]
    assert "under_current_rules" not in beats  # judged under the current rules already
    # a result, recorded: the next verify holds it to it
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 0 and by_id(report)["A_beats_B"]["first_outcome"] == "unverifiable"


def test_the_same_comparison_against_a_competent_control_is_supported(tmp_path, monkeypatch, capsys):
    db = _project(tmp_path, monkeypatch, RULES_2)
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)  # B right at depth 1
    _code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert by_id(report)["A_beats_B"]["outcome"] == "supported", report
    assert report["tally"]["supported"] == 3 and "under_current_rules" not in report["tally"]


def test_an_older_file_verifies_under_its_own_rules_with_the_current_tally_beside(tmp_path, monkeypatch, capsys):
    db = _project(tmp_path, monkeypatch, CLAIMS)
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    assert code == 0
    claims = by_id(report)
    assert claims["A_beats_B"]["outcome"] == "supported"  # as registered: rules 1
    now = claims["A_beats_B"]["under_current_rules"]
    assert now["outcome"] == "unverifiable" and "comparator A declares no acquisition" in now["reason"]
    tally = report["tally"]
    assert tally["supported"] == 3
    # A_accurate: 24 of 24 has a one-sided 95% lower bound of 0.899, short of its 0.9
    assert tally["under_current_rules"]["supported"] == 0
    withdrawn = {w["claim_id"]: w["why"] for w in tally["under_current_rules"]["withdrawn"]}
    assert set(withdrawn) == {"A_beats_B", "A_accurate", "B_deep"}
    assert "lower bound 0.899 does not clear 0.9" in withdrawn["A_accurate"]
    capsys.readouterr()
    assert run("verify", "claims.yaml", "--db", db) == 0
    assert "under the current claim rules: supported 0 (withdrawn: A_beats_B, A_accurate, B_deep)" in " ".join(
        capsys.readouterr().out.split()
    )


def test_the_rules_a_file_registered_under_cannot_change_afterwards(tmp_path, monkeypatch, capsys):
    db = _project(tmp_path, monkeypatch, RULES_2)
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)
    # the acquisition of B moved to a claim it passes more easily, after registration
    (tmp_path / "claims.yaml").write_text(
        RULES_2.replace("  B: [B_answers_depth_1]", "  B: [A_answers]"), encoding="utf-8"
    )
    code, report = verify_json(db, "claims.yaml", capsys=capsys)
    assert code == 4
    assert all(claim["integrity"] == "tampered" for claim in report["claims"])
    assert "claim rules changed since registration (acquisition:" in by_id(report)["A_beats_B"]["problems"][-1]
