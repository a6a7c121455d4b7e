"""How an arm reads a manifest's rows, for the run and the dry run alike."""

from __future__ import annotations

from typing import Any

from ledger.spec.manifests import GENERATORS


def read_rows(runtime: Any, arm: Any, manifest: Any, rows: list) -> list:
    """How an arm reads a manifest's rows: multiple choice once at loop 1, chains at every loop."""
    if GENERATORS[manifest.generator].reading == "choice":
        return runtime.choice_at_loop1(rows, arm.evaluation.batch_size)
    return runtime.evaluate(rows, arm.evaluation)


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
