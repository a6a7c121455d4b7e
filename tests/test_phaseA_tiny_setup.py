"""The embedded default (issue #6), everything but the end-to-end run: the shipped tiny
bases and their recipes, the tuning twin, the longer protocol, `ledger params` on them.

Kept apart from tests/test_phaseA_tiny.py (the end-to-end run, minutes long) so that the
two pytest-xdist workers of the README's test command run them side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ledger.protocol_loader import load_protocol

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "protocols" / "phaseA-tiny.yaml"
TUNING = ROOT / "protocols" / "phaseA-tiny-tuning.yaml"
LONG = ROOT / "protocols" / "phaseA-tiny-long.yaml"
BASES = {"tiny": ROOT / "bases" / "tiny-base", "tiny_large": ROOT / "bases" / "tiny-base-large"}
RECIPES = {"tiny": ROOT / "bases" / "tiny-base.recipe.yaml", "tiny_large": ROOT / "bases" / "tiny-base-large.recipe.yaml"}
pytestmark = pytest.mark.models


def ledger_cli(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ledger", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=dict(os.environ))


@pytest.mark.parametrize("name", sorted(BASES))
def test_shipped_base_matches_its_record_and_the_protocol(name):
    from arms.pretrain import verify_base_hash

    folder = BASES[name]
    declared = load_protocol(TINY).bases[name].sha256
    assert verify_base_hash(folder, expected=declared) == declared  # file == SHA256 record == protocol
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["model_sha256"] == declared and summary["steps"] == summary["recipe_steps"]
    assert (folder / "recipe.yaml").read_bytes() == RECIPES[name].read_bytes()  # the recipe in bases/ made it
    log = [json.loads(line) for line in (folder / "train.log").read_text(encoding="utf-8").splitlines()]
    assert log[0]["event"] == "start" and log[-1]["event"] == "end" and log[-1]["model_sha256"] == declared


def test_pretrain_base_with_the_shipped_recipe_reproduces_the_first_logged_steps(tmp_path):
    """Same code path, same recipe: the first logged losses equal the shipped training log's."""
    import math

    from arms.pretrain import load_recipe, pretrain_base

    recipe = load_recipe(RECIPES["tiny"])
    steps = recipe.log_every
    summary = pretrain_base(RECIPES["tiny"], tmp_path / "again", max_steps=steps, progress=False)
    assert summary["steps"] == steps and math.isfinite(summary["final_loss"])
    ours = [json.loads(line) for line in (tmp_path / "again" / "train.log").read_text().splitlines()]
    shipped = [json.loads(line) for line in (BASES["tiny"] / "train.log").read_text().splitlines()]
    first = next(r for r in ours if r["event"] == "train" and r["step"] == steps)
    recorded = next(r for r in shipped if r["event"] == "train" and r["step"] == steps)
    assert first["loss"] == pytest.approx(recorded["loss"], rel=1e-3)
    assert first["loss_by_kind"] == pytest.approx(recorded["loss_by_kind"], rel=1e-3)


def test_tuning_protocol_is_exploratory_and_never_reads_the_frozen_evaluation():
    from ledger.manifest_builder import build_manifests

    tuning, tiny = load_protocol(TUNING), load_protocol(TINY)
    assert tuning.purpose == "exploratory" and tiny.purpose == "confirmatory"
    tuned_rows = {row.sha256 for m in build_manifests(tuning).values() for row in m.rows}
    frozen = {row.sha256 for row in build_manifests(tiny)["phaseA_eval"].rows}
    assert not tuned_rows & frozen
    # what was tuned is what is frozen: arms, bases and training are the same
    assert [a.model_dump() for a in tuning.arms] == [
        a.model_dump() | {"evaluation": a.evaluation.model_dump() | {"manifests": ["tune"]}} for a in tiny.arms
    ]
    assert tuning.bases == tiny.bases



def test_long_protocol_is_the_default_with_more_training_and_its_own_rows():
    from ledger.manifest_builder import build_manifests

    tiny, long = load_protocol(LONG.parent / "phaseA-tiny.yaml"), load_protocol(LONG)
    assert long.purpose == "confirmatory" and long.bases == tiny.bases and long.gates == tiny.gates
    for short_arm, long_arm in zip(tiny.arms, long.arms, strict=True):
        assert short_arm.id == long_arm.id
        short_stages, long_stages = short_arm.model_dump().pop("stages"), long_arm.model_dump().pop("stages")
        assert {k: v for k, v in short_arm.model_dump().items() if k != "stages"} == {
            k: v for k, v in long_arm.model_dump().items() if k != "stages"}
        for a, b in zip(short_stages, long_stages, strict=True):  # only the step counts grow
            assert b["steps"] > a["steps"] and {**a, "steps": 0} == {**b, "steps": 0}
    short_rows, long_rows = build_manifests(tiny), build_manifests(long)
    tuned = {row.sha256 for m in build_manifests(load_protocol(TUNING)).values() for row in m.rows}
    frozen_long = {row.sha256 for row in long_rows["phaseA_eval"].rows}
    seen_before = {row.sha256 for m in short_rows.values() for row in m.rows} | tuned
    assert len(frozen_long) == 14 * 64 and not frozen_long & seen_before
    assert len(long_rows["train"].rows) == 8 * 4096 and len(long_rows["train_short"].rows) == 4 * 4096
    claims = [yaml.safe_load((ROOT / "claims" / f"{name}.yaml").read_text()) for name in ("phaseA-tiny", "phaseA-tiny-long")]
    assert claims[0]["claims"] == claims[1]["claims"] and claims[1]["protocol"] == "phaseA-tiny-long"


def test_params_reads_the_shipped_bases_by_their_relative_path():
    result = ledger_cli("params", "protocols/phaseA-tiny.yaml", "--loops", "1,8")
    assert result.returncode == 0, result.stderr
    assert "633,984" in result.stdout and "1,224,832" in result.stdout  # tiny and tiny_large, read from bases/
