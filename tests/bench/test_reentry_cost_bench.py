"""bench/reentry_cost.py: a small run prints, for both shapes, every variant's ratio and the equivalence checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "reentry_cost.py"


def test_a_small_run_prints_both_shapes_side_by_side() -> None:
    args = ["--loops", "2", "6", "--batches", "2", "--repeats", "1", "--hidden", "128", "--seq", "16"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("## tiny protocol") for line in lines) == 1
    assert sum(line.startswith("## Qwen2.5-0.5B layout") for line in lines) == 1
    rows = [[cell.strip() for cell in line.split("|")] for line in lines if line.count("|") == 8]
    header, body = rows[0], [row for row in rows if row[0].isdigit()]
    assert header[:4] == ["T", "(1+T)/2", "theory", "cached"] and header[-2:] == ["lora/full", "merged/full"]
    assert [int(row[0]) for row in body] == [2, 6, 2, 6] and all(float(cell) > 0 for row in body for cell in row[1:])
    diffs = [float(line.rsplit("=", 1)[1]) for line in lines if "max |diff|" in line]
    assert len(diffs) == 4 and max(diffs) < 1e-4  # cached == uncached, merged == unmerged, to fp32 rounding
