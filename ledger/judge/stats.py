"""Paired statistics over fixed row ids (docs/science.md, statistics).

Pure functions, no I/O. Every result is a small frozen dataclass whose
``to_dict()`` holds only JSON-safe ints, floats, strings, bools, None and lists,
so a claim evaluator can store it in the ledger as it is.

Conventions used throughout:

* A comparison is "arm A against arm B" on the same rows. ``helped`` counts
  rows A gets right and B gets wrong, ``hurt`` rows A gets wrong and B right.
* Exact binomial tails are summed in log space, so p-values far below the
  smallest double (or near it: A vs B in the paper is p = 5.72e-257) keep a
  finite ``log10_p`` instead of collapsing to 0.

This module is the one import point (``from ledger.judge import stats``); each concept
lives in its own file: ``paired`` (paired counts, exact McNemar), ``depth_gates``
(Fisher and paired depth gates), ``noninferiority`` (Tango), ``multiplicity`` (Holm,
Bonferroni), ``frontier``, ``intervals`` (``Interval``, Wilson), ``records`` (``to_dict``)
and ``deferred`` (scipy imported on first use).
"""

from __future__ import annotations

from ledger.judge.depth_gates import DepthGateResult, GateResult, fisher_depth_gate, paired_depth_gate
from ledger.judge.frontier import FRONTIER_BAR, FRONTIER_BAR_EXACT, SENSITIVITY_BARS, FrontierResult, frontier
from ledger.judge.intervals import Interval, wilson_interval
from ledger.judge.multiplicity import AdjustedPValues, adjust_pvalues
from ledger.judge.noninferiority import (
    NonInferiorityResult,
    tango_interval,
    tango_noninferiority,
    tango_score_statistic,
)
from ledger.judge.paired import LN10, Alternative, PairedCounts, TestResult, mcnemar_exact, paired_counts
from ledger.judge.signed_rank import SignedRankResult, signed_rank_test

__all__ = [
    "FRONTIER_BAR",
    "FRONTIER_BAR_EXACT",
    "LN10",
    "SENSITIVITY_BARS",
    "AdjustedPValues",
    "Alternative",
    "DepthGateResult",
    "FrontierResult",
    "GateResult",
    "Interval",
    "NonInferiorityResult",
    "PairedCounts",
    "SignedRankResult",
    "TestResult",
    "adjust_pvalues",
    "fisher_depth_gate",
    "frontier",
    "mcnemar_exact",
    "paired_counts",
    "paired_depth_gate",
    "signed_rank_test",
    "tango_interval",
    "tango_noninferiority",
    "tango_score_statistic",
    "wilson_interval",
]
