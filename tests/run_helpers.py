"""Shared by the run tests: the protocols they run and `ledger` as a user calls it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "protocols" / "smoke.yaml"
PHASE_A = ROOT / "protocols" / "phaseA.yaml"


def ledger_cli(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def planted_regression(arm: str) -> dict[str, str]:
    """The environment of a ``ledger`` subprocess whose ARM regresses on Tier-1 (``fault_injection.py``)."""
    path = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    return {"LEDGER_PLUGINS": "fault_injection", "PYTHONPATH": path, "FAULT_TIER1_REGRESSION": arm}


def digest(db: Path) -> tuple[int, str]:
    from ledger.protocol.loader import load_protocol
    from ledger.run.records import evidence_digest
    from ledger.store import open_store

    with open_store(f"sqlite:///{db}") as store:
        return evidence_digest(store, load_protocol(SMOKE).sha256)
