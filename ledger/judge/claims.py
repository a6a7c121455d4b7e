"""A claim's result is a pure function of (claim, evidence).

The evidence a claim sees is reduced to what it needs: for an arm on a manifest, the
per-row (depth, correct) outcome at the claim's reading (the final loop by default:
loop = depth for a recurrent arm, the single read of a dense arm), per-depth counts, or
a gate's recorded result. ``evaluate_claims`` adds the file's multiplicity correction
within each family. Nothing here touches the store or a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ledger.judge import stats
from ledger.judge.selection import RowsUsed, SelectionRecorder, note_rows
from ledger.protocol.claims import (
    STATISTICS,
    AccuracyClaim,
    Claim,
    FrontierClaim,
    GateClaim,
    NonInferiorityClaim,
    PairedExactClaim,
    manifest_of,
)
from ledger.store.evidence_source import EvidenceSource

Outcome = str  # "supported" | "refuted" | "unverifiable"


@dataclass
class ClaimResult:
    claim_id: str
    statistic: str
    outcome: Outcome
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    p_value: float | None = None
    family: str | None = None
    alpha: float | None = None
    # why the outcome is reported but never counted as support (exploratory, true by construction): claim rules 2
    not_counted: str | None = None
    # the rows the statistic computed on (``ledger.judge.selection``); recorded with its test, not in to_dict
    rows_used: list[RowsUsed] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "statistic": self.statistic,
            "outcome": self.outcome,
            "reason": self.reason,
            "figures": _json_safe(self.figures),
            "p_value": _json_safe(self.p_value),
            "family": self.family,
        }


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


class Unverifiable(Exception):
    """The evidence a claim needs is not in the ledger (``figures``: what the statistic found before it stopped)."""

    def __init__(self, message: str, figures: dict[str, Any] | None = None):
        super().__init__(message)
        self.figures = figures or {}


# ----------------------------------------------------------------------------- one claim


def evaluate_claim(claim: Claim, evidence: EvidenceSource) -> ClaimResult:
    """Recompute one claim from evidence (no multiplicity correction)."""
    recorder = SelectionRecorder(evidence)
    try:
        result = STATISTICS.implementation(claim.statistic)(claim, recorder)
    except Unverifiable as exc:
        return ClaimResult(
            claim.id, claim.statistic, "unverifiable", str(exc), figures=exc.figures, family=claim.family
        )
    result.family = claim.family
    result.rows_used = recorder.used
    if STATISTICS[claim.statistic].tested and result.outcome != "unverifiable" and not recorder.used:
        # a p-value with no rows behind it in the ledger: verify could not show what it was computed on
        reason = f"statistic {claim.statistic!r} noted no rows it computed on (note_rows): its test cannot be audited"
        return ClaimResult(claim.id, claim.statistic, "unverifiable", reason, family=claim.family)
    return _check_reported(claim, result)


def _rows(claim: Claim, evidence: EvidenceSource, arm: str, loop: int | None = None) -> dict[str, tuple[int, bool]]:
    manifest = manifest_of(claim, arm)  # the claim's manifest, or the one it names for this arm
    step = getattr(claim, "at_step", None)
    checkpoint = None
    found: dict[str, tuple[int, bool]] | None
    if step is not None:  # the arm's checkpoint at that step of its stage, read at each row's final loop
        checkpoint, found = evidence.outcomes_at_step(arm, manifest, step)
        if checkpoint is None:
            raise Unverifiable(f"arm {arm!r} has no checkpoint at step {step} read on manifest {manifest!r}")
    else:
        found = evidence.outcomes(arm, manifest, loop)
    if not found:
        reading = "final loop" if loop is None else f"loop {loop}"
        raise Unverifiable(f"no evidence for arm {arm!r} on manifest {manifest!r} at the {reading}")
    if claim.rows.depths is not None:
        low, high = claim.rows.depths
        found = {row: value for row, value in found.items() if low <= value[0] <= high}
        if not found:
            raise Unverifiable(f"no rows of arm {arm!r} at depths {low}-{high}")
    note_rows(evidence, arm, manifest, loop, found, checkpoint=checkpoint)
    return found


def depth_tally(rows: dict[str, tuple[int, bool]]) -> dict[int, tuple[int, int]]:
    """(correct, total) per depth of per-row (depth, correct) outcomes."""
    counts: dict[int, tuple[int, int]] = {}
    for depth, hit in rows.values():
        correct, total = counts.get(depth, (0, 0))
        counts[depth] = (correct + int(hit), total + 1)
    return counts


def _paired(claim, evidence, loop=None, loops=None):
    """Both arms' rows at ``loop`` (or each at its own of ``loops``), paired by row id."""
    first, second = claim.arms
    first_loop, second_loop = loops if loops is not None else (loop, loop)
    a = _rows(claim, evidence, first, first_loop)
    b = _rows(claim, evidence, second, second_loop)
    if set(a) != set(b):
        missing = sorted(set(a) ^ set(b))
        raise Unverifiable(
            f"arms {first} and {second} were not measured on the same rows ({len(missing)} unpaired, "
            f"e.g. {missing[0]!r})"
        )
    ids = sorted(a)
    return ids, [a[row][1] for row in ids], [b[row][1] for row in ids]


