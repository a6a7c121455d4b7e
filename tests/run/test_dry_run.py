"""The dry run: a protocol's miniature run end to end in a throwaway ledger, every claim judged there.

The miniature keeps every depth, operation and part of every manifest at the fewest rows, one step per stage
past its warm-up, every gate recorded rather than stopping; nothing is left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ledger.cli.main import main
from ledger.protocol.check import check_protocol_file
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.run.dry_run import ROWS, miniature

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["phaseA-tiny", "designM-tiny", "retention-tiny", "surfaces-tiny"])
def test_the_miniature_keeps_every_depth_and_part_at_the_fewest_rows(name, tmp_path):
    path = ROOT / "protocols" / f"{name}.yaml"
    protocol = load_protocol(path)
    small_path = miniature(path, protocol, tmp_path, random_weights=False)
    small = check_protocol_file(small_path).protocol  # the miniature passes the complete check itself
    full_rows, small_rows = build_manifests(protocol), build_manifests(small)
    for spec in protocol.manifests:
        full, few = full_rows[spec.id].rows, small_rows[spec.id].rows
        assert 0 < len(few) < len(full) or len(full) <= 4, spec.id
        assert {getattr(r, "depth", None) for r in few} == {getattr(r, "depth", None) for r in full}, spec.id
    for arm, small_arm in zip(protocol.arms, small.arms, strict=True):
        for stage, small_stage in zip(arm.stages, small_arm.stages, strict=True):
            warmed = bool(stage.optimizer.schedule and stage.optimizer.schedule.warmup_steps)
            every = stage.checkpoint_every
            assert small_stage.steps == (max(2, -(-stage.steps // every)) if every else 2 if warmed else 1)
            assert small_stage.batch_size == min(stage.batch_size, ROWS)
            if warmed:
                assert small_stage.optimizer.schedule.warmup_steps == 1
            assert small_stage.checkpoint_every in (None, 1)
    assert {gate.action for gate in small.gates} <= {"flag"}
    copied = [yaml.safe_load((small_path.parent / c).read_text()) for c in small.claims]
    originals = [yaml.safe_load((path.parent / c).read_text()) for c in protocol.claims]
    for copy, original in zip(copied, originals, strict=True):
        for claim, was in zip(copy["claims"], original["claims"], strict=True):
            if "at_step" in was:  # the same checkpoint in the miniature: its n-th, one step apart
                every = next(s.checkpoint_every for s in protocol.arm(was["arms"][0]).stages if s.checkpoint_every)
                assert claim.pop("at_step") == was.pop("at_step") // every
            assert claim == was


def test_a_dry_run_judges_every_claim_and_leaves_nothing_behind(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(Path("/tmp").glob("ledger-dry-run-*"))
    assert main(["check", str(ROOT / "protocols" / "smoke.yaml"), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    claims = yaml.safe_load((ROOT / "claims" / "smoke.yaml").read_text())["claims"]
    assert f"{len(claims)} claims judged in the throwaway ledger" in out
    for claim in claims:
        assert f"{claim['id']} " in out
    assert "first update: the first update moved" in out
    assert list(tmp_path.iterdir()) == [] and sorted(Path("/tmp").glob("ledger-dry-run-*")) == before
