"""Power for "within" gates: how often two identical arms would fail them.

A gate that holds an arm within some rows of a reference (the paper's adapter gate, "E within 8 of 128 rows of
A at every depth"; a guardrail's drop against the base) is meant to pass an arm as good as its reference. Take
two arms with identical accuracy p at a depth and independent errors on its n rows: the reference's count minus
the arm's is the difference of two Binomial(n, p), and the gate passes the depth when that is at most the rows
allowed. Over every depth the chances multiply. The accuracy is not known at registration, so each depth is
taken at its worst p (about 0.5, where the counts spread most): the chance is a floor, whatever the arms learn.

At small n such a gate measures noise: at 64 rows per depth and 14 depths, "within 4 rows at every depth" fails
identical arms nearly always. Claim rules 2 refuse a claim on a gate that identical arms would fail more often
than the file's ``identical_arms_fail_at_most`` (0.2 by default), naming the rows that would meet it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_GRID = tuple(step / 100 for step in range(1, 100))  # p from 0.01 to 0.99


@dataclass(frozen=True)
class GatePower:
    """``fail``: the chance identical arms fail the gate, at the worst accuracy; ``allowed`` the rows it allows
    per depth (or pooled); ``rows``: the rows per depth it reads."""

    fail: float
    allowed: int
    rows: tuple[int, ...]
    pooled: bool

    def rows_for(self, level: float) -> int:
        """The fewest rows the gate would have to allow for identical arms to fail it at most ``level``."""
        allowed = self.allowed
        while allowed < max(self.rows) and _fail(self.rows, allowed) > level:
            allowed += 1
        return allowed


@functools.lru_cache(maxsize=4096)
def _worst_within(n: int, allowed: int) -> float:
    """min over p of P(Y - X <= allowed), X and Y independent Binomial(n, p): every p of the grid at once."""
    import numpy
    from scipy.stats import binom  # heavy: only when a gate is sized

    counts = numpy.arange(n + 1)[None, :]
    p = numpy.asarray(_GRID)[:, None]
    within = (binom.pmf(counts, n, p) * binom.cdf(numpy.minimum(n, counts + allowed), n, p)).sum(axis=1)
    return float(within.min())


def _fail(rows: Sequence[int], allowed: int) -> float:
    passes = 1.0
    for n in rows:
        passes *= _worst_within(n, allowed)
    return 1.0 - passes


def gate_power(gate: Mapping[str, Any], depths: Sequence[int]) -> GatePower | None:
    """The power of a "within" gate (``within_rows``: at every depth; ``guardrail``: pooled, its ``max_drop`` of
    the rows) on rows of these depths (one entry per row); None for any other gate, or no rows."""
    if not depths:
        return None
    if gate.get("kind") == "within_rows":
        per_depth: dict[int, int] = {}
        for depth in depths:
            per_depth[depth] = per_depth.get(depth, 0) + 1
        rows, allowed, pooled = tuple(per_depth[d] for d in sorted(per_depth)), int(gate.get("rows", 8)), False
    elif gate.get("kind") == "guardrail":
        n = len(depths)
        rows, allowed, pooled = (n,), math.floor(float(gate["max_drop"]) * n + 1e-9), True
    else:
        return None
    return GatePower(_fail(rows, allowed), allowed, rows, pooled)
