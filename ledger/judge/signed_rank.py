"""The paired test of per-document losses: Wilcoxon's signed-rank test (scipy), one-sided, with a margin.

Two arms' next-token losses on the same held-out documents are paired by document; the test
asks whether the differences ``d_i = loss_a,i - loss_b,i`` (nats per token) lie below ``-margin``
(``less``: arm a better by more than the margin) or below ``+margin`` (``at_most``: arm a not worse
than arm b by more than the margin, non-inferiority). Rank-based, so a few long documents with
extreme losses cannot carry the result; exact for n <= 50 without ties (scipy's choice), else the
normal approximation with tie and zero corrections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ledger.judge.deferred import _Deferred

scipy_stats = _Deferred("scipy.stats")


@dataclass(frozen=True)
class SignedRankResult:
    n: int
    mean_difference: float
    median_difference: float
    statistic: float
    p_value: float
    shift: float  # the margin the differences were tested against (-margin for less, +margin for at_most)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def signed_rank_test(
    differences: Sequence[float], *, margin: float = 0.0, direction: Literal["less", "at_most"] = "less"
) -> SignedRankResult:
    """One-sided Wilcoxon signed-rank test of H1: the differences lie below the shift."""
    values = [float(d) for d in differences]
    if len(values) < 2:
        raise ValueError("a signed-rank test needs at least two paired documents")
    shift = -margin if direction == "less" else margin
    shifted = [d - shift for d in values]
    if all(d == 0 for d in shifted):
        p_value, statistic = 1.0, 0.0
    else:
        test = scipy_stats.wilcoxon(shifted, alternative="less", zero_method="wilcox")
        p_value, statistic = float(test.pvalue), float(test.statistic)
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return SignedRankResult(len(values), sum(values) / len(values), median, statistic, p_value, shift)
