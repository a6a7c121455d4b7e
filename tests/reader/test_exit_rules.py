"""Exit rules (choosing depth): the signals against torch's own computation as Huginn's code writes it, and each
rule's stopping loop on sequences built to stop at a known loop."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ledger.protocol.depth_choice import ExitRule
from ledger.reader.exit_rules import exit_loop, log_distribution, loop_signals, row_signals


def test_kl_and_entropy_equal_huginns_computation_on_random_scores() -> None:
    generator = torch.Generator().manual_seed(3)
    names = [chr(ord("A") + i) for i in range(7)]
    previous_logits = torch.randn(7, generator=generator, dtype=torch.float64) * 2
    logits = torch.randn(7, generator=generator, dtype=torch.float64) * 2
    # Huginn: F.kl_div(log_probs, prev_log_probs, reduction="none", log_target=True).sum(-1)
    log_p = F.log_softmax(logits, -1)
    prev_log_p = F.log_softmax(previous_logits, -1)
    expected_kl = F.kl_div(log_p, prev_log_p, reduction="none", log_target=True).sum(-1).item()
    probs = F.softmax(logits, -1)
    expected_entropy = -(probs * torch.log(probs)).sum().item()
    previous = log_distribution(dict(zip(names, previous_logits.tolist())))
    current = log_distribution(dict(zip(names, logits.tolist())))
    signals = loop_signals(previous, current)
    assert signals["kl"] == pytest.approx(expected_kl, rel=1e-12)
    assert signals["entropy"] == pytest.approx(expected_entropy, rel=1e-12)
    # before loop 1 the previous distribution is uniform (Huginn starts from log(1/V))
    uniform = torch.full((7,), math.log(1 / 7), dtype=torch.float64)
    first = row_signals([dict(zip(names, logits.tolist()))])[0]
    assert first["kl"] == pytest.approx(
        F.kl_div(log_p, uniform, reduction="none", log_target=True).sum().item(), rel=1e-12
    )


def test_nan_scores_get_no_mass() -> None:
    logs = log_distribution({"A": 1.0, "B": float("nan"), "C": 1.0})
    assert logs["B"] == -math.inf and math.exp(logs["A"]) == pytest.approx(0.5)


def _loops(kls, entropies, predictions, halts=None):
    return [
        {"kl": k, "entropy": h, "prediction": p, **({"halt": halts[i]} if halts else {})}
        for i, (k, h, p) in enumerate(zip(kls, entropies, predictions))
    ]


def test_each_rule_stops_at_the_first_loop_it_fires_and_else_at_the_last() -> None:
    loops = _loops(
        kls=[2.0, 0.5, 0.01, 0.0005, 0.0001, 0.0],
        entropies=[2.0, 1.5, 1.2, 1.1995, 1.1994, 1.1994],
        predictions=["A", "B", "C", "C", "C", "C"],
        halts=[0.1, 0.2, 0.3, 0.6, 0.9, 1.0],
    )
    assert exit_loop("kl", 1e-3, loops) == 4
    assert exit_loop("kl", 5e-4, loops) == 5  # strictly below
    assert exit_loop("kl", 1e-9, loops) == 6  # never fires: the last loop
    assert exit_loop("entropy", 1e-3, loops) == 4
    assert exit_loop("argmax", 1, loops) == 4  # C at loop 3 then again at 4
    assert exit_loop("argmax", 3, loops) == 6
    assert exit_loop("argmax", 5, loops) == 6  # never stable for 5 loops: the last one
    assert exit_loop("halting", 0.5, loops) == 4
    with pytest.raises(ValueError, match="records no 'halt'"):
        exit_loop("halting", 0.5, _loops([1.0], [1.0], ["A"]))


def test_rule_defaults_and_labels() -> None:
    assert ExitRule(rule="kl").value() == 1e-3 and ExitRule(rule="kl").label() == "kl<0.001"
    assert ExitRule(rule="kl", threshold=5e-4).label() == "kl<0.0005"
    assert ExitRule(rule="argmax").label() == "argmax>=5"
    with pytest.raises(ValueError, match="whole number"):
        ExitRule(rule="argmax", threshold=1.5)


def test_a_signal_that_is_not_finite_is_recorded_as_none_and_never_fires() -> None:
    from ledger.reader.exit_rules import exit_details, first_firing

    nan = float("nan")
    details = exit_details(
        [{"A": 1.0, "B": 0.0}, {"A": 1.0, "B": nan}, {"A": 1.0, "B": nan}],
        ["A", "A", "A"],
        [ExitRule(rule="kl")],
    )
    assert details[1]["kl"] is None  # B lost its mass: the KL from loop 1 is infinite
    assert details[2]["kl"] == 0.0 and details[2]["exits"] == ["kl<0.001"]
    assert first_firing("kl", 1e-3, [{"kl": None}, {"kl": None}]) is None
    assert exit_loop("kl", 1e-3, [{"kl": None}, {"kl": None}]) == 2
