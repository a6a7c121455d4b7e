"""Design M in miniature (issue 15), end to end: `ledger run protocols/designM-tiny.yaml`, then verify.

Checks what the ledger holds, not what the claims conclude: every claim verifies from the row-level
evidence; every next-token checkpoint's FLOPs equal the seed's rule recomputed here from a freshly
built model and the recorded draws; the lineage's FLOPs add up; the test-recurrence sweep is evidence
at every loop of every curve checkpoint.
"""

from __future__ import annotations

import json

import pytest
import yaml
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

DESIGN_M = ROOT / "protocols" / "designM-tiny.yaml"
pytestmark = [pytest.mark.models, pytest.mark.long]  # CI runs it: `pytest -m long`


@pytest.fixture(scope="module")
def design_m_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("designM-tiny")
    db = f"sqlite:///{folder / 'ledger.db'}"
    result = ledger_cli("run", str(DESIGN_M), "--db", db, "--out", str(folder / "out"), "--no-progress", timeout=3000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, db, result.stdout


def test_design_m_runs_and_every_claim_verifies(design_m_run):
    _folder, db, stdout = design_m_run
    for arm in ("M", "M_random", "M_flat", "M_adamw", "M_healed", "M_mixed", "C"):
        assert f"│ {arm}" in stdout and "complete" in stdout, stdout
    verified = ledger_cli("verify", "claims/designM-tiny.yaml", "--db", db, "--json")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    claims = {v["claim_id"]: v for v in json.loads(verified.stdout)["claims"]}
    expected = {c["id"] for c in yaml.safe_load((ROOT / "claims" / "designM-tiny.yaml").read_text())["claims"]}
    assert set(claims) == expected and all(v["integrity"] == "verified" for v in claims.values()), claims


def test_recorded_flops_follow_the_rule_and_add_up_along_the_lineage(design_m_run):
    from arms.bases.loading import load_base
    from arms.model.flops import fixed_depth_flops_per_token, recurrent_counts
    from arms.model.recurrent import RecurrentLM
    from ledger.protocol.loader import load_protocol

    _folder, db, _ = design_m_run
    protocol = load_protocol(DESIGN_M)
    model, _tokenizer = load_base(str((DESIGN_M.parent / protocol.bases["tiny8"].source).resolve()))
    with open_store(db) as store:
        checkpoints = {row["sha256"]: row for row in store.rows_of("checkpoints")}
    seen = 0
    for row in checkpoints.values():
        meta = json.loads(row["meta_json"] or "{}")
        if "recurrences" not in meta:
            continue
        arm = protocol.arm(row["arm"])
        if arm.kind == "dense":
            per_token = fixed_depth_flops_per_token(model)

            def rule(loops, grad, per_token=per_token):
                return per_token

        else:
            retrofit = RecurrentLM.from_spec(model, arm)
            rule = recurrent_counts(retrofit.surgery, retrofit.bridge).flops_per_token
        steps = zip(meta["recurrences"], meta["grad_recurrences"], meta["step_tokens"])
        assert meta["flops"] == pytest.approx(sum(rule(r, g) * d for r, g, d in steps), rel=1e-12)
        assert meta["mean_recurrence"] == pytest.approx(sum(meta["recurrences"]) / len(meta["recurrences"]))
        parent = json.loads((checkpoints.get(row["parent_sha256"]) or {}).get("meta_json") or "{}")
        assert meta["flops_total"] == pytest.approx(parent.get("flops_total", 0.0) + meta["flops"], rel=1e-12)
        seen += 1
    # M and C checkpoint every 5 of 60 steps (12 each), M_random, M_flat and M_adamw every 20 (3 each), the healed
    # arm's two stages, M_mixed's one
    assert seen == 2 * 12 + 3 * 3 + 2 + 1


def test_the_test_recurrence_sweep_is_evidence_at_every_loop(design_m_run):
    _folder, db, _ = design_m_run
    with open_store(db) as store:
        evidence = store.rows_of("evidence")
    loops_of = {}
    for row in evidence:
        loops_of.setdefault((row["arm"], row["checkpoint_sha256"], row["manifest_sha256"]), set()).add(row["loop"])
    recurrent = {key: loops for key, loops in loops_of.items() if key[0] != "C"}
    assert recurrent and all(loops == {1, 2, 4, 8, 16, 32} for loops in recurrent.values())
    assert all(loops == {1} for key, loops in loops_of.items() if key[0] == "C")
    text = [row for row in evidence if row["correct"] is None]
    assert text and all({"nats", "tokens"} <= set(json.loads(row["detail_json"])) for row in text)
