"""The run tests' shared reference: one uninterrupted run of the smoke protocol, made once
for the whole test session (the xdist workers share it through a lock) and only read."""

from __future__ import annotations

import json
import os
import time

import pytest
from filelock import FileLock
from run_helpers import SMOKE, ledger_cli


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """(folder, seconds the run took, its stdout). Tests copy it before changing anything."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every xdist worker's base temp lies in
    folder = root / "smoke-reference"
    with FileLock(str(root / "smoke-reference.lock")):
        record = folder / "reference.json"
        if not record.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            result = ledger_cli(
                "run", str(SMOKE), "--db", f"sqlite:///{folder / 'ledger.db'}", "--out", str(folder / "out"),
                "--no-progress",
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
            record.write_text(json.dumps({"elapsed": time.monotonic() - started, "stdout": result.stdout}))
    data = json.loads(record.read_text())
    return folder, data["elapsed"], data["stdout"]
