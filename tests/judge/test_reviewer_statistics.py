"""What a reviewer asks of the statistics: a loop on every paired test, families corrected over every declared
member (never a smaller family), the non-inferiority statistic shown, a censored frontier never read past a
depth filter. Each p-value is checked against an independent computation (scipy's binomial test)."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from ledger.judge.claim_files import evaluate_claims
from ledger.judge.claims import evaluate_claim
from ledger.judge.noninferiority import tango_score_statistic
from ledger.protocol.claims import ClaimFile, FrontierClaim, PairedExactClaim
from ledger.protocol.loader import ProtocolError
from tests.judge.memory_evidence import MemoryEvidence


def _rows(pattern: str) -> dict[str, tuple[int, bool]]:
    return {f"r{i:03d}": (1, bit == "1") for i, bit in enumerate(pattern)}


def test_paired_exact_reads_the_loop_it_names():
    claim = PairedExactClaim(
        id="loop1",
        statement="s",
        statistic="paired_exact",
        arms=("ck", "base"),
        manifest="arc",
        loop=1,
        direction="two-sided",
    )
    # at loop 1 the checkpoint loses 9 rows and wins 2; at the final loop it would win everything
    evidence = MemoryEvidence(
        outcome_map={
            ("ck", "arc", 1): _rows("1" * 20 + "0" * 9 + "1" * 2 + "0" * 9),
            ("base", "arc", 1): _rows("1" * 20 + "1" * 9 + "0" * 2 + "0" * 9),
            ("ck", "arc", None): _rows("1" * 40),
            ("base", "arc", None): _rows("0" * 40),
        }
    )
    result = evaluate_claim(claim, evidence)
    assert (result.figures["helped"], result.figures["hurt"], result.figures["ties"]) == (2, 9, 29)
    assert result.p_value == pytest.approx(binomtest(2, 11, 0.5, alternative="two-sided").pvalue, rel=1e-12)
    assert "at loop 1" in result.reason


def test_noninferiority_shows_its_statistic_p_and_interval():
    file = ClaimFile.model_validate(
        {
            "protocol": "p",
            "correction": "none",
            "claims": [
                {
                    "id": "ni",
                    "statement": "s",
                    "statistic": "noninferiority",
                    "arms": ["ck", "base"],
                    "manifest": "arc",
                    "loop": 1,
                    "margin": 0.03,
                }
            ],
        }
    )
    pattern_a, pattern_b = "1" * 180 + "10" * 5, "1" * 180 + "01" * 5
    evidence = MemoryEvidence(outcome_map={("ck", "arc", 1): _rows(pattern_a), ("base", "arc", 1): _rows(pattern_b)})
    (result,) = evaluate_claims(file, evidence)
    z = tango_score_statistic(5, 5, 190, -0.03)
    assert result.figures["score_statistic"] == pytest.approx(z)
    assert f"Tango z = {z:.3f}" in result.reason and "CI" in result.reason and "p = " in result.reason
    assert {"ci_low", "ci_high", "p_value"} <= set(result.figures)


def _family_file(correction: str = "holm", declared: bool = True) -> dict:
    claims = [
        {
            "id": f"c{i}",
            "statement": "s",
            "statistic": "paired_exact",
            "arms": [f"A{i}", "B"],
            "manifest": "m",
            "family": "fam",
        }
        for i in range(3)
    ]
    body = {"protocol": "p", "correction": "none", "claims": claims}
    if declared:
        body["families"] = {"fam": {"correction": correction, "members": ["c0", "c1", "c2"]}}
    return body


def _arms(*patterns: str) -> MemoryEvidence:
    outcomes = {("B", "m", None): _rows("0" * 12)}
    for index, pattern in enumerate(patterns):
        outcomes[(f"A{index}", "m", None)] = _rows(pattern)
    return MemoryEvidence(outcome_map=outcomes)


def test_a_family_is_judged_only_when_every_declared_member_is_measured():
    file = ClaimFile.model_validate(_family_file())
    # c0: 6 of 12 helped (one-sided p = 0.0156); c1 and c2 not measured yet
    early = evaluate_claims(file, _arms("1" * 6 + "0" * 6))
    assert [r.outcome for r in early] == ["unverifiable"] * 3
    assert "judged only when all 3 members are measured" in early[0].reason and "c1, c2" in early[0].reason
    # all three measured: Holm over three members, not over the one that had evidence
    late = evaluate_claims(file, _arms("1" * 6 + "0" * 6, "1" * 2 + "0" * 10, "1" * 1 + "0" * 11))
    p0 = binomtest(6, 6, 0.5, alternative="greater").pvalue
    assert late[0].figures["p_adjusted"] == pytest.approx(min(1.0, 3 * p0))
    assert late[0].figures["correction"] == "holm over 3 in family 'fam'"


def test_a_declared_family_uses_its_own_correction():
    file = ClaimFile.model_validate(_family_file("bonferroni"))
    results = evaluate_claims(file, _arms("1" * 8 + "0" * 4, "1" * 7 + "0" * 5, "1" * 3 + "0" * 9))
    for result, helped in zip(results, (8, 7, 3)):
        p = binomtest(helped, helped, 0.5, alternative="greater").pvalue
        assert result.figures["p_adjusted"] == pytest.approx(min(1.0, 3 * p))


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda body: body["families"]["fam"]["members"].pop(), "names family 'fam' but is not one of its members"),
        (lambda body: body["families"]["fam"]["members"].append("c9"), "'c9' is not a claim of this file"),
        (
            lambda body: body["claims"].append(
                {
                    "id": "acc",
                    "statement": "s",
                    "statistic": "accuracy",
                    "arm": "A0",
                    "manifest": "m",
                    "threshold": 0.5,
                    "family": "fam",
                }
            ),
            "has no p-value",
        ),
    ],
)
def test_family_declarations_are_checked(tmp_path, change, message):
    import yaml

    body = _family_file()
    change(body)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    from ledger.protocol.claims import load_claims

    with pytest.raises(ProtocolError, match=message):
        load_claims(path)


def test_a_censored_frontier_is_not_read_past_a_depth_filter():
    """The curve crosses 0.71 at 3.37; filtered to depths 9-14 it would read 'never crosses, >= 14'."""
    curve = {1: 0.9, 2: 0.8, 3: 0.72, 4: 0.5, **dict.fromkeys(range(5, 9), 0.4), **dict.fromkeys(range(9, 15), 0.9)}
    counts = {depth: (round(accuracy * 100), 100) for depth, accuracy in curve.items()}
    evidence = MemoryEvidence(count_map={("A", "eval"): counts})
    common = dict(id="f", statement="s", statistic="frontier_ratio", arm="A", manifest="eval", support_max_depth=8)
    unfiltered = evaluate_claim(FrontierClaim(**common, threshold=0.3), evidence)
    assert unfiltered.figures["frontier"] == pytest.approx(3 + (0.72 - 0.71) / (0.72 - 0.5))
    filtered = evaluate_claim(FrontierClaim(**common, threshold=1.3, rows={"depths": (9, 14)}), evidence)
    assert filtered.outcome == "unverifiable"
    assert "first falls below the bar 0.71 at depth 4, before the claim's depths 9-14" in filtered.reason
    # a filter that starts before the fall still reads the first crossing
    early = evaluate_claim(FrontierClaim(**common, threshold=0.3, rows={"depths": (1, 14)}), evidence)
    assert early.outcome == "supported" and early.figures["frontier"] == pytest.approx(unfiltered.figures["frontier"])


def test_paired_exact_reads_one_arm_at_two_loops():
    """Does accuracy rise with test recurrence? The same arm's rows at loop 8 against loop 1, each row paired."""
    claim = PairedExactClaim(
        id="rises", statement="s", statistic="paired_exact", arms=("M", "M"), manifest="gsm", loops=(8, 1)
    )
    evidence = MemoryEvidence(
        outcome_map={
            ("M", "gsm", 8): _rows("1" * 10 + "1" * 12 + "0" * 3 + "0" * 15),
            ("M", "gsm", 1): _rows("1" * 10 + "0" * 12 + "1" * 3 + "0" * 15),
        }
    )
    result = evaluate_claim(claim, evidence)
    assert (result.figures["helped"], result.figures["hurt"]) == (12, 3)
    assert (result.figures["correct_M@8"], result.figures["correct_M@1"]) == (22, 13)
    assert result.p_value == pytest.approx(binomtest(12, 15, 0.5, alternative="greater").pvalue, rel=1e-12)
    assert result.outcome == "supported" and "M at loop 8 vs M at loop 1" in result.reason
    flat = MemoryEvidence(outcome_map={("M", "gsm", 8): _rows("10" * 20), ("M", "gsm", 1): _rows("10" * 20)})
    assert evaluate_claim(claim, flat).outcome == "refuted"  # a flat curve: nothing to credit


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"arms": ("M", "M")}, "an arm against itself needs two different loops"),
        ({"arms": ("M", "M"), "loops": (4, 4)}, "an arm against itself needs two different loops"),
        ({"arms": ("M", "C"), "loops": (8, 1), "loop": 1}, "give loops, or loop / at_step, not both"),
    ],
)
def test_paired_exact_loops_are_refused_where_they_cannot_mean_anything(fields, message):
    with pytest.raises(ValueError, match=message):
        PairedExactClaim(id="c", statement="s", statistic="paired_exact", manifest="m", **fields)


