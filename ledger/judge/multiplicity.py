"""Family-wise multiplicity adjustment of p-values (Bonferroni, Holm)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ledger.judge.records import _ToDict

# --------------------------------------------------------------------------- #
# Multiplicity
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class AdjustedPValues(_ToDict):
    method: str
    alpha: float
    raw: tuple[float, ...]
    adjusted: tuple[float, ...]
    reject: tuple[bool, ...]


def adjust_pvalues(
    pvalues: Sequence[float], method: Literal["bonferroni", "holm"], alpha: float = 0.05
) -> AdjustedPValues:
    """Family-wise adjustment via statsmodels ``multipletests``; method must be named."""
    if method not in ("bonferroni", "holm"):
        raise ValueError(f"method must be 'bonferroni' or 'holm', got {method!r}")
    raw = np.asarray(pvalues, dtype=float)
    if raw.size == 0:
        return AdjustedPValues(method=method, alpha=float(alpha), raw=(), adjusted=(), reject=())
    from statsmodels.stats.multitest import multipletests  # heavy (pulls in pandas): only when a family is adjusted

    reject, adjusted, _, _ = multipletests(raw, alpha=alpha, method=method)
    return AdjustedPValues(
        method=method,
        alpha=float(alpha),
        raw=tuple(float(p) for p in raw),
        adjusted=tuple(float(p) for p in adjusted),
        reject=tuple(bool(r) for r in reject),
    )
