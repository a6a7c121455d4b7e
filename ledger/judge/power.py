"""Power at registration: can a claim be supported at all with the rows it names?

Each test's best case on ``n`` rows, computed before any result:

* ``paired_exact``, and ``at_equal_flops`` on accuracy: every row discordant in the claimed direction, the
  exact binomial p = 0.5^n (twice that, two-sided);
* ``paired_loss`` and ``at_equal_flops`` on loss: every document's difference in the claimed direction,
  the exact Wilcoxon signed-rank p = 0.5^n;
* ``noninferiority``: the retrofit equal to its comparison on every row (no discordant pair), the design
  point a non-inferiority claim is sized for: Tango's p at zero discordant pairs on n rows;
* ``frontier_ratio``: the curve censored at the manifest's deepest (or shallowest) depth, the furthest a
  frontier can be read with those rows.

A claim in a Bonferroni family must clear alpha / m (Holm's last step is alpha itself, so Holm needs only
alpha). A claim whose best case misses is unwinnable: ``ledger register`` refuses it and says how many rows
(or how deep) it would need. Accuracy and gate claims can always be decided.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.judge.noninferiority import tango_noninferiority
from ledger.spec.claims import ClaimFile, manifest_of

LARGEST_SEARCH = 10_000_000  # rows: past this a claim is unwinnable in any budget ledger check allows


@dataclass(frozen=True)
class Unwinnable:
    claim_id: str
    index: int
    message: str


def _binomial_best(n: int, two_sided: bool) -> float:
    return min(1.0, (2.0 if two_sided else 1.0) * 0.5**n) if n > 0 else 1.0


def _noninferiority_best(n: int, margin: float, alpha: float) -> float:
    return tango_noninferiority(0, 0, n, margin, alpha=alpha).p_value if n > 0 else 1.0


def _rows_needed(best_p, alpha: float) -> int | None:
    """The fewest rows whose best case p is below alpha (p falls with n): doubling, then bisection."""
    high = 1
    while best_p(high) >= alpha:
        high *= 2
        if high > LARGEST_SEARCH:
            return None
    low = high // 2
    while low + 1 < high:
        middle = (low + high) // 2
        low, high = (middle, high) if best_p(middle) >= alpha else (low, middle)
    return high


def _family_alpha(claim_file: ClaimFile, claim: Any) -> tuple[float, str]:
    alpha = float(getattr(claim, "alpha", 0.05))
    if claim.family is None:
        return alpha, ""
    declared = claim_file.families.get(claim.family)
    correction = declared.correction if declared is not None else claim_file.correction
    members = sum(1 for other in claim_file.claims if other.family == claim.family)
    if correction == "bonferroni" and members > 1:
        return alpha / members, f" (alpha {alpha} / {members}, Bonferroni in family {claim.family!r})"
    return alpha, ""


def unwinnable_claims(claim_file: ClaimFile, depths_by_manifest: Mapping[str, Sequence[int]]) -> list[Unwinnable]:
    """The claims of a file that no outcome of their rows could support; ``depths_by_manifest``: each
    manifest's row depths (one entry per row)."""
    found = []
    for index, claim in enumerate(claim_file.claims):
        if claim.statistic == "support_scaling":
            short = _support_too_shallow(claim, depths_by_manifest)
            if short is not None:
                found.append(Unwinnable(claim.id, index, short))
            continue
        depths = list(depths_by_manifest.get(claim.manifest, ()))
        if claim.rows.depths is not None:
            low, high = claim.rows.depths
            depths = [depth for depth in depths if low <= depth <= high]
        if not depths:
            continue  # no rows to size by: `ledger check` reports the manifest and filter
        message = _best_case(claim_file, claim, depths)
        if message is not None:
            found.append(Unwinnable(claim.id, index, message))
    return found


def _support_too_shallow(claim: Any, depths_by_manifest: Mapping[str, Sequence[int]]) -> str | None:
    """A support-scaling claim whose rows for some arm stop short of threshold x support: that arm's frontier
    (at most its deepest row) cannot reach the ratio."""
    for arm, support in zip(claim.arms, claim.supports):
        depths = depths_by_manifest.get(manifest_of(claim, arm), ())
        if depths and max(depths) / support < claim.threshold:
            need = math.ceil(claim.threshold * support)
            return (
                f"cannot be supported: arm {arm}'s rows reach depth {max(depths)}, so its frontier / support is at "
                f"most {max(depths)}/{support} = {max(depths) / support:.3f} < {claim.threshold}; it needs rows of "
                f"depth {need} or more"
            )
    return None


def _best_case(claim_file: ClaimFile, claim: Any, depths: list[int]) -> str | None:
    n, statistic = len(depths), claim.statistic
    alpha, family = _family_alpha(claim_file, claim)
    if statistic == "frontier_ratio":
        deepest, shallowest = max(depths), min(depths)
        if claim.direction == "at_least" and deepest / claim.support_max_depth < claim.threshold:
            need = math.ceil(claim.threshold * claim.support_max_depth)
            return (
                f"cannot be supported: its rows reach depth {deepest}, so the frontier / support ratio is at most "
                f"{deepest}/{claim.support_max_depth} = {deepest / claim.support_max_depth:.3f} < {claim.threshold}; "
                f"it needs rows of depth {need} or more"
            )
        if claim.direction == "at_most" and shallowest / claim.support_max_depth > claim.threshold:
            return (
                f"cannot be supported: its shallowest rows are at depth {shallowest}, so the ratio is at least "
                f"{shallowest / claim.support_max_depth:.3f} > {claim.threshold}"
            )
        return None
    if statistic == "noninferiority" or getattr(claim, "measure", None) == "noninferior":

        def best(rows: int) -> float:
            return _noninferiority_best(rows, claim.margin, min(claim.alpha, 0.49))

        versus = claim.arms[1] if statistic == "noninferiority" else "forced depth"
        what = f"equal to {versus} on every one of its {n} rows (no discordant pair)"
    elif statistic in ("paired_exact", "paired_loss", "at_equal_flops"):
        two_sided = getattr(claim, "direction", "") == "two-sided"

        def best(rows: int) -> float:
            return _binomial_best(rows, two_sided)

        what = f"with every one of its {n} rows in the claimed direction"
    else:
        return None
    best_p = best(n)
    if best_p < alpha:
        return None
    needed = _rows_needed(best, alpha)
    need = f"it needs {needed} rows" if needed is not None else "no number of rows would do"
    return f"cannot be supported: even {what}, p = {best_p:.3g} >= alpha {alpha:.3g}{family}; {need}"
