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
(or how deep) it would need. Each statistic names its rule (``StatisticKind.power``), or says why it needs
none (``no_power_check``: accuracy and gate claims, descriptive statistics, can always be decided).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.judge.noninferiority import tango_noninferiority
from ledger.protocol.claims import STATISTICS, ClaimFile, manifest_of

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


@dataclass(frozen=True)
class PowerInputs:
    """What a power rule sizes a claim by: its file (families and their corrections) and each manifest's row
    depths (one entry per row)."""

    claim_file: ClaimFile
    depths_by_manifest: Mapping[str, Sequence[int]]

    def depths(self, claim: Any, manifest: str | None = None) -> list[int]:
        """The depths of the rows the claim reads on ``manifest`` (its own by default), its row filter applied."""
        depths = list(self.depths_by_manifest.get(manifest or claim.manifest, ()))
        if claim.rows.depths is not None:
            low, high = claim.rows.depths
            depths = [depth for depth in depths if low <= depth <= high]
        return depths

    def alpha(self, claim: Any) -> tuple[float, str]:
        """The level the claim must clear (Bonferroni in its family) and how to say so."""
        return _family_alpha(self.claim_file, claim)


def unwinnable_claims(claim_file: ClaimFile, depths_by_manifest: Mapping[str, Sequence[int]]) -> list[Unwinnable]:
    """The claims of a file that no outcome of their rows could support, each judged by its statistic's power
    rule (``StatisticKind.power``; a statistic that declares ``no_power_check`` is decided by any rows)."""
    inputs = PowerInputs(claim_file, depths_by_manifest)
    found = []
    for index, claim in enumerate(claim_file.claims):
        if not STATISTICS[claim.statistic].power:
            continue
        message = STATISTICS.resolve(claim.statistic, "power")(claim, inputs)
        if message is not None:
            found.append(Unwinnable(claim.id, index, message))
    return found


def support_reach(claim: Any, inputs: PowerInputs) -> str | None:
    """A support-scaling claim whose rows for some arm stop short of threshold x support: that arm's frontier
    (at most its deepest row) cannot reach the ratio."""
    for arm, support in zip(claim.arms, claim.supports):
        depths = inputs.depths_by_manifest.get(manifest_of(claim, arm), ())
        if depths and max(depths) / support < claim.threshold:
            need = math.ceil(claim.threshold * support)
            return (
                f"cannot be supported: arm {arm}'s rows reach depth {max(depths)}, so its frontier / support is at "
                f"most {max(depths)}/{support} = {max(depths) / support:.3f} < {claim.threshold}; it needs rows of "
                f"depth {need} or more"
            )
    return None


def frontier_reach(claim: Any, inputs: PowerInputs) -> str | None:
    """The curve censored at the rows' deepest (or shallowest) depth: the furthest a frontier can be read."""
    depths = inputs.depths(claim)
    if not depths:
        return None  # no rows to size by: `ledger check` reports the manifest and filter
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


def paired_best_case(claim: Any, inputs: PowerInputs) -> str | None:
    """Every row (or document) in the claimed direction: the exact binomial (sign-rank) p = 0.5^n."""
    two_sided = getattr(claim, "direction", "") == "two-sided"

    def best(rows: int) -> float:
        return _binomial_best(rows, two_sided)

    return _unless_clears(claim, inputs, best, "with every one of its {n} rows in the claimed direction")


def noninferiority_best_case(claim: Any, inputs: PowerInputs) -> str | None:
    """The retrofit equal to its comparison on every row (no discordant pair): Tango's p at zero discordant pairs."""

    def best(rows: int) -> float:
        return _noninferiority_best(rows, claim.margin, min(claim.alpha, 0.49))

    versus = claim.arms[1] if claim.statistic == "noninferiority" else "forced depth"
    return _unless_clears(claim, inputs, best, f"equal to {versus} on every one of its {{n}} rows (no discordant pair)")


def adaptive_depth_best_case(claim: Any, inputs: PowerInputs) -> str | None:
    """Paired non-inferiority against forced depth is sized as ``noninferiority``; the right-depth share has no
    p-value, so any rows decide it."""
    return noninferiority_best_case(claim, inputs) if claim.measure == "noninferior" else None


def _unless_clears(claim: Any, inputs: PowerInputs, best_p, what: str) -> str | None:
    depths = inputs.depths(claim)
    if not depths:
        return None  # no rows to size by: `ledger check` reports the manifest and filter
    n = len(depths)
    alpha, family = inputs.alpha(claim)
    best = best_p(n)
    if best < alpha:
        return None
    needed = _rows_needed(best_p, alpha)
    need = f"it needs {needed} rows" if needed is not None else "no number of rows would do"
    return f"cannot be supported: even {what.format(n=n)}, p = {best:.3g} >= alpha {alpha:.3g}{family}; {need}"