def paired_exact(claim: PairedExactClaim, evidence: EvidenceSource) -> ClaimResult:
    _ids, a, b = _paired(claim, evidence, claim.loop, claim.loops)
    counts = stats.paired_counts(a, b)
    test = stats.mcnemar_exact(counts.helped, counts.hurt, alternative=claim.direction)
    # each arm as it was read: "M@8" and "M@1" where loops name each arm's loop (one arm at two loops)
    first, second = (f"{arm}@{loop}" for arm, loop in zip(claim.arms, claim.loops)) if claim.loops else claim.arms
    figures = {
        "n": counts.n,
        f"correct_{first}": sum(a),
        f"correct_{second}": sum(b),
        "helped": counts.helped,
        "hurt": counts.hurt,
        "ties": counts.ties,
        "net": counts.net,
        "p_value": test.p_value,
        "log10_p": test.log10_p,
        "alternative": claim.direction,
    }
    supported = test.p_value < claim.alpha and (
        claim.direction == "two-sided" or (counts.net > 0) == (claim.direction == "greater")
    )
    at = "" if claim.loop is None else f" at loop {claim.loop}"
    pair = (
        f"{claim.arms[0]} at loop {claim.loops[0]} vs {claim.arms[1]} at loop {claim.loops[1]}" if claim.loops else ""
    )
    reason = (
        f"{pair or f'{claim.arms[0]} vs {claim.arms[1]}{at}'}: helped {counts.helped} / hurt {counts.hurt} / "
        f"ties {counts.ties}, exact {claim.direction} p = {format_p(test.p_value, test.log10_p)} "
        f"{'<' if test.p_value < claim.alpha else '>='} alpha {claim.alpha}"
    )
    return ClaimResult(
        claim.id,
        claim.statistic,
        "supported" if supported else "refuted",
        reason,
        figures,
        test.p_value,
        alpha=claim.alpha,
    )


def accuracy(claim: AccuracyClaim, evidence: EvidenceSource) -> ClaimResult:
    rows = _rows(claim, evidence, claim.arm, claim.loop)
    correct = sum(1 for _, hit in rows.values() if hit)
    n = len(rows)
    interval = stats.wilson_interval(correct, n)
    accuracy = correct / n
    holds = accuracy >= claim.threshold if claim.direction == "at_least" else accuracy <= claim.threshold
    sign = ">=" if claim.direction == "at_least" else "<="
    figures = {
        "correct": correct,
        "n": n,
        "accuracy": accuracy,
        "wilson_low": interval.lower,
        "wilson_high": interval.upper,
    }
    at = "" if claim.loop is None else f" at loop {claim.loop}"
    reason = f"{claim.arm}{at}: {correct}/{n} = {accuracy:.4f} (Wilson 95% {interval.lower:.3f}-{interval.upper:.3f}); needs {sign} {claim.threshold}"
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures)


def noninferiority(claim: NonInferiorityClaim, evidence: EvidenceSource) -> ClaimResult:
    _ids, a, b = _paired(claim, evidence, claim.loop)
    counts = stats.paired_counts(a, b)
    result = stats.tango_noninferiority(counts.helped, counts.hurt, counts.n, claim.margin, alpha=claim.alpha)
    figures = {
        "n": counts.n,
        "helped": counts.helped,
        "hurt": counts.hurt,
        "difference": result.difference,
        "ci_low": result.ci_lower,
        "ci_high": result.ci_upper,
        "ci_confidence": result.ci_confidence,
        "score_statistic": result.score_statistic,
        "p_value": result.p_value,
        "margin": claim.margin,
    }
    at = "" if claim.loop is None else f" at loop {claim.loop}"
    reason = (
        f"{claim.arms[0]} - {claim.arms[1]}{at} = {result.difference:+.4f} (helped {counts.helped} / hurt "
        f"{counts.hurt} of {counts.n}; {result.ci_confidence:.0%} Tango CI {result.ci_lower:+.4f} to "
        f"{result.ci_upper:+.4f}); margin -{claim.margin}: Tango z = {result.score_statistic:.3f}, "
        f"p = {format_p(result.p_value)}"
    )
    return ClaimResult(
        claim.id,
        claim.statistic,
        "supported" if result.noninferior else "refuted",
        reason,
        figures,
        result.p_value,
        alpha=claim.alpha,
    )


