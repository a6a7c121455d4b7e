"""Tango's score test and interval for a paired difference, and paired non-inferiority by it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ledger.judge.deferred import norm, optimize
from ledger.judge.intervals import Interval
from ledger.judge.records import _ToDict

# --------------------------------------------------------------------------- #
# Tango's score test and interval for a paired difference of proportions
# --------------------------------------------------------------------------- #
#
# Tango T. (1998) Equivalence test and confidence interval for the difference
# in proportions for the paired-sample design. Stat Med 17:891-908; correction
# Stat Med (1999) 18:3511. With b = helped, c = hurt, n pairs and the null
# difference delta = p_b - p_c, the score statistic is
#     Z(delta) = (b - c - n*delta) / sqrt(n * (2*q + delta*(1 - delta)))
# where q is the maximum-likelihood estimate of p_c under the constraint
# p_b - p_c = delta: the larger root of 2n q^2 + B q + C = 0 with
#     B = -b - c + (2n - b + c) * delta,   C = -c * delta * (1 - delta).
# The interval is {delta : |Z(delta)| <= z_{1 - (1 - confidence)/2}}.


def _check_paired_counts(helped: int, hurt: int, n: int) -> None:
    if helped < 0 or hurt < 0 or n <= 0 or helped + hurt > n:
        raise ValueError(f"need 0 <= helped + hurt <= n and n > 0, got {helped}, {hurt}, {n}")


def _tango_numerator_and_variance(helped: int, hurt: int, n: int, delta: float) -> tuple[float, float]:
    quad_b = -helped - hurt + (2 * n - helped + hurt) * delta
    quad_c = -hurt * delta * (1.0 - delta)
    discriminant = max(quad_b * quad_b - 8.0 * n * quad_c, 0.0)
    hurt_probability = (math.sqrt(discriminant) - quad_b) / (4.0 * n)
    variance = n * (2.0 * hurt_probability + delta * (1.0 - delta))
    return helped - hurt - n * delta, max(variance, 0.0)


def tango_score_statistic(helped: int, hurt: int, n: int, delta: float) -> float:
    """Tango's score statistic Z for H0: p_helped - p_hurt = delta (see formula above)."""
    _check_paired_counts(helped, hurt, n)
    if not -1.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [-1, 1], got {delta}")
    numerator, variance = _tango_numerator_and_variance(helped, hurt, n, delta)
    if variance == 0.0:  # only at a degenerate boundary: the data sit exactly on delta or reject it outright
        return 0.0 if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def tango_interval(helped: int, hurt: int, n: int, confidence: float) -> Interval:
    """Tango's score confidence interval for d = (helped - hurt) / n.

    Inverts the two-sided score test: both limits solve Z(delta) = +-z with
    brentq on numerator - z * sqrt(variance), which is finite and continuous on
    [-1, 1] (Z itself is infinite at the ends).
    """
    _check_paired_counts(helped, hurt, n)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = float(norm.ppf(0.5 + confidence / 2.0))
    z_squared = z * z
    estimate = (helped - hurt) / n
    method = "Tango score interval (paired difference)"

    # The score's variance vanishes at the estimate only in three tables, where
    # root finding would stop at that spurious zero; there |Z| has closed forms:
    #   no discordant pairs:  Z^2 = n|delta| / (1 - |delta|)
    #   all pairs helped:     Z^2 = n(1 - delta) / (1 + delta)   (mirror: all hurt)
    if helped == hurt == 0:
        half_width = z_squared / (n + z_squared)
        return Interval(estimate, -half_width, half_width, float(confidence), method)
    if helped == n:
        return Interval(estimate, (n - z_squared) / (n + z_squared), 1.0, float(confidence), method)
    if hurt == n:
        return Interval(estimate, -1.0, -(n - z_squared) / (n + z_squared), float(confidence), method)

    def distance(delta: float, target: float) -> float:
        numerator, variance = _tango_numerator_and_variance(helped, hurt, n, delta)
        return numerator - target * math.sqrt(variance)

    # Lower limit: Z(delta) = +z on [-1, estimate]; Z -> +inf at -1 unless hurt == n.
    if distance(-1.0, z) <= 0.0:
        lower = -1.0
    else:
        lower = optimize.brentq(distance, -1.0, estimate, args=(z,), xtol=1e-12)
    # Upper limit: Z(delta) = -z on [estimate, 1]; Z -> -inf at 1 unless helped == n.
    if distance(1.0, -z) >= 0.0:
        upper = 1.0
    else:
        upper = optimize.brentq(distance, estimate, 1.0, args=(-z,), xtol=1e-12)
    return Interval(
        estimate=estimate, lower=float(lower), upper=float(upper), confidence=float(confidence), method=method
    )


@dataclass(frozen=True)
class NonInferiorityResult(_ToDict):
    difference: float  # (helped - hurt) / n
    margin: float
    score_statistic: float  # Tango's Z at delta = -margin
    p_value: float  # one-sided, H0: difference <= -margin
    alpha: float
    ci_lower: float
    ci_upper: float
    ci_confidence: float  # 1 - 2 * alpha: its lower limit is the one-sided alpha bound
    noninferior: bool
    helped: int
    hurt: int
    n: int
    method: str


def tango_noninferiority(helped: int, hurt: int, n: int, margin: float, alpha: float = 0.05) -> NonInferiorityResult:
    """Paired non-inferiority of A to B with a margin by Tango's score test.

    H0: d <= -margin against H1: d > -margin, with d = (helped - hurt) / n.
    p = P(N(0,1) >= Z(-margin)). The reported interval is Tango's at
    confidence 1 - 2*alpha, so "lower limit > -margin" and "p < alpha" are the
    same decision (both invert the same score test).
    """
    _check_paired_counts(helped, hurt, n)
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must be in (0, 1), got {margin}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    statistic = tango_score_statistic(helped, hurt, n, -margin)
    p_value = float(norm.sf(statistic))
    interval = tango_interval(helped, hurt, n, 1.0 - 2.0 * alpha)
    return NonInferiorityResult(
        difference=(helped - hurt) / n,
        margin=float(margin),
        score_statistic=float(statistic),
        p_value=p_value,
        alpha=float(alpha),
        ci_lower=interval.lower,
        ci_upper=interval.upper,
        ci_confidence=interval.confidence,
        noninferior=p_value < alpha,
        helped=int(helped),
        hurt=int(hurt),
        n=int(n),
        method="Tango score test, one-sided, paired difference",
    )
