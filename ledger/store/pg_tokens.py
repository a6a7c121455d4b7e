"""PostgreSQL's lexical rules, as far as ``ledger query`` needs them to see what a statement calls.

A name hidden in a comment or a string literal is not a call, and a call cannot be hidden from the check by
writing it where a simpler reader would see a string or a comment: comments (``--`` and nested ``/* */``),
string literals ('' doubled; ``E'..'`` with backslash escapes; a string continued on the next line keeps its
kind), dollar quoting (``$tag$ .. $tag$``), quoted identifiers ("" doubled) and names that contain ``$`` are read
as the server reads them (``src/backend/parser/scan.l``), with ``standard_conforming_strings`` on, which the
read-only transaction sets. Input the server would refuse to parse (an unterminated string or comment) ends at
the end of the text: nothing in it runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME = "name"  # an identifier, quoted or not; text folded to lower case
UNICODE_NAME = "unicode_name"  # U&"..": an identifier spelt with escapes
STRING = "string"  # any string literal or dollar-quoted text; text is not kept
NUMBER = "number"
PARAMETER = "parameter"  # $1
SYMBOL = "symbol"  # one character of punctuation or an operator


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


_SPACE = " \t\n\r\f\v"
_NAME_START = r"A-Za-z_\x80-\U0010FFFF"
_NAME = re.compile(rf"[{_NAME_START}][{_NAME_START}0-9$]*")
_DOLLAR_TAG = re.compile(rf"\$(?:[{_NAME_START}][{_NAME_START}0-9]*)?\$")
_NEWLINE = re.compile(r"[\n\r]")
_PARAMETER = re.compile(r"\$[0-9]+")
_NUMBER = re.compile(r"(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?")
# Between two string literals, a line break (and optional spaces and -- comments) makes them one literal, read in
# the first one's mode: E'a'<newline>'\'' is one E string (scan.l's quotecontinue).
_QUOTE_CONTINUE = re.compile(r"[ \t\f]*(?:--[^\n\r]*)?[\n\r](?:[ \t\n\r\f\v]|--[^\n\r]*[\n\r])*'")


def _string_end(sql: str, start: int, *, backslashes: bool) -> int:
    """The index after a string literal whose opening quote is at ``start``."""
    i = start + 1
    while i < len(sql):
        char = sql[i]
        if (backslashes and char == "\\") or sql.startswith("''", i):  # an escaped character, a doubled quote
            i += 2
        elif char == "'":
            following = _QUOTE_CONTINUE.match(sql, i + 1)
            if following is None:
                return i + 1
            i = following.end()
        else:
            i += 1
    return len(sql)


def _quoted_end(sql: str, start: int) -> int:
    """The index after a quoted identifier whose opening ``"`` is at ``start``."""
    i = start + 1
    while i < len(sql):
        if sql.startswith('""', i):
            i += 2
        elif sql[i] == '"':
            return i + 1
        else:
            i += 1
    return len(sql)


def _block_comment_end(sql: str, start: int) -> int:
    """The index after a ``/* */`` comment at ``start``; PostgreSQL's block comments nest."""
    depth, i = 0, start
    while i < len(sql):
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return len(sql)


def tokens(sql: str) -> list[Token]:
    """The tokens of ``sql`` as PostgreSQL reads them, without comments or whitespace."""
    found: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        char, two = sql[i], sql[i : i + 2]
        three = sql[i : i + 3].upper()
        if char in _SPACE:
            i += 1
        elif two == "--":
            newline = _NEWLINE.search(sql, i)
            i = newline.end() if newline else n
        elif two == "/*":
            i = _block_comment_end(sql, i)
        elif two in ("E'", "e'"):
            i = _string_end(sql, i + 1, backslashes=True)
            found.append(Token(STRING, ""))
        elif three == "U&'":
            i = _string_end(sql, i + 2, backslashes=False)
            found.append(Token(STRING, ""))
        elif three == 'U&"':
            end = _quoted_end(sql, i + 2)
            found.append(Token(UNICODE_NAME, sql[i:end]))
            i = end
        elif char == "'":
            i = _string_end(sql, i, backslashes=False)
            found.append(Token(STRING, ""))
        elif char == '"':
            end = _quoted_end(sql, i)
            # folded like an unquoted name: a check that compares names then errs towards refusing
            found.append(Token(NAME, sql[i + 1 : end - 1].replace('""', '"').lower()))
            i = end
        elif char == "$" and (match := _PARAMETER.match(sql, i)):
            found.append(Token(PARAMETER, match.group(0)))
            i = match.end()
        elif char == "$" and (match := _DOLLAR_TAG.match(sql, i)):
            close = sql.find(match.group(0), match.end())
            i = n if close < 0 else close + len(match.group(0))
            found.append(Token(STRING, ""))
        elif match := _NAME.match(sql, i):
            found.append(Token(NAME, match.group(0).lower()))
            i = match.end()
        elif match := _NUMBER.match(sql, i):
            found.append(Token(NUMBER, match.group(0)))
            i = match.end()
        else:
            found.append(Token(SYMBOL, char))
            i += 1
    return found
