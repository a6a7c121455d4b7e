"""Claims that need acquisition: a precondition that fails makes a would-be vacuous support unverifiable; the
acquisition rule names every claim an arm that learnt nothing would support, and every guardrail on a base near
chance; a paper's finding is counted as replicated or departed from."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ledger.audit.verdicts import ClaimVerdict, Tally
from ledger.judge.acquisition import chance_of, competence_floor, unacquired_claims
from ledger.judge.claim_files import evaluate_claims
from ledger.protocol.claims import ClaimFile
from tests.judge.memory_evidence import MemoryEvidence

INSIDE = {
    "id": "C_inside",
    "statement": "C is near-perfect inside its support.",
    "statistic": "accuracy",
    "arm": "C",
    "manifest": "eval",
    "rows": {"depths": [1, 8]},
    "threshold": 0.9,
}
BEYOND = {
    "id": "C_beyond",
    "statement": "C falls beyond its support.",
    "statistic": "accuracy",
    "arm": "C",
    "manifest": "eval",
    "rows": {"depths": [11, 14]},
    "threshold": 0.5,
    "direction": "at_most",
}


def _file(*claims: dict) -> ClaimFile:
    return ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": list(claims)})


def _c(inside_correct: bool, beyond_correct: bool) -> MemoryEvidence:
    rows = {f"d{depth}_{i}": (depth, inside_correct) for depth in range(1, 9) for i in range(8)}
    rows |= {f"d{depth}_{i}": (depth, beyond_correct) for depth in range(11, 15) for i in range(8)}
    return MemoryEvidence(outcome_map={("C", "eval", None): rows})


def _outcomes(file: ClaimFile, evidence: MemoryEvidence) -> dict[str, str]:
    return {result.claim_id: result.outcome for result in evaluate_claims(file, evidence)}


def test_a_failed_precondition_turns_a_vacuous_support_into_unverifiable():
    nothing_learnt = _c(inside_correct=False, beyond_correct=False)
    # without the precondition, a C that learnt nothing "falls beyond its support"
    assert _outcomes(_file(INSIDE, BEYOND), nothing_learnt) == {"C_inside": "refuted", "C_beyond": "supported"}
    guarded = _file(INSIDE, {**BEYOND, "requires": ["C_inside"]})
    (inside, beyond) = evaluate_claims(guarded, nothing_learnt)
    assert (inside.outcome, beyond.outcome) == ("refuted", "unverifiable")
    assert "precondition not met: claim C_inside is refuted" in beyond.reason
    assert "its own statistic: supported" in beyond.reason and beyond.figures["preconditions_met"] is False
    # a C that learnt its support and fails beyond it: the claim is judged, and supported
    assert _outcomes(guarded, _c(inside_correct=True, beyond_correct=False)) == {
        "C_inside": "supported",
        "C_beyond": "supported",
    }
    # a C that learnt everything: judged, and refuted (it does not fall)
    assert _outcomes(guarded, _c(inside_correct=True, beyond_correct=True))["C_beyond"] == "refuted"


def test_preconditions_chain_and_a_gate_must_have_passed():
    chained = _file(
        INSIDE,
        {**BEYOND, "requires": ["C_inside"]},
        {**BEYOND, "id": "C_beyond_again", "requires": ["C_beyond", {"gate": "installed", "arm": "C"}]},
    )
    learnt = _c(inside_correct=True, beyond_correct=False)
    assert _outcomes(chained, learnt)["C_beyond_again"] == "unverifiable"  # the gate was never recorded
    learnt.gates = {("installed", "C"): False}
    (result,) = [r for r in evaluate_claims(chained, learnt) if r.claim_id == "C_beyond_again"]
    assert result.outcome == "unverifiable" and "gate installed for C failed" in result.reason
    learnt.gates = {("installed", "C"): True}
    assert _outcomes(chained, learnt)["C_beyond_again"] == "supported"
    # the chain: C_inside fails, so C_beyond is unverifiable, so C_beyond_again is too
    nothing = _c(inside_correct=False, beyond_correct=False)
    nothing.gates = {("installed", "C"): True}
    (result,) = [r for r in evaluate_claims(chained, nothing) if r.claim_id == "C_beyond_again"]
    assert result.outcome == "unverifiable" and "claim C_beyond is unverifiable" in result.reason


@pytest.mark.parametrize(
    "requires,message",
    [
        (["C_nowhere"], "requires 'C_nowhere', not a claim of this file"),
        (["C_beyond"], "a claim cannot require itself"),
    ],
)
def test_a_precondition_must_name_another_claim_of_the_file(requires, message):
    with pytest.raises(ValidationError, match=message):
        _file(INSIDE, {**BEYOND, "requires": requires})


def test_a_cycle_of_preconditions_is_refused():
    with pytest.raises(ValidationError, match="requires itself through its preconditions"):
        _file({**INSIDE, "requires": ["C_beyond"]}, {**BEYOND, "requires": ["C_inside"]})


def test_the_acquisition_rule_names_claims_nothing_learnt_would_support():
    chances = {"eval": 1 / 16, "tier1": 0.25}
    unguarded = {found.claim_id for found in unacquired_claims(_file(INSIDE, BEYOND), chances)}
    assert unguarded == {"C_beyond"}
    assert unacquired_claims(_file(INSIDE, {**BEYOND, "requires": ["C_inside"]}), chances) == []
    # a precondition at chance shows nothing: C "at least 0.3" on N16 is under the floor 0.531
    weak = {**INSIDE, "threshold": 0.3}
    assert [f.claim_id for f in unacquired_claims(_file(weak, {**BEYOND, "requires": ["C_inside"]}), chances)] == [
        "C_beyond"
    ]
    # a precondition that itself holds without learning does not count either
    low = {**BEYOND, "id": "C_low"}
    assert {f.claim_id for f in unacquired_claims(_file(low, {**BEYOND, "requires": ["C_low"]}), chances)} == {
        "C_low",
        "C_beyond",
    }
    # two arms that learnt nothing tie: a non-inferiority claim between arms needs acquisition too
    tie = {"id": "E_near_A", "statement": "s", "statistic": "noninferiority", "arms": ["E", "A"], "manifest": "eval"}
    assert [f.claim_id for f in unacquired_claims(_file({**tie, "margin": 0.05}), chances)] == ["E_near_A"]


def test_a_guardrail_on_a_base_must_require_its_competence_floor():
    assert chance_of([4] * 64) == 0.25 and competence_floor(0.25) == 0.625
    assert chance_of([16] * 10) == pytest.approx(1 / 16) and chance_of([]) is None and chance_of([4, 0]) is None
    guardrail = {
        "id": "A_tier1",
        "statement": "s",
        "statistic": "noninferiority",
        "arms": ["A", "base:tiny"],
        "manifest": "tier1",
        "loop": 1,
        "margin": 0.03,
    }
    base = {"id": "base_knows", "statement": "s", "statistic": "accuracy", "arm": "base:tiny", "manifest": "tier1"}
    (found,) = unacquired_claims(_file(guardrail), {"tier1": 0.25})
    assert "at least 0.625, the competence floor: halfway from chance 0.250 to 1" in found.message
    near_chance = _file({**base, "threshold": 0.3}, {**guardrail, "requires": ["base_knows"]})
    assert [f.claim_id for f in unacquired_claims(near_chance, {"tier1": 0.25})] == ["A_tier1"]
    competent = _file({**base, "threshold": 0.8}, {**guardrail, "requires": ["base_knows"]})
    assert unacquired_claims(competent, {"tier1": 0.25}) == []


def _verdict(claim_id: str, outcome: str, paper: str | None, vacuous: bool = False) -> ClaimVerdict:
    verdict = ClaimVerdict("f", claim_id, outcome, "verified", "")
    verdict.paper = None if paper is None else {"outcome": paper, "figure": "x"}
    verdict.vacuous_risk = vacuous
    return verdict


def test_the_tally_counts_replications_and_names_departures():
    verdicts = [
        _verdict("a", "supported", "supported"),
        _verdict("b", "refuted", "refuted"),  # the paper's negative finding, replicated
        _verdict("c", "supported", "refuted"),
        _verdict("d", "unverifiable", "supported"),  # not judged: neither replicates nor departs
        _verdict("e", "supported", None, vacuous=True),
    ]
    tally = Tally.of(verdicts)
    assert (tally.supported, tally.with_paper, tally.replicates, tally.departs) == (3, 4, 2, ("c",))
    assert tally.line() == (
        "supported: 3 of 5; replicates the paper: 2 of 4 (departs: c); "
        "possibly vacuous (no acquisition precondition): e"
    )
    assert [v.replicates for v in verdicts] == [True, True, False, None, None]


def test_a_paper_finding_keeps_claims_without_one_hashed_as_before():
    from ledger.canonical import sha256_canonical

    plain = _file(INSIDE).claims[0]
    assert "paper" not in plain.model_dump(mode="json") and "requires" not in plain.model_dump(mode="json")
    with_paper = _file({**INSIDE, "paper": {"outcome": "supported", "figure": "C 99.2% inside its support"}}).claims[0]
    assert with_paper.model_dump(mode="json")["paper"]["figure"] == "C 99.2% inside its support"
    assert sha256_canonical(plain.model_dump(mode="json")) != sha256_canonical(with_paper.model_dump(mode="json"))


def test_every_committed_protocol_passes_the_acquisition_rule_at_registration(tmp_path):
    """Registration refuses a claim file that breaks the rule; every committed protocol's current version meets it
    (smoke, phaseA and phaseA-tiny-long broke it, and each has a recorded version that does not)."""
    from pathlib import Path

    from benchmark_files import write_stand_in

    from ledger.audit.preregistration import claim_files_of, refuse_unacquired
    from ledger.protocol.loader import load_protocol
    from ledger.rows.builder import build_manifest, build_manifests, files_to_come

    root = Path(__file__).resolve().parents[2]
    checked = 0
    for path in sorted((root / "protocols").glob("*.yaml")):
        protocol = load_protocol(path)
        files = claim_files_of(path, protocol)
        if files:
            to_come = files_to_come(protocol)
            manifests = build_manifests(protocol, leave_out=to_come)
            for spec in protocol.manifests:  # a file the user supplies (ARC): its chance from stand-in questions
                if spec.id in to_come and spec.generator == "choice_file":  # (a token corpus is read by no claim)
                    stand_in = write_stand_in(tmp_path / f"{spec.id}.jsonl", spec.ids)
                    manifests[spec.id] = build_manifest(spec.model_copy(update={"path": str(stand_in)}))
            refuse_unacquired(files, manifests)
            checked += 1
    assert checked >= 10


def test_registration_refuses_a_claim_that_holds_without_acquisition(tmp_path):
    """`ledger register` on smoke with version 1's "C at most 1": one line per claim, exit 2, no database."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "protocols").mkdir()
    (tmp_path / "claims").mkdir()
    shutil.copy(root / "protocols" / "smoke.yaml", tmp_path / "protocols" / "smoke.yaml")
    claims = (root / "claims" / "smoke.yaml").read_text()
    claims = claims.replace(
        "{id: C_accuracy_defined_v2, statement: Arm C's accuracy at depth 1-5 is defined (>= 0)., statistic: accuracy, "
        "arm: C, manifest: eval, rows: {depths: [1, 5]}, threshold: 0.0}",
        "{id: C_at_most_1, statement: at most 1., statistic: accuracy, arm: C, manifest: eval, threshold: 1.0, "
        "direction: at_most}",
    )
    assert "C_at_most_1" in claims
    (tmp_path / "claims" / "smoke.yaml").write_text(claims)
    db = tmp_path / "l.db"
    result = subprocess.run(
        [sys.executable, "-m", "ledger", "register", "protocols/smoke.yaml", "--db", f"sqlite:///{db}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "claims.3: claim C_at_most_1 would be supported by an arm that learnt nothing" in result.stderr
    assert not db.exists()


def test_a_precondition_still_waiting_for_its_evidence_leaves_the_claim_open():
    """C not run yet: both claims are unverifiable, and the dependent one is not settled (verify records no first
    outcome for it); once C_inside is refuted, the dependent claim's unverifiable outcome is a result."""
    guarded = _file(INSIDE, {**BEYOND, "requires": ["C_inside"]})
    (_, beyond) = evaluate_claims(guarded, MemoryEvidence())
    assert beyond.outcome == "unverifiable" and "preconditions_met" not in beyond.figures
    (_, beyond) = evaluate_claims(guarded, _c(inside_correct=False, beyond_correct=False))
    assert beyond.outcome == "unverifiable" and beyond.figures["preconditions_met"] is False
