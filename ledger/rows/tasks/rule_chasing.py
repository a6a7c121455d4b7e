"""Rule chasing: follow a shuffled table of rules from a start symbol, d times.

A problem is a finite function ``f`` over an alphabet (the table), a start symbol and a
depth ``d``. The start's orbit ``path = [start, f(start), ..., f^d(start)]`` has d+1
DISTINCT symbols, so every one of the d hops is a new symbol and the answer cannot be
reached by a shortcut through a short cycle.

What the rest of the table looks like follows the paper's released Phase A rows
(checked in tests against all 1,792 of them):

- the last orbit symbol ``path[d]`` maps to a uniformly random symbol of the alphabet
  (it may be any symbol, itself and earlier orbit symbols included: in the released
  rows it lands back on the orbit at the rate (d+1)/16 that a uniform draw gives);
- every off-orbit symbol maps to a uniformly random symbol (distractor rules), which
  may lie on the orbit or be itself;
- every symbol of the alphabet appears exactly once as a key, and the lines are shown
  in a shuffled order.

With ``distractors=False`` (template-style natural surfaces) the table holds only the
orbit's symbols as keys, and the last orbit symbol maps to a random orbit symbol, so
the table is closed over the symbols it shows and no symbol stands out as "the one
without a rule" (which would give the answer away).

Randomness: each row has its own ``random.Random`` from :func:`ledger.rows.tasks.seeds.derive_seed`
of ``("rule_chasing", version, seed, split, depth, index)``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ledger.rows.manifest import Row
from ledger.rows.tasks.alphabets import resolve_alphabet
from ledger.rows.tasks.reverse_lookup import OPERATIONS, draw_reverse, render_reverse
from ledger.rows.tasks.seeds import row_rng
from ledger.rows.tasks.surfaces import DEFAULT_ALPHABET, SURFACES, render

__all__ = [
    "GENERATOR",
    "SUPPORTED_VERSIONS",
    "chase",
    "check_rule_chasing_row",
    "generate_rule_chasing",
    "make_table",
    "row_id",
]

GENERATOR = "rule_chasing"
SUPPORTED_VERSIONS = (1,)


def _check_depth(depth: object) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an int >= 1, got {depth!r}")
    return depth


def make_table(
    rng: random.Random,
    symbols: Sequence[str] | str,
    depth: int,
    *,
    distractors: bool = True,
) -> tuple[dict[str, str], str, list[str]]:
    """Draw one problem: ``(table, start, path)``.

    ``table`` is a dict whose insertion order is the shuffled display order;
    ``path[0] == start``, ``path[t + 1] == table[path[t]]``, ``len(path) == depth + 1``,
    all of ``path`` distinct. Needs ``len(symbols) >= depth + 1``.
    """
    alphabet = resolve_alphabet(symbols)
    depth = _check_depth(depth)
    if len(alphabet) < depth + 1:
        raise ValueError(
            f"depth {depth} needs an orbit of {depth + 1} distinct symbols, "
            f"but the alphabet has only {len(alphabet)} ({', '.join(alphabet[:4])}, ...); "
            f"use a larger alphabet or depth <= {len(alphabet) - 1}"
        )
    return _draw(rng, alphabet, depth, distractors)


def _draw(
    rng: random.Random, alphabet: tuple[str, ...], depth: int, distractors: bool
) -> tuple[dict[str, str], str, list[str]]:
    """make_table's draw, on an already validated alphabet and depth."""
    path = rng.sample(alphabet, depth + 1)
    rules = {path[t]: path[t + 1] for t in range(depth)}
    on_path = set(path)
    if distractors:
        rules[path[-1]] = rng.choice(alphabet)
        for symbol in alphabet:  # canonical order, so the draw order is fixed
            if symbol not in on_path:
                rules[symbol] = rng.choice(alphabet)
        keys = list(alphabet)
    else:
        rules[path[-1]] = rng.choice(path)
        keys = [symbol for symbol in alphabet if symbol in on_path]
    rng.shuffle(keys)
    table = {key: rules[key] for key in keys}
    return table, path[0], path


def chase(table: dict[str, str], start: str, depth: int) -> list[str]:
    """The path ``[start, f(start), ..., f^depth(start)]`` (KeyError if a rule is missing)."""
    path = [start]
    for _ in range(depth):
        path.append(table[path[-1]])
    return path


def row_id(split: str, depth: int, index: int) -> str:
    """The paper's row id: ``test_d12_00091`` (index counts within the depth)."""
    return f"{split}_d{depth:02d}_{index:05d}"


