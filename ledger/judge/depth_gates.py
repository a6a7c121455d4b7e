"""Per-depth gates: the paper's count-based Fisher gate and its paired McNemar alternative."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ledger.judge.deferred import fisher_exact
from ledger.judge.paired import mcnemar_exact, paired_counts
from ledger.judge.records import _ToDict

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
