"""Training seeds: an arm written with `seeds` is one replicate per seed, each its own lineage; a claim on it is
judged over the seeds (a run-level quantity by its mean's t bound, with the interval and the spread; a paired
test as it says it combines them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ledger.judge.claim_files import evaluate_claims, evaluate_claims_beside
from ledger.judge.claim_rules import registration_issues
from ledger.protocol.claims import ClaimFile, check_claims_against
from ledger.protocol.loader import load_protocol
from ledger.protocol.protocol import Protocol
from tests.audit.test_verify import PROTOCOL
from tests.judge.memory_evidence import MemoryEvidence

SEEDED = PROTOCOL.replace(
    "    evaluation: {manifests: [eval]}\n  - id: B",
    "    seeds: [1, 2, 3]\n    evaluation: {manifests: [eval]}\n  - id: B",
    1,
)


def _protocol(tmp_path, text: str) -> Protocol:
    (tmp_path / "protocol.yaml").write_text(text, encoding="utf-8")
    return load_protocol(tmp_path / "protocol.yaml")


def test_an_arm_with_seeds_is_one_replicate_per_seed(tmp_path):
    protocol = _protocol(tmp_path, SEEDED)
    assert [arm.id for arm in protocol.arms] == ["A.s1", "A.s2", "A.s3", "B"]
    assert [(arm.replicate.of, arm.replicate.seed) for arm in protocol.replicates_of("A")] == [
        ("A", 1),
        ("A", 2),
        ("A", 3),
    ]
    # the canonical document holds each replicate; an arm without seeds serialises as before seeds existed
    arms = json.loads(protocol.canonical())["arms"]
    assert arms[0]["replicate"] == {"of": "A", "seed": 1} and "replicate" not in arms[3]
    assert Protocol.model_validate(json.loads(protocol.canonical())).canonical() == protocol.canonical()
    plain = _protocol(tmp_path, PROTOCOL)
    assert "replicate" not in plain.canonical()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SEEDED.replace("seeds: [1, 2, 3]", "seeds: [1]"), "two or more distinct training seeds"),
        (SEEDED.replace("seeds: [1, 2, 3]", "seeds: [2, 2]"), "two or more distinct training seeds"),
        (
            SEEDED.replace(
                "  - id: B\n    kind: dense\n    base: tiny\n",
                "  - id: B\n    kind: dense\n    base: tiny\n    init_from: A\n",
            ),
            "replicated over seeds [1, 2, 3]: give this arm the same `seeds`",
        ),
    ],
)
def test_seeds_that_cannot_be_replicated_are_refused(tmp_path, text, message):
    with pytest.raises(Exception, match=message.replace("[", r"\[").replace("]", r"\]")):
        _protocol(tmp_path, text)


def test_claims_name_a_replicated_arm_by_the_name_it_was_written_with(tmp_path):
    protocol = _protocol(tmp_path, SEEDED)
    claims = ClaimFile.model_validate({"protocol": "tiny-verify", "correction": "none", "claims": [_accuracy(0.7)]})
    assert check_claims_against(claims, protocol, "claims.yaml") == []


def _accuracy(threshold: float, **extra: Any) -> dict:
    return {
        "id": "A_accurate",
        "statement": "A answers its rows.",
        "statistic": "accuracy",
        "arm": "A",
        "manifest": "eval",
        "threshold": threshold,
        **extra,
    }


def _seeded_evidence(correct_by_seed: dict[int, int], n: int = 100, b_correct: int = 0) -> MemoryEvidence:
    outcomes: dict[tuple, dict] = {}
    for seed, correct in correct_by_seed.items():
        outcomes[(f"A.s{seed}", "eval", None)] = {f"r{i}": (1, i < correct) for i in range(n)}
    outcomes[("B", "eval", None)] = {f"r{i}": (1, i < b_correct) for i in range(n)}
    arms = {f"A.s{seed}": {"id": f"A.s{seed}", "replicate": {"of": "A", "seed": seed}} for seed in correct_by_seed}
    return MemoryEvidence(outcome_map=outcomes, protocol={"arms": {**arms, "B": {"id": "B"}}})


def test_a_seeded_claim_is_judged_over_three_seeds_with_its_interval():
    # three training runs at 0.82, 0.86 and 0.90: each passes 0.8 alone; their mean's one-sided 95% t bound is
    # 0.86 - 2.920 x 0.04 / sqrt(3) = 0.7926, short of 0.8
    evidence = _seeded_evidence({1: 82, 2: 86, 3: 90})
    (result,) = evaluate_claims(
        ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_accuracy(0.8)]}), evidence
    )
    assert result.outcome == "refuted"
    figures = result.figures
    assert figures["seeds"] == 3 and figures["per_seed"] == {"A.s1": 0.82, "A.s2": 0.86, "A.s3": 0.90}
    assert figures["mean"] == pytest.approx(0.86) and figures["sd"] == pytest.approx(0.04)
    assert figures["spread"] == [0.82, 0.90]
    assert figures["bound_low"] == pytest.approx(0.86 - 2.919986 * 0.04 / 3**0.5, abs=1e-5)
    assert figures["ci_low"] == pytest.approx(0.86 - 4.302653 * 0.04 / 3**0.5, abs=1e-5) and figures["ci_high"] > 0.9
    assert "over 3 training seeds" in result.reason and "95% t interval" in result.reason
    # a threshold the bound clears
    (lower,) = evaluate_claims(
        ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_accuracy(0.75)]}), evidence
    )
    assert lower.outcome == "supported"
    # one seed unread: unverifiable, naming it
    missing = _seeded_evidence({1: 82, 2: 86})
    missing.protocol["arms"]["A.s3"] = {"id": "A.s3", "replicate": {"of": "A", "seed": 3}}
    (unread,) = evaluate_claims(
        ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_accuracy(0.75)]}), missing
    )
    assert unread.outcome == "unverifiable" and "A.s3" in unread.reason


def test_under_rules_2_a_run_level_claim_over_seeds_is_counted():
    evidence = _seeded_evidence({1: 95, 2: 96, 3: 97})
    frontier_file = ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_accuracy(0.8)]})
    _, current = evaluate_claims_beside(frontier_file, evidence)
    assert current[0].outcome == "supported" and current[0].not_counted is None


def _beats(**extra: Any) -> dict:
    return {
        "id": "A_beats_B",
        "statement": "A beats B.",
        "statistic": "paired_exact",
        "arms": ["A", "B"],
        "manifest": "eval",
        "direction": "greater",
        **extra,
    }


def test_a_paired_test_over_seeds_says_how_it_combines_them():
    # seed 3 alone leads B by 4 rows: not significant alone (p = 0.0625), significant pooled with the others
    evidence = _seeded_evidence({1: 10, 2: 10, 3: 4})
    unsaid = ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_beats()]})
    (result,) = evaluate_claims(unsaid, evidence)
    assert result.outcome == "unverifiable" and "`seeds: every` or `seeds: pooled`" in result.reason
    assert any("say how the test combines them" in i.message for i in registration_issues(unsaid, {}, replicated={"A"}))
    (every,) = evaluate_claims(
        ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_beats(seeds="every")]}), evidence
    )
    assert every.outcome == "refuted" and every.p_value == pytest.approx(0.0625)
    assert every.figures["per_seed"]["A.s3 vs B"]["helped"] == 4
    (pooled,) = evaluate_claims(
        ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_beats(seeds="pooled")]}), evidence
    )
    assert pooled.outcome == "supported" and (pooled.figures["helped"], pooled.figures["hurt"]) == (24, 0)
    assert pooled.rows_used  # the rows of each seed, for the record


def test_the_run_summary_shows_the_between_seed_spread(tmp_path):
    from ledger.cli.protocol_commands import seed_spreads
    from ledger.run.results import ArmOutcome, RunResult

    protocol = _protocol(tmp_path, SEEDED)
    arms = [
        ArmOutcome(f"A.s{seed}", "complete", accuracy={"eval": (correct, 24)})
        for seed, correct in ((1, 18), (2, 21), (3, 24))
    ]
    arms.append(ArmOutcome("B", "complete", accuracy={"eval": (8, 24)}))
    (line,) = seed_spreads(RunResult(protocol, protocol.sha256, tmp_path, arms))
    assert line == (
        "A over 3 training seeds on eval: accuracy seed 1 0.750, seed 2 0.875, seed 3 1.000; mean 0.875, "
        "between-seed spread 0.750-1.000 (0.250)"
    )
