"""Named symbol alphabets for rule chasing.

- ``N16``: the letters A-P (the paper's Phase A alphabet).
- ``N24``: the letters A-X (the paper's N24 runs).
- ``names``: 24 short, common English first names for the natural surfaces
  ("Ben always passes the key to Max."). They are chosen to be ordinary words
  that BPE tokenizers usually keep as one token after a space, and no name is a
  prefix of another, so a reader that scores or parses the first token of an
  answer cannot confuse two of them.
- ``names16``: the first 16 of ``names`` (a natural-surface counterpart of N16).

An alphabet is an ordered tuple of distinct, non-empty strings; its order is the
canonical order stored in ``Row.symbols``.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Iterable

__all__ = ["ALPHABETS", "N16", "N24", "NAMES", "NAMES16", "alphabet_name", "resolve_alphabet"]

N16: tuple[str, ...] = tuple(string.ascii_uppercase[:16])  # A-P
N24: tuple[str, ...] = tuple(string.ascii_uppercase[:24])  # A-X

NAMES: tuple[str, ...] = (
    "Ben",
    "Max",
    "Eve",
    "Kai",
    "Sam",
    "Tom",
    "Amy",
    "Joe",
    "Dan",
    "Tim",
    "Bob",
    "Jim",
    "Ann",
    "Ted",
    "Leo",
    "Ray",
    "Jack",
    "Kate",
    "Jane",
    "Paul",
    "Mark",
    "John",
    "Emma",
    "Lucy",
)
NAMES16: tuple[str, ...] = NAMES[:16]

ALPHABETS: dict[str, tuple[str, ...]] = {
    "N16": N16,
    "N24": N24,
    "names": NAMES,
    "names16": NAMES16,
}


def resolve_alphabet(name_or_list: str | Iterable[str]) -> tuple[str, ...]:
    """Return the alphabet named ``name_or_list``, or validate an explicit list of symbols.

    Raises ``ValueError`` for an unknown name, an empty alphabet, a non-string or empty
    symbol, a symbol with surrounding whitespace or a line break, or a duplicate.
    """
    if isinstance(name_or_list, str):
        try:
            return ALPHABETS[name_or_list]
        except KeyError:
            known = ", ".join(sorted(ALPHABETS))
            raise ValueError(
                f"unknown alphabet {name_or_list!r}; known alphabets: {known} (or pass an explicit list of symbols)"
            ) from None
    if isinstance(name_or_list, dict):
        raise ValueError("an alphabet is a name or a list of symbols, not a mapping")
    symbols = tuple(name_or_list)
    if not symbols:
        raise ValueError("an alphabet needs at least one symbol")
    for symbol in symbols:
        if not isinstance(symbol, str) or not symbol:
            raise ValueError(f"alphabet symbols must be non-empty strings, got {symbol!r}")
        if symbol != symbol.strip() or "\n" in symbol or "\r" in symbol:
            raise ValueError(f"alphabet symbol {symbol!r} has surrounding whitespace or a line break")
    counts = Counter(symbols)
    duplicates = sorted(s for s, n in counts.items() if n > 1)
    if duplicates:
        raise ValueError(f"alphabet has duplicate symbols: {', '.join(map(repr, duplicates))}")
    return symbols


def alphabet_name(symbols: Iterable[str]) -> str | None:
    """The registered name of an alphabet given as symbols (same order), or None."""
    symbols = tuple(symbols)
    for name, alphabet in ALPHABETS.items():
        if alphabet == symbols:
            return name
    return None
