"""Claims of design M: paired next-token loss, and two arms compared at equal training FLOPs.

Pure functions of (claim, evidence), as every claim (``ledger.judge.claims``). The evidence a loss
claim reads is, per held-out document, its summed nats and its token count at the test recurrence the
claim names for each arm; a document's loss is nats / tokens. An equal-FLOPs claim also reads every
recorded checkpoint of both arms with its ``flops_total`` (the training FLOPs of its whole lineage).
"""

from __future__ import annotations

import math
from typing import Any

from ledger.judge import stats
from ledger.judge.claims import ClaimResult, Unverifiable
from ledger.judge.selection import note_rows
from ledger.protocol.claims import EqualFlopsClaim, PairedLossClaim, TrainingStableClaim
from ledger.store.evidence_source import EvidenceSource


def _losses(evidence: EvidenceSource, arm: str, manifest: str, loop: int, checkpoint: str | None = None) -> dict:
    found = evidence.losses(arm, manifest, loop, checkpoint)
    if not found:
        raise Unverifiable(f"no loss evidence for arm {arm!r} on manifest {manifest!r} at test recurrence {loop}")
    note_rows(evidence, arm, manifest, loop, found, checkpoint=checkpoint, kind="losses")
    return found


def _paired_keys(a: dict, b: dict, names: tuple[str, str]) -> list[str]:
    if set(a) != set(b):
        raise Unverifiable(f"arms {names[0]} and {names[1]} were not measured on the same documents")
    return sorted(a)


def nats_per_token(losses: dict) -> float | None:
    """Token-weighted loss of {document: (nats, tokens)}: all nats over all tokens (None without tokens)."""
    tokens = sum(t for _, t in losses.values())
    return sum(n for n, _ in losses.values()) / tokens if tokens else None


def _loss_result(claim: Any, a: dict, b: dict, direction: Any, margin: float, extra: dict) -> ClaimResult:
    first, second = claim.arms
    ids = _paired_keys(a, b, (first, second))
    differences = [a[i][0] / max(a[i][1], 1) - b[i][0] / max(b[i][1], 1) for i in ids]
    if len(differences) < 2:  # the test has no null distribution on one pair: no outcome, not a crash
        raise Unverifiable(
            f"a signed-rank test needs at least two paired documents; {first} and {second} share {len(differences)}"
        )
    test = stats.signed_rank_test(differences, margin=margin, direction=direction)
    loss_a, loss_b = nats_per_token(a) or 0.0, nats_per_token(b) or 0.0
    figures = {
        "n": test.n,
        f"loss_{first}": loss_a,
        f"loss_{second}": loss_b,
        "mean_difference": test.mean_difference,
        "median_difference": test.median_difference,
        "statistic": test.statistic,
        "p_value": test.p_value,
        "margin": margin,
        **extra,
    }
    holds = test.p_value < claim.alpha
    wanted = f"< -{margin}" if direction == "less" else f"<= +{margin}"
    reason = (
        f"{first} {loss_a:.4f} vs {second} {loss_b:.4f} nats/token on {test.n} documents; median difference "
        f"{test.median_difference:+.4f} (H1 {wanted}), signed-rank p = {test.p_value:.3g} "
        f"{'<' if holds else '>='} alpha {claim.alpha}"
    )
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures, test.p_value)


def paired_loss(claim: PairedLossClaim, evidence: EvidenceSource) -> ClaimResult:
    (first, second), (loop_a, loop_b) = claim.arms, claim.loops
    a = _losses(evidence, first, claim.manifest, loop_a)
    b = _losses(evidence, second, claim.manifest, loop_b)
    result = _loss_result(claim, a, b, claim.direction, claim.margin, {"loops": list(claim.loops)})
    result.alpha = claim.alpha
    return result


