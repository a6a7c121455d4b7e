"""The support-scaling claim (frontier / support across supports, SPEC section 8): each arm's frontier by the
same interpolated crossing as a frontier_ratio claim, every ratio against the threshold, the supports' mean ratios
(seeds averaged) against the spread, a bounded frontier deciding only what its bound decides. The paper's own
frontiers (5.75 / 9.01 / 11.61 / 17.93 at support 4 / 6 / 8 / 12) serve as a curve shape here, built per test."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ledger.judge import stats
from ledger.judge.claims import evaluate_claim
from ledger.judge.power import unwinnable_claims
from ledger.protocol.claims import ClaimFile, SupportScalingClaim
from tests.judge.memory_evidence import MemoryEvidence

ARMS = ("S4", "S6", "S6b", "S8", "S12")
SUPPORTS = (4, 6, 6, 8, 12)


def claim(threshold: float = 1.3, max_spread: float | None = None, **extra) -> SupportScalingClaim:
    return SupportScalingClaim(
        id="scaling",
        statement="s",
        statistic="support_scaling",
        arms=ARMS,
        supports=SUPPORTS,
        manifest="n16",
        manifests={"S12": "n24"},
        threshold=threshold,
        max_spread=max_spread,
        **extra,
    )


def curve(crossing: float, deepest: int) -> dict[int, tuple[int, int]]:
    """Counts of 100 rows per depth, accuracy 0.95 up to floor(crossing) and 0.5 after: it crosses the bar
    between floor(crossing) and the next depth."""
    return {depth: (95 if depth <= crossing else 50, 100) for depth in range(1, deepest + 1)}


def evidence(crossings: dict[str, float], deepest: dict[str, int] | None = None) -> MemoryEvidence:
    deepest = deepest or {}
    return MemoryEvidence(
        count_map={
            (arm, "n24" if arm == "S12" else "n16"): curve(x, deepest.get(arm, 23 if arm == "S12" else 15))
            for arm, x in crossings.items()
        }
    )


PAPER_LIKE = {"S4": 5.5, "S6": 9.2, "S6b": 8.2, "S8": 11.5, "S12": 17.5}


def _frontier(crossing: float, deepest: int) -> float:
    accuracy = {d: c / t for d, (c, t) in curve(crossing, deepest).items()}
    return stats.frontier(accuracy, 0.71).frontier


def test_every_ratio_and_the_spread_of_the_supports_means_are_computed_from_each_arms_curve() -> None:
    result = evaluate_claim(claim(max_spread=0.3), evidence(PAPER_LIKE))
    members = result.figures["members"]
    for arm, support in zip(ARMS, SUPPORTS):  # independent: the same crossing through stats.frontier
        deepest = 23 if arm == "S12" else 15
        assert members[arm]["ratio"] == pytest.approx(_frontier(PAPER_LIKE[arm], deepest) / support)
    means = result.figures["mean_ratio_by_support"]
    assert means["6"] == pytest.approx((members["S6"]["ratio"] + members["S6b"]["ratio"]) / 2, abs=1e-6)
    assert result.figures["spread"] == pytest.approx(max(means.values()) - min(means.values()), abs=1e-6)
    assert members["S12"]["manifest"] == "n24"
    assert result.outcome == ("supported" if result.figures["spread"] <= 0.3 else "refuted"), result.reason
    assert result.figures["min_ratio"] >= 1.3


def test_one_arm_below_the_threshold_refutes_and_a_wide_spread_refutes() -> None:
    low = evaluate_claim(claim(), evidence({**PAPER_LIKE, "S8": 8.5}))  # 8.5 / 8 ~ 1.1
    assert low.outcome == "refuted" and "S8" in low.reason.split("below")[-1]
    wide = evaluate_claim(claim(max_spread=0.05), evidence({**PAPER_LIKE, "S12": 21.5}))
    assert wide.outcome == "refuted" and wide.figures["spread"] > 0.05


def test_a_frontier_past_the_deepest_depth_counts_by_its_bound_for_the_threshold_never_for_the_spread() -> None:
    never = {**PAPER_LIKE, "S8": 99.0}  # S8 above the bar through depth 15: frontier >= 15, ratio >= 1.875
    bounded = evaluate_claim(claim(), evidence(never))
    assert bounded.outcome == "supported" and bounded.figures["members"]["S8"]["ratio_at_least"] == 15 / 8
    assert evaluate_claim(claim(max_spread=0.3), evidence(never)).outcome == "unverifiable"
    assert evaluate_claim(claim(threshold=2.0), evidence(never)).outcome == "refuted"  # S4 is below 2.0 anyway
    only_bound_short = dict.fromkeys(ARMS, 99.0)  # every arm bounded; S12 >= 23/12 = 1.92 < 1.95: undecided
    assert evaluate_claim(claim(threshold=1.95), evidence(only_bound_short)).outcome == "unverifiable"
    missing = evaluate_claim(claim(), evidence({k: v for k, v in PAPER_LIKE.items() if k != "S6b"}))
    assert missing.outcome == "unverifiable" and "S6b" in missing.reason


def test_the_claim_is_refused_when_its_members_do_not_line_up() -> None:
    for bad in (
        {"supports": (4, 6)},
        {"supports": (6, 6, 6, 6, 6)},
        {"manifests": {"S99": "n24"}},
        {"rows": {"depths": [1, 8]}},
    ):
        fields = {"arms": ARMS, "supports": SUPPORTS, "manifests": {"S12": "n24"}, **bad}
        with pytest.raises(ValidationError):
            SupportScalingClaim(
                id="x", statement="s", statistic="support_scaling", manifest="n16", threshold=1.3, **fields
            )


def test_power_refuses_a_claim_whose_rows_stop_short_of_threshold_times_support() -> None:
    file = ClaimFile(protocol="p", correction="holm", claims=[claim(threshold=1.3)])
    shallow = {"n16": list(range(1, 16)), "n24": list(range(1, 15))}  # N24 rows to 14 < 1.3 x 12 = 15.6
    (found,) = unwinnable_claims(file, shallow)
    assert "S12" in found.message and "depth 16" in found.message
    assert unwinnable_claims(file, {"n16": list(range(1, 16)), "n24": list(range(1, 24))}) == []


def test_an_arm_below_the_bar_at_its_shallowest_depth_is_bounded_above_only() -> None:
    """Its frontier is at most its shallowest depth: a ratio bound above the threshold decides nothing; below it,
    the claim is refuted."""
    below = dict.fromkeys(range(6, 16), (10, 100))  # rows of depth 6-15 only, all below the bar
    counts = {
        ("S4", "n16"): below,
        **{(a, "n24" if a == "S12" else "n16"): curve(PAPER_LIKE[a], 23 if a == "S12" else 15) for a in ARMS[1:]},
    }
    undecided = evaluate_claim(claim(threshold=1.2), MemoryEvidence(count_map=counts))
    assert undecided.outcome == "unverifiable" and undecided.figures["members"]["S4"]["ratio_at_most"] == 6 / 4
    assert evaluate_claim(claim(threshold=1.6), MemoryEvidence(count_map=counts)).outcome == "refuted"
