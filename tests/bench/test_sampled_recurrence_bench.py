"""bench/sampled_recurrence.py: the quick run prints both parts, every (r, s) row, and the same figures as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "sampled_recurrence.py"


def test_quick_run_prints_every_row_and_its_json(tmp_path: Path) -> None:
    report_file = tmp_path / "sampled.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(report_file)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("## part 1") for line in lines) and any(line.startswith("## part 2") for line in lines)
    table = [[cell.strip() for cell in line.split("|")] for line in lines if line.count("|") == 6]
    assert table[0] == ["r", "s", "measured ms", "pred ms", "meas/pred", "meas/r1", "flops/r1"]
    assert [(int(row[0]), int(row[1])) for row in table[1:]] == [(1, 2), (2, 2), (4, 2)]
    assert all(float(row[2]) > 0 and float(row[3]) > 0 and float(row[4]) > 0 for row in table[1:])
    optimizers = {line.split("|")[0].strip() for line in lines if line.count("|") == 3}
    assert {"adamw", "muon"} <= optimizers and any(line.startswith("muon/adamw = ") for line in lines)

    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert [(row["r"], row["s"]) for row in report["steps"]] == [(1, 2), (2, 2), (4, 2)]
    once, per = report["counts"]["once"], report["counts"]["per_iteration"]
    # the FLOPs rule at r = 4, s = 2: two iterations with gradient, two forward-only, over r = 1
    four = report["steps"][2]["flops_over_r1"]
    assert four == pytest.approx((6 * (once + 2 * per) + 2 * 2 * per) / (6 * (once + per)))
    assert report["steps"][0]["flops_over_r1"] == 1.0
    assert report["optimizer_step_ms"]["muon"]["cpu"] > 0 and report["muon_over_adamw"] > 0
