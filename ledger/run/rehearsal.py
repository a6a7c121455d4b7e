"""What a dry run changes in a run (``ledger.run.dry_run``): everything else runs as ``ledger run`` does."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rehearsal:
    """``bases``: base name -> (model, tokenizer) built by the dry run (random weights at the base's shape),
    recorded as a built-in base is; ``registration_rules``: False leaves out power and acquisition, which a
    handful of rows per manifest could never meet; ``narrow``: given an arm's runtime before a stage, lets the
    stage step only the part of its tensors this machine can hold and says so (None: it steps them all);
    ``progress``: told each line the run logs, as it logs it."""

    bases: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    registration_rules: bool = True
    narrow: Callable[[Any], str | None] | None = None
    progress: Callable[[str], None] | None = None

    def log_handlers(self) -> list[logging.Handler]:
        """Beside the run's log file: the handler that passes each line on to ``progress``."""
        return [_PassedOn(self.progress)] if self.progress is not None else []


class _PassedOn(logging.Handler):
    def __init__(self, progress: Callable[[str], None]):
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        self.progress(record.getMessage())
