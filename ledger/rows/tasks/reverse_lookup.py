"""The reverse operation of rule chasing (the acquisition-retention boundary, docs/science.md, the split-bridge paper's other experiments): "which symbol maps
to X", applied d times.

The function f is a permutation of the alphabet (so every symbol has exactly one preimage and the question has
one answer), drawn so that the start's reverse orbit ``path = [start, f^-1(start), ..., f^-d(start)]`` has d+1
distinct symbols. A row's ``table`` is the inverse g = f^-1 (``path`` follows it, so every reader of a
rule-chasing row, persistence labels included, reads a reverse row the same way); its prompt shows f, the
forward table, in the paper's symbolic format, and asks for the inverse. Two variants:

* ``reverse_inverse_table``: the prompt also shows the explicit inverse table ("Inverse table:", g's lines in
  their own shuffled order) -- the paper's variant that was learnt alone (63/64);
* ``reverse_forward_table``: the forward table alone, to be searched backwards -- the variant that plateaued.

The row keeps f and both display orders in ``meta`` so the prompt re-renders from the row.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

OPERATIONS = ("forward", "reverse_inverse_table", "reverse_forward_table")


def draw_reverse(
    rng: random.Random, alphabet: Sequence[str], depth: int
) -> tuple[dict[str, str], dict[str, str], str, list[str], list[str]]:
    """``(forward f, inverse g, start, path, inverse display order)``; f's insertion order is its display order."""
    path = rng.sample(list(alphabet), depth + 1)
    forward = {path[t + 1]: path[t] for t in range(depth)}  # f(path[t+1]) = path[t]: path follows f^-1
    free_keys = [symbol for symbol in alphabet if symbol not in forward]
    free_values = [symbol for symbol in alphabet if symbol not in set(path[:depth])]
    rng.shuffle(free_values)
    forward.update(zip(free_keys, free_values))  # the rest of f: a random bijection, so f is a permutation
    keys = list(alphabet)
    rng.shuffle(keys)
    shown = {key: forward[key] for key in keys}
    inverse = {value: key for key, value in forward.items()}
    inverse_order = list(alphabet)
    rng.shuffle(inverse_order)
    return shown, {key: inverse[key] for key in inverse_order}, path[0], path, inverse_order


def render_reverse(
    operation: str,
    forward: Mapping[str, str],
    start: str,
    depth: int,
    forward_order: Sequence[str],
    inverse_order: Sequence[str],
) -> str:
    """The paper's symbolic format, asking for the inverse d times (no trailing "Answer:": the reader adds it)."""
    if operation not in OPERATIONS[1:]:
        raise ValueError(f"unknown reverse operation {operation!r}: one of {', '.join(OPERATIONS[1:])}")
    lines = "".join(f"{key} -> {forward[key]}\n" for key in forward_order)
    inverse = {value: key for key, value in forward.items()}
    shown_inverse = (
        "Inverse table:\n" + "".join(f"{key} -> {inverse[key]}\n" for key in inverse_order)
        if operation == "reverse_inverse_table"
        else ""
    )
    return (
        "You are given a finite function f as a shuffled lookup table.\n"
        "Function table:\n"
        f"{lines}"
        f"{shown_inverse}"
        f"\nStart value: {start}\n"
        f"Find the value that f maps to the current value, exactly {depth} times.\n"
        "What is the final value?"
    )
