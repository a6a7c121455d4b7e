"""adaptive_depth claims on known readings: the chosen loop re-derived from the recorded signals, marks that
disagree refused, the figures counted by hand, and the claim's fields held to its measure."""

from __future__ import annotations

import pytest

from ledger.judge.adaptive_depth import adaptive_depth
from ledger.judge.claims import Unverifiable
from ledger.protocol.depth_choice import AdaptiveDepthClaim
from ledger.store.evidence import LoopReading


class Evidence:
    def __init__(self, readings):
        self.readings = readings

    def loop_readings(self, arm, manifest):
        return list(self.readings)


def row(row_id, depth, answer, kls, predictions, mark=None):
    """Readings of one row at loops 1..len(kls); the kl<0.001 mark where the rule stops (or at ``mark``)."""
    chosen = mark or next((t for t, kl in enumerate(kls, 1) if kl < 1e-3), len(kls))
    return [
        LoopReading(
            row_id,
            depth,
            t,
            prediction,
            answer,
            {"kl": kl, "entropy": 1.0, **({"exits": ["kl<0.001"]} if t == chosen else {})},
        )
        for t, (kl, prediction) in enumerate(zip(kls, predictions), 1)
    ]


def claim(**fields):
    base = {"id": "c", "statement": "s", "statistic": "adaptive_depth", "manifest": "m", "arm": "A", "rule": "kl"}
    return AdaptiveDepthClaim.model_validate({**base, **fields})


ROWS = [
    # depth 2, stops at 2, right both ways
    *row("r1", 2, "C", [1.0, 1e-4, 1e-5, 0.0], ["B", "C", "C", "C"]),
    # depth 3, stops early at 2 (wrong there), right at forced depth 3: hurt
    *row("r2", 3, "D", [1.0, 1e-4, 0.5, 0.0], ["B", "C", "D", "D"]),
    # depth 1, never settles: stops at 4, right there, wrong at forced depth 1: helped
    *row("r3", 1, "E", [1.0, 0.5, 0.5, 0.5], ["A", "B", "C", "E"]),
]


def test_right_depth_share_and_compute_are_counted_from_the_rows() -> None:
    result = adaptive_depth(claim(measure="right_depth", share=0.3), Evidence(ROWS))
    figures = result.figures
    assert (figures["right_depth"], figures["n"]) == (1, 3)
    assert (figures["exit_correct"], figures["forced_correct"], figures["helped"], figures["hurt"]) == (2, 2, 1, 1)
    assert figures["mean_loops_used"] == pytest.approx((2 + 2 + 4) / 3)
    assert figures["mean_forced_loops"] == pytest.approx(2.0)
    assert figures["compute_saved"] == pytest.approx(1 - 8 / 6)  # more loops than forced: negative saving
    assert result.outcome == "supported"
    assert adaptive_depth(claim(measure="right_depth", share=0.5), Evidence(ROWS)).outcome == "refuted"


def test_noninferiority_against_forced_depth_is_paired() -> None:
    result = adaptive_depth(claim(measure="noninferior", margin=0.1), Evidence(ROWS))
    assert result.figures["difference"] == pytest.approx(0.0)
    assert result.p_value is not None and result.outcome == "refuted"  # 3 rows cannot show it


def test_a_mark_the_signals_do_not_give_is_refused() -> None:
    tampered = [*row("r1", 2, "C", [1.0, 1e-4, 1e-5, 0.0], ["B", "C", "C", "C"], mark=3)]
    with pytest.raises(Unverifiable, match=r"recorded exit under kl<0\.001 is at loop"):
        adaptive_depth(claim(measure="right_depth", share=0.3), Evidence(tampered))


def test_a_row_not_read_past_its_depth_is_refused() -> None:
    short = row("r1", 5, "C", [1.0, 1e-4], ["B", "C"])
    with pytest.raises(Unverifiable, match="not read at every loop"):
        adaptive_depth(claim(measure="right_depth", share=0.3), Evidence(short))


def test_a_claim_carries_exactly_its_measures_fields() -> None:
    with pytest.raises(ValueError, match="needs `share`"):
        claim(measure="right_depth")
    with pytest.raises(ValueError, match="`margin` is for a noninferior claim"):
        claim(measure="right_depth", share=0.5, margin=0.1)
    with pytest.raises(ValueError, match="no p-value"):
        claim(measure="right_depth", share=0.5, family="f")
