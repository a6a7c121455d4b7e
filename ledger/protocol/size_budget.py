"""The size budget: what one protocol may ask for, checked from its fields alone before anything is built.

A protocol past it (a manifest of 10^9 rows, a stage of 10^12 steps) is refused by ``ledger check``,
``run`` and ``register`` in well under a second, as bad input, instead of building for minutes and
gigabytes first. The budget is far beyond the paper's largest experiment.
"""

from __future__ import annotations

from typing import Any

from ledger.protocol.common import Problem
from ledger.protocol.protocol import Protocol

# What one protocol may ask for (the stated budget `ledger check` enforces before building anything): far
# beyond the paper's largest experiment, and small enough that checking and building stay bounded.
SIZE_BUDGET = {
    "rows": 2_000_000,  # all manifests together
    "steps": 10_000_000,  # per stage
    "batch_size": 65_536,
    "loops": 1_000,  # the largest recurrence a stage or an evaluation names
    "tokens": 100_000,  # max_new_tokens / max_tokens
}
_BUDGETED_FIELDS = {"steps": "steps", "batch_size": "batch_size", "max_new_tokens": "tokens", "max_tokens": "tokens"}


def size_problems(protocol: Protocol) -> list[Problem]:
    """Every number of the protocol past ``SIZE_BUDGET``, located; computed from the fields alone."""
    problems: list[Problem] = []
    total = 0
    for index, spec in enumerate(protocol.manifests):
        size = int(getattr(spec, "size", 0) or 0)
        total += size
        if size > SIZE_BUDGET["rows"]:
            problems.append((("manifests", index), f"{size:,} rows: more than the budget of {SIZE_BUDGET['rows']:,}"))
    if total > SIZE_BUDGET["rows"] and not problems:
        problems.append((("manifests",), f"{total:,} rows in all: more than the budget of {SIZE_BUDGET['rows']:,}"))

    def walk(value: Any, at: tuple) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                budget = _BUDGETED_FIELDS.get(key)
                if budget and isinstance(item, int) and item > SIZE_BUDGET[budget]:
                    problems.append(((*at, key), f"{item:,}: more than the budget of {SIZE_BUDGET[budget]:,}"))
                elif key in ("loops", "backprop_depth") and _largest(item) > SIZE_BUDGET["loops"]:
                    problems.append(((*at, key), f"loop {_largest(item):,}: more than the budget of 1,000"))
                else:
                    walk(item, (*at, key))
        elif isinstance(value, list):
            for position, item in enumerate(value):
                walk(item, (*at, position))

    walk(protocol.model_dump(mode="json", include={"arms"}), ())
    return problems


def _largest(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, list):
        return max((_largest(item) for item in value), default=0)
    if isinstance(value, dict):
        return max((_largest(item) for item in value.values()), default=0)
    return 0
