"""A stage trained until a gate passes (``until``): it stops at the first passing reading, or runs to its cap, and
its checkpoint keeps every reading."""

from __future__ import annotations

import pytest
from run_helpers import SMOKE, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models


def _until_protocol(tmp_path):
    text = SMOKE.read_text(encoding="utf-8").replace("name: smoke\n", "name: smoke-until\n", 1)
    text = text.replace(
        "{id: sft, objective: sft_direct, manifest: train, steps: 6, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}}",
        "{id: sft, objective: sft_direct, manifest: train, steps: 12, batch_size: 8, optimizer: {kind: adamw, "
        "lr: 0.003}, gates: [floor], until: {gate: floor, every: 4}}",
        1,
    )
    # a second direct arm (the cheapest to read) whose gate never passes
    never = (
        "  - id: B_never\n    kind: dense\n    base: tiny\n    stages:\n"
        "      - {id: sft, objective: sft_direct, manifest: train, steps: 12, batch_size: 8, optimizer: {kind: adamw, "
        "lr: 0.003}, gates: [never], until: {gate: never, every: 4}}\n"
        "    evaluation: {manifests: [eval], batch_size: 8, max_new_tokens: 4, latency_sample_per_depth: 0}\n"
    )
    text = text.replace("  - id: C\n", never + "  - id: C\n", 1)
    text = text.replace(
        "gates:\n",
        "gates:\n  - {id: never, kind: retention_floor, manifest: dev, floor: 1.0, action: flag}\n",
        1,
    )
    text = text.replace("claims:\n  - ../claims/smoke.yaml\n", "")
    path = tmp_path / "until.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_stage_stops_at_its_gates_first_pass_or_runs_to_its_cap(tmp_path):
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    protocol = _until_protocol(tmp_path)
    ran = ledger_cli(
        "run", str(protocol), "--db", db, "--out", str(tmp_path / "out"), "--arms", "B,B_never", "--no-progress"
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with open_store(db) as store:
        metas = {
            row["arm"]: store.checkpoint_meta([row["sha256"]])[row["sha256"]] for row in store.rows_of("checkpoints")
        }
        gates = {(row["gate"], row["passed"]) for row in store.rows_of("gate_results")}
    # B's floor of 0 passes at its first reading: the stage ends after 4 of its 12 steps
    assert metas["B"]["steps"] == 4 and len(metas["B"]["losses"]) == 4
    assert metas["B"]["until"] == {
        "gate": "floor",
        "checks": [{"step": 4, "value": metas["B"]["until"]["checks"][0]["value"], "passed": True}],
        "reached": True,
    }
    # B_never's floor of 1.0 never passes: read at steps 4 and 8 (not at the cap: the stage's own gate), 12 steps
    assert metas["B_never"]["steps"] == 12
    assert [(c["step"], c["passed"]) for c in metas["B_never"]["until"]["checks"]] == [(4, False), (8, False)]
    assert metas["B_never"]["until"]["reached"] is False
    assert ("never", False) in gates and ("floor", True) in gates  # each stage's gate judged at its end
    log = (tmp_path / "out" / "run.log").read_text(encoding="utf-8")
    assert "arm B stage sft: step 4: gate floor passed: the stage ends here" in log


@pytest.mark.long  # two runs: the long call
def test_a_rerun_stops_at_the_same_step_with_the_same_weights(tmp_path):
    protocol = _until_protocol(tmp_path)
    heads = []
    for name in ("one", "two"):
        db = f"sqlite:///{tmp_path / name / 'ledger.db'}"
        (tmp_path / name).mkdir()
        ran = ledger_cli(
            "run", str(protocol), "--db", db, "--out", str(tmp_path / name), "--arms", "B", "--no-progress"
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        with open_store(db) as store:
            heads.append([(row["arm"], row["stage"], row["sha256"]) for row in store.rows_of("checkpoints")])
    assert heads[0] == heads[1]
