"""Arithmetic word problems: design M's task manifest (the role GSM8K plays in the seed).

A row tells how points move between people over ``steps`` sentences and asks for one
person's final count::

    Amy has 5 points . Ben has 2 points . Amy passes 3 points to Ben . Ben passes 1 points to Amy .
    What value has Amy ?

Every word is in the shipped tiny bases' vocabulary, so the same generator serves the tiny
protocol and a real base. The answer is a number in ``0..answer_max`` (a single token for
the shared reader), read at the reader's answer position at every test recurrence; the row's
``depth`` is its number of transfers (the work a model must chain), ``path`` the asked
person's count after each sentence.
"""

from __future__ import annotations

from ledger.rows.manifest import Row
from ledger.rows.tasks.people import PEOPLE
from ledger.rows.tasks.seeds import row_rng

GENERATOR = "word_problems"
SUPPORTED_VERSIONS = (1,)
# answers as words for tokenizers that split " 5" into a space and a digit (SmolLM2: " five" is one token)
NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]


def answer_symbol(value: int, answer_format: str) -> str:
    return NUMBER_WORDS[value] if answer_format == "words" else str(value)


def _problem(rng, steps: int, answer_max: int) -> tuple[str, list[int], str]:
    """(prompt, the asked person's count after each step, whom it asks about); every count stays in range."""
    while True:
        a, b = rng.sample(PEOPLE, 2)
        counts = {a: rng.randint(0, answer_max), b: rng.randint(0, answer_max)}
        asked = rng.choice((a, b))
        sentences = [f"{a} has {counts[a]} points .", f"{b} has {counts[b]} points ."]
        trail = [counts[asked]]
        for _ in range(steps):
            giver = rng.choice((a, b))
            taker = b if giver == a else a
            room = min(counts[giver], answer_max - counts[taker])
            if room < 1:
                break
            moved = rng.randint(1, room)
            counts[giver] -= moved
            counts[taker] += moved
            sentences.append(f"{giver} passes {moved} points to {taker} .")
            trail.append(counts[asked])
        else:
            return " ".join(sentences) + f" What value has {asked} ?", trail, asked


def generate_word_problems(
    *,
    seed: int,
    split: str,
    steps: tuple[int, int],
    rows_per_step: int,
    answer_max: int = 9,
    answer_format: str = "digits",
    version: int = 1,
) -> list[Row]:
    """``rows_per_step`` problems for each number of transfers in ``steps`` (inclusive), ids ``{split}_s{k}_{i}``;
    answers as digits, or as English number words (``answer_format: words``, up to twenty)."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"word_problems version {version!r} is not supported (supported: {SUPPORTED_VERSIONS})")
    if answer_format == "words" and answer_max >= len(NUMBER_WORDS):
        raise ValueError(f"answers as words go up to {len(NUMBER_WORDS) - 1}, not {answer_max}")
    symbols = [answer_symbol(value, answer_format) for value in range(answer_max + 1)]
    rows = []
    low, high = steps
    for depth in range(low, high + 1):
        seen: set[str] = set()
        for index in range(rows_per_step):
            rng = row_rng(GENERATOR, version, seed, split, depth, index)
            prompt, trail, asked = _problem(rng, depth, answer_max)
            while prompt in seen:  # no repeated problem within a depth
                prompt, trail, asked = _problem(rng, depth, answer_max)
            seen.add(prompt)
            rows.append(
                Row(
                    row_id=f"{split}_s{depth}_{index:05d}",
                    task="word_problem",
                    surface="word_problem",
                    depth=depth,
                    prompt=prompt,
                    answer=answer_symbol(trail[-1], answer_format),
                    path=[answer_symbol(value, answer_format) for value in trail],
                    symbols=symbols,
                    meta={"generator": GENERATOR, "version": version, "seed": seed, "split": split, "asked": asked},
                )
            )
    return rows
