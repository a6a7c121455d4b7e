"""The label of a cell above the diagonal (a row read at a loop past its depth, docs/science.md, design S "persistence").

At loop t > depth the state either **advances** (the rule applied once more: the symbol t hops from the start,
found in the row's own table), **stays** on the answer, or does something else. Where the t-th hop *is* the
answer (the answer's rule maps back to it, or the orbit closes on it), the two cannot be told apart: the cell
is **ambiguous**, counted among the cells above the diagonal and in neither share.
"""

from __future__ import annotations

from typing import Any


def hop(table: dict[str, str], start: str, times: int) -> str | None:
    """The symbol ``times`` applications of the table from ``start`` (None if a rule is missing)."""
    symbol: str | None = start
    for _ in range(times):
        symbol = table.get(symbol) if symbol is not None else None
    return symbol


def cell_behavior(row: Any, loop: int, prediction: str | None) -> str | None:
    """advance / stay / other / ambiguous for a cell above the diagonal; None where it does not apply (an
    active cell, or a row without a table and start)."""
    if loop <= row.depth or not row.table or row.start is None:
        return None
    advanced = hop(row.table, row.start, loop)
    if advanced == row.answer:
        return "ambiguous"
    if prediction is not None and prediction == advanced:
        return "advance"
    if prediction is not None and prediction == row.answer:
        return "stay"
    return "other"
