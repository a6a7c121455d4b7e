"""What an arm's evaluation returns: one reading per row and loop (``Reading``), and the helpers every runtime's
evaluation shares."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Tick = Callable[[int], None] | None  # told how many rows a batch of an evaluation read


@dataclass
class Reading:
    """One arm's reading of one row at one loop (loop 0: read once, e.g. generated text)."""

    row_id: str
    loop: int
    prediction: str | None
    correct: bool | None
    margin: float | None = None
    latency_ms: float | None = None
    tokens_generated: int | None = None
    text: str | None = None
    detail: dict | None = None  # what else the reading measured (a text row's nats and tokens)


def _tick(progress: Tick, n: int) -> None:
    if progress is not None:
        progress(n)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