def generate_rule_chasing(
    *,
    surface: str,
    symbols: Sequence[str] | str | None = None,
    depth_range: Sequence[int],
    rows_per_depth: int,
    seed: int,
    split: str,
    version: int = 1,
    distractors: bool = True,
    operation: str = "forward",
) -> list[Row]:
    """Generate ``rows_per_depth`` rows for every depth in ``depth_range`` (inclusive).

    ``operation``: "forward" (apply f), or the reverse operation ("which symbol maps to X",
    ``ledger.rows.tasks.reverse_lookup``) with or without the explicit inverse table (symbolic surface only).

    ``symbols`` is an alphabet name (``"N16"``, ``"N24"``, ``"names"``, ...) or an explicit
    list; by default the surface's alphabet (N16 for symbolic, names for relay/pointer).
    Rows come ordered by depth, then index; ids are ``{split}_d{depth:02d}_{index:05d}``.
    """
    if surface not in SURFACES:
        raise ValueError(f"unknown surface {surface!r}; known surfaces: {', '.join(SURFACES)}")
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"rule_chasing version {version!r} is not supported (supported: {SUPPORTED_VERSIONS})")
    if not isinstance(split, str) or not split or any(c.isspace() for c in split):
        raise ValueError(f"split must be a non-empty string without spaces, got {split!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if isinstance(rows_per_depth, bool) or not isinstance(rows_per_depth, int) or rows_per_depth < 1:
        raise ValueError(f"rows_per_depth must be an int >= 1, got {rows_per_depth!r}")
    depth_range = tuple(depth_range)
    if len(depth_range) != 2:
        raise ValueError(f"depth_range must be (min_depth, max_depth), got {depth_range!r}")
    lo, hi = (_check_depth(d) for d in depth_range)
    if lo > hi:
        raise ValueError(f"depth_range {depth_range!r} is empty (min > max)")
    alphabet = resolve_alphabet(DEFAULT_ALPHABET[surface] if symbols is None else symbols)
    if hi + 1 > len(alphabet):
        raise ValueError(
            f"max depth {hi} needs {hi + 1} distinct symbols but the alphabet has {len(alphabet)}; "
            f"lower the depth range to <= {len(alphabet) - 1} or use a larger alphabet"
        )

    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; known: {', '.join(OPERATIONS)}")
    if operation != "forward" and surface != "symbolic":
        raise ValueError(f"the reverse operation is rendered on the symbolic surface only, not {surface!r}")
    rows: list[Row] = []
    for depth in range(lo, hi + 1):
        for index in range(rows_per_depth):
            if operation == "forward":
                rng = row_rng(GENERATOR, version, seed, split, depth, index)
                table, start, path = _draw(rng, alphabet, depth, distractors)
                order = list(table)
                prompt = render(surface, table, start, depth, order)
                drawn: dict = {"distractors": distractors, "order": order}
            else:  # the row's table is f^-1 (the path follows it); the prompt shows f
                rng = row_rng(f"{GENERATOR}/{operation}", version, seed, split, depth, index)
                forward, table, start, path, order = draw_reverse(rng, alphabet, depth)
                prompt = render_reverse(operation, forward, start, depth, list(forward), order)
                drawn = {"operation": operation, "forward_order": list(forward), "order": order}
            rows.append(
                Row(
                    row_id=row_id(split, depth, index),
                    task="rule_chasing",
                    surface=surface,
                    depth=depth,
                    prompt=prompt,
                    answer=path[-1],
                    path=path,
                    symbols=list(alphabet),
                    table=table,
                    start=start,
                    meta={
                        "generator": GENERATOR,
                        "version": version,
                        "seed": seed,
                        "split": split,
                        "index": index,
                        **drawn,
                    },
                )
            )
    return rows


def check_rule_chasing_row(row: Row) -> None:
    """Raise ``ValueError`` unless ``row`` is a well-formed rule-chasing row.

    Checks: the path follows the table from the start, has depth+1 distinct symbols and
    ends at the answer; the table's keys and values lie in ``row.symbols``; with
    distractors, every symbol is a key exactly once; the prompt re-renders from
    (table, meta.order, start, depth).
    """
    problems: list[str] = []
    table, path, symbols = row.table or {}, row.path, row.symbols
    if row.task != "rule_chasing":
        problems.append(f"task is {row.task!r}")
    if row.start is None or not path or path[0] != row.start:
        problems.append("path[0] is not the start")
    if len(path) != row.depth + 1:
        problems.append(f"path has {len(path)} symbols for depth {row.depth}")
    if len(set(path)) != len(path):
        problems.append("path repeats a symbol")
    if any(table.get(path[t]) != path[t + 1] for t in range(len(path) - 1)):
        problems.append("path does not follow the table")
    if not path or row.answer != path[-1]:
        problems.append("answer is not path[-1]")
    if not set(table) <= set(symbols) or not set(table.values()) <= set(symbols):
        problems.append("table uses symbols outside the alphabet")
    if row.meta.get("distractors", True) and sorted(table) != sorted(symbols):
        problems.append("not every symbol is a key exactly once")
    order = row.meta.get("order")
    operation = row.meta.get("operation", "forward")
    if operation != "forward" and row.start in table:
        forward = {value: key for key, value in table.items()}
        forward_order = row.meta.get("forward_order") or list(forward)
        try:
            shown = {key: forward[key] for key in forward_order}
            rendered = render_reverse(operation, shown, row.start, row.depth, forward_order, order or list(table))
        except (KeyError, ValueError) as exc:
            problems.append(f"cannot re-render the reverse prompt: {exc}")
        else:
            if rendered != row.prompt:
                problems.append("prompt does not re-render from the table")
    elif order is not None and row.start in table:
        try:
            rendered = render(row.surface, table, row.start, row.depth, order)
        except ValueError as exc:
            problems.append(str(exc))
        else:
            if rendered != row.prompt:
                problems.append("prompt does not re-render from the table")
    if problems:
        raise ValueError(f"row {row.row_id}: " + "; ".join(problems))
