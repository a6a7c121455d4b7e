"""An accuracy claim read at one test recurrence: an answer read at every loop (word problems) is judged at the
loop the claim names, its rows filtered by depth, and `ledger check` refuses a loop the arm is never read at."""

from __future__ import annotations

from pathlib import Path

from memory_evidence import MemoryEvidence

from ledger.judge.claims import evaluate_claim
from ledger.protocol.check import claim_problems
from ledger.protocol.claims import AccuracyClaim, ClaimFile
from ledger.protocol.loader import load_protocol

ROOT = Path(__file__).resolve().parents[2]


def _claim(**fields) -> AccuracyClaim:
    spec = {
        "id": "M_answers_one_transfer",
        "statement": "s",
        "statistic": "accuracy",
        "arm": "M",
        "manifest": "problems_eval",
        "rows": {"depths": [1, 1]},
        "threshold": 0.5,
        **fields,
    }
    return AccuracyClaim.model_validate(spec)


def _problems(claim: AccuracyClaim) -> list[str]:
    protocol = load_protocol(ROOT / "protocols" / "designM-tiny.yaml")
    claim_file = ClaimFile.model_validate(
        {"protocol": "designM-tiny", "correction": "holm", "claims": [claim.model_dump(mode="json")]}
    )
    return [message for _where, message in claim_problems(claim_file, protocol)]


def test_an_accuracy_claim_reads_word_problems_at_the_loop_it_names():
    assert _problems(_claim(loop=4)) == []
    assert _problems(_claim()) == ["arm 'M' is not read at every row's final loop on 'problems_eval'"]
    assert _problems(_claim(loop=3)) == [
        "arm 'M' is never read at loop 3 on 'problems_eval' (read at [1, 2, 4, 8, 16, 32])"
    ]


def test_the_accuracy_at_a_loop_is_that_loops_rows_at_the_filtered_depths():
    at_4 = {f"s1_{i}": (1, i < 12) for i in range(16)} | {f"s2_{i}": (2, False) for i in range(16)}
    at_32 = {row: (depth, False) for row, (depth, _hit) in at_4.items()}
    evidence = MemoryEvidence(outcome_map={("M", "problems_eval", 4): at_4, ("M", "problems_eval", 32): at_32})
    result = evaluate_claim(_claim(loop=4), evidence)
    assert (result.figures["correct"], result.figures["n"]) == (12, 16)
    assert result.outcome == "supported" and result.reason.startswith("M at loop 4: 12/16")
    assert evaluate_claim(_claim(loop=32), evidence).figures["correct"] == 0


def test_a_claim_without_a_loop_keeps_its_registered_form():
    assert "loop" not in _claim().model_dump(mode="json")
    assert _claim(loop=4).model_dump(mode="json")["loop"] == 4
