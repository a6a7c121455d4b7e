"""Paired counts over aligned row ids and the exact McNemar (sign) test in log space."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ledger.judge.deferred import binom, special
from ledger.judge.records import _ToDict

Alternative = Literal["two-sided", "greater", "less"]
_ALTERNATIVES = ("two-sided", "greater", "less")

LN10 = math.log(10.0)


# --------------------------------------------------------------------------- #
# Paired counts
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class PairedCounts(_ToDict):
    helped: int  # A right, B wrong
    hurt: int  # A wrong, B right
    both_right: int
    both_wrong: int
    ties: int  # both_right + both_wrong
    n: int
    net: int  # helped - hurt


def paired_counts(a: Sequence[bool], b: Sequence[bool]) -> PairedCounts:
    """Cross-tabulate two arms' per-row correctness on the same, aligned row ids."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    a_right = np.asarray(a, dtype=bool)
    b_right = np.asarray(b, dtype=bool)
    helped = int(np.sum(a_right & ~b_right))
    hurt = int(np.sum(~a_right & b_right))
    both_right = int(np.sum(a_right & b_right))
    both_wrong = int(np.sum(~a_right & ~b_right))
    return PairedCounts(
        helped=helped,
        hurt=hurt,
        both_right=both_right,
        both_wrong=both_wrong,
        ties=both_right + both_wrong,
        n=len(a_right),
        net=helped - hurt,
    )


# --------------------------------------------------------------------------- #
# Exact McNemar / sign test
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TestResult(_ToDict):
    __test__ = False  # not a pytest test class despite the name

    statistic: float  # number of helped pairs (the binomial count tested)
    p_value: float
    log10_p: float  # finite even when p_value underflows to 0.0
    alternative: str
    method: str
    helped: int
    hurt: int
    n_discordant: int
    mid_p: bool


def _log_upper_tail(k: int, n: int) -> float:
    """log P(X >= k) for X ~ Binomial(n, 1/2).

    The short tail (k above the mean) is a log-space sum of pmf terms, exact far
    past double underflow; the long tail is 1 minus the mirrored short tail,
    so it reaches exactly 1 (log 0) where it should.
    """
    if k <= 0:
        return 0.0
    if k > n:
        return -math.inf
    if 2 * k > n:
        return float(special.logsumexp(binom.logpmf(np.arange(k, n + 1), n, 0.5)))
    # P(X >= k) = 1 - P(X <= k - 1) = 1 - P(X >= n - k + 1), by symmetry of p = 1/2
    return math.log1p(-math.exp(_log_upper_tail(n - k + 1, n)))


def _log_lower_tail(k: int, n: int) -> float:
    """log P(X <= k) for X ~ Binomial(n, 1/2), by symmetry with the upper tail."""
    return _log_upper_tail(n - k, n)


def mcnemar_exact(
    helped: int,
    hurt: int,
    alternative: Alternative = "two-sided",
    mid_p: bool = False,
) -> TestResult:
    """Exact McNemar test = sign test of helped ~ Binomial(helped + hurt, 1/2).

    ``greater``: A better than B (more helped than hurt); ``less``: the reverse.
    Two-sided p doubles the smaller tail (the null is symmetric), capped at 1;
    this equals statsmodels' ``mcnemar(exact=True)`` and scipy's ``binomtest``.
    Mid-p counts only half the probability of the observed count
    (Lancaster 1961; Fagerland, Lydersen & Laake 2013, BMC Med Res Methodol 13:91).
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {alternative!r}")
    if helped < 0 or hurt < 0:
        raise ValueError("helped and hurt must be non-negative counts")
    n = int(helped) + int(hurt)

    def log_tail_at_least(k: int) -> float:  # P(X >= k), or P(X > k) + P(X = k)/2
        if mid_p:
            return float(np.logaddexp(_log_upper_tail(k + 1, n), math.log(0.5) + binom.logpmf(k, n, 0.5)))
        return _log_upper_tail(k, n)

    def log_tail_at_most(k: int) -> float:  # P(X <= k), or P(X < k) + P(X = k)/2
        if mid_p:
            return float(np.logaddexp(_log_lower_tail(k - 1, n), math.log(0.5) + binom.logpmf(k, n, 0.5)))
        return _log_lower_tail(k, n)

    if n == 0:
        log_p = 0.0  # no discordant pairs: no evidence either way
    elif alternative == "greater":
        log_p = log_tail_at_least(helped)
    elif alternative == "less":
        log_p = log_tail_at_most(helped)
    else:
        log_p = min(0.0, math.log(2.0) + log_tail_at_most(min(helped, hurt)))
    log_p = min(log_p, 0.0)  # rounding in logsumexp can exceed 0 by an ulp

    return TestResult(
        statistic=float(helped),
        p_value=math.exp(log_p),
        log10_p=log_p / LN10,
        alternative=alternative,
        method="exact McNemar (sign test on discordant pairs)" + (", mid-p" if mid_p else ""),
        helped=int(helped),
        hurt=int(hurt),
        n_discordant=n,
        mid_p=bool(mid_p),
    )
