"""`ledger check` on the claims over checkpoints and on choosing depth: what can never be judged is refused, with
its place, before anything is built or written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ledger.protocol.check import check_protocol_file
from ledger.protocol.loader import ProtocolError

ROOT = Path(__file__).resolve().parents[2]
STAGE = {"objective": "intermediate", "steps": 4, "batch_size": 4, "optimizer": {"lr": 0.001}}


def protocol(arm_extra: dict, claims: list[dict], gates: list[dict] | None = None) -> dict:
    arm = {
        "id": "A",
        "kind": "recurrent",
        "base": "tiny",
        "surgery": {"split": [1, 3]},
        "bridge": {"kind": "split", "reentry": "answer"},
        "budget": {"kind": "full_block"},
        "stages": [{"id": "one", "manifest": "train", **STAGE}, {"id": "two", "manifest": "train", **STAGE}],
        "evaluation": {"manifests": ["eval"]},
        **arm_extra,
    }
    rows = {"generator": "rule_chasing", "depths": [1, 2], "rows_per_depth": 2, "seed": 1}
    return {
        "protocol": {
            "name": "p",
            "version": 1,
            "description": "d",
            "seed": 1,
            "bases": {"tiny": {"source": str(ROOT / "bases" / "tiny-base"), "dtype": "float32"}},
            "manifests": [
                {"id": "train", "role": "train", "split": "tr", **rows},
                {"id": "eval", "role": "eval", "split": "ev", **rows},
                {"id": "dev", "role": "dev", "split": "dv", **rows},
            ],
            "arms": [arm, {**arm, "id": "B", "stages": arm["stages"][:1], "evaluation": {"manifests": ["eval"]}}],
            "gates": gates or [],
            "claims": ["claims.yaml"],
        },
        "claims": {"protocol": "p", "correction": "none", "claims": claims},
    }


def refused(tmp_path: Path, document: dict) -> str:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(document["protocol"], sort_keys=False))
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(document["claims"], sort_keys=False))
    with pytest.raises(ProtocolError) as caught:
        check_protocol_file(tmp_path / "p.yaml")
    return str(caught.value)


def paired_at(step: int) -> dict:
    return {
        "id": "c",
        "statement": "s",
        "statistic": "paired_exact",
        "arms": ["A", "B"],
        "manifest": "eval",
        "at_step": step,
    }


def test_a_step_two_stages_share_is_ambiguous_and_refused(tmp_path: Path) -> None:
    every = {
        "stages": [
            {"id": "one", "manifest": "train", **STAGE, "steps": 8, "checkpoint_every": 4},
            {"id": "two", "manifest": "train", **STAGE},
        ]
    }
    message = refused(tmp_path, protocol(every, [paired_at(4)]))
    assert "records no single checkpoint at step 4" in message  # stage one's step 4 and stage two's last step


def test_keeps_all_needs_one_checkpoint_reading_every_condition(tmp_path: Path) -> None:
    gates = [{"id": "g", "kind": "retention_floor", "manifest": "dev", "floor": 0.0, "action": "flag"}]
    arm = {
        "stages": [
            {"id": "one", "manifest": "train", **STAGE, "gates": ["g"]},
            {"id": "two", "manifest": "train", **STAGE},
        ]
    }
    claim = {
        "id": "k",
        "statement": "s",
        "statistic": "keeps_all",
        "arm": "A",
        "manifest": "dev",
        "conditions": [{"manifest": "dev", "at_least": 0.5}, {"manifest": "eval", "at_least": 0.5}],
    }
    assert "no checkpoint of arm 'A' is read on all of ['dev', 'eval']" in refused(
        tmp_path, protocol(arm, [claim], gates)
    )


def test_a_halting_rule_needs_a_trained_head_read_where_it_was_trained(tmp_path: Path) -> None:
    evaluation = {"evaluation": {"manifests": ["eval"], "loops": [1, 2, 3, 4], "exit_rules": [{"rule": "halting"}]}}
    untrained = refused(tmp_path, protocol({**evaluation, "halting_head": {"max_loops": 4}}, [paired_at(4)]))
    assert "no stage of arm A trains its halting head" in untrained
    beyond = refused(tmp_path, protocol({**evaluation, "halting_head": {"max_loops": 3}}, [paired_at(4)]))
    assert "the halting head is trained over loops 1-3" in beyond


def test_fields_that_cannot_mean_anything_are_refused_at_load() -> None:
    from ledger.protocol.checkpoint_claims import KeepsAllClaim
    from ledger.protocol.claims import PairedExactClaim
    from ledger.protocol.manifests import RuleChasingManifest

    with pytest.raises(ValueError, match="give loop or at_step, not both"):
        PairedExactClaim.model_validate({**paired_at(4), "loop": 1})
    with pytest.raises(ValueError, match="no row filter"):
        KeepsAllClaim.model_validate(
            {
                "id": "k",
                "statement": "s",
                "statistic": "keeps_all",
                "arm": "A",
                "manifest": "dev",
                "rows": {"depths": [1, 1]},
                "conditions": [{"manifest": "dev", "at_least": 0.5}, {"manifest": "eval", "at_least": 0.5}],
            }
        )
    with pytest.raises(ValueError, match="distractors do not apply"):
        RuleChasingManifest.model_validate(
            {
                "id": "m",
                "role": "eval",
                "generator": "rule_chasing",
                "depths": [1, 2],
                "rows_per_depth": 1,
                "seed": 1,
                "split": "x",
                "operation": "reverse_inverse_table",
                "distractors": False,
            }
        )