def _per_depth_accuracy(
    claim: FrontierClaim, evidence: EvidenceSource, *, filtered: bool = True
) -> dict[int, tuple[int, int]]:
    counts = evidence.depth_counts(claim.arm, claim.manifest)
    if counts is None and filtered:
        rows = _rows(claim, evidence, claim.arm)
    elif counts is None:
        rows = evidence.outcomes(claim.arm, claim.manifest, None) or {}
    if counts is None:
        counts = depth_tally(rows)
    elif filtered and claim.rows.depths is not None:
        low, high = claim.rows.depths
        counts = {depth: value for depth, value in counts.items() if low <= depth <= high}
    return dict(sorted(counts.items()))


def _first_fall_before_filter(claim: FrontierClaim, evidence: EvidenceSource) -> int | None:
    """The first evaluated depth below the bar, where it lies shallower than the claim's depth filter: then a
    frontier read inside the filter is not the curve's first crossing (nor a bound on it)."""
    if claim.rows.depths is None:
        return None
    for depth, (correct, total) in _per_depth_accuracy(claim, evidence, filtered=False).items():
        if total and correct / total < claim.bar:
            return depth if depth < claim.rows.depths[0] else None
    return None


def _sensitivity(accuracy: dict[int, float]) -> dict[str, float | None]:
    """The frontier at each sensitivity bar; where the curve is censored at a bar, the bound it gives instead of
    nothing: at least the deepest evaluated depth (never below the bar), at most the shallowest (below at once)."""
    figures: dict[str, float | None] = {}
    for bar in stats.SENSITIVITY_BARS:
        found = stats.frontier(accuracy, bar)
        figures[f"frontier_at_{bar}"] = found.frontier
        if found.status == "never_crosses":
            figures[f"frontier_at_{bar}_at_least"] = found.depth_above
        elif found.status == "below_at_first_depth":
            figures[f"frontier_at_{bar}_at_most"] = found.depth_below
    return figures


def frontier_ratio(claim: FrontierClaim, evidence: EvidenceSource) -> ClaimResult:
    counts = _per_depth_accuracy(claim, evidence)
    fell = _first_fall_before_filter(claim, evidence)
    if fell is not None:
        low, high = claim.rows.depths or (0, 0)
        raise Unverifiable(
            f"{claim.arm}: accuracy first falls below the bar {claim.bar} at depth {fell}, before the claim's depths "
            f"{low}-{high}: a frontier read inside them is not the curve's first crossing, nor bounded by it"
        )
    accuracy = {depth: correct / total for depth, (correct, total) in counts.items()}
    result = stats.frontier(accuracy, claim.bar)
    sensitivity = _sensitivity(accuracy)
    figures = {
        "frontier": result.frontier,
        "ratio": None if result.frontier is None else result.frontier / claim.support_max_depth,
        "support_max_depth": claim.support_max_depth,
        "bar": claim.bar,
        **sensitivity,
        "accuracy_by_depth": {str(depth): round(value, 6) for depth, value in accuracy.items()},
    }
    if result.frontier is None:
        return _censored_frontier(claim, result, figures)
    ratio = result.frontier / claim.support_max_depth
    holds = ratio >= claim.threshold if claim.direction == "at_least" else ratio <= claim.threshold
    sign = ">=" if claim.direction == "at_least" else "<="
    reason = (
        f"{claim.arm}: frontier {result.frontier:.2f} at bar {claim.bar} (between depth {result.depth_above} and "
        f"{result.depth_below}); / support {claim.support_max_depth} = {ratio:.3f}, needs {sign} {claim.threshold}"
    )
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures)


