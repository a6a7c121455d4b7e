"""Claims on an arm replicated over training seeds (``seeds:`` on the arm: replicates ``ID.sSEED``).

A run-level quantity (a frontier / support ratio, an accuracy) is one number per training run, and one run's
number says nothing of the next run's. A claim on a replicated arm is judged on the distribution over its seeds:
each seed's value, their mean and spread, and a one-sided 95% Student-t bound of the mean, which must clear the
threshold (two-sided 95% interval shown beside). A paired test states how it combines the seeds (``seeds``):
``every`` (each seed's exact test at alpha, supported only when every seed's is: an intersection-union test,
whose p-value is the largest) or ``pooled`` (one exact test on the discordant pairs of all seeds together,
stratified by seed: each seed's pairs are its own rows). Two replicated arms are paired seed by seed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ledger.judge import stats
from ledger.judge.claims import ClaimResult, format_p
from ledger.protocol.claims import AccuracyClaim, FrontierClaim, PairedExactClaim, claim_subjects
from ledger.store.evidence_source import EvidenceSource

Judge = Callable[[Any, EvidenceSource], ClaimResult]
BOUND_CONFIDENCE = 0.95


def replicates_by_arm(evidence: EvidenceSource) -> dict[str, list[str]]:
    """arm name as written -> its replicates' ids, in seed order as written (from the registered protocol)."""
    found: dict[str, list[str]] = {}
    for arm_id, spec in evidence.protocol_part("arms").items():
        replicate = spec.get("replicate")
        if isinstance(replicate, dict) and replicate.get("of"):
            found.setdefault(str(replicate["of"]), []).append(arm_id)
    return found


def judge_seeded(
    claim: Any, evidence: EvidenceSource, judge: Judge, replicates: Mapping[str, list[str]]
) -> ClaimResult | None:
    """The claim judged over the seeds of the replicated arm(s) it names (None: it names none). ``judge``
    computes one claim on one set of arms (``evaluate_claim``); ``replicates``: ``replicates_by_arm``."""
    named = [arm for arm in claim_subjects(claim) if arm in replicates]
    if not named:
        return None
    if isinstance(claim, (AccuracyClaim, FrontierClaim)):
        return _run_level(claim, evidence, judge, replicates[claim.arm])
    if isinstance(claim, PairedExactClaim):
        return _paired(claim, evidence, judge, replicates)
    return ClaimResult(
        claim.id,
        claim.statistic,
        "unverifiable",
        f"a {claim.statistic} claim on an arm replicated over seeds ({', '.join(named)}) is not judged over seeds: "
        "name one replicate (ARM.sSEED), or claim a frontier, an accuracy or a paired test",
    )


def _per_seed(claim: Any, evidence: EvidenceSource, judge: Judge, updates: Sequence[dict]) -> list[ClaimResult]:
    return [judge(claim.model_copy(update=update), evidence) for update in updates]


def _run_level(claim: Any, evidence: EvidenceSource, judge: Judge, replicate_ids: list[str]) -> ClaimResult:
    results = _per_seed(claim, evidence, judge, [{"arm": arm} for arm in replicate_ids])
    key = "ratio" if isinstance(claim, FrontierClaim) else "accuracy"
    values: dict[str, float] = {}
    for arm, result in zip(replicate_ids, results):
        value = result.figures.get(key)
        if result.outcome == "unverifiable" or not isinstance(value, (int, float)):
            why = result.reason if result.outcome == "unverifiable" else f"its {key} is censored ({result.reason})"
            return ClaimResult(claim.id, claim.statistic, "unverifiable", f"seed replicate {arm}: {why}")
        values[arm] = float(value)
    figures = seed_distribution(values)
    at_least = claim.direction == "at_least"
    bound = figures["bound_low" if at_least else "bound_high"]
    holds = bound >= claim.threshold if at_least else bound <= claim.threshold
    sign = ">=" if at_least else "<="
    shown = ", ".join(f"{arm} {value:.3f}" for arm, value in values.items())
    reason = (
        f"{claim.arm} over {len(values)} training seeds ({shown}): mean {key} {figures['mean']:.3f}, sd "
        f"{figures['sd']:.3f}, 95% t interval {figures['ci_low']:.3f}-{figures['ci_high']:.3f}; its one-sided 95% "
        f"{'lower' if at_least else 'upper'} bound {bound:.3f} needs {sign} {claim.threshold}"
    )
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures)