def _curve(evidence: EvidenceSource, arm: str, manifest: str) -> list[tuple[str, float]]:
    curve = evidence.curve(arm, manifest)
    if not curve:  # (a dry run's arm whose step this machine could not hold trains nothing, and records no FLOPs)
        raise Unverifiable(
            f"no recorded checkpoint of arm {arm!r} with training FLOPs read {manifest!r}", {"no_flops_curve": True}
        )
    return curve


def _bracket(curve: list[tuple[str, float]], flops: float, arm: str) -> tuple[tuple[str, float], tuple[str, float]]:
    """The checkpoints at or just below and at or just above ``flops`` on an arm's curve."""
    below = [point for point in curve if point[1] <= flops]
    above = [point for point in curve if point[1] >= flops]
    apart = {"flops_curves_apart": True}  # the arms' checkpoints never met at one FLOPs budget
    if not above:
        raise Unverifiable(f"arm {arm} stopped at {curve[-1][1]:.4g} FLOPs, before {flops:.4g}", apart)
    if not below:
        raise Unverifiable(f"arm {arm}'s first checkpoint ({curve[0][1]:.4g} FLOPs) is past {flops:.4g}", apart)
    return below[-1], above[0]


def at_equal_flops(claim: EqualFlopsClaim, evidence: EvidenceSource) -> ClaimResult:
    (first, second), loops = claim.arms, dict(zip(claim.arms, claim.loops))
    curves = {arm: _curve(evidence, arm, claim.manifest) for arm in claim.arms}
    stopped = min(claim.arms, key=lambda arm: curves[arm][-1][1])  # the arm with fewer FLOPs, read at its end
    other = second if stopped == first else first
    flops = curves[stopped][-1][1]
    (low_sha, low), (high_sha, high) = _bracket(curves[other], flops, other)
    weight = 0.0 if high == low else (flops - low) / (high - low)
    extra = {"flops": flops, "stopped": stopped, "interpolated": other, "weight": weight, "bracket": [low, high]}
    if claim.metric == "loss":
        ends = {stopped: _losses(evidence, stopped, claim.manifest, loops[stopped], curves[stopped][-1][0])}
        lo = _losses(evidence, other, claim.manifest, loops[other], low_sha)
        hi = _losses(evidence, other, claim.manifest, loops[other], high_sha)
        # per document: loss per token interpolated in FLOPs (kept as (nats, tokens) with the low end's tokens)
        ends[other] = {
            row: ((1 - weight) * lo[row][0] / lo[row][1] + weight * hi[row][0] / hi[row][1], 1)
            for row in lo
            if row in hi
        }
        ends[stopped] = {row: (n / max(t, 1), 1) for row, (n, t) in ends[stopped].items()}
        result = _loss_result(claim, ends[first], ends[second], "less", claim.margin, extra)
        result.alpha = claim.alpha
        return result
    gap = (flops - low) / flops if flops else 0.0  # how far below F the other arm's checkpoint sits
    if claim.flops_tolerance is not None and gap > claim.flops_tolerance:
        raise Unverifiable(
            f"{other}'s last checkpoint at or below F = {flops:.4g} FLOPs is at {low:.4g} ({1 - gap:.0%} of F), "
            f"more than the tolerance {claim.flops_tolerance:.0%} below it: not a comparison at equal FLOPs "
            f"(checkpoint {other} more densely: checkpoint_every)"
        )
    ends = {
        stopped: evidence.outcomes_at(stopped, claim.manifest, loops[stopped], curves[stopped][-1][0]) or {},
        other: evidence.outcomes_at(other, claim.manifest, loops[other], low_sha) or {},  # never more compute than F
    }
    if not ends[first] or not ends[second] or set(ends[first]) != set(ends[second]):
        raise Unverifiable(f"arms {first} and {second} have no paired readings of {claim.manifest!r} at F")
    ids = sorted(ends[first])
    a, b = [ends[first][i][1] for i in ids], [ends[second][i][1] for i in ids]
    counts = stats.paired_counts(a, b)
    test = stats.mcnemar_exact(counts.helped, counts.hurt, alternative="greater")
    hi_rows = evidence.outcomes_at(other, claim.manifest, loops[other], high_sha) or {}
    for arm, checkpoint, read in (
        (stopped, curves[stopped][-1][0], ends[stopped]),
        (other, low_sha, ends[other]),
        (other, high_sha, hi_rows),
    ):
        note_rows(evidence, arm, claim.manifest, loops[arm], read, checkpoint=checkpoint)
    low_acc = sum(ends[other][i][1] for i in ids) / len(ids)
    high_acc = sum(hi_rows[i][1] for i in ids if i in hi_rows) / max(len(hi_rows), 1)
    figures = {
        "n": counts.n,
        f"accuracy_{first}": sum(a) / len(a),
        f"accuracy_{second}": sum(b) / len(b),
        f"accuracy_{other}_interpolated": (1 - weight) * low_acc + weight * high_acc,
        "helped": counts.helped,
        "hurt": counts.hurt,
        "p_value": test.p_value,
        **extra,
    }
    holds = test.p_value < claim.alpha and counts.net > 0
    reason = (
        f"at {flops:.4g} FLOPs ({stopped}'s end; {other} at its checkpoint of {low:.4g}, {1 - gap:.0%} of F): {first} "
        f"{sum(a)}/{len(a)} vs {second} {sum(b)}/{len(b)}, helped {counts.helped} / hurt {counts.hurt}, "
        f"exact p = {test.p_value:.3g}"
    )
    return ClaimResult(
        claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures, test.p_value, alpha=claim.alpha
    )


