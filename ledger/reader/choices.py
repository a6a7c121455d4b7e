"""Reading a multiple-choice row two more ways than by its answer letter's score alone.

- **Cyclic-label permutations** (the split-bridge paper's ARC reading): the row is shown ``k`` times with its
  options rotated over the letters (rotation s shows option (i + s) mod n at letter i), each showing is read
  as usual (the letters' scores, normalised over the row's letters), and each *option* gets the mean of the
  log-probabilities its letter received across the showings. The prediction is the option with the highest
  mean: a model that always says "A" no longer scores a quarter of the rows by position alone.
- **Log-likelihood of each option's text** after the question (lm-eval's ARC reading): ``loglik_pairs``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def option_block(choices: Mapping[str, str]) -> str:
    return "".join(f"{letter}. {text}\n" for letter, text in choices.items())


def rotated(row: Any, shift: int) -> Any:
    """The row with its options rotated by ``shift`` over the same letters (prompt, choices and answer)."""
    letters = list(row.choices)
    texts = [row.choices[letter] for letter in letters]
    n = len(letters)
    block = option_block(row.choices)
    if block not in row.prompt:
        raise ValueError(f"row {row.row_id}: its prompt does not list its options as 'X. text' lines")
    shown = {letter: texts[(index + shift) % n] for index, letter in enumerate(letters)}
    answer = letters[(letters.index(row.answer) - shift) % n]
    return row.model_copy(
        update={
            "prompt": row.prompt.replace(block, option_block(shown), 1),
            "choices": shown,
            "answer": answer,
            "path": [answer],
        }
    )


def _log_softmax(scores: Mapping[str, float]) -> dict[str, float]:
    top = max(scores.values())
    total = top + math.log(sum(math.exp(value - top) for value in scores.values()))
    return {letter: value - total for letter, value in scores.items()}


def mean_over_rotations(
    row: Any, shifts: Sequence[int], letter_scores: Sequence[Mapping[str, float]]
) -> dict[str, float]:
    """Each original option's mean log-probability over the showings (``letter_scores[j]``: the letters' scores
    when the options were rotated by ``shifts[j]``), keyed by the option's letter in the row as stored."""
    letters = list(row.choices)
    n = len(letters)
    totals = dict.fromkeys(letters, 0.0)
    for shift, scores in zip(shifts, letter_scores, strict=True):
        normalised = _log_softmax({letter: float(scores[letter]) for letter in letters})
        for index, letter in enumerate(letters):
            totals[letters[(index + shift) % n]] += normalised[letter]
    return {letter: total / len(shifts) for letter, total in totals.items()}


def loglik_pairs(row: Any) -> list[tuple[str, str]]:
    """(context, continuation) per option, in letter order: the question as lm-eval's ARC task asks it, and the
    option's text after a space."""
    question = row.meta.get("question") or row.prompt.split("\n", 1)[0]
    context = f"Question: {question}\nAnswer:"
    return [(context, f" {row.choices[letter]}") for letter in row.choices]
