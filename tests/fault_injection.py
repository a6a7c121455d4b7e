"""Fault injection for the hard-stop tests: a ledger plugin that only the tests load
(``run_helpers.planted_regression``); never imported in a test's own process.

``LEDGER_PLUGINS=fault_injection`` with ``tests/`` on ``PYTHONPATH``, and ``FAULT_TIER1_REGRESSION=ARM``:
ARM's readings of the guardrail (Tier-1) manifests come back wrong, as from a model that lost its general
ability. Evaluation manifests and every other arm read as they are. The product has no such switch: the run
records ``LEDGER_PLUGINS`` with its environment, so a run made with this plugin says so.
"""

from __future__ import annotations

import os

from ledger.run.runner import Runner

_read = Runner.evaluate_rows


def _evaluate_rows(self, runtime, arm, manifest_id, rows, progress=None):
    readings = _read(self, runtime, arm, manifest_id, rows, progress)
    planted = os.environ.get("FAULT_TIER1_REGRESSION")
    if arm.id == planted and self.protocol.manifest(manifest_id).role == "guardrail":
        for reading in readings:
            reading.correct = False
            reading.prediction = None
    return readings


Runner.evaluate_rows = _evaluate_rows  # type: ignore[method-assign]
