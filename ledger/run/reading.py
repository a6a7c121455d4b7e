"""How an arm reads a manifest's rows, for the run and the dry run alike."""

from __future__ import annotations

from typing import Any

from ledger.spec.manifests import GENERATORS


def read_rows(runtime: Any, arm: Any, manifest: Any, rows: list) -> list:
    """How an arm reads a manifest's rows: multiple choice once at loop 1, chains at every loop."""
    if GENERATORS[manifest.generator].reading == "choice":
        return runtime.choice_at_loop1(rows, arm.evaluation.batch_size)
    return runtime.evaluate(rows, arm.evaluation)
