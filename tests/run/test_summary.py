"""What `ledger run` shows at its end: the claims and their outcomes first, each naming its arms' bridge and
re-entry; then the arms, with their design; evaluation and gate bars that move while the arm reads."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ledger.audit.verify import ClaimVerdict
from ledger.cli import protocol_commands
from ledger.protocol.loader import load_protocol
from ledger.run.results import ArmOutcome, RunResult

ROOT = Path(__file__).resolve().parents[2]


def _summary(monkeypatch, protocol_file: str, verdicts: list[ClaimVerdict]) -> str:
    console = Console(width=1000, record=True, highlight=False)
    monkeypatch.setattr(protocol_commands, "out", console)
    protocol = load_protocol(ROOT / protocol_file)
    arms = [ArmOutcome(arm.id, "complete", accuracy={"eval": (3, 4)}) for arm in protocol.arms]
    result = RunResult(protocol, protocol.sha256, Path("runs/x"), arms, claims=verdicts)
    protocol_commands._print_run_summary(result)
    return console.export_text()


def test_the_summary_leads_with_the_claims_and_names_each_arms_bridge(monkeypatch):
    verdicts = [
        ClaimVerdict("c.yaml", "A_beats_B", "supported", "verified", "helped 9 / hurt 1", subjects=("A", "B")),
        ClaimVerdict("c.yaml", "A_tier1", "refuted", "verified", "p = 0.2", subjects=("A", "base:tiny")),
    ]
    text = _summary(monkeypatch, "protocols/phaseA-tiny-long.yaml", verdicts)
    assert text.index("preregistered claims: supported: 1 of 2") < text.index("phaseA-tiny-long (")
    claim_line = next(line for line in text.splitlines() if "A_beats_B" in line)
    assert "A (split [2, 6], split bridge, answer-only re-entry (not the paper's), full_block)" in claim_line
    assert "B (dense sft_direct)" in claim_line
    assert "base:tiny (the base, loop 1)" in next(line for line in text.splitlines() if "A_tier1" in line)
    arm_line = next(line for line in text.splitlines() if line.strip("│ ").startswith("E "))
    assert "answer-only re-entry (not the paper's), adapter r=8" in arm_line


def test_the_papers_bridge_is_named_as_the_papers(monkeypatch):
    text = _summary(monkeypatch, "protocols/phaseA-tiny-long-tuning.yaml", [])
    line = next(line for line in text.splitlines() if line.strip("│ ").startswith("A_large_cosine "))
    assert "split bridge, every position re-enters (the paper's)" in line
    line = next(line for line in text.splitlines() if line.strip("│ ").startswith("A_cosine_answer_norm "))
    assert "answer-only re-entry (not the paper's), state normalised (not the paper's)" in line
