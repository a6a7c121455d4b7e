"""The frontier-ratio claim when the curve never crosses its bar inside the evaluated depths.

The frontier is then only bounded (at least the deepest evaluated depth, or at most the
shallowest); the bound decides the claim when it clears the threshold on the claim's side,
and leaves it unverifiable otherwise.
"""

from __future__ import annotations

import pytest

from ledger.judge.claims import evaluate_claim
from ledger.protocol.claims import FrontierClaim
from tests.judge.memory_evidence import MemoryEvidence


def claim(threshold: float, direction: str = "at_least") -> FrontierClaim:
    return FrontierClaim(
        id="frontier",
        statement="s",
        statistic="frontier_ratio",
        arm="A",
        manifest="eval",
        bar=0.71,
        support_max_depth=8,
        threshold=threshold,
        direction=direction,
    )


def evidence(accuracy_by_depth: dict[int, float], rows: int = 100) -> MemoryEvidence:
    counts = {depth: (round(accuracy * rows), rows) for depth, accuracy in accuracy_by_depth.items()}
    return MemoryEvidence(count_map={("A", "eval"): counts})


ABOVE_THROUGH_14 = {depth: 0.95 if depth <= 11 else 0.86 for depth in range(1, 15)}
BELOW_FROM_3 = dict.fromkeys(range(3, 15), 0.5)


@pytest.mark.parametrize(
    "threshold,direction,outcome",
    [
        (1.3, "at_least", "supported"),  # ratio >= 14 / 8 = 1.75 >= 1.3
        (1.75, "at_least", "supported"),
        (2.0, "at_least", "unverifiable"),  # >= 1.75 cannot say >= 2.0: needs deeper rows
        (1.5, "at_most", "refuted"),  # ratio >= 1.75 > 1.5
        (2.0, "at_most", "unverifiable"),
    ],
)
def test_a_curve_above_the_bar_through_the_deepest_depth_bounds_the_frontier_from_below(threshold, direction, outcome):
    result = evaluate_claim(claim(threshold, direction), evidence(ABOVE_THROUGH_14))
    assert result.outcome == outcome, result.reason
    assert result.figures["frontier"] is None and result.figures["frontier_at_least"] == 14
    assert result.figures["ratio_at_least"] == pytest.approx(1.75)
    assert "frontier >= 14" in result.reason


@pytest.mark.parametrize(
    "threshold,direction,outcome",
    [
        (1.3, "at_least", "refuted"),  # ratio <= 3 / 8 < 1.3
        (0.2, "at_least", "unverifiable"),  # <= 0.375 cannot say >= 0.2: needs shallower rows
        (0.5, "at_most", "supported"),
        (0.2, "at_most", "unverifiable"),
    ],
)
def test_a_curve_below_the_bar_at_the_shallowest_depth_bounds_the_frontier_from_above(threshold, direction, outcome):
    result = evaluate_claim(claim(threshold, direction), evidence(BELOW_FROM_3))
    assert result.outcome == outcome, result.reason
    assert result.figures["frontier_at_most"] == 3 and result.figures["ratio_at_most"] == pytest.approx(3 / 8)


def test_a_crossing_inside_the_depths_is_interpolated_as_before():
    curve = {**ABOVE_THROUGH_14, 12: 0.61, 13: 0.5, 14: 0.4}
    result = evaluate_claim(claim(1.3), evidence(curve))
    assert result.outcome == "supported" and result.figures["frontier"] == pytest.approx(
        11 + (0.95 - 0.71) / (0.95 - 0.61)
    )
    assert "frontier_at_least" not in result.figures
