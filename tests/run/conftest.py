"""The run tests' shared reference: one uninterrupted run of the smoke protocol."""

from __future__ import annotations

import time

import pytest
from run_helpers import SMOKE, ledger_cli


@pytest.fixture(scope="package")
def reference(tmp_path_factory):
    """One uninterrupted run of the smoke protocol (timed, for the SIGKILL test); once per worker."""
    folder = tmp_path_factory.mktemp("reference")
    started = time.monotonic()
    result = ledger_cli(
        "run", str(SMOKE), "--db", f"sqlite:///{folder / 'ledger.db'}", "--out", str(folder / "out"), "--no-progress"
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    return folder, elapsed, result.stdout
