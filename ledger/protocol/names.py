"""Names that become keys: one visible name, one thing.

An arm, base, manifest, gate, claim, family or protocol name (and every reference to one, and every mapping
key) is matched by its code points, but read by its look. Two spellings that look alike would be two things
under one visible name: two multiplicity families the correction treats apart, an arm a claim cannot find. So
a ``KeyName`` is stored in NFC (``cafe`` + U+0301 and ``café`` are one key), and one a reader cannot read as it
is matched is refused: an invisible character (a zero-width space, a bidi control, a variation selector, a
space other than U+0020), a compatibility form of another character (the ligature U+FB01 for "fi", fullwidth
letters), or letters from more than one script (a Cyrillic 'а' among Latin letters). ``KeyNameMap[V]`` is a
mapping keyed by such names that also refuses two keys that are one name written two ways.

Left to the reader: a name wholly in another script that looks like a Latin one (Cyrillic "таре"), which
needs Unicode's confusables table.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator
from pydantic_core import PydanticCustomError

# Categories nothing visible belongs to: controls, format characters (zero-width joiners, bidi controls, the
# BOM), surrogates, private use, unassigned code points, line and paragraph separators.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

# Unicode's default-ignorable code points outside those categories (they render as nothing), and the braille
# blank: the combining grapheme joiner, the Hangul fillers, Khmer's inherent vowels, the Mongolian and the
# standard variation selectors.
_INVISIBLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0100, 0xE01EF),
)

# Scripts one language writes together in a single word (Unicode's UTS #39): a Japanese, Korean or Chinese
# name mixes these and is still one name to its reader. Latin joins none of them: U+4E00 (one) reads as a dash.
_WRITTEN_TOGETHER = (
    frozenset({"HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"HAN", "HANGUL"}),
    frozenset({"HAN", "BOPOMOFO"}),
)

# The first word of a character's Unicode name where it is not the script's own name.
_SCRIPT_OF_WORD = {"CJK": "HAN", "IDEOGRAPHIC": "HAN", "KATAKANA-HIRAGANA": "KATAKANA"}


def name_problem(name: str) -> str | None:
    """Why ``name`` (in NFC) cannot be a key a reader tells apart from every other, or None where it can."""
    if not name:
        return "a name cannot be empty"
    if name != name.strip():
        return f"{name!r} begins or ends with whitespace, which a reader cannot see"
    if name.isascii():  # the common case: only an ASCII control character can hide in it
        hidden = next((ch for ch in name if unicodedata.category(ch) == "Cc"), None)
        return None if hidden is None else _invisible(name, hidden)
    for ch in name:
        if _is_invisible(ch):
            return _invisible(name, ch)
        folded = unicodedata.normalize("NFKC", ch)
        if folded != ch:
            return (
                f"{name!r} holds {_described(ch)}, a compatibility form of {folded!r}: write {folded!r}, "
                "or the name reads as another"
            )
    return _mixed_scripts(name)


def _is_invisible(ch: str) -> bool:
    category = unicodedata.category(ch)
    if category in _INVISIBLE_CATEGORIES or (category == "Zs" and ch != " "):
        return True
    code = ord(ch)
    return any(low <= code <= high for low, high in _INVISIBLE_RANGES)


def _invisible(name: str, ch: str) -> str:
    if unicodedata.category(ch) == "Zs":
        return f"{name!r} holds {_described(ch)}, a space a reader cannot tell from U+0020"
    return f"{name!r} holds an invisible character, {_described(ch)}: a name must read as it is matched"


def _mixed_scripts(name: str) -> str | None:
    first: tuple[str, str] | None = None  # the first letter's script, and the letter
    scripts: set[str] = set()
    for ch in name:
        script = _script(ch)
        if script is None:
            continue
        first = first or (script, ch)
        scripts.add(script)
        if len(scripts) > 1 and not any(scripts <= together for together in _WRITTEN_TOGETHER):
            return (
                f"{name!r} mixes the {first[0].title()} and {script.title()} scripts ({_described(ch)} beside "
                f"{_described(first[1])}): a name is written in one script"
            )
    return None


def _script(ch: str) -> str | None:
    """The script of a letter or a non-ASCII digit (the first word of its Unicode name); None for everything
    shared between scripts: ASCII digits, punctuation, symbols, combining marks."""
    category = unicodedata.category(ch)
    if not (category.startswith("L") or (category == "Nd" and not ch.isascii())):
        return None
    words = unicodedata.name(ch, "").split()
    if not words or words[0] == "MODIFIER":  # a modifier letter (an apostrophe-like mark) is shared
        return None
    word = words[1] if words[0] == "EXTENDED" and len(words) > 1 else words[0]
    return _SCRIPT_OF_WORD.get(word, word.split("-")[0])


# What a code point with no Unicode name is, by its category.
_UNNAMED = {"Cc": "a control character", "Cs": "a surrogate", "Co": "a private-use character"}


def _described(ch: str) -> str:
    category = unicodedata.category(ch)
    return f"U+{ord(ch):04X} {unicodedata.name(ch, '') or _UNNAMED.get(category, 'an unassigned code point')}"


def key_name(value: str) -> str:
    """``value`` in NFC, or a refusal naming why it cannot be a key (a pydantic error: located by the loader)."""
    normal = unicodedata.normalize("NFC", value)
    problem = name_problem(normal)
    if problem is not None:
        raise PydanticCustomError("key_name", "{message}", {"message": problem})
    return normal


def _named_keys(value: Any) -> Any:
    """A mapping's keys as ``key_name`` stores them, refusing two that are one name written two ways (NFC would
    merge them silently). Checked here rather than by a ``KeyName`` key type, so that a refusal is located at
    the key itself (the field's path and the key, as every other located error)."""
    if not isinstance(value, dict):
        return value
    named: dict[Any, Any] = {}
    given: dict[str, str] = {}  # each stored key, as the mapping first wrote it
    for key, item in value.items():
        if isinstance(key, str):
            normal = unicodedata.normalize("NFC", key)
            problem = name_problem(normal)
            if problem is None and normal in given:
                problem = f"keys {given[normal]!a} and {key!a} are one name written two ways (one in NFC)"
            if problem is not None:
                raise PydanticCustomError("key_name", "{message}", {"message": problem, "at": [key]})
            given[normal], key = key, normal
        named[key] = item
    return named


# A user-chosen name that becomes a key (an id, a reference to one, a family or protocol name).
KeyName = Annotated[str, AfterValidator(key_name)]

V = TypeVar("V")
# A mapping keyed by user-chosen names (a protocol's bases, a stage's mixture, a claim file's families).
KeyNameMap = Annotated[dict[str, V], BeforeValidator(_named_keys)]
