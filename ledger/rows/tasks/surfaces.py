"""Surfaces: how one rule-chasing problem (table, start, depth) becomes prompt text.

A renderer receives the table in its display (shuffled) order, the start symbol and the
depth, and returns the prompt WITHOUT the trailing ``"\\nAnswer:"``: the shared reader
appends that, the same way for every surface and arm.

- ``symbolic``: the paper's exact text (reproduces the 1,792 released Phase A
  questions byte for byte).
- ``relay``: "Ben always passes the key to Max." sentences, then a question in days.
- ``pointer``: "Ben's note points to Max." sentences, then a question in hops.

The display order is the table's insertion order unless ``order`` is given. Rows keep
it in ``meta["order"]`` because canonical JSON sorts the table's keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "DEFAULT_ALPHABET",
    "SURFACES",
    "render",
    "render_pointer",
    "render_relay",
    "render_symbolic",
]


def _ordered_items(table: Mapping[str, str], order: Sequence[str] | None) -> list[tuple[str, str]]:
    if order is None:
        return list(table.items())
    order = list(order)
    if len(order) != len(table) or set(order) != set(table):
        raise ValueError("order must list every key of the table exactly once")
    return [(key, table[key]) for key in order]


def _check(table: Mapping[str, str], start: str, depth: int) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be a non-negative int, got {depth!r}")
    if start not in table:
        raise ValueError(f"start {start!r} has no rule in the table")


def render_symbolic(table: Mapping[str, str], start: str, depth: int, order: Sequence[str] | None = None) -> str:
    """The paper's rendering, byte for byte (including its "1 times")."""
    _check(table, start, depth)
    lines = "".join(f"{key} -> {value}\n" for key, value in _ordered_items(table, order))
    return (
        "You are given a finite function f as a shuffled lookup table.\n"
        "Function table:\n"
        f"{lines}"
        f"\nStart value: {start}\n"
        f"Apply f exactly {depth} times.\n"
        "What is the final value?"
    )


def _plural(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"


def render_relay(table: Mapping[str, str], start: str, depth: int, order: Sequence[str] | None = None) -> str:
    """Key-passing sentences; one day is one application of the rule."""
    _check(table, start, depth)
    lines = []
    for giver, receiver in _ordered_items(table, order):
        if giver == receiver:
            lines.append(f"{giver} always keeps the key.")
        else:
            lines.append(f"{giver} always passes the key to {receiver}.")
    return (
        "A key is passed around a group of people. The passing rules are:\n"
        + "\n".join(lines)
        + f"\n\n{start} has the key on day 0. Each day, whoever has the key passes it according to the rules.\n"
        f"After {_plural(depth, 'day', 'days')}, who has the key?"
    )


def render_pointer(table: Mapping[str, str], start: str, depth: int, order: Sequence[str] | None = None) -> str:
    """Note-following sentences; one hop is one application of the rule."""
    _check(table, start, depth)
    lines = [f"{owner}'s note points to {target}." for owner, target in _ordered_items(table, order)]
    return (
        "Each person has a note that points to one person:\n"
        + "\n".join(lines)
        + f"\n\nStart at {start}'s note and follow the notes exactly {_plural(depth, 'time', 'times')}.\n"
        "Whose note do you reach?"
    )


Renderer = Callable[..., str]

SURFACES: dict[str, Renderer] = {
    "symbolic": render_symbolic,
    "relay": render_relay,
    "pointer": render_pointer,
}

#: The alphabet a surface uses when a generator is not given one.
DEFAULT_ALPHABET: dict[str, str] = {
    "symbolic": "N16",
    "relay": "names",
    "pointer": "names",
}


def render(surface: str, table: Mapping[str, str], start: str, depth: int, order: Sequence[str] | None = None) -> str:
    """Render with the named surface; ``ValueError`` for an unknown surface."""
    try:
        renderer = SURFACES[surface]
    except KeyError:
        raise ValueError(f"unknown surface {surface!r}; known surfaces: {', '.join(SURFACES)}") from None
    return renderer(table, start, depth, order)
