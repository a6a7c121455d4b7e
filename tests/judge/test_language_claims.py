"""Design M's claims on known evidence: paired loss (signed-rank) and comparisons at equal training FLOPs."""

from __future__ import annotations

import pytest
from scipy import stats as scipy_stats

from ledger.judge.claims import evaluate_claim
from ledger.judge.stats import signed_rank_test
from ledger.protocol.claims import EqualFlopsClaim, PairedLossClaim, TrainingStableClaim


class Evidence:
    """Losses and outcomes per (arm, checkpoint), and each arm's curve of (checkpoint, FLOPs)."""

    def __init__(self, losses, outcomes=None, curves=None):
        self._losses, self._outcomes, self._curves = losses, outcomes or {}, curves or {}

    def losses(self, arm, manifest, loop, checkpoint=None):
        checkpoint = checkpoint or self._curves.get(arm, [(f"{arm}-end", 0)])[-1][0]
        return self._losses.get((arm, checkpoint, loop))

    def curve(self, arm, manifest):
        return self._curves.get(arm, [])

    def outcomes_at(self, arm, manifest, loop, checkpoint):
        return self._outcomes.get((arm, checkpoint, loop))


def docs(values, tokens=10):
    return {f"d{i}": (value * tokens, tokens) for i, value in enumerate(values)}


def loss_claim(**fields):
    return PairedLossClaim(
        id="c", statement="s", statistic="paired_loss", manifest="m", arms=("A", "B"), loops=(4, 4), **fields
    )


def test_signed_rank_matches_scipy_with_the_margin_shift():
    d = [-0.3, -0.1, -0.25, 0.05, -0.2, -0.15, -0.4, 0.02]
    assert signed_rank_test(d).p_value == pytest.approx(scipy_stats.wilcoxon(d, alternative="less").pvalue)
    shifted = [x + 0.1 for x in d]
    assert signed_rank_test(d, margin=0.1).p_value == pytest.approx(
        scipy_stats.wilcoxon(shifted, alternative="less").pvalue
    )
    assert signed_rank_test(d, margin=0.1, direction="at_most").shift == 0.1


def test_paired_loss_supported_refuted_and_unverifiable():
    better = [1.0 + 0.01 * i for i in range(20)]
    worse = [x + 0.2 for x in better]
    evidence = Evidence({("A", "A-end", 4): docs(better), ("B", "B-end", 4): docs(worse)})
    result = evaluate_claim(loss_claim(direction="less"), evidence)
    assert result.outcome == "supported" and result.figures["mean_difference"] == pytest.approx(-0.2)
    assert evaluate_claim(loss_claim(direction="less", margin=0.3), evidence).outcome == "refuted"
    swapped = Evidence({("A", "A-end", 4): docs(worse), ("B", "B-end", 4): docs(better)})
    assert evaluate_claim(loss_claim(direction="less"), swapped).outcome == "refuted"
    # non-inferiority: 0.2 worse is within a margin of 0.3, not within 0.1
    assert evaluate_claim(loss_claim(direction="at_most", margin=0.3), swapped).outcome == "supported"
    assert evaluate_claim(loss_claim(direction="at_most", margin=0.1), swapped).outcome == "refuted"
    missing = Evidence({("A", "A-end", 4): docs(better)})
    assert evaluate_claim(loss_claim(), missing).outcome == "unverifiable"
    one = Evidence({("A", "A-end", 4): docs(better[:1]), ("B", "B-end", 4): docs(worse[:1])})
    result = evaluate_claim(loss_claim(direction="less"), one)  # found by a dry run: it raised, now it says why
    assert result.outcome == "unverifiable" and "at least two paired documents" in result.reason


def flops_claim(metric, arms=("A", "B"), loops=(4, 4), **fields):
    return EqualFlopsClaim(
        id="f", statement="s", statistic="at_equal_flops", manifest="m", metric=metric, arms=arms, loops=loops, **fields
    )


def test_loss_at_equal_flops_interpolates_the_longer_arm():
    # A stops at 100 FLOPs with loss 1.0; B reaches 1.4 at 80 and 1.2 at 120: 1.3 at 100 by interpolation
    curves = {"A": [("a1", 50.0), ("a2", 100.0)], "B": [("b1", 80.0), ("b2", 120.0), ("b3", 160.0)]}
    losses = {
        ("A", "a2", 4): docs([1.0 + 0.001 * i for i in range(12)]),
        ("B", "b1", 4): docs([1.4 + 0.001 * i for i in range(12)]),
        ("B", "b2", 4): docs([1.2 + 0.001 * i for i in range(12)]),
    }
    result = evaluate_claim(flops_claim("loss"), Evidence(losses, curves=curves))
    assert result.outcome == "supported"
    assert result.figures["flops"] == 100.0 and result.figures["stopped"] == "A" and result.figures["weight"] == 0.5
    assert result.figures["loss_B"] == pytest.approx(1.3055, abs=1e-3)
    # the same evidence cannot support B better than A
    assert evaluate_claim(flops_claim("loss", arms=("B", "A")), Evidence(losses, curves=curves)).outcome == "refuted"


