"""The final reading of a row: which of an arm's readings of it is its answer.

One definition, ``FINAL_CASES``, read two ways: ``final_rank`` (Python, for readings in
memory: gates, the report) and ``final_rank_sql`` (SQLAlchemy Core, for the store's
reads). The auditor view ``v_final_readings`` (migration 0002) is a frozen copy of the
SQL; tests/store/test_final_reading.py checks that every reader gives the same rows.

In order of preference, a row's final reading is its reading at

1. loop = depth: a recurrent arm read at every loop up to its forced depth;
2. loop 0: an arm read once (a dense arm's generated text);
3. loop 1 of a depth-0 row: a guardrail row read through the base route.

Readings with no single right answer (``correct`` NULL, e.g. a loop above the diagonal)
are never final. Among repeats of the best case, the latest recorded one wins.

``arms/runtime.py`` keeps its own choice of the reading that carries a latency sample
(loop = depth, else the deepest loop run): arms sit below the store and may not import
it, and with forced loops that reading is the final one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import and_, case, or_
from sqlalchemy.sql.elements import ColumnElement


@dataclass(frozen=True)
class FinalCase:
    """A reading is in this case when its loop matches (None: the row's depth) and, if set, its depth does."""

    why: str
    loop: int | None
    depth: int | None = None

    def matches(self, depth: int, loop: int) -> bool:
        wanted_loop = depth if self.loop is None else self.loop
        return loop == wanted_loop and (self.depth is None or depth == self.depth)

    def sql(self, depth: ColumnElement, loop: ColumnElement) -> ColumnElement:
        condition = loop == (depth if self.loop is None else self.loop)
        return condition if self.depth is None else and_(condition, depth == self.depth)


FINAL_CASES: tuple[FinalCase, ...] = (
    FinalCase("recurrent arm at forced depth", loop=None),
    FinalCase("arm read once", loop=0),
    FinalCase("depth-0 row read at the base route", loop=1, depth=0),
)


def final_rank(depth: int, loop: int) -> int | None:
    """0 for the most preferred case, higher for later ones; None if this reading is never final."""
    for rank, final_case in enumerate(FINAL_CASES):
        if final_case.matches(depth, loop):
            return rank
    return None


def is_final_candidate(depth: int, loop: int, correct: bool | None) -> bool:
    return correct is not None and final_rank(depth, loop) is not None


def final_rank_sql(depth: ColumnElement, loop: ColumnElement) -> ColumnElement:
    """``CASE WHEN <case 0> THEN 0 WHEN <case 1> THEN 1 ... END`` (NULL: never final)."""
    return case(*[(final_case.sql(depth, loop), rank) for rank, final_case in enumerate(FINAL_CASES)])


def final_candidate_sql(depth: ColumnElement, loop: ColumnElement, correct: ColumnElement) -> ColumnElement:
    """The SQL predicate of ``is_final_candidate``."""
    return and_(correct.is_not(None), or_(*[final_case.sql(depth, loop) for final_case in FINAL_CASES]))


R = TypeVar("R")


def choose_final(readings: Iterable[R], depth_of: Mapping[str, int] | None = None) -> dict[str, R]:
    """row_id -> the final reading, from readings in recording order.

    A reading is any object with ``row_id``, ``loop`` and ``correct``, and ``depth`` unless
    ``depth_of`` maps row ids to depths (an arm's in-memory readings know no depth).
    """
    chosen: dict[str, tuple[int, Any]] = {}
    for reading in readings:
        row_id = reading.row_id  # type: ignore[attr-defined]
        depth = depth_of[row_id] if depth_of is not None else reading.depth  # type: ignore[attr-defined]
        if reading.correct is None:  # type: ignore[attr-defined]
            continue
        rank = final_rank(depth, reading.loop)  # type: ignore[attr-defined]
        if rank is None:
            continue
        current = chosen.get(row_id)
        if current is None or rank <= current[0]:  # a later repeat of the same case replaces an earlier one
            chosen[row_id] = (rank, reading)
    return {row_id: reading for row_id, (_, reading) in chosen.items()}