def test_check_reads_each_arms_own_loop_of_a_paired_claim(tmp_path, capsys):
    """`ledger check`: M against itself at loops 32 and 1 on the word problems can be decided (M is read at
    1-32); at loop 64 it cannot, located at the claim."""
    import shutil
    from pathlib import Path

    import yaml

    from ledger.cli.main import main

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "protocols").mkdir()
    shutil.copy(root / "protocols" / "designM-tiny.yaml", tmp_path / "protocols" / "designM-tiny.yaml")
    shutil.copytree(root / "claims", tmp_path / "claims")
    (tmp_path / "bases").symlink_to(root / "bases")
    claims_file = tmp_path / "claims" / "designM-tiny.yaml"
    claims = yaml.safe_load(claims_file.read_text())
    rises = {
        "id": "accuracy_rises_with_recurrence",
        "statement": "M answers more word problems at test recurrence 32 than at 1.",
        "statistic": "paired_exact",
        "arms": ["M", "M"],
        "loops": [32, 1],
        "manifest": "problems_eval",
        "direction": "greater",
    }
    kept = claims["claims"]
    for loops, code in (([32, 1], 0), ([64, 1], 2)):
        claims["claims"] = [*kept, {**rises, "loops": loops}]
        claims_file.write_text(yaml.safe_dump(claims, sort_keys=False))
        assert main(["check", str(tmp_path / "protocols" / "designM-tiny.yaml")]) == code
    err = capsys.readouterr().err
    assert "arm 'M' is never read at loop 64 on 'problems_eval' (read at [1, 2, 4, 8, 16, 32])" in err
