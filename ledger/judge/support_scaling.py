"""Support scaling (docs/science.md, the split-bridge paper's other experiments): the frontier divided by the training support, across supports.

Each arm's per-depth accuracy at its final reading gives a frontier at the bar (``stats.frontier``, the same
interpolated crossing as ``frontier_ratio``), divided by the top depth the arm trained on. The claim holds when
every arm's ratio is at least the threshold and, if ``max_spread`` is set, the supports' mean ratios (arms at one
support are seeds) lie within it. A curve that never falls below the bar bounds its frontier from below by the
deepest evaluated depth: enough for the threshold, never for the spread (then unverifiable, with the bound).
"""

from __future__ import annotations

from statistics import fmean
from typing import Any

from ledger.judge import stats
from ledger.judge.claims import ClaimResult, _rows, depth_tally
from ledger.protocol.claims import SupportScalingClaim, manifest_of
from ledger.store.evidence_source import EvidenceSource


def _accuracy_by_depth(claim: SupportScalingClaim, evidence: EvidenceSource, arm: str) -> dict[int, float]:
    counts = evidence.depth_counts(arm, manifest_of(claim, arm))
    if counts is None:
        counts = depth_tally(_rows(claim, evidence, arm))
    return {depth: correct / total for depth, (correct, total) in sorted(counts.items()) if total}


def support_scaling(claim: SupportScalingClaim, evidence: EvidenceSource) -> ClaimResult:
    members: dict[str, dict[str, Any]] = {}
    censored: list[str] = []
    for arm, support in zip(claim.arms, claim.supports):
        manifest = manifest_of(claim, arm)
        accuracy = _accuracy_by_depth(claim, evidence, arm)
        found = stats.frontier(accuracy, claim.bar)
        member: dict[str, Any] = {"support": support, "manifest": manifest, "frontier": found.frontier}
        if found.frontier is not None:
            member["ratio"] = found.frontier / support
        elif found.status == "never_crosses":
            member["ratio_at_least"] = int(found.depth_above or 0) / support
            censored.append(f"{arm} stays above {claim.bar} through depth {found.depth_above}")
        else:
            member["ratio_at_most"] = int(found.depth_below or 0) / support
            censored.append(f"{arm} is below {claim.bar} already at depth {found.depth_below}")
        member["accuracy_by_depth"] = {str(depth): round(value, 6) for depth, value in accuracy.items()}
        members[arm] = member

    ratios = {arm: m.get("ratio") for arm, m in members.items()}
    failing = [
        arm
        for arm, m in members.items()
        if (m.get("ratio") is not None and m["ratio"] < claim.threshold)
        or (m.get("ratio_at_most") is not None and m["ratio_at_most"] < claim.threshold)
    ]
    by_support: dict[int, list[float]] = {}
    for arm, support in zip(claim.arms, claim.supports):
        ratio = ratios[arm]
        if ratio is not None:
            by_support.setdefault(support, []).append(float(ratio))
    means = {support: fmean(values) for support, values in sorted(by_support.items())}
    spread = max(means.values()) - min(means.values()) if len(means) >= 2 and not censored else None
    figures: dict[str, Any] = {
        "bar": claim.bar,
        "threshold": claim.threshold,
        "max_spread": claim.max_spread,
        "members": members,
        "mean_ratio_by_support": {str(support): round(value, 6) for support, value in means.items()},
        "spread": spread,
        "min_ratio": min((r for r in ratios.values() if r is not None), default=None),
    }
    shown = ", ".join(_shown(arm, member) for arm, member in members.items())
    if failing:
        return ClaimResult(
            claim.id,
            claim.statistic,
            "refuted",
            f"frontier/support at bar {claim.bar}: {shown}; below {claim.threshold}: {', '.join(failing)}",
            figures,
        )
    if censored and claim.max_spread is not None:  # unverifiable, with every member's figures shown
        reason = f"{'; '.join(censored)}: a bounded frontier cannot decide the spread ({shown})"
        return ClaimResult(claim.id, claim.statistic, "unverifiable", reason, figures)
    if censored and any(
        (m.get("ratio_at_least") is not None and m["ratio_at_least"] < claim.threshold)
        or m.get("ratio_at_most") is not None  # below the bar already at its shallowest depth: bounded above only
        for m in members.values()
    ):
        reason = f"{'; '.join(censored)}: a bound cannot decide >= {claim.threshold} ({shown})"
        return ClaimResult(claim.id, claim.statistic, "unverifiable", reason, figures)
    holds = claim.max_spread is None or (spread is not None and spread <= claim.max_spread)
    spread_text = "" if spread is None else f"; support means spread {spread:.3f}"
    needs = f"needs every ratio >= {claim.threshold}" + (
        "" if claim.max_spread is None else f" and spread <= {claim.max_spread}"
    )
    return ClaimResult(
        claim.id,
        claim.statistic,
        "supported" if holds else "refuted",
        f"frontier/support at bar {claim.bar}: {shown}{spread_text}; {needs}",
        figures,
    )


def _shown(arm: str, member: dict[str, Any]) -> str:
    support = member["support"]
    if member.get("ratio") is not None:
        return f"{arm} {member['frontier']:.2f}/{support} = {member['ratio']:.3f}"
    if member.get("ratio_at_least") is not None:
        return f"{arm} >= {member['ratio_at_least'] * support:.0f}/{support} = {member['ratio_at_least']:.3f}"
    return f"{arm} <= {member['ratio_at_most'] * support:.0f}/{support} = {member['ratio_at_most']:.3f}"
