"""The threshold-crossing frontier: first downward crossing of a bar by per-depth accuracy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ledger.judge.records import _ToDict

# Threshold-crossing frontier bars (docs/science.md, design S). 0.71 is the preregistered
# rounding of (1/4)^(1/4); the exact value is kept for a sensitivity read.
FRONTIER_BAR = 0.71
FRONTIER_BAR_EXACT = 0.25**0.25
SENSITIVITY_BARS = (0.60, 0.80)


# --------------------------------------------------------------------------- #
# Threshold-crossing frontier
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class FrontierResult(_ToDict):
    bar: float
    frontier: float | None
    status: Literal["crossed", "never_crosses", "below_at_first_depth"]
    reason: str
    depth_above: int | None  # last depth at or above the bar before the crossing
    depth_below: int | None  # first depth below the bar


def frontier(acc_by_depth: Mapping[int, float], bar: float) -> FrontierResult:
    """First downward crossing of ``bar`` by per-depth accuracy, linearly interpolated.

    Scans depths in increasing order for the first depth whose accuracy is
    strictly below ``bar``; the frontier is the point between it and the
    previous evaluated depth (accuracy >= bar) where the straight line between
    the two accuracies meets ``bar``. Gaps between evaluated depths are allowed.
    Later recoveries above the bar are ignored (first crossing only).

    Conventions: never below the bar -> frontier None, status "never_crosses"
    (the frontier lies beyond the deepest evaluated depth); already below at
    the shallowest evaluated depth -> frontier None, "below_at_first_depth".
    """
    if not acc_by_depth:
        raise ValueError("acc_by_depth is empty")
    depths = sorted(acc_by_depth)
    accuracies = [float(acc_by_depth[d]) for d in depths]
    if accuracies[0] < bar:
        return FrontierResult(
            bar=float(bar),
            frontier=None,
            status="below_at_first_depth",
            reason=f"below bar at the first evaluated depth; frontier <= {depths[0]}",
            depth_above=None,
            depth_below=int(depths[0]),
        )
    for index in range(1, len(depths)):
        if accuracies[index] < bar:
            depth_above, depth_below = depths[index - 1], depths[index]
            acc_above, acc_below = accuracies[index - 1], accuracies[index]
            fraction = (acc_above - bar) / (acc_above - acc_below)
            return FrontierResult(
                bar=float(bar),
                frontier=float(depth_above + fraction * (depth_below - depth_above)),
                status="crossed",
                reason=f"first below bar at depth {depth_below}; interpolated from depth {depth_above}",
                depth_above=int(depth_above),
                depth_below=int(depth_below),
            )
    return FrontierResult(
        bar=float(bar),
        frontier=None,
        status="never_crosses",
        reason=f"never crosses; > max depth {depths[-1]}",
        depth_above=int(depths[-1]),
        depth_below=None,
    )
