"""Choosing depth at evaluation: the exit rules of Huginn-style recurrent models, and a halting head's.

A recurrent arm read at loops 1..K gives each row one answer distribution per loop: the softmax of its readout
over the row's own symbols, the distribution the shared reader decodes from. Each loop's **signals** are
recorded with its reading:

* ``kl``: KL(p_{t-1} || p_t), the divergence of the previous loop's distribution from this one's, as Huginn's
  code computes it (``F.kl_div(log p_t, log p_{t-1}, log_target=True)``); before loop 1 the previous
  distribution is uniform over the row's symbols;
* ``entropy``: H(p_t) in nats;
* ``halt``: a halting head's probability of stopping at loop t (an arm with a halting head only).

A rule turns a row's signals into the loop it stops at (the first loop where it fires, else the last loop
read), the same function at evaluation (the runtime marks the chosen reading) and in the judge (which
re-derives the choice from the signals and refuses marks that disagree):

* ``kl``: KL < threshold (Huginn's current default 1e-3; its older code 5e-4);
* ``entropy``: |H_t - H_{t-1}| < threshold, from loop 2 (Huginn starts the previous entropy at 100 nats);
* ``argmax``: the prediction has stayed the same for ``threshold`` consecutive loops (Huginn's default 5);
* ``halting``: the head's halting probability at loop t >= threshold (0.5: the head's own decision).

Huginn reads the whole vocabulary's next-token distribution; here the distribution is over the row's answer
symbols, where the reader reads the answer (a stated difference).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ledger.protocol.depth_choice import DEFAULT_THRESHOLDS, EXIT_RULES


def log_distribution(scores: Mapping[str, float]) -> dict[str, float]:
    """Log-softmax of a row's restricted scores (symbol -> score); NaN scores get no mass."""
    names = list(scores)
    values = np.array([scores[name] for name in names], dtype=np.float64)
    valid = ~np.isnan(values)
    if not valid.any():
        return {name: math.log(1.0 / len(names)) for name in names}
    top = values[valid].max()
    shifted = np.where(valid, values - top, -np.inf)
    log_norm = math.log(float(np.exp(shifted).sum()))
    return {name: float(v - log_norm) for name, v in zip(names, shifted)}


def loop_signals(previous: Mapping[str, float] | None, current: Mapping[str, float]) -> dict[str, float]:
    """``kl`` and ``entropy`` of one loop from the previous loop's log-distribution (None: before loop 1)."""
    if previous is None:
        previous = {name: math.log(1.0 / len(current)) for name in current}
    kl = 0.0
    entropy = 0.0
    for name, log_p in current.items():
        if log_p > -math.inf:
            entropy -= math.exp(log_p) * log_p
        log_q = previous.get(name, -math.inf)
        if log_q > -math.inf:
            kl += math.exp(log_q) * (log_q - log_p)  # KL(previous || current): inf where current has no mass
    return {"kl": max(kl, 0.0), "entropy": max(entropy, 0.0)}


def row_signals(restricted_by_loop: Sequence[Mapping[str, float]]) -> list[dict[str, float | None]]:
    """Each loop's signals (loops 1..K in order) from its restricted scores; a signal that is not finite (a NaN
    score leaves a symbol without mass, and the KL to it is infinite) is recorded as None, where no rule fires."""
    signals: list[dict[str, float | None]] = []
    previous: dict[str, float] | None = None
    for scores in restricted_by_loop:
        current = log_distribution(scores)
        signals.append({k: (v if math.isfinite(v) else None) for k, v in loop_signals(previous, current).items()})
        previous = current
    return signals


def exit_loop(rule: str, threshold: float | None, loops: Sequence[Mapping[str, Any]]) -> int:
    """The loop (1-based) a rule stops at, given each loop's signals and ``prediction`` in order (loops 1..K);
    the last loop when the rule never fires."""
    fired = first_firing(rule, threshold, loops)
    return len(loops) if fired is None else fired


def first_firing(rule: str, threshold: float | None, loops: Sequence[Mapping[str, Any]]) -> int | None:
    """The first loop (1-based) where a rule fires; None when it never does (``exit_loop`` then stops at the
    last loop read). A signal recorded as None (not finite) never fires; a signal missing is an error."""
    if rule not in DEFAULT_THRESHOLDS:
        raise ValueError(f"unknown exit rule {rule!r}: one of {', '.join(EXIT_RULES)}")
    if not loops:
        raise ValueError("no loops to choose from")
    limit = DEFAULT_THRESHOLDS[rule] if threshold is None else float(threshold)
    stable = 0
    for index, loop in enumerate(loops):
        t = index + 1
        if rule == "kl":
            kl = _signal(loop, "kl", t)
            fires = kl is not None and kl < limit
        elif rule == "entropy":
            now = _signal(loop, "entropy", t)
            before = _signal(loops[index - 1], "entropy", t - 1) if t >= 2 else None
            fires = now is not None and before is not None and abs(now - before) < limit
        elif rule == "argmax":
            same = (
                t >= 2
                and loop.get("prediction") is not None
                and loop.get("prediction") == loops[index - 1].get("prediction")
            )
            stable = stable + 1 if same else 0
            fires = stable >= limit
        else:
            halt = _signal(loop, "halt", t)
            fires = halt is not None and halt >= limit
        if fires:
            return t
    return None


def _signal(loop: Mapping[str, Any], name: str, t: int) -> float | None:
    if name not in loop:
        raise ValueError(f"loop {t} records no {name!r} signal")
    value = loop[name]
    return None if value is None else float(value)


def exit_details(
    restricted_by_loop: Sequence[Mapping[str, float]],
    predictions: Sequence[str | None],
    rules: Sequence[Any],
    halts: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """What each loop's reading records (loops 1..K of one row): its signals, and ``exits``, the labels of the
    rules (``ExitRule`` specs) that stop the row at that loop."""
    details: list[dict[str, Any]] = [dict(signals) for signals in row_signals(restricted_by_loop)]
    if halts is not None:
        for detail, halt in zip(details, halts):
            detail["halt"] = float(halt) if math.isfinite(float(halt)) else None
    loops = [{**detail, "prediction": prediction} for detail, prediction in zip(details, predictions)]
    for rule in rules:
        chosen = exit_loop(rule.rule, rule.value(), loops)
        details[chosen - 1].setdefault("exits", []).append(rule.label())
    return details
