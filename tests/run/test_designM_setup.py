"""Design M's protocols without running them: each exploratory twin tunes on development rows only, and
what each confirmatory protocol froze is what its twin tried (issue 15: tune, freeze, register, run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("designM-tiny", "designM-tiny-tuning"), ("designM-smollm2", "designM-smollm2-tuning")]


def _training(arm) -> dict:
    """What an arm trains with: everything but its id, description, evaluation and how often its stages record
    checkpoints (which reads the training curve, and changes no step)."""
    training = {k: v for k, v in arm.model_dump().items() if k not in ("id", "description", "evaluation")}
    training["stages"] = [{k: v for k, v in stage.items() if k != "checkpoint_every"} for stage in training["stages"]]
    return training


@pytest.mark.parametrize("frozen_name,twin_name", PAIRS)
def test_twin_is_exploratory_and_reads_none_of_the_frozen_rows(frozen_name, twin_name):
    frozen, twin = (load_protocol(ROOT / "protocols" / f"{name}.yaml") for name in (frozen_name, twin_name))
    assert twin.purpose == "exploratory" and frozen.purpose == "confirmatory" and not twin.claims
    assert twin.bases == frozen.bases
    built_twin, built_frozen = build_manifests(twin), build_manifests(frozen)
    read = {row.sha256 for spec in twin.manifests if spec.role == "dev" for row in built_twin[spec.id].rows}
    texts = {row.prompt for spec in twin.manifests if spec.role == "dev" for row in built_twin[spec.id].rows}
    for spec in frozen.manifests:
        rows = built_frozen[spec.id].rows
        assert not read & {row.sha256 for row in rows}, spec.id
        assert not texts & {row.prompt for row in rows}, spec.id  # not even the same text under other metadata


@pytest.mark.parametrize("frozen_name,twin_name", PAIRS)
def test_every_frozen_optimiser_was_tried_on_development_rows_by_an_arm_of_its_kind(frozen_name, twin_name):
    frozen, twin = (load_protocol(ROOT / "protocols" / f"{name}.yaml") for name in (frozen_name, twin_name))
    tried = {(arm.kind, stage.optimizer.model_dump_json()) for arm in twin.arms for stage in arm.stages}
    for arm in frozen.arms:
        for stage in arm.stages:
            assert (arm.kind, stage.optimizer.model_dump_json()) in tried, f"{frozen_name} {arm.id} {stage.id}"


def test_the_tiny_twin_tried_every_single_stage_arm_the_tiny_protocol_froze():
    frozen, twin = (load_protocol(ROOT / "protocols" / f"{name}.yaml") for name in PAIRS[0])
    tried = [_training(arm) for arm in twin.arms]
    for arm in frozen.arms:
        if len(arm.stages) > 1 or any(stage.mixture for stage in arm.stages):
            continue  # healing and its same-text control (mixtures of general text and the task) were not tuned
        assert _training(arm) in tried, f"arm {arm.id} was not tried by the twin"
