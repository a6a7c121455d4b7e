"""Confidence intervals: the ``Interval`` record and the Wilson interval for one proportion."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.judge.records import _ToDict


@dataclass(frozen=True)
class Interval(_ToDict):
    estimate: float
    lower: float
    upper: float
    confidence: float
    method: str


# --------------------------------------------------------------------------- #
# Single proportion
# --------------------------------------------------------------------------- #


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for k successes of n (statsmodels ``proportion_confint``)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    from statsmodels.stats.proportion import proportion_confint  # heavy: only when an interval is asked for

    lower, upper = proportion_confint(k, n, alpha=1.0 - confidence, method="wilson")
    estimate = k / n
    return Interval(
        estimate=estimate,
        # clamp rounding noise (e.g. 5.6e-17 at k = 0) so the interval holds the estimate
        lower=min(float(lower), estimate),
        upper=max(float(upper), estimate),
        confidence=float(confidence),
        method="Wilson score interval",
    )
