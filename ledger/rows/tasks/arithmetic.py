"""The Tier-1 guardrail: a small four-way multiple-choice arithmetic check.

``generate_arithmetic`` gives ``4 * per_op`` rows (64 by default): ``per_op`` each of
addition, subtraction, multiplication and exact division, with small operands and
integer answers. Each row offers four options labelled A-D: the correct value and three
distinct, plausible distractors (off by a little, or by one operand for products and
quotients). The correct label is balanced within each operation (each label equally
often when ``per_op`` is a multiple of 4) and placed in a shuffled order.

Question text uses ASCII ``+ - * /``; ``meta["op"]`` names the operation ``+``, ``-``,
``x`` or ``/``. The answer is the correct label; ``choices`` maps label -> value text.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ledger.rows.manifest import Row
from ledger.rows.tasks.seeds import derive_seed, row_rng

__all__ = ["GENERATOR", "LABELS", "OPERATIONS", "check_arithmetic_row", "generate_arithmetic"]

GENERATOR = "arithmetic"
SUPPORTED_VERSIONS = (1,)
LABELS = ("A", "B", "C", "D")
MAX_PER_OP = 11 * 11  # x and / draw both factors from 2..12: no more distinct questions than that
INSTRUCTION = "Answer with the letter of the correct option."


def _draw_add(rng: random.Random) -> tuple[int, int, int]:
    a, b = rng.randint(2, 49), rng.randint(2, 49)
    return a, b, a + b


def _draw_sub(rng: random.Random) -> tuple[int, int, int]:
    a = rng.randint(10, 99)
    b = rng.randint(2, a - 1)
    return a, b, a - b


def _draw_mul(rng: random.Random) -> tuple[int, int, int]:
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return a, b, a * b


def _draw_div(rng: random.Random) -> tuple[int, int, int]:
    divisor, quotient = rng.randint(2, 12), rng.randint(2, 12)
    return divisor * quotient, divisor, quotient


# name used in row ids -> (meta op, ASCII symbol in the question, operand draw)
OPERATIONS: dict[str, tuple[str, str, Callable[[random.Random], tuple[int, int, int]]]] = {
    "add": ("+", "+", _draw_add),
    "sub": ("-", "-", _draw_sub),
    "mul": ("x", "*", _draw_mul),
    "div": ("/", "/", _draw_div),
}


def _distractors(rng: random.Random, op: str, a: int, b: int, value: int) -> list[int]:
    """Three distinct, non-negative wrong values near ``value``."""
    offsets = {-3, -2, -1, 1, 2, 3, -10, 10}
    if op == "x":
        offsets |= {a, -a, b, -b}  # one factor too many or too few
    candidates = sorted({value + k for k in offsets if value + k >= 0 and value + k != value})
    return rng.sample(candidates, 3)


def generate_arithmetic(*, seed: int, split: str = "tier1", per_op: int = 16, version: int = 1) -> list[Row]:
    """``4 * per_op`` forced-choice arithmetic rows, ids ``{split}_{add|sub|mul|div}_{index:05d}``."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"arithmetic version {version!r} is not supported (supported: {SUPPORTED_VERSIONS})")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if isinstance(per_op, bool) or not isinstance(per_op, int) or not 1 <= per_op <= MAX_PER_OP:
        raise ValueError(f"per_op must be an int in 1..{MAX_PER_OP} (the distinct x and / questions), got {per_op!r}")
    if not isinstance(split, str) or not split or any(c.isspace() for c in split):
        raise ValueError(f"split must be a non-empty string without spaces, got {split!r}")

    rows: list[Row] = []
    for op_index, (name, (op, shown, draw)) in enumerate(OPERATIONS.items()):
        # Balanced correct-label positions, shuffled by an op-level stream.
        positions = [LABELS[i % len(LABELS)] for i in range(per_op)]
        random.Random(derive_seed(f"{GENERATOR}/labels", version, seed, split, 0, op_index)).shuffle(positions)
        seen: set[tuple[int, int]] = set()
        for index in range(per_op):
            rng = row_rng(f"{GENERATOR}/{name}", version, seed, split, 0, index)
            a, b, value = draw(rng)
            while (a, b) in seen:  # no repeated question within an operation
                a, b, value = draw(rng)
            seen.add((a, b))
            wrong = _distractors(rng, op, a, b, value)
            label = positions[index]
            options = iter(wrong)
            choices = {lab: str(value if lab == label else next(options)) for lab in LABELS}
            prompt = f"What is {a} {shown} {b}?\n" + "".join(f"{lab}. {choices[lab]}\n" for lab in LABELS) + INSTRUCTION
            rows.append(
                Row(
                    row_id=f"{split}_{name}_{index:05d}",
                    task="arithmetic",
                    surface="multiple_choice",
                    depth=0,
                    prompt=prompt,
                    answer=label,
                    path=[label],
                    symbols=list(LABELS),
                    choices=choices,
                    meta={
                        "generator": GENERATOR,
                        "version": version,
                        "seed": seed,
                        "split": split,
                        "index": index,
                        "op": op,
                        "operands": [a, b],
                        "value": value,
                    },
                )
            )
    return rows


_EVAL = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "x": lambda a, b: a * b, "/": lambda a, b: a / b}


def check_arithmetic_row(row: Row) -> None:
    """Raise ``ValueError`` unless exactly the answer's option holds the true (integer) value."""
    problems = []
    a, b = row.meta["operands"]
    true = _EVAL[row.meta["op"]](a, b)
    if true != int(true):
        problems.append(f"{a} {row.meta['op']} {b} is not an integer")
    choices = row.choices or {}
    if sorted(choices) != list(LABELS):
        problems.append("choices are not labelled A-D")
    correct = [lab for lab, text in choices.items() if int(text) == true]
    if correct != [row.answer]:
        problems.append(f"correct options {correct} != answer {row.answer!r}")
    if len(set(choices.values())) != len(choices):
        problems.append("options are not distinct")
    if problems:
        raise ValueError(f"row {row.row_id}: " + "; ".join(problems))
