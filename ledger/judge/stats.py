"""Paired statistics over fixed row ids (SPEC sections 5-6).

Pure functions, no I/O. Every result is a small frozen dataclass whose
``to_dict()`` holds only JSON-safe ints, floats, strings, bools, None and lists,
so a claim evaluator can store it in the ledger as it is.

Conventions used throughout:

* A comparison is "arm A against arm B" on the same rows. ``helped`` counts
  rows A gets right and B gets wrong, ``hurt`` rows A gets wrong and B right.
* Exact binomial tails are summed in log space, so p-values far below the
  smallest double (or near it: A vs B in the paper is p = 5.72e-257) keep a
  finite ``log10_p`` instead of collapsing to 0.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np


class _Deferred:
    """A scipy object imported on first use: scipy.stats alone takes seconds to import on a small
    machine, and ``ledger verify`` or a report should not pay for it before a test is computed."""

    def __init__(self, module: str, name: str | None = None):
        self._module, self._name = module, name
        self._resolved: Any = None

    def _target(self) -> Any:
        if self._resolved is None:
            module = importlib.import_module(self._module)
            self._resolved = getattr(module, self._name) if self._name else module
        return self._resolved

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._target(), attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)


optimize = _Deferred("scipy.optimize")
special = _Deferred("scipy.special")
binom = _Deferred("scipy.stats", "binom")
fisher_exact = _Deferred("scipy.stats", "fisher_exact")
norm = _Deferred("scipy.stats", "norm")

Alternative = Literal["two-sided", "greater", "less"]
_ALTERNATIVES = ("two-sided", "greater", "less")

# Threshold-crossing frontier bars (SPEC section 5). 0.71 is the preregistered
# rounding of (1/4)^(1/4); the exact value is kept for a sensitivity read.
FRONTIER_BAR = 0.71
FRONTIER_BAR_EXACT = 0.25**0.25
SENSITIVITY_BARS = (0.60, 0.80)

LN10 = math.log(10.0)


def _json_safe(value):
    """Turn numpy scalars / tuples into plain JSON types; non-finite floats to None."""
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


class _ToDict:
    def to_dict(self) -> dict:
        return _json_safe(asdict(self))


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


# --------------------------------------------------------------------------- #
# Per-depth gates
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class DepthGateResult(_ToDict):
    depth: int
    a_count: int  # count-based gate: A's correct rows; paired gate: helped
    b_count: int  # count-based gate: B's correct rows; paired gate: hurt
    p_value: float
    passed: bool


@dataclass(frozen=True)
class GateResult(_ToDict):
    passed: bool
    method: str
    alpha: float
    k_consecutive: int
    per_depth: tuple[DepthGateResult, ...]
    passing_run: tuple[int, ...] | None  # first k consecutive passing depths


def _first_consecutive_run(per_depth: Sequence[DepthGateResult], k: int) -> tuple[int, ...] | None:
    """First run of k passing depths that are adjacent integers (no gaps)."""
    run: list[int] = []
    for result in per_depth:
        if result.passed and run and result.depth == run[-1] + 1:
            run.append(result.depth)
        elif result.passed:
            run = [result.depth]
        else:
            run = []
        if len(run) >= k:
            return tuple(run[-k:])
    return None


def _check_gate_args(alpha: float, k_consecutive: int) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if k_consecutive < 1:
        raise ValueError(f"k_consecutive must be >= 1, got {k_consecutive}")


def fisher_depth_gate(
    per_depth_counts: Mapping[int, tuple[int, int, int, int]],
    alpha: float,
    k_consecutive: int,
) -> GateResult:
    """The paper's count-based gate: per depth, one-sided Fisher exact test that A > B.

    ``per_depth_counts[depth] = (correct_a, n_a, correct_b, n_b)``. A depth
    passes when A's count exceeds B's and the hypergeometric p (scipy
    ``fisher_exact``, alternative="greater", on [[correct_a, wrong_a],
    [correct_b, wrong_b]]) is below ``alpha``; the gate passes when
    ``k_consecutive`` adjacent depths pass. No multiplicity correction, as
    preregistered by the paper.

    Why it ignores pairing: it only sees the two marginal counts, as if A and
    B had been scored on independent samples. Both arms in fact read the same
    row ids, so the rows both get right (or both wrong) carry no information
    about the difference; Fisher treats them as if they did, which is
    conservative when arms agree on most rows. It is kept to replicate the
    paper's preregistered gate; ``paired_depth_gate`` is the paired analysis.
    """
    _check_gate_args(alpha, k_consecutive)
    results = []
    for depth in sorted(per_depth_counts):
        correct_a, n_a, correct_b, n_b = (int(x) for x in per_depth_counts[depth])
        if not (0 <= correct_a <= n_a and 0 <= correct_b <= n_b):
            raise ValueError(f"depth {depth}: counts out of range {per_depth_counts[depth]}")
        table = [[correct_a, n_a - correct_a], [correct_b, n_b - correct_b]]
        p_value = float(fisher_exact(table, alternative="greater").pvalue)
        results.append(
            DepthGateResult(
                depth=int(depth),
                a_count=correct_a,
                b_count=correct_b,
                p_value=p_value,
                passed=correct_a > correct_b and p_value < alpha,
            )
        )
    run = _first_consecutive_run(results, k_consecutive)
    return GateResult(
        passed=run is not None,
        method="count-based one-sided Fisher exact per depth (ignores pairing)",
        alpha=float(alpha),
        k_consecutive=int(k_consecutive),
        per_depth=tuple(results),
        passing_run=run,
    )


def paired_depth_gate(
    per_depth_pairs: Mapping[int, tuple[Sequence[bool], Sequence[bool]]],
    alpha: float,
    k_consecutive: int,
) -> GateResult:
    """Paired version of the depth gate: per depth, exact one-sided McNemar that A > B.

    ``per_depth_pairs[depth] = (a_correct, b_correct)``, aligned on the same row
    ids. A depth passes when helped > hurt and the one-sided exact p is below
    ``alpha``; the gate passes on ``k_consecutive`` adjacent passing depths.
    """
    _check_gate_args(alpha, k_consecutive)
    results = []
    for depth in sorted(per_depth_pairs):
        a_correct, b_correct = per_depth_pairs[depth]
        counts = paired_counts(a_correct, b_correct)
        test = mcnemar_exact(counts.helped, counts.hurt, alternative="greater")
        results.append(
            DepthGateResult(
                depth=int(depth),
                a_count=counts.helped,
                b_count=counts.hurt,
                p_value=test.p_value,
                passed=counts.helped > counts.hurt and test.p_value < alpha,
            )
        )
    run = _first_consecutive_run(results, k_consecutive)
    return GateResult(
        passed=run is not None,
        method="paired one-sided exact McNemar per depth",
        alpha=float(alpha),
        k_consecutive=int(k_consecutive),
        per_depth=tuple(results),
        passing_run=run,
    )


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


@dataclass(frozen=True)
class Interval(_ToDict):
    estimate: float
    lower: float
    upper: float
    confidence: float
    method: str


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
    return Interval(estimate=estimate, lower=float(lower), upper=float(upper), confidence=float(confidence), method=method)


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


def tango_noninferiority(
    helped: int, hurt: int, n: int, margin: float, alpha: float = 0.05
) -> NonInferiorityResult:
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


# --------------------------------------------------------------------------- #
# Multiplicity
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class AdjustedPValues(_ToDict):
    method: str
    alpha: float
    raw: tuple[float, ...]
    adjusted: tuple[float, ...]
    reject: tuple[bool, ...]


def adjust_pvalues(
    pvalues: Sequence[float], method: Literal["bonferroni", "holm"], alpha: float = 0.05
) -> AdjustedPValues:
    """Family-wise adjustment via statsmodels ``multipletests``; method must be named."""
    if method not in ("bonferroni", "holm"):
        raise ValueError(f"method must be 'bonferroni' or 'holm', got {method!r}")
    raw = np.asarray(pvalues, dtype=float)
    if raw.size == 0:
        return AdjustedPValues(method=method, alpha=float(alpha), raw=(), adjusted=(), reject=())
    from statsmodels.stats.multitest import multipletests  # heavy (pulls in pandas): only when a family is adjusted

    reject, adjusted, _, _ = multipletests(raw, alpha=alpha, method=method)
    return AdjustedPValues(
        method=method,
        alpha=float(alpha),
        raw=tuple(float(p) for p in raw),
        adjusted=tuple(float(p) for p in adjusted),
        reject=tuple(bool(r) for r in reject),
    )


# --------------------------------------------------------------------------- #
# Threshold-crossing frontier
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class FrontierResult(_ToDict):
    bar: float
    frontier: float | None
    status: Literal["crossed", "never_crosses", "below_at_first_depth"]
    reason: str
    depth_above: int | None  # last depth at or above the bar before the crossing
    depth_below: int | None  # first depth below the bar


def frontier(acc_by_depth: Mapping[int, float], bar: float) -> FrontierResult:
    """First downward crossing of ``bar`` by per-depth accuracy, linearly interpolated.

    Scans depths in increasing order for the first depth whose accuracy is
    strictly below ``bar``; the frontier is the point between it and the
    previous evaluated depth (accuracy >= bar) where the straight line between
    the two accuracies meets ``bar``. Gaps between evaluated depths are allowed.
    Later recoveries above the bar are ignored (first crossing only).

    Conventions: never below the bar -> frontier None, status "never_crosses"
    (the frontier lies beyond the deepest evaluated depth); already below at
    the shallowest evaluated depth -> frontier None, "below_at_first_depth".
    """
    if not acc_by_depth:
        raise ValueError("acc_by_depth is empty")
    depths = sorted(acc_by_depth)
    accuracies = [float(acc_by_depth[d]) for d in depths]
    if accuracies[0] < bar:
        return FrontierResult(
            bar=float(bar),
            frontier=None,
            status="below_at_first_depth",
            reason=f"below bar at the first evaluated depth; frontier <= {depths[0]}",
            depth_above=None,
            depth_below=int(depths[0]),
        )
    for index in range(1, len(depths)):
        if accuracies[index] < bar:
            depth_above, depth_below = depths[index - 1], depths[index]
            acc_above, acc_below = accuracies[index - 1], accuracies[index]
            fraction = (acc_above - bar) / (acc_above - acc_below)
            return FrontierResult(
                bar=float(bar),
                frontier=float(depth_above + fraction * (depth_below - depth_above)),
                status="crossed",
                reason=f"first below bar at depth {depth_below}; interpolated from depth {depth_above}",
                depth_above=int(depth_above),
                depth_below=int(depth_below),
            )
    return FrontierResult(
        bar=float(bar),
        frontier=None,
        status="never_crosses",
        reason=f"never crosses; > max depth {depths[-1]}",
        depth_above=int(depths[-1]),
        depth_below=None,
    )


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
