"""The acquisition-retention boundary in a protocol's own run: an arm installs the forward operation, then learns
the reverse one with rehearsal of the forward one; a retention floor on the forward operation's lowest per-depth
accuracy is a hard stop, the checkpoint is failed, and a later protocol that continues from it is refused, naming
the gate. A keeps_all claim then reads every checkpoint of the lineage. Recounted here from the stored rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models

BASE = f"{{source: {ROOT / 'bases' / 'tiny-base'}, dtype: float32, num_layers: 4}}"
ARM_DESIGN = "    base: tiny\n    surgery: {split: [1, 3]}\n    bridge: {kind: split, reentry: answer}\n    budget: {kind: full_block}"
OPT = "optimizer: {kind: adamw, lr: 1.0e-3}, recurrence: {kind: forced}"

PROTOCOL = f"""name: retention-mini
version: 1
description: Forward installed, then the reverse operation with rehearsal, under a forward retention floor.
seed: 13
bases:
  tiny: {BASE}
manifests:
  - {{id: fwd_train, role: train, generator: rule_chasing, depths: [1, 2], rows_per_depth: 16, seed: 13, split: fwdtrain}}
  - {{id: rev_train, role: train, generator: rule_chasing, operation: reverse_inverse_table, depths: [1, 2], rows_per_depth: 16, seed: 13, split: revtrain}}
  - {{id: fwd_dev, role: dev, generator: rule_chasing, depths: [1, 2], rows_per_depth: 8, seed: 13, split: fwddev}}
  - {{id: rev_dev, role: dev, generator: rule_chasing, operation: reverse_inverse_table, depths: [1, 2], rows_per_depth: 8, seed: 13, split: revdev}}
arms:
  - id: R
    kind: recurrent
{ARM_DESIGN}
    stages:
      - {{id: install, objective: intermediate, manifest: fwd_train, steps: 4, batch_size: 8, {OPT}, gates: [fwd_measure, rev_measure]}}
      - {{id: reverse, objective: intermediate, mixture: {{rev_train: 1.0, fwd_train: 1.0}}, steps: 4, batch_size: 8, {OPT}, gates: [forward_floor, rev_measure]}}
    evaluation: {{manifests: [rev_dev]}}
  - id: C
    kind: recurrent
    init_from: R
{ARM_DESIGN}
    stages:
      - {{id: more, objective: intermediate, manifest: rev_train, steps: 2, batch_size: 8, {OPT}}}
    evaluation: {{manifests: [rev_dev]}}
  - id: D
    kind: recurrent
    init_from: C
{ARM_DESIGN}
    stages:
      - {{id: more, objective: intermediate, manifest: rev_train, steps: 2, batch_size: 8, {OPT}}}
    evaluation: {{manifests: [rev_dev]}}
gates:
  - {{id: fwd_measure, kind: retention_floor, manifest: fwd_dev, floor: 0.0, measure: min_per_depth, action: flag}}
  - {{id: rev_measure, kind: retention_floor, manifest: rev_dev, floor: 0.0, action: flag}}
  - {{id: forward_floor, kind: retention_floor, manifest: fwd_dev, floor: 0.93, measure: min_per_depth, action: stop, description: the paper's forward retention floor}}
claims: [claims.yaml]
"""

CLAIMS = """protocol: retention-mini
correction: none
claims:
  - id: nothing_keeps_both
    statement: No checkpoint keeps the reverse operation and the forward one at once.
    statistic: keeps_all
    arm: R
    manifest: rev_dev
    conditions:
      - {manifest: rev_dev, at_least: 0.9}
      - {manifest: fwd_dev, measure: min_per_depth, at_least: 0.93}
    requires: [{gate: fwd_measure, arm: R}]
"""


def _min_per_depth(readings: list[dict], rows: dict) -> float:
    tally: dict[int, list[int]] = {}
    for reading in readings:
        depth = rows[reading["row_id"]]["depth"]
        if reading["loop"] != depth:
            continue
        counts = tally.setdefault(depth, [0, 0])
        counts[0] += bool(reading["correct"])
        counts[1] += 1
    return min(right / n for right, n in tally.values())


@pytest.mark.long  # two runs end to end: the long call
def test_a_floor_breach_fails_the_checkpoint_and_a_later_protocol_cannot_continue_from_it(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    stopped = ledger_cli("run", str(tmp_path / "p.yaml"), "--db", db, "--out", str(tmp_path / "out"), "--no-progress")
    assert stopped.returncode == 3, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "hard_stop" in stopped.stdout and "forward_floor" in stopped.stdout
    # the arm that continues from the stopped one is not run, and the run still judges its claims
    # (two steps down the chain too: D continues from C, which never ran)
    assert stopped.stdout.count("skipped") == 2 and "preregistered claims: supported: 1 of 1" in stopped.stdout
    with open_store(db) as store:
        checkpoints = {row["stage"]: row for row in store.rows_of("checkpoints", arm="R")}
        failed = checkpoints["reverse"]
        gates = {row["gate"]: row for row in store.rows_of("gate_results", checkpoint_sha256=failed["sha256"])}
        (fwd,) = [m for m in store.rows_of("manifests") if m["name"] == "fwd_dev"]
        rows = {r.row_id: json.loads(r.canonical_json) for r in store.manifest_rows(fwd["sha256"])}
        readings = [
            e
            for e in store.rows_of("evidence", arm="R", checkpoint_sha256=failed["sha256"])
            if e["manifest_sha256"] == fwd["sha256"]
        ]
    assert failed["status"] == "failed" and checkpoints["install"]["status"] != "failed"
    floor = gates["forward_floor"]
    assert not floor["passed"] and floor["action"] == "stop"
    assert floor["value"] == pytest.approx(_min_per_depth(readings, rows)) and floor["value"] < 0.93
    # a later protocol that continues from the failed checkpoint is refused, naming the gate
    continued = (
        PROTOCOL.replace("name: retention-mini", "name: retention-continued")
        .replace("    base: tiny\n", f"    base: tiny\n    init_checkpoint: {failed['sha256']}\n", 1)
        .replace("claims: [claims.yaml]\n", "")
    )
    (tmp_path / "continued.yaml").write_text(continued, encoding="utf-8")
    refused = ledger_cli(
        "run", str(tmp_path / "continued.yaml"), "--db", db, "--out", str(tmp_path / "out2"), "--no-progress"
    )
    assert refused.returncode == 3, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "failed gate forward_floor" in refused.stderr and failed["sha256"][:12] in refused.stderr
    # every checkpoint of the lineage is judged against both operations at once
    verified = ledger_cli("verify", str(tmp_path / "claims.yaml"), "--db", db, "--json")
    (claim,) = json.loads(verified.stdout)["claims"]
    assert claim["outcome"] == "supported" and claim["integrity"] == "verified", claim
    assert claim["figures"]["checkpoints"] == 2 and claim["figures"]["keeping"] == 0
    assert claim["figures"]["table"][1]["values"][1] == pytest.approx(floor["value"])
