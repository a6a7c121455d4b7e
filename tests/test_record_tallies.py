"""docs/results/tallies.md, every committed record's tally under the current claim rules beside its own, is what
docs/results/tallies_under_rules.py draws from the records as committed (and names what rules 2 withdraw)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_tallies_are_drawn_from_the_records():
    script = ROOT / "docs" / "results" / "tallies_under_rules.py"
    checked = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, "docs/results/tallies.md is stale: run docs/results/tallies_under_rules.py"
    text = (ROOT / "docs" / "results" / "tallies.md").read_text(encoding="utf-8")
    # the first command's record of version 5 (rules 1): its comparisons withdrawn, the variant counted apart
    row = next(line for line in text.splitlines() if line.startswith("| `phaseA-tiny-v5` |"))
    assert "variant (answer-only re-entry), counted apart" in row
    assert "possibly vacuous (no acquisition precondition): A_beats_B_overall_v5" in row
    assert "under the current claim rules: supported 4 (withdrawn: A_beats_B_overall_v5" in row
    # version 6, registered under rules 2: what they withdraw was never supported, and nothing is vacuous
    row = next(line for line in text.splitlines() if line.startswith("| `phaseA-tiny-v6` |"))
    assert row.count("supported: 4 of 12") == 2 and "possibly vacuous" not in row and "withdrawn" not in row
    # version 7, the paper's bridge over seeds: every claim on the paper's design, none on a variant
    row = next(line for line in text.splitlines() if line.startswith("| `phaseA-tiny` |"))
    assert row.count("supported: 8 of 10") == 2 and "variant" not in row and "withdrawn" not in row
    assert "departs: A_beats_B_tail_v7, A_frontier_ratio_v7" in row