def _stability(claim: TrainingStableClaim, evidence: EvidenceSource, arm: str, figures: dict[str, Any], prefix: str):
    """(where the arm's lineage diverged, each stage's start -> end in words), its figures written under
    ``prefix``."""
    stages = evidence.training_losses(arm, claim.manifest)
    if not stages:
        raise Unverifiable(f"no recorded training losses of arm {arm!r} behind its readings of {claim.manifest!r}")
    broken = []
    for stage, losses in stages:
        width = max(1, round(claim.window * len(losses)))
        start, end = sum(losses[:width]) / width, sum(losses[-width:]) / width
        finite = all(math.isfinite(loss) for loss in losses)
        figures[f"{prefix}{stage}_steps"] = len(losses)
        figures[f"{prefix}{stage}_start"], figures[f"{prefix}{stage}_end"] = start, end
        figures[f"{prefix}{stage}_max"] = max(losses)
        if not finite or not end <= start + claim.margin:
            broken.append(f"{stage} {start:.4f} -> {end:.4f}" + ("" if finite else " (a non-finite loss)"))
    summary = "; ".join(
        f"{stage}: {figures[f'{prefix}{stage}_start']:.4f} -> {figures[f'{prefix}{stage}_end']:.4f} over "
        f"{len(losses)} steps"
        for stage, losses in stages
    )
    return broken, summary


def training_stable(claim: TrainingStableClaim, evidence: EvidenceSource) -> ClaimResult:
    figures: dict[str, Any] = {"window": claim.window, "margin": claim.margin}
    broken, summary = _stability(claim, evidence, claim.arm, figures, "")
    reason = f"{claim.arm}'s training loss, mean of the first and last {claim.window:.0%} of each stage: {summary}"
    if broken:
        reason += f"; diverged: {', '.join(broken)}"
    if claim.versus is None:
        return ClaimResult(claim.id, claim.statistic, "refuted" if broken else "supported", reason, figures, None)
    # "stable where the other is not": the arm it is compared with must have diverged
    versus_broken, versus_summary = _stability(claim, evidence, claim.versus, figures, f"{claim.versus}:")
    figures["versus_diverged"] = bool(versus_broken)
    reason += f"; {claim.versus}: {versus_summary}" + (
        f"; diverged: {', '.join(versus_broken)}" if versus_broken else f"; {claim.versus} did not diverge either"
    )
    holds = not broken and bool(versus_broken)
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures, None)
