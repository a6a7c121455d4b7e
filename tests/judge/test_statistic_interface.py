"""A statistic carries everything it needs: its spec, its evaluation, the evidence it reads, the rows it used and
its power rule (or why it needs none). One defined here is registered, checked, sized and judged like the
built-in ones."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from scipy.stats import binomtest

from ledger.judge.claims import ClaimResult, _rows, evaluate_claim
from ledger.judge.power import PowerInputs, unwinnable_claims
from ledger.protocol.check import check_protocol_file
from ledger.protocol.claim_common import StatisticKind
from ledger.protocol.claims import STATISTICS, ClaimSpec, load_claims
from tests.judge.memory_evidence import MemoryEvidence
from tests.run_helpers import SMOKE


def test_every_statistic_declares_a_power_rule_or_why_it_needs_none():
    for kind in STATISTICS:
        assert bool(kind.power) != bool(kind.no_power_check), kind.name
        if kind.tested:  # a p-value can fall short on too few rows: it must be sized at registration
            assert kind.power, f"{kind.name} yields a p-value but declares no power rule"
        if kind.power:
            assert callable(STATISTICS.resolve(kind.name, "power"))


def test_a_statistic_that_declares_neither_is_refused_where_it_is_declared():
    with pytest.raises(TypeError, match="declares neither of power and no_power_check"):
        StatisticKind("vague", ClaimSpec, "x:y", tested=True)
    with pytest.raises(TypeError, match="declares both"):
        StatisticKind("both", ClaimSpec, "x:y", power="x:p", no_power_check="why")


class AboveChanceClaim(ClaimSpec):
    """One arm's accuracy above chance, by the exact binomial test."""

    statistic: Literal["above_chance"]
    arm: str
    chance: float
    alpha: float = 0.05


def above_chance(claim: AboveChanceClaim, evidence: Any) -> ClaimResult:
    rows = _rows(claim, evidence, claim.arm)  # notes the rows it computed on
    correct = sum(hit for _, hit in rows.values())
    p = binomtest(correct, len(rows), claim.chance, alternative="greater").pvalue
    outcome = "supported" if p < claim.alpha else "refuted"
    figures = {"correct": correct, "n": len(rows), "p_value": p}
    return ClaimResult(claim.id, claim.statistic, outcome, f"{correct}/{len(rows)}, p = {p:.3g}", figures, p_value=p)


def above_chance_power(claim: AboveChanceClaim, inputs: PowerInputs) -> str | None:
    n = len(inputs.depths(claim))
    best = claim.chance**n  # every row right
    return None if best < claim.alpha else f"cannot be supported: even all {n} rows right, p = {best:.3g}"


@pytest.fixture
def registered():
    STATISTICS.add(
        StatisticKind(
            "above_chance",
            AboveChanceClaim,
            f"{__name__}:above_chance",
            "accuracy above chance (exact binomial)",
            tested=True,
            power=f"{__name__}:above_chance_power",
        )
    )
    yield
    STATISTICS.remove("above_chance")


CLAIMS = """\
protocol: smoke
correction: holm
claims:
  - {id: A_above_chance, statement: A is above chance., statistic: above_chance, arm: A, manifest: eval, chance: 0.5}
"""


def test_a_statistic_defined_here_is_loaded_checked_sized_and_judged(registered, tmp_path):
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    protocol = tmp_path / "smoke.yaml"
    protocol.write_text(SMOKE.read_text(encoding="utf-8").replace("../claims/smoke.yaml", "claims.yaml"))

    claim_file = load_claims(tmp_path / "claims.yaml")
    (claim,) = claim_file.claims
    assert isinstance(claim, AboveChanceClaim)
    assert check_protocol_file(protocol).claim_files  # `ledger check`'s complete validation accepts it

    # sized at registration by its own rule: 2 rows can never reach p < 0.05, 20 can
    (too_few,) = unwinnable_claims(claim_file, {"eval": [1, 2]})
    assert too_few.claim_id == "A_above_chance" and "all 2 rows right" in too_few.message
    assert unwinnable_claims(claim_file, {"eval": [1] * 20}) == []

    outcomes = {f"r{i}": (1 + i % 5, i % 10 != 0) for i in range(20)}  # 18 of 20 right
    result = evaluate_claim(claim, MemoryEvidence(outcome_map={("A", "eval", None): outcomes}))
    assert result.outcome == "supported" and result.figures["correct"] == 18
    assert [(used.arm, used.manifest, len(used.rows)) for used in result.rows_used] == [("A", "eval", 20)]


def test_removing_it_again_leaves_the_claim_file_refusing_it(registered, tmp_path):
    STATISTICS.remove("above_chance")
    try:
        (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
        from ledger.protocol.loader import ProtocolError

        with pytest.raises(ProtocolError, match="above_chance"):
            load_claims(tmp_path / "claims.yaml")
    finally:
        STATISTICS.add(STATISTICS_KIND_BACK)  # the fixture removes it once more


STATISTICS_KIND_BACK = StatisticKind(
    "above_chance",
    AboveChanceClaim,
    f"{__name__}:above_chance",
    "",
    tested=True,
    power=f"{__name__}:above_chance_power",
)


class ForgetfulClaim(AboveChanceClaim):
    statistic: Literal["forgetful"]  # type: ignore[assignment]


def forgetful(claim: ForgetfulClaim, evidence: Any) -> ClaimResult:
    """The same test, reading the rows without noting them."""
    rows = evidence.outcomes(claim.arm, claim.manifest, None)
    correct = sum(hit for _, hit in rows.values())
    p = binomtest(correct, len(rows), claim.chance, alternative="greater").pvalue
    return ClaimResult(claim.id, claim.statistic, "supported", f"p = {p:.3g}", {"p_value": p}, p_value=p)


def test_a_tested_statistic_that_notes_no_rows_is_unverifiable(tmp_path):
    STATISTICS.add(
        StatisticKind(
            "forgetful", ForgetfulClaim, f"{__name__}:forgetful", tested=True, power=f"{__name__}:above_chance_power"
        )
    )
    try:
        (tmp_path / "claims.yaml").write_text(CLAIMS.replace("above_chance", "forgetful"), encoding="utf-8")
        (claim,) = load_claims(tmp_path / "claims.yaml").claims
        outcomes = {f"r{i}": (1, True) for i in range(20)}
        result = evaluate_claim(claim, MemoryEvidence(outcome_map={("A", "eval", None): outcomes}))
        assert result.outcome == "unverifiable" and "noted no rows" in result.reason
    finally:
        STATISTICS.remove("forgetful")
