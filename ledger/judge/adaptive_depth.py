"""Choosing depth against forced depth (``adaptive_depth`` claims; ``ledger/protocol/depth_choice.py``).

Each row was read at loops 1..K with its exit signals. The judge re-derives the loop the claim's rule stops at
from those signals (``ledger.reader.exit_rules.exit_loop``, the function the runtime marked the chosen reading
with) and refuses a ledger whose marks disagree. The chosen answer is the prediction at that loop, the forced
answer the prediction at the row's own depth; both are right when they equal the row's answer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ledger.judge import stats
from ledger.judge.claims import ClaimResult, Unverifiable, format_p
from ledger.judge.selection import note_rows
from ledger.protocol.depth_choice import AdaptiveDepthClaim
from ledger.reader.exit_rules import first_firing
from ledger.store.evidence_source import EvidenceSource


def adaptive_depth(claim: AdaptiveDepthClaim, evidence: EvidenceSource) -> ClaimResult:
    rule = claim.exit_rule()
    label = rule.label()
    by_row: dict[str, list[Any]] = defaultdict(list)
    for reading in evidence.loop_readings(claim.arm, claim.manifest):
        by_row[reading.row_id].append(reading)
    if claim.rows.depths is not None:
        low, high = claim.rows.depths
        by_row = {row: reads for row, reads in by_row.items() if low <= reads[0].depth <= high}
    if not by_row:
        raise Unverifiable(f"no readings of arm {claim.arm!r} on manifest {claim.manifest!r}")
    chosen: dict[str, int] = {}
    exit_right: list[bool] = []
    forced_right: list[bool] = []
    depths: list[int] = []
    fired = 0  # rows where the rule fired; the others stop at the last loop read
    for row_id, reads in by_row.items():
        reads = sorted(reads, key=lambda r: r.loop)
        loops = [r.loop for r in reads]
        depth = reads[0].depth
        if loops != list(range(1, len(loops) + 1)) or depth > len(loops):
            raise Unverifiable(f"row {row_id!r} is not read at every loop 1..K past its depth {depth}: {loops}")
        loops_read = [{**r.detail, "prediction": r.prediction} for r in reads]
        try:
            firing = first_firing(rule.rule, rule.value(), loops_read)
        except ValueError as exc:
            raise Unverifiable(f"row {row_id!r}: {exc}") from None
        fired += firing is not None
        t = len(loops_read) if firing is None else firing  # exit_loop's rule: the last loop when it never fires
        marked = [r.loop for r in reads if label in r.detail.get("exits", ())]
        if marked != [t]:
            raise Unverifiable(
                f"row {row_id!r}: the recorded exit under {label} is at loop(s) {marked}, its signals give loop {t}"
            )
        answer = reads[0].answer
        chosen[row_id] = t
        exit_right.append(answer is not None and reads[t - 1].prediction == answer)
        forced_right.append(answer is not None and reads[depth - 1].prediction == answer)
        depths.append(depth)
    for loop in sorted(set(chosen.values()) | set(depths)):
        used = [row for row, t in chosen.items() if t == loop]
        used += [row for row, reads in by_row.items() if reads[0].depth == loop and row not in used]
        note_rows(evidence, claim.arm, claim.manifest, loop, used, kind="cells")
    n = len(chosen)
    used_loops = sum(chosen.values()) / n
    forced_loops = sum(depths) / n
    right_depth = sum(1 for (row, t), depth in zip(chosen.items(), depths) if t == depth)
    counts = stats.paired_counts(exit_right, forced_right)
    figures: dict[str, Any] = {
        "n": n,
        "rule": label,
        "exit_correct": sum(exit_right),
        "forced_correct": sum(forced_right),
        "helped": counts.helped,
        "hurt": counts.hurt,
        "fired": fired,
        "right_depth": right_depth,
        "right_depth_share": right_depth / n,
        "mean_loops_used": used_loops,
        "mean_forced_loops": forced_loops,
        "compute_saved": 1.0 - used_loops / forced_loops,
    }
    summary = (
        f"{claim.arm} under {label}: right at the chosen loop {sum(exit_right)}/{n}, at forced depth "
        f"{sum(forced_right)}/{n}; the rule fired on {fired}/{n} (the rest stop at the last loop); stopped at the "
        f"row's depth {right_depth}/{n}; mean loops {used_loops:.2f} against "
        f"{forced_loops:.2f} forced (compute saved {figures['compute_saved']:+.1%})"
    )
    if claim.measure == "right_depth":
        assert claim.share is not None
        interval = stats.wilson_interval(right_depth, n)
        figures.update(wilson_low=interval.lower, wilson_high=interval.upper, share=claim.share)
        share = right_depth / n
        holds = share >= claim.share if claim.direction == "at_least" else share <= claim.share
        sign = ">=" if claim.direction == "at_least" else "<="
        reason = f"{summary}; right-depth share {share:.4f} needs {sign} {claim.share}"
        return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures)
    assert claim.margin is not None
    result = stats.tango_noninferiority(counts.helped, counts.hurt, counts.n, claim.margin, alpha=claim.alpha)
    figures.update(
        difference=result.difference,
        ci_low=result.ci_lower,
        ci_high=result.ci_upper,
        p_value=result.p_value,
        margin=claim.margin,
    )
    reason = (
        f"{summary}; chosen - forced = {result.difference:+.4f}, margin -{claim.margin}: Tango p = "
        f"{format_p(result.p_value)}"
    )
    outcome = "supported" if result.noninferior else "refuted"
    return ClaimResult(claim.id, claim.statistic, outcome, reason, figures, result.p_value, alpha=claim.alpha)
