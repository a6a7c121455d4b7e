"""A run's progress bars: rich on the terminal, a line in run.log every tenth of a stage."""

from __future__ import annotations

import logging

log = logging.getLogger("ledger.run")


class Progress:
    """A rich progress bar (steps/s, loss, ETA) that also writes to run.log."""

    def __init__(self, label: str, total: int, *, enabled: bool, show_loss: bool):
        self.label, self.total, self.enabled, self.show_loss = label, total, enabled, show_loss
        self.done = 0

    def __enter__(self):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class Speed(ProgressColumn):
            def render(self, task):
                return Text(f"{task.speed:.2f} it/s" if task.speed else "- it/s")

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            Speed(),
            TextColumn("{task.fields[loss]}"),
            TimeRemainingColumn(),
            disable=not self.enabled,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task(self.label, total=self.total, loss="")
        return self.advance

    def advance(self, n: int = 1, loss: float | None = None) -> None:
        self.done += n
        fields = {"loss": f"loss {loss:.4f}"} if loss is not None and self.show_loss else {}
        self.progress.update(self.task, advance=n, **fields)
        if loss is not None and (self.done % max(1, self.total // 10) == 0 or self.done == self.total):
            log.info("%s step %d/%d loss %.5f", self.label, self.done, self.total, loss)

    def __exit__(self, *exc):
        self.progress.stop()
        return False