def test_accuracy_at_equal_flops_never_gives_the_other_arm_more_compute():
    curves = {"A": [("a1", 100.0)], "B": [("b1", 60.0), ("b2", 140.0)]}
    rows = [f"r{i}" for i in range(30)]
    outcomes = {
        ("A", "a1", 4): dict.fromkeys(rows, (1, True)),
        ("B", "b1", 1): {r: (1, i < 5) for i, r in enumerate(rows)},  # read at b1 (60 <= 100), not b2
        ("B", "b2", 1): dict.fromkeys(rows, (1, True)),
    }
    result = evaluate_claim(flops_claim("accuracy", loops=(4, 1)), Evidence({}, outcomes, curves))
    assert result.outcome == "supported"
    assert (result.figures["helped"], result.figures["hurt"]) == (25, 0)
    assert result.figures["accuracy_B_interpolated"] == pytest.approx(5 / 30 + 0.5 * (1 - 5 / 30))


def test_accuracy_at_equal_flops_refuses_a_checkpoint_further_below_f_than_its_tolerance():
    """B's checkpoint at or below F = 100 sits at 60 (60% of F): a 10% tolerance refuses the comparison, a 50% one
    reads it; without a tolerance the reason still says how far below F it was read."""
    curves = {"A": [("a1", 100.0)], "B": [("b1", 60.0), ("b2", 140.0)]}
    rows = [f"r{i}" for i in range(30)]
    outcomes = {
        ("A", "a1", 4): dict.fromkeys(rows, (1, True)),
        ("B", "b1", 1): {r: (1, i < 5) for i, r in enumerate(rows)},
        ("B", "b2", 1): dict.fromkeys(rows, (1, True)),
    }
    evidence = Evidence({}, outcomes, curves)
    refused = evaluate_claim(flops_claim("accuracy", loops=(4, 1), flops_tolerance=0.1), evidence)
    assert refused.outcome == "unverifiable"
    assert "at 60 (60% of F), more than the tolerance 10% below it" in refused.reason
    assert evaluate_claim(flops_claim("accuracy", loops=(4, 1), flops_tolerance=0.5), evidence).outcome == "supported"
    assert "60% of F" in evaluate_claim(flops_claim("accuracy", loops=(4, 1)), evidence).reason


def test_equal_flops_is_unverifiable_without_a_bracketing_checkpoint():
    curves = {"A": [("a1", 100.0)], "B": [("b1", 150.0), ("b2", 200.0)]}
    result = evaluate_claim(flops_claim("loss"), Evidence({}, curves=curves))
    assert result.outcome == "unverifiable" and "first checkpoint" in result.reason
    assert result.figures == {"flops_curves_apart": True}  # the dry run's miniature tells it from missing evidence


class Training:
    def __init__(self, stages):
        self.stages = stages

    def training_losses(self, arm, manifest):
        return self.stages


def stable_claim(**fields):
    return TrainingStableClaim(id="t", statement="s", statistic="training_stable", manifest="m", arm="A", **fields)


def test_training_stable_reads_each_stage_start_and_end_and_refuses_a_family():
    from pydantic import ValidationError

    falling = [5.0 - 0.1 * step for step in range(20)]  # 5.0 .. 3.1
    result = evaluate_claim(stable_claim(), Training([("heal", falling), ("task", falling)]))
    assert result.outcome == "supported" and result.p_value is None
    assert result.figures["task_start"] == pytest.approx(4.95) and result.figures["task_end"] == pytest.approx(3.15)
    rising = falling[::-1]  # the second stage ends above where it started: diverged
    refuted = evaluate_claim(stable_claim(), Training([("heal", falling), ("task", rising)]))
    assert refuted.outcome == "refuted" and "diverged: task 3.1500 -> 4.9500" in refuted.reason
    assert evaluate_claim(stable_claim(margin=2.0), Training([("task", rising)])).outcome == "supported"
    assert evaluate_claim(stable_claim(), Training([("task", [*falling, float("nan")])])).outcome == "refuted"
    assert evaluate_claim(stable_claim(), Training([])).outcome == "unverifiable"
    with pytest.raises(ValidationError, match="no multiplicity family"):
        stable_claim(family="designM")
