"""Persistence claims: a release's cell labels imported and checked, and a protocol's claim on cells above the
diagonal refused while its arm never reads a row past its depth (tests/run/test_persistence_run.py runs one)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ledger.cli.main import main
from ledger.protocol.check import claim_problems
from ledger.protocol.claims import ClaimFile
from ledger.protocol.loader import load_protocol

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference" / "recurrent-qwen-svgd"

MAPPING = """\
release: persistence-part
source: the depth-1 rows of the split-bridge paper's persistence file
root: data
manifests:
  - id: persistence
    file: cells.jsonl
    task: rule_chasing
    surface: symbolic
    fields: {row_id: id, answer: target, depth: depth}
    symbols_from: scores
    where: {forced_loop_count: $depth}
predictions:
  - {arm: A_anneal, manifest: persistence, file: cells.jsonl, prediction: prediction, loop: forced_loop_count, target: target, scores: scores, behavior: {field: above_diagonal_behavior, values: VALUES}}
"""


def _release(folder: Path, values: str) -> Path:
    assert REFERENCE.is_dir(), f"the released reference data is missing: expected it at {REFERENCE}"
    (folder / "data").mkdir()
    with (REFERENCE / "persistence" / "anneal_heldout_active_rows.jsonl").open(encoding="utf-8") as lines:
        cells = [line for line in lines if json.loads(line)["depth"] == 1]
    (folder / "data" / "cells.jsonl").write_text("".join(cells), encoding="utf-8")
    (folder / "release.yaml").write_text(MAPPING.replace("VALUES", values), encoding="utf-8")
    return folder / "release.yaml"


def test_a_cell_label_the_mapping_does_not_name_is_one_located_line(tmp_path, capsys):
    mapping = _release(tmp_path, "{iterate: advance, hold: stay}")  # 'other' left out
    db = tmp_path / "ledger.db"
    assert main(["import", str(mapping), "--db", f"sqlite:///{db}"]) == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert "cells.jsonl:" in message and "'above_diagonal_behavior' is 'other'" in message
    assert "not one of the mapped labels (hold, iterate)" in message
    if db.exists():  # nothing half-imported
        connection = sqlite3.connect(db)
        try:
            assert connection.execute("SELECT COUNT(*) FROM evidence").fetchone() == (0,)
        finally:
            connection.close()


def test_the_labels_are_imported_with_their_cells(tmp_path, capsys):
    mapping = _release(tmp_path, "{iterate: advance, hold: stay, other: other}")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert main(["import", str(mapping), "--db", db]) == 0
    capsys.readouterr()
    assert (
        main(["query", "SELECT loop, detail_json FROM evidence WHERE loop > 1 LIMIT 1", "--db", db, "--format", "json"])
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert json.loads(row["detail_json"])["behavior"] in {"advance", "stay", "other"}


def test_a_persistence_claim_needs_an_arm_read_past_its_rows_depths():
    protocol = load_protocol(ROOT / "protocols" / "phaseA.yaml")
    claims = ClaimFile.model_validate(
        {
            "protocol": "phaseA",
            "correction": "none",
            "claims": [
                {
                    "id": "persists",
                    "statement": "s",
                    "statistic": "persistence",
                    "arm": "A",
                    "manifest": "persistence",
                    "cells": "advance",
                    "threshold": 0.9,
                }
            ],
        }
    )
    problems = claim_problems(claims, protocol)
    assert any("never reads a row past its depth" in message for _, message in problems)  # phaseA: loops forced
    active = claims.model_copy(update={"claims": [claims.claims[0].model_copy(update={"cells": "active"})]})
    assert not [message for _, message in claim_problems(active, protocol) if "past its depth" in message]
