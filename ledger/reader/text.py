"""The first-completed-answer rule for a dense arm's generated text, and its streaming stop rule.

First-completed-answer rule (dense text)
----------------------------------------
Given a continuation and the row's symbols (its table's symbols, see
:func:`row_symbols`), in this order of priority:

1. **leading**: after optional whitespace the text starts with a standalone symbol
   (``" M\\n\\nThe function..."`` -> ``M``; ``"B."`` -> ``B``);
2. **marker**: else the first occurrence of ``answer``, optionally ``:`` or ``=``,
   then a standalone symbol; ``answer`` is case-insensitive and must itself be a
   whole word (``"Answer: B"``, ``"answer=B"``, ``"ANSWER B"``; not ``"answers B"``).
   An ``answer`` marker followed by a non-symbol is skipped and the search goes on;
3. **first symbol**: else the first standalone symbol anywhere in the text;
4. else nothing (``None``).

A symbol is *standalone* when it is not part of a longer word: the characters
before and after it are not word characters (``\\w``: letters, digits, ``_``).
So ``"Apple"`` does not contain the symbol ``A``, ``"BHuman"`` does not contain
``B``, but ``"B."``, ``"(B)"`` and ``"Ben's"`` contain ``B``/``B``/``Ben``.
Symbols are matched case-sensitively (``"a"`` is not ``A``; ``"ben"`` is not
``Ben``). Symbols that are not the row's are never read (rules 1-3 only accept the
row's symbols; rule 1 simply fails on a leading non-symbol word).

Streaming completeness (stop rule)
----------------------------------
``is_complete(text)`` is True only when the answer read from ``text`` can no longer
change whatever text is appended -- so a generator may stop as soon as it is True,
and ``read(prefix) == read(prefix + anything)`` holds for a complete prefix:

* rule 1 is final once the leading symbol is followed by at least one more
  character (which must be a non-word character, else it was no symbol):
  ``" B"`` is *not* complete (it may grow into ``" Ben"`` or ``" BHuman"``),
  ``" B\\n"`` and ``" B."`` are;
* rule 2 is final once rule 1 has definitively failed (the first word is complete
  and is no symbol, or the text starts with a non-word character) and the first
  marker match is followed by at least one more character;
* rule 3 is never final before the end of the text (a later ``answer: X`` would
  take priority), so it never stops a generation; the caller reads the finished
  text with :meth:`Reader.read_text` when generation ends (EOS or token budget).

In both cases the match is also not final while the text after the symbol's start
is still a proper prefix of a longer row symbol (``"B-"`` with symbols ``B`` and
``B-2``). (Assumes no symbol contains the word ``answer``.)
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

RULE_LEADING = "leading"
RULE_MARKER = "marker"
RULE_FIRST_SYMBOL = "first_symbol"


# ---------------------------------------------------------------------------
# Text rule (pure functions)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TextRead:
    """Outcome of the first-completed-answer rule on one text.

    ``symbol``: the symbol read, or None. ``rule``: which rule fired (``"leading"``,
    ``"marker"``, ``"first_symbol"``) or None. ``complete``: the read can no longer
    change if more text is appended (see the module docstring). ``end``: index in the
    text just after the symbol read (None when nothing was read).
    """

    symbol: str | None
    rule: str | None
    complete: bool
    end: int | None


@lru_cache(maxsize=256)
def _patterns(symbols: tuple[str, ...]) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    # Longest first, so that an alternation prefers "Benny" over "Ben" at one position.
    alternation = "|".join(re.escape(s) for s in sorted(symbols, key=lambda s: (-len(s), s)))
    sym = rf"(?<!\w)(?P<sym>{alternation})(?!\w)"
    leading = re.compile(rf"\s*{sym}")
    marker = re.compile(rf"(?<!\w)(?i:answer)(?!\w)\s*[:=]?\s*{sym}")
    anywhere = re.compile(sym)
    return leading, marker, anywhere


_FIRST_WORD = re.compile(r"\s*(\w*)")


def _normalise_symbols(symbols: Collection[str]) -> tuple[str, ...]:
    out = tuple(sorted({str(s) for s in symbols if str(s) != ""}))
    for s in out:
        if s != s.strip():
            raise ValueError(f"symbol {s!r} has surrounding whitespace")
    return out


def _may_grow(text: str, match: re.Match, symbols: tuple[str, ...]) -> bool:
    """Could appended text turn this match into a longer symbol (one that contains a
    non-word character, e.g. ``"B-2"`` after ``"B-"``)?"""
    tail = text[match.start("sym") :]
    sym = match.group("sym")
    return any(len(s) > len(tail) and s.startswith(tail) and s != sym for s in symbols)


def read_generated_text_detail(text: str, symbols: Collection[str]) -> TextRead:
    """The first-completed-answer rule with its provenance (rule fired, completeness)."""
    syms = _normalise_symbols(symbols)
    if not syms or not text:
        return TextRead(None, None, False, None)
    leading, marker, anywhere = _patterns(syms)
    n = len(text)

    # Rule 1: a leading standalone symbol.
    m = leading.match(text)
    if m:
        end = m.end("sym")
        return TextRead(m.group("sym"), RULE_LEADING, end < n and not _may_grow(text, m, syms), end)
    # Has rule 1 definitively failed, or could appending text still make it fire?
    w = _FIRST_WORD.match(text)
    assert w is not None  # r"\s*(\w*)" matches every string, the empty one too
    leading_undecided = w.end() == n  # text is whitespace + (possibly partial) first word

    # Rule 2: the first "answer[:=]? X" with X a row symbol.
    m = marker.search(text)
    if m:
        end = m.end("sym")
        complete = (not leading_undecided) and end < n and not _may_grow(text, m, syms)
        return TextRead(m.group("sym"), RULE_MARKER, complete, end)

    # Rule 3: the first standalone symbol anywhere (never final before the end).
    m = anywhere.search(text)
    if m:
        return TextRead(m.group("sym"), RULE_FIRST_SYMBOL, False, m.end("sym"))
    return TextRead(None, None, False, None)


def read_generated_text(text: str, symbols: Collection[str]) -> str | None:
    """Read a dense arm's generated text by the first-completed-answer rule.

    ``symbols`` is the row's answer vocabulary (its table's symbols). Returns the
    symbol read, or None. See the module docstring for the exact rule.
    """
    return read_generated_text_detail(text, symbols).symbol


def is_complete_answer(text: str, symbols: Collection[str]) -> bool:
    """True once ``text`` holds a complete answer that no appended text can change.

    Usable as a generation stopping criterion; see the module docstring.
    """
    return read_generated_text_detail(text, symbols).complete


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------


def row_symbols(row: Any) -> list[str]:
    """A row's answer vocabulary: ``row.symbols``, then any table key or value not yet
    listed (in table order). For a multiple-choice row these are its choice labels."""
    ordered: list[Any] = list(getattr(row, "symbols", None) or ())
    table = getattr(row, "table", None)
    if table:
        for pair in table.items():
            ordered.extend(pair)
    return [s if isinstance(s, str) else str(s) for s in dict.fromkeys(ordered)]
