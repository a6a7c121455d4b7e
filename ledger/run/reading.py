"""How an arm reads a manifest's rows, for the run and the dry run alike."""

from __future__ import annotations

from typing import Any

from ledger.protocol.manifests import GENERATORS


def read_rows(runtime: Any, arm: Any, manifest: Any, rows: list, progress: Any = None) -> list:
    """How an arm reads a manifest's rows, by its generator's reading: multiple choice as the manifest's
    ``choice_reading`` says (``arms.choice_reading``), chains at every loop, answers and next-token loss at every
    test recurrence (design M's sweep). ``progress(n)`` is told the rows each batch read."""
    reading = GENERATORS[manifest.generator].reading
    if reading == "choice":
        from arms.choice_reading import read_choices

        return read_choices(
            runtime,
            rows,
            arm.evaluation.batch_size,
            **manifest.choice_reading(),
            progress=progress,
        )
    if reading in ("answer", "loss"):
        return runtime.read_sweep(rows, arm.evaluation, reading, progress=progress)
    return runtime.evaluate(rows, arm.evaluation, progress=progress)


def reader_symbols(manifests) -> list[str]:
    """Every symbol any row of these manifests can ask for, in first-seen order: what a run's reader holds."""
    from ledger.reader.shared import row_symbols

    symbols: list[str] = []
    for manifest in manifests:
        for row in manifest.rows:
            for symbol in row_symbols(row):
                if symbol not in symbols:
                    symbols.append(symbol)
    return symbols
