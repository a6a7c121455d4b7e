"""Each claim as a picture: its effect, the interval around it, and the bar it must clear.

A claim's figures say it in its statistic's own terms; the forest plot at the head of the report needs one
number and an interval in a shared form. An accuracy claim: its accuracy, the Wilson 95% interval, its threshold.
A paired comparison: the paired difference in accuracy (helped − hurt) / n, Tango's 95% score interval, 0. A
non-inferiority claim: the difference with the interval its test reports, the margin below 0. A frontier
ratio: the ratio and its bar, with no interval (one training run has none). Gates and other pass/fail claims
have no effect size and are left out of the picture (the table below it lists them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.judge.noninferiority import tango_interval


@dataclass(frozen=True)
class ClaimEffect:
    claim_id: str
    scale: str  # what the number is: claims on one scale share a panel
    value: float
    low: float | None
    high: float | None
    bar: float | None
    holds_above: bool | None  # the claim holds when the effect lies above its bar (False: below; None: either side)
    outcome: str | None
    paper: str | None  # the paper's figure the claim carries, as written


def claim_effect(
    claim_id: str, spec: dict[str, Any], figures: dict[str, Any], outcome: str | None
) -> ClaimEffect | None:
    """The effect of one claim from its spec and recorded figures; None where it has no effect size."""
    paper = (spec.get("paper") or {}).get("figure")

    def effect(scale, value, low, high, bar, above: bool | None = True) -> ClaimEffect | None:
        if not isinstance(value, (int, float)):  # not measured (no rows, no frontier reached): nothing to draw
            return None
        return ClaimEffect(claim_id, scale, float(value), low, high, bar, above, outcome, paper)

    if "wilson_low" in figures and "accuracy" in figures:
        above = spec.get("direction", "at_least") != "at_most"
        return effect("accuracy", figures["accuracy"], figures["wilson_low"], figures["wilson_high"],
                      spec.get("threshold"), above)  # fmt: skip
    if "ci_low" in figures and "difference" in figures:
        margin = figures.get("margin", spec.get("margin"))
        return effect("difference in accuracy", figures["difference"], figures["ci_low"], figures["ci_high"],
                      -margin if margin is not None else None)  # fmt: skip
    if all(isinstance(figures.get(key), int) for key in ("helped", "hurt", "n")) and figures["n"] > 0:
        helped, hurt, n = int(figures["helped"]), int(figures["hurt"]), int(figures["n"])
        interval = tango_interval(helped, hurt, n, 0.95)
        direction = spec.get("direction", "greater")
        above = None if direction == "two-sided" else direction != "less"
        return effect("difference in accuracy", (helped - hurt) / n, interval.lower, interval.upper, 0.0, above)
    if "ratio" in figures and "threshold" in spec:  # the ratio's bar is the claim's threshold (its `bar` is accuracy's)
        return effect("frontier / support depth", figures["ratio"], None, None, spec["threshold"])
    return None
