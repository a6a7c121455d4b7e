"""Choosing depth in a protocol's own run: an arm read at loops 1..K under exit rules records each loop's
signals and marks the loop each rule stops at; adaptive_depth claims compare the chosen answer with the forced
one on the same rows. Every figure is recounted here from the stored readings and the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models

PROTOCOL = f"""name: depth-choice-mini
version: 1
description: Rows of depth 1-3 read at loops 1-5 under the KL and argmax exit rules and a supervised halting head.
seed: 12
bases:
  tiny: {{source: {ROOT / "bases" / "tiny-base"}, dtype: float32, num_layers: 4}}
manifests:
  - {{id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 16, seed: 12, split: train}}
  - {{id: held, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 8, seed: 12, split: held}}
arms:
  - id: A
    kind: recurrent
    base: tiny
    surgery: {{split: [1, 3]}}
    bridge: {{kind: split, reentry: answer}}
    budget: {{kind: full_block}}
    halting_head: {{max_loops: 5}}
    stages:
      - {{id: install, objective: intermediate, manifest: train, steps: 4, batch_size: 8, optimizer: {{kind: adamw, lr: 1.0e-3}}, recurrence: {{kind: forced}}}}
      - {{id: halt, objective: halting_supervised, manifest: train, steps: 6, batch_size: 8, optimizer: {{kind: adamw, lr: 5.0e-2}}}}
    evaluation: {{manifests: [held], loops: [1, 2, 3, 4, 5], exit_rules: [{{rule: kl}}, {{rule: argmax, threshold: 1}}, {{rule: halting}}]}}
claims: [claims.yaml]
"""

CLAIMS = """protocol: depth-choice-mini
correction: none
claims:
  - {id: kl_right_depth, statement: The KL rule stops at the row's depth on some rows., statistic: adaptive_depth, arm: A, manifest: held, rule: kl, measure: right_depth, share: 0.0}
  - {id: halting_right_depth, statement: The halting head stops at the row's depth on some rows., statistic: adaptive_depth, arm: A, manifest: held, rule: halting, measure: right_depth, share: 0.0}
  - {id: argmax_noninferior, statement: Stopping when the answer repeats costs at most 60 points., statistic: adaptive_depth, arm: A, manifest: held, rule: argmax, threshold: 1, measure: noninferior, margin: 0.6, requires: [kl_right_depth]}
"""


def _kl_exit(loops: list[dict]) -> int:
    return next((t for t, detail in enumerate(loops, 1) if detail["kl"] < 1e-3), len(loops))


def _argmax_exit(predictions: list) -> int:
    return next(
        (t for t in range(2, len(predictions) + 1) if predictions[t - 1] == predictions[t - 2]), len(predictions)
    )


def test_exit_rules_are_recorded_and_judged_against_forced_depth(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = ledger_cli("run", str(tmp_path / "p.yaml"), "--db", db, "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    with open_store(db) as store:
        (manifest,) = [m for m in store.rows_of("manifests") if m["name"] == "held"]
        rows = {stored.row_id: json.loads(stored.canonical_json) for stored in store.manifest_rows(manifest["sha256"])}
        evidence = [e for e in store.rows_of("evidence", arm="A") if e["manifest_sha256"] == manifest["sha256"]]
    assert len(evidence) == 24 * 5
    by_row: dict[str, list] = {}
    for reading in sorted(evidence, key=lambda e: (e["row_id"], e["loop"])):
        by_row.setdefault(reading["row_id"], []).append(reading)
    kl = {"right": 0, "loops": 0}
    halting = {"right": 0, "loops": 0}
    argmax = {"exit": 0, "forced": 0, "loops": 0}
    for row_id, reads in by_row.items():
        details = [json.loads(r["detail_json"]) for r in reads]
        predictions = [r["prediction"] for r in reads]
        depth, answer = rows[row_id]["depth"], rows[row_id]["answer"]
        chosen = _kl_exit(details)
        assert [t for t, d in enumerate(details, 1) if "kl<0.001" in d.get("exits", [])] == [chosen]
        kl["right"] += chosen == depth
        kl["loops"] += chosen
        chosen = next((t for t, d in enumerate(details, 1) if d["halt"] >= 0.5), 5)
        assert [t for t, d in enumerate(details, 1) if "halting>=0.5" in d.get("exits", [])] == [chosen]
        halting["right"] += chosen == depth
        halting["loops"] += chosen
        chosen = _argmax_exit(predictions)
        assert [t for t, d in enumerate(details, 1) if "argmax>=1" in d.get("exits", [])] == [chosen]
        argmax["exit"] += predictions[chosen - 1] == answer
        argmax["forced"] += predictions[depth - 1] == answer
        argmax["loops"] += chosen
    verified = ledger_cli("verify", str(tmp_path / "claims.yaml"), "--db", db, "--json")
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    claims = {c["claim_id"]: c for c in json.loads(verified.stdout)["claims"]}
    right = claims["kl_right_depth"]["figures"]
    assert (right["right_depth"], right["n"]) == (kl["right"], 24)
    assert right["mean_loops_used"] == pytest.approx(kl["loops"] / 24)
    assert right["mean_forced_loops"] == pytest.approx(2.0)
    assert right["compute_saved"] == pytest.approx(1 - kl["loops"] / 24 / 2.0)
    head = claims["halting_right_depth"]["figures"]
    assert (head["right_depth"], head["mean_loops_used"]) == (halting["right"], pytest.approx(halting["loops"] / 24))
    figures = claims["argmax_noninferior"]["figures"]
    assert (figures["exit_correct"], figures["forced_correct"]) == (argmax["exit"], argmax["forced"])
    assert figures["mean_loops_used"] == pytest.approx(argmax["loops"] / 24)
    assert 0 < figures["p_value"] <= 1
    for claim in claims.values():
        assert claim["integrity"] == "verified", claim
