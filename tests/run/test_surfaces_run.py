"""Natural surfaces and transfer in a protocol's own run: a symbolic-trained arm read zero-shot on relay and
pointer rows; a language stage on relay rows continued from it (installed) and from a fresh surgery (the same
budget); paired claims per step on the same rows (a family, Holm-corrected) and a trend across the checkpoints of
one run. Every figure is recounted here from the stored readings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

pytestmark = [pytest.mark.models, pytest.mark.long]  # CI runs it: `pytest -m long` (beside the e2e runs)

DESIGN = "surgery: {{split: [1, 3]}}\n    bridge: {{kind: split, reentry: answer}}\n    budget: {{kind: full_block}}"
LANGUAGE = (
    "{{id: language, objective: intermediate, manifest: relay_train, steps: 6, batch_size: 8, checkpoint_every: 2, "
    "optimizer: {{kind: adamw, lr: 1.0e-3}}, recurrence: {{kind: forced}}}}"
)
PROTOCOL = f"""name: surfaces-mini
version: 1
description: Zero-shot natural surfaces, language training, and transfer of an installed mechanism.
seed: 14
bases:
  tiny: {{{{source: {ROOT / "bases" / "tiny-base"}, dtype: float32, num_layers: 4}}}}
manifests:
  - {{{{id: sym_train, role: train, generator: rule_chasing, depths: [1, 2], rows_per_depth: 16, seed: 14, split: symtrain}}}}
  - {{{{id: relay_train, role: train, generator: rule_chasing, surface: relay, alphabet: names, distractors: false, depths: [1, 2], rows_per_depth: 16, seed: 14, split: relaytrain}}}}
  - {{{{id: relay_eval, role: eval, generator: rule_chasing, surface: relay, alphabet: names, distractors: false, depths: [1, 3], rows_per_depth: 8, seed: 14, split: relaytest}}}}
  - {{{{id: pointer_eval, role: eval, generator: rule_chasing, surface: pointer, alphabet: names, distractors: false, depths: [1, 3], rows_per_depth: 8, seed: 14, split: pointertest}}}}
arms:
  - id: A
    kind: recurrent
    base: tiny
    {DESIGN}
    stages:
      - {{{{id: install, objective: intermediate, manifest: sym_train, steps: 4, batch_size: 8, optimizer: {{{{kind: adamw, lr: 1.0e-3}}}}, recurrence: {{{{kind: forced}}}}}}}}
    evaluation: {{{{manifests: [relay_eval, pointer_eval]}}}}
  - id: L
    kind: recurrent
    base: tiny
    init_from: A
    {DESIGN}
    stages:
      - {LANGUAGE}
    evaluation: {{{{manifests: [relay_eval]}}}}
  - id: T
    kind: recurrent
    base: tiny
    {DESIGN}
    stages:
      - {LANGUAGE}
    evaluation: {{{{manifests: [relay_eval]}}}}
claims: [claims.yaml]
""".format()

CLAIMS = """protocol: surfaces-mini
correction: none
families:
  transfer: {correction: holm, members: [step2, step4, step6]}
claims:
  - {id: zero_shot_relay, statement: Zero-shot relay accuracy., statistic: accuracy, arm: A, manifest: relay_eval, threshold: 0.0}
  - {id: deep_relay, statement: Deepest relay rows after language training., statistic: accuracy, arm: L, manifest: relay_eval, rows: {depths: [3, 3]}, threshold: 0.0}
  - {id: mean_trend, statement: Relay accuracy across the language stage., statistic: checkpoint_trend, arm: L, manifest: relay_eval, direction: rises}
  - {id: step2, statement: Installed beats fresh at step 2., statistic: paired_exact, arms: [L, T], manifest: relay_eval, at_step: 2, family: transfer}
  - {id: step4, statement: Installed beats fresh at step 4., statistic: paired_exact, arms: [L, T], manifest: relay_eval, at_step: 4, family: transfer}
  - {id: step6, statement: Installed beats fresh at step 6., statistic: paired_exact, arms: [L, T], manifest: relay_eval, at_step: 6, family: transfer}
"""


def test_surfaces_transfer_and_trends_are_recounted_from_the_rows(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = ledger_cli("run", str(tmp_path / "p.yaml"), "--db", db, "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open_store(db) as store:
        manifests = {m["name"]: m["sha256"] for m in store.rows_of("manifests")}
        rows = {r.row_id: json.loads(r.canonical_json) for r in store.manifest_rows(manifests["relay_eval"])}
        checkpoints = {arm: store.rows_of("checkpoints", arm=arm) for arm in ("A", "L", "T")}
        evidence = {arm: store.rows_of("evidence", arm=arm) for arm in ("A", "L", "T")}

    def final(arm: str, checkpoint: str, manifest: str = "relay_eval") -> dict[str, bool]:
        return {
            e["row_id"]: bool(e["correct"])
            for e in evidence[arm]
            if e["checkpoint_sha256"] == checkpoint
            and e["manifest_sha256"] == manifests[manifest]
            and e["loop"] == rows_of(manifest)[e["row_id"]]["depth"]
        }

    def rows_of(manifest: str) -> dict:
        return (
            rows
            if manifest == "relay_eval"
            else {e["row_id"]: {"depth": int(e["row_id"].split("_d")[1][:2])} for e in evidence["A"]}
        )

    def at_step(arm: str, step: int) -> str:
        found = [c for c in checkpoints[arm] if json.loads(c["meta_json"])["step_range"][1] == step]
        return found[-1]["sha256"]

    assert all(row["surface"] == "relay" and row["symbols"][0] == "Ben" for row in rows.values())
    verified = ledger_cli("verify", str(tmp_path / "claims.yaml"), "--db", db, "--json")
    claims = {c["claim_id"]: c for c in json.loads(verified.stdout)["claims"]}
    assert all(c["integrity"] == "verified" for c in claims.values()), claims
    zero_shot = final("A", checkpoints["A"][-1]["sha256"])
    assert claims["zero_shot_relay"]["figures"]["correct"] == sum(zero_shot.values())
    for step in (2, 4, 6):
        installed, fresh = final("L", at_step("L", step)), final("T", at_step("T", step))
        assert set(installed) == set(fresh) == set(rows)
        helped = sum(installed[r] and not fresh[r] for r in rows)
        hurt = sum(fresh[r] and not installed[r] for r in rows)
        figures = claims[f"step{step}"]["figures"]
        assert (figures["helped"], figures["hurt"]) == (helped, hurt), step
        assert "holm-adjusted p" in claims[f"step{step}"]["reason"]  # corrected within the per-step family
    values = [sum(final("L", at_step("L", s)).values()) / len(rows) for s in (2, 4, 6)]
    trend = claims["mean_trend"]["figures"]
    assert [trend[f"value_{i}"] for i in (1, 2, 3)] == pytest.approx(values)
    assert claims["mean_trend"]["outcome"] == ("supported" if values[-1] > values[0] else "refuted")
    deep = [r for r, row in rows.items() if row["depth"] == 3]
    assert claims["deep_relay"]["figures"]["correct"] == sum(
        final("L", checkpoints["L"][-1]["sha256"])[r] for r in deep
    )