def _censored_frontier(claim: FrontierClaim, result, figures: dict) -> ClaimResult:
    """The curve never crosses the bar inside the evaluated depths: the frontier is only bounded.

    Never below the bar: the frontier is at least the deepest evaluated depth; below it
    already at the shallowest: at most that depth. A bound decides the claim when it
    clears the threshold on the claim's side (e.g. "ratio >= 1.3" holds when the curve
    stays above the bar through depth 14 with support 8: ratio >= 14 / 8); otherwise the
    claim needs deeper (or shallower) rows and stays unverifiable.
    """
    support, threshold = claim.support_max_depth, claim.threshold
    if result.status == "never_crosses":
        bound = result.depth_above
        figures.update(frontier_at_least=bound, ratio_at_least=bound / support)
        decided = {
            "at_least": "supported" if bound / support >= threshold else None,
            "at_most": "refuted" if bound / support > threshold else None,
        }[claim.direction]
        relation = f"frontier >= {bound} (the deepest evaluated depth), ratio >= {bound / support:.3f}"
    else:  # below_at_first_depth
        bound = result.depth_below
        figures.update(frontier_at_most=bound, ratio_at_most=bound / support)
        decided = {
            "at_least": "refuted" if bound / support < threshold else None,
            "at_most": "supported" if bound / support <= threshold else None,
        }[claim.direction]
        relation = f"frontier <= {bound} (the shallowest evaluated depth), ratio <= {bound / support:.3f}"
    sign = ">=" if claim.direction == "at_least" else "<="
    if decided is None:
        return ClaimResult(
            claim.id,
            claim.statistic,
            "unverifiable",
            f"{claim.arm}: {result.reason}; {relation} cannot decide {sign} {threshold}",
            figures,
        )
    return ClaimResult(
        claim.id,
        claim.statistic,
        decided,
        f"{claim.arm}: {result.reason}; {relation}, needs {sign} {threshold}",
        figures,
    )


def gate(claim: GateClaim, evidence: EvidenceSource) -> ClaimResult:
    passed = evidence.gate_passed(claim.gate, claim.arm)
    if passed is None:
        raise Unverifiable(f"gate {claim.gate!r} was never recorded for arm {claim.arm!r}")
    holds = passed == (claim.expect == "pass")
    reason = f"gate {claim.gate} {'passed' if passed else 'failed'} for {claim.arm} (expected {claim.expect})"
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, {"passed": passed})


# ----------------------------------------------------------------------------- reported figures


def significant_digits(value: float) -> int:
    """Digits a reported number was written with (0 = an exact count): 5.72e-257 -> 3, 17.93 -> 4, 1048 -> 0."""
    text = repr(float(value))  # the shortest text that reads back as the same float
    mantissa, _, exponent = text.partition("e")
    if not exponent and float(value).is_integer():
        return 0
    return max(len(mantissa.lstrip("-").replace(".", "").lstrip("0")), 1)


def agrees(computed: Any, reported: float) -> bool:
    if computed is None:
        return False
    computed = float(computed)
    digits = significant_digits(reported)
    if digits == 0:
        return computed == float(reported)
    return float(f"{computed:.{digits - 1}e}") == float(f"{float(reported):.{digits - 1}e}")


# Figures a claim's family gives it (``claim_files.correct_families``): checked once the family is corrected.
FAMILY_FIGURES = frozenset({"p_adjusted"})


def _check_reported(claim: Claim, result: ClaimResult) -> ClaimResult:
    return check_reported(claim, result, sorted(set(claim.reported) - FAMILY_FIGURES))


def check_reported(claim: Claim, result: ClaimResult, keys: list[str]) -> ClaimResult:
    """Each reported figure of ``keys`` against the re-derived one, to the digits written."""
    if not keys or result.outcome == "unverifiable":
        return result
    mismatches = []
    for key in keys:
        reported = claim.reported[key]
        computed = result.figures.get(key)
        if not agrees(computed, reported):
            mismatches.append(f"{key} re-derived {computed!r}, reported {reported!r}")
    result.figures["reported_agrees"] = not mismatches and result.figures.get("reported_agrees", True)
    if mismatches:
        result.outcome = "refuted"
        result.reason += "; reported figures disagree: " + "; ".join(mismatches)
    else:
        result.reason += f"; matches the reported {', '.join(keys)}"
    return result


def format_p(p: float, log10_p: float | None = None) -> str:
    if p == 0.0 and log10_p is not None:
        return f"10^{log10_p:.2f}"
    return f"{p:.3g}"