def seed_distribution(values: Mapping[str, float]) -> dict[str, Any]:
    """Each seed's value, the mean, the sample sd, the spread, the two-sided 95% t interval and the one-sided 95%
    bounds of the mean."""
    from scipy.stats import t  # heavy: only when seeds are judged

    numbers = list(values.values())
    n = len(numbers)
    mean = statistics.fmean(numbers)
    sd = statistics.stdev(numbers) if n > 1 else 0.0
    error = sd / math.sqrt(n)
    one_sided, two_sided = float(t.ppf(BOUND_CONFIDENCE, n - 1)), float(t.ppf(0.975, n - 1))
    return {
        "per_seed": dict(values),
        "seeds": n,
        "mean": mean,
        "sd": sd,
        "spread": [min(numbers), max(numbers)],
        "ci_low": mean - two_sided * error,
        "ci_high": mean + two_sided * error,
        "bound_low": mean - one_sided * error,
        "bound_high": mean + one_sided * error,
    }


def _paired(
    claim: PairedExactClaim, evidence: EvidenceSource, judge: Judge, replicates: Mapping[str, list[str]]
) -> ClaimResult:
    if claim.seeds is None:
        return ClaimResult(
            claim.id,
            claim.statistic,
            "unverifiable",
            f"arm(s) {', '.join(a for a in claim.arms if a in replicates)} are replicated over seeds and the claim "
            "does not say how its test combines them (`seeds: every` or `seeds: pooled`)",
        )
    first, second = (replicates.get(arm) for arm in claim.arms)
    if first is not None and second is not None and len(first) != len(second):
        return ClaimResult(
            claim.id, claim.statistic, "unverifiable", f"{claim.arms[0]} and {claim.arms[1]} have different seeds"
        )
    count = len(first or second or [])
    pairs = [[first[i] if first else claim.arms[0], second[i] if second else claim.arms[1]] for i in range(count)]
    results = _per_seed(claim, evidence, judge, [{"arms": tuple(pair)} for pair in pairs])
    for pair, result in zip(pairs, results):
        if result.outcome == "unverifiable":
            return ClaimResult(claim.id, claim.statistic, "unverifiable", f"seeds {' vs '.join(pair)}: {result.reason}")
    labels = [" vs ".join(pair) for pair in pairs]
    figures: dict[str, Any] = {
        "seeds": count,
        "combine": claim.seeds,
        "per_seed": {
            label: {key: result.figures[key] for key in ("helped", "hurt", "n", "p_value")}
            for label, result in zip(labels, results)
        },
    }
    rows_used = [used for result in results for used in result.rows_used]
    if claim.seeds == "every":
        p_value = max(float(result.p_value or 1.0) for result in results)
        supported = all(result.outcome == "supported" for result in results)
        reason = (
            f"every seed's exact test at alpha {claim.alpha} ("
            + "; ".join(
                f"{label}: {r.figures['helped']}/{r.figures['hurt']}, p = {format_p(r.p_value or 1.0)}"
                for label, r in zip(labels, results)
            )
            + f"): {'all' if supported else 'not all'} significant; intersection-union p = {format_p(p_value)}"
        )
    else:
        helped = sum(int(result.figures["helped"]) for result in results)
        hurt = sum(int(result.figures["hurt"]) for result in results)
        test = stats.mcnemar_exact(helped, hurt, alternative=claim.direction)
        p_value = test.p_value
        supported = p_value < claim.alpha and (
            claim.direction == "two-sided" or (helped > hurt) == (claim.direction == "greater")
        )
        figures.update(helped=helped, hurt=hurt, log10_p=test.log10_p)
        reason = (
            f"pooled over {count} seeds (each seed's rows its own): helped {helped} / hurt {hurt}, exact "
            f"{claim.direction} p = {format_p(p_value, test.log10_p)} {'<' if p_value < claim.alpha else '>='} "
            f"alpha {claim.alpha}"
        )
    figures["p_value"] = p_value
    result = ClaimResult(
        claim.id, claim.statistic, "supported" if supported else "refuted", reason, figures, p_value, alpha=claim.alpha
    )
    result.rows_used = rows_used
    return result
