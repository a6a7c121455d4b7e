"""Persistence in a protocol's own run (SPEC section 5): an arm read past its rows' depths labels each cell above
the diagonal (advance: the next hop of the row's own table; stay: the answer; ambiguous where the two coincide),
and persistence claims are judged from those cells. Labels and counts are recomputed here from the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models

PROTOCOL = f"""name: persistence-mini
version: 1
description: Rows of depth 1-2 run to 4 loops after an outcome-only anneal.
seed: 11
bases:
  tiny: {{source: {ROOT / "bases" / "tiny-base"}, dtype: float32, num_layers: 4}}
manifests:
  - {{id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 16, seed: 11, split: train}}
  - {{id: held, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 8, seed: 11, split: held}}
arms:
  - id: A
    kind: recurrent
    base: tiny
    surgery: {{split: [1, 3]}}
    bridge: {{kind: split, reentry: answer}}
    budget: {{kind: full_block}}
    stages:
      - {{id: install, objective: intermediate, manifest: train, steps: 4, batch_size: 8, optimizer: {{kind: adamw, lr: 1.0e-3}}, recurrence: {{kind: forced}}}}
      - {{id: anneal, objective: anneal, manifest: train, steps: 4, batch_size: 8, anneal_fraction: 0.5, optimizer: {{kind: adamw, lr: 1.0e-3}}, recurrence: {{kind: forced}}}}
    evaluation: {{manifests: [held], loops: [1, 2, 3, 4]}}
claims: [claims.yaml]
"""

CLAIMS = """protocol: persistence-mini
correction: none
claims:
  - {id: active, statement: Active cells hold the intermediate state., statistic: persistence, arm: A, manifest: held, cells: active, threshold: 0.0}
  - {id: advance, statement: Cells past the depth advance., statistic: persistence, arm: A, manifest: held, cells: advance, threshold: 0.0}
  - {id: stay, statement: Cells past the depth rarely stay., statistic: persistence, arm: A, manifest: held, cells: stay, threshold: 1.0, direction: at_most, requires: [active]}
"""


def _hop(table: dict, start: str, times: int) -> str:
    symbol = start
    for _ in range(times):
        symbol = table[symbol]
    return symbol


def test_cells_past_the_depth_are_labelled_from_the_rows_table_and_claimed(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = ledger_cli("run", str(tmp_path / "p.yaml"), "--db", db, "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    with open_store(db) as store:
        (manifest,) = [m for m in store.rows_of("manifests") if m["name"] == "held"]
        rows = {stored.row_id: json.loads(stored.canonical_json) for stored in store.manifest_rows(manifest["sha256"])}
        evidence = [e for e in store.rows_of("evidence", arm="A") if e["manifest_sha256"] == manifest["sha256"]]
    assert len(evidence) == 16 * 4
    expected = {"active": [0, 0], "advance": [0, 0], "stay": [0, 0]}
    for reading in evidence:
        row, loop = rows[reading["row_id"]], reading["loop"]
        detail = json.loads(reading["detail_json"]) if reading["detail_json"] else None
        if loop <= row["depth"]:
            assert not detail or "behavior" not in detail
            expected["active"][0] += reading["prediction"] == row["path"][loop]
            expected["active"][1] += 1
            continue
        advanced = _hop(row["table"], row["start"], loop)
        label = (
            "ambiguous"
            if advanced == row["answer"]
            else "advance"
            if reading["prediction"] == advanced
            else "stay"
            if reading["prediction"] == row["answer"]
            else "other"
        )
        assert detail["behavior"] == label, (reading["row_id"], loop)
        for kind in ("advance", "stay"):
            expected[kind][0] += label == kind
            expected[kind][1] += 1
    verified = ledger_cli("verify", str(tmp_path / "claims.yaml"), "--db", db, "--json")
    claims = {c["claim_id"]: c for c in json.loads(verified.stdout)["claims"]}
    for kind, (count, n) in expected.items():
        assert (claims[kind]["figures"]["count"], claims[kind]["figures"]["n"]) == (count, n), kind
        assert claims[kind]["outcome"] == "supported" and claims[kind]["integrity"] == "verified"
    assert expected["advance"][1] == 8 * 3 + 8 * 2  # depth 1: loops 2-4; depth 2: loops 3-4
