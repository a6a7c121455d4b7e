"""The embedded default (issue #6), everything but the end-to-end run: the shipped tiny
bases and their recipes, the tuning twin, the longer protocol, `ledger params` on them.

Kept apart from tests/e2e/test_phaseA_tiny.py (the end-to-end run, minutes long) so that the
two pytest-xdist workers of the README's test command run them side by side.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from run_helpers import ledger_cli as run_ledger

from ledger.protocol.loader import load_protocol

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "protocols" / "phaseA-tiny.yaml"
TINY_V2 = ROOT / "tests" / "pins" / "versions" / "phaseA-tiny.v2.yaml"  # version 2's registered text
TINY_V3 = ROOT / "tests" / "pins" / "versions" / "phaseA-tiny.v3.yaml"  # version 3's
TINY_V6 = ROOT / "tests" / "pins" / "versions" / "phaseA-tiny.v6.yaml"  # version 6's
PAPER_TUNING = ROOT / "protocols" / "phaseA-tiny-paper-tuning.yaml"  # version 7's
TUNING = ROOT / "protocols" / "phaseA-tiny-tuning.yaml"  # version 2's exploratory twin
BUDGET_TUNING = ROOT / "protocols" / "phaseA-tiny-budget-tuning.yaml"  # version 3's
LONG = ROOT / "protocols" / "phaseA-tiny-long.yaml"
LONG_TUNING = ROOT / "protocols" / "phaseA-tiny-long-tuning.yaml"
pytestmark = pytest.mark.models


def ledger_cli(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return run_ledger(*args, timeout=timeout)


SHIPPED = [
    (protocol, name)
    for protocol in (TINY, LONG, LONG_TUNING, ROOT / "protocols" / "surfaces-tiny.yaml")
    for name in load_protocol(protocol).bases
]


@pytest.mark.parametrize("protocol,name", SHIPPED, ids=[f"{p.stem}-{n}" for p, n in SHIPPED])
def test_shipped_base_matches_its_record_and_the_protocol(protocol, name):
    from arms.bases.pretrain import verify_base_hash

    spec = load_protocol(protocol).bases[name]
    folder = (protocol.parent / spec.source).resolve()
    assert folder.parent == ROOT / "bases"
    assert verify_base_hash(folder, expected=spec.sha256) == spec.sha256  # file == SHA256 record == protocol
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["model_sha256"] == spec.sha256 and summary["steps"] == summary["recipe_steps"]
    recipe = ROOT / "bases" / f"{folder.name}.recipe.yaml"
    assert (folder / "recipe.yaml").read_bytes() == recipe.read_bytes()  # the recipe in bases/ made it
    log = [json.loads(line) for line in (folder / "train.log").read_text(encoding="utf-8").splitlines()]
    assert log[0]["event"] == "start" and log[-1]["event"] == "end" and log[-1]["model_sha256"] == spec.sha256
    init_from = yaml.safe_load(recipe.read_text()).get("init_from")
    if init_from:  # continued from another shipped base: the log names that base's hash
        assert log[0]["init_from_sha256"] == init_from["sha256"]
        assert verify_base_hash(ROOT / "bases" / init_from["path"], expected=init_from["sha256"])


@pytest.mark.long  # half a minute and more: the long call
@pytest.mark.parametrize("base", ["tiny-base", "tiny-base-v2"])
def test_pretrain_base_with_the_shipped_recipe_reproduces_the_first_logged_steps(tmp_path, base):
    """Same code path, same recipe: the first logged losses equal the shipped training log's
    (tiny-base from scratch; tiny-base-v2 continued from tiny-base through init_from)."""
    import math

    from arms.bases.pretrain import pretrain_base
    from arms.bases.recipe import load_recipe

    recipe_path = ROOT / "bases" / f"{base}.recipe.yaml"
    steps = load_recipe(recipe_path).log_every
    summary = pretrain_base(recipe_path, tmp_path / "again", max_steps=steps, progress=False)
    assert summary["steps"] == steps and math.isfinite(summary["final_loss"])
    ours = [json.loads(line) for line in (tmp_path / "again" / "train.log").read_text().splitlines()]
    shipped = [json.loads(line) for line in (ROOT / "bases" / base / "train.log").read_text().splitlines()]
    first = next(r for r in ours if r["event"] == "train" and r["step"] == steps)
    recorded = next(r for r in shipped if r["event"] == "train" and r["step"] == steps)
    assert first["loss"] == pytest.approx(recorded["loss"], rel=1e-3)
    assert first["loss_by_kind"] == pytest.approx(recorded["loss_by_kind"], rel=1e-3)


def test_tuning_protocol_is_exploratory_and_never_reads_the_frozen_evaluation():
    from ledger.rows.builder import build_manifests

    tuning, tiny = load_protocol(TUNING), load_protocol(TINY_V2)
    assert tuning.purpose == "exploratory" and tiny.purpose == "confirmatory"
    tuned_rows = {row.sha256 for m in build_manifests(tuning).values() for row in m.rows}
    frozen = {row.sha256 for row in build_manifests(tiny)["phaseA_eval"].rows}
    assert not tuned_rows & frozen
    # what was tuned is what is frozen: arms, bases and training are the same
    assert [a.model_dump() for a in tuning.arms] == [
        a.model_dump() | {"evaluation": a.evaluation.model_dump() | {"manifests": ["tune"]}} for a in tiny.arms
    ]
    assert tuning.bases == tiny.bases


def _without(arm, *keys):
    return {k: v for k, v in arm.model_dump().items() if k not in keys}


def test_long_protocol_is_the_default_with_more_training_larger_bases_and_its_own_rows():
    from ledger.protocol.arms import LrSchedule
    from ledger.rows.builder import build_manifest, build_manifests

    tiny, long = load_protocol(TINY_V2), load_protocol(LONG)
    assert long.purpose == "confirmatory" and long.gates == tiny.gates and long.version == 4
    # the bases, by recorded hash: A/E/B/C's is tiny-base grown to 8 layers; D's is that grown to 16
    recipes = {
        name: yaml.safe_load((ROOT / "bases" / f"{Path(long.bases[name].source).name}.recipe.yaml").read_text())
        for name in ("tiny", "tiny_large")
    }
    assert recipes["tiny"]["init_from"]["sha256"] == tiny.bases["tiny"].sha256
    assert recipes["tiny_large"]["init_from"]["sha256"] == long.bases["tiny"].sha256
    assert long.bases["tiny_large"].num_layers == 2 * long.bases["tiny"].num_layers
    cosine = LrSchedule(kind="cosine", warmup_steps=50, min_lr_ratio=0.1)
    for short_arm, long_arm in zip(tiny.arms, long.arms, strict=True):
        changed = ("stages", "description") + (("surgery", "bridge") if long_arm.kind == "recurrent" else ())
        assert _without(short_arm, *changed) == _without(long_arm, *changed)
        if long_arm.kind == "recurrent":  # the larger block, answer-only re-entry (not the paper's bridge)
            assert long_arm.surgery.split == (2, 6) and long_arm.bridge.reentry == "answer"
            assert long_arm.bridge.model_copy(update={"reentry": "all"}) == short_arm.bridge
        for a, b in zip(short_arm.stages, long_arm.stages, strict=True):  # more steps, a schedule, nothing else
            assert b.steps > a.steps and b.optimizer.schedule == cosine
            assert a.model_copy(update={"steps": 0}) == b.model_copy(
                update={"steps": 0, "optimizer": b.optimizer.model_copy(update={"schedule": None})}
            )
    frozen_long = {row.sha256 for row in build_manifests(long)["phaseA_eval"].rows}
    seen_before = {
        row.sha256
        for path in (TINY_V2, TUNING, LONG_TUNING)
        for m in build_manifests(load_protocol(path)).values()
        for row in m.rows
    }
    # the frozen rows of versions 1 and 2 (splits testlong, testlong2), read by their runs
    frozen_spec = next(m for m in long.manifests if m.id == "phaseA_eval")
    for split in ("testlong", "testlong2"):
        seen_before |= {row.sha256 for row in build_manifest(frozen_spec.model_copy(update={"split": split})).rows}
    assert len(frozen_long) == 14 * 64 and not frozen_long & seen_before
    long_rows = build_manifests(long)
    assert len(long_rows["train"].rows) == 8 * 4096 and len(long_rows["train_short"].rows) == 4 * 4096
    claims = [  # version 2 of the default registered the same nine claims as the longer protocol (version 3)
        yaml.safe_load(path.read_text())
        for path in (TINY_V2.parent / "phaseA-tiny.claims.v2.yaml", TINY_V2.parent / "phaseA-tiny-long.claims.v3.yaml")
    ]
    assert claims[0]["claims"] == claims[1]["claims"] and claims[1]["protocol"] == "phaseA-tiny-long"


def test_long_tuning_is_exploratory_and_its_chosen_variants_are_what_the_long_protocol_froze():
    tuning, long = load_protocol(LONG_TUNING), load_protocol(LONG)
    assert tuning.purpose == "exploratory" and tuning.claims == []
    assert not [m for m in tuning.manifests if m.role == "eval"]
    assert tuning.bases["tiny_large"] == long.bases["tiny"]
    tuned = {arm.id: arm for arm in tuning.arms}
    for variant, frozen_id in (("A_large_cosine_answer", "A"), ("E_large_cosine_answer", "E")):
        frozen = next(arm for arm in long.arms if arm.id == frozen_id)
        chosen = tuned[variant].model_copy(
            update={
                "id": frozen_id,
                "base": frozen.base,
                "description": frozen.description,
                "evaluation": frozen.evaluation,
            }
        )
        assert chosen == frozen, variant
    # the rejected variants differ by one thing each: the paper's bridge; the 2-layer block; no schedule
    paper = tuned["A_large_cosine"]
    assert paper.bridge.reentry == "all" and paper.stages == tuned["A_large_cosine_answer"].stages
    assert tuned["A_cosine_answer"].surgery.split == (1, 3) and tuned["A_cosine_answer"].base == "tiny"
    plain = tuned["A"]
    assert [s.optimizer.schedule for s in plain.stages] == [None] * len(plain.stages)
    assert [
        s.model_copy(update={"optimizer": s.optimizer.model_copy(update={"schedule": None})})
        for s in tuned["A_cosine"].stages
    ] == list(plain.stages)


def test_params_reads_the_shipped_bases_by_their_relative_path():
    result = ledger_cli("params", "protocols/phaseA-tiny-long.yaml", "--loops", "1,8")
    assert result.returncode == 0, result.stderr
    # tiny-base-large-v2 and tiny-base-xl, read from bases/
    assert "1,225,856" in result.stdout and "2,409,600" in result.stdout


# version 3's arm -> the budget twin's variant it froze (docs/phaseA-tiny-tuning.md: the cheapest budget whose
# answer-only arm extrapolated on the tune rows; A_paper has A's budget by design; C_small read better than C_mid)
CHOSEN = {"A": "A_small", "A_paper": "A_paper_small", "E": "E_small", "B": "B_small", "C": "C_small", "D": "D_small"}


def test_version_3_froze_what_its_budget_twin_tuned_and_reads_fresh_rows():
    """Version 3's arms are the budget twin's chosen variants (renamed, evaluated on the frozen rows); the twin is
    exploratory and never built the frozen evaluation or Tier-1 rows; every arm of version 3 reads rows that no
    earlier protocol of this default, its twins or the longer protocol built."""
    from ledger.rows.builder import build_manifest, build_manifests

    tuning, tiny = load_protocol(BUDGET_TUNING), load_protocol(TINY_V3)
    assert tuning.purpose == "exploratory" and tuning.claims == [] and tiny.version == 3
    assert not [m for m in tuning.manifests if m.role == "eval"]
    assert tuning.bases == tiny.bases
    tuned = {arm.id: arm for arm in tuning.arms}
    for frozen in tiny.arms:
        chosen = tuned[CHOSEN[frozen.id]].model_copy(
            update={"id": frozen.id, "description": frozen.description, "evaluation": frozen.evaluation}
        )
        assert chosen == frozen, frozen.id
    assert {a.id: a.bridge.reentry for a in tiny.arms if a.kind == "recurrent"} == {
        "A": "answer",
        "A_paper": "all",
        "E": "answer",
    }
    guard = next(g for g in tiny.gates if g.id == "tier1")
    assert (guard.max_drop, guard.action) == (0.03, "stop")  # the paper's hard stop at a 3-point drop
    built = build_manifests(tiny)
    fresh = {row.sha256 for name in ("phaseA_eval", "tier1") for row in built[name].rows}
    assert len(built["phaseA_eval"].rows) == 14 * 64 and len(built["tier1"].rows) == 484
    # every row an earlier protocol, twin or the longer run evaluated or gated on (by content); their training
    # rows come from other splits (a row is a function of its split, seed, depth and index)
    earlier = [load_protocol(path) for path in (BUDGET_TUNING, TINY_V2, TUNING, LONG, LONG_TUNING)]
    read = [[m for m in protocol.manifests if m.role != "train"] for protocol in earlier]
    seen = {row.sha256 for manifests in read for m in manifests for row in build_manifest(m).rows}
    assert not fresh & seen
    frozen_splits = {m.split for m in tiny.manifests if m.id in ("phaseA_eval", "tier1")}
    assert not frozen_splits & {m.split for protocol in earlier for m in protocol.manifests}


def test_versions_4_to_6_move_the_base_and_c_alone_and_read_fresh_rows():
    """Version 4 keeps version 3's arms but for C's budget (400 steps for 200) on the skilled base (D keeps its own),
    guards on the 256 Tier-1 rows that base was taught, and reads frozen rows no earlier version or twin built;
    version 5 records the Tier-1 gate instead of stopping at it and reads fresh evaluation rows again, and so does
    version 6, whose claims follow claim rules 2 (its arms are version 5's)."""
    from arms.bases.corpus import tier1_rows
    from arms.bases.recipe import load_recipe
    from ledger.rows.builder import build_manifest, build_manifests

    v3, v4 = load_protocol(TINY_V3), load_protocol(TINY_V6)
    assert v4.version == 6 and v4.bases["tiny_large"] == v3.bases["tiny_large"]
    assert next(g for g in v4.gates if g.id == "tier1").action == "flag"
    assert v4.bases["tiny"].source == "../bases/tiny-base-skills"
    before = {arm.id: arm for arm in v3.arms}
    for arm in v4.arms:
        if arm.id == "C":
            (stage,) = arm.stages
            assert stage.steps == 400 and before["C"].stages[0].steps == 200
            arm = arm.model_copy(update={"stages": [stage.model_copy(update={"steps": 200})]})
        assert arm == before[arm.id], arm.id
    built = build_manifests(v4)
    assert len(built["tier1"].rows) == 256 and len(built["phaseA_eval"].rows) == 14 * 64
    recipe = load_recipe(ROOT / "bases" / "tiny-base-skills.recipe.yaml")
    taught = {(row.prompt, row.answer) for row in tier1_rows(recipe)}
    assert {(row.prompt, row.answer) for row in built["tier1"].rows} <= taught
    fresh = {row.sha256 for name in ("phaseA_eval", "tier1") for row in built[name].rows}
    earlier = [load_protocol(path) for path in (TINY_V3, BUDGET_TUNING, TINY_V2, TUNING, LONG, LONG_TUNING)]
    seen = {row.sha256 for p in earlier for m in p.manifests if m.role != "train" for row in build_manifest(m).rows}
    assert not fresh & seen
    for kept in ("phaseA-tiny.v4.yaml", "phaseA-tiny.v5.yaml"):
        version = load_protocol(ROOT / "tests" / "pins" / "versions" / kept)
        read_before = {
            row.sha256 for row in build_manifest(next(m for m in version.manifests if m.role == "eval")).rows
        }
        assert not read_before & {row.sha256 for row in built["phaseA_eval"].rows}, kept
    version_5 = load_protocol(ROOT / "tests" / "pins" / "versions" / "phaseA-tiny.v5.yaml")
    assert [arm.model_dump() for arm in version_5.arms] == [arm.model_dump() for arm in v4.arms]  # the same training
    gate = next(g for g in v4.gates if g.id == "E_within_rows_of_A")
    assert (gate.arm, gate.versus, gate.rows) == ("E", "A", 4)  # the paper's 8 of 128 rows per depth, as a share


def test_version_7_holds_the_papers_bridge_trained_as_its_twin_tuned_and_reads_fresh_rows():
    """Version 7's A is the paper's bridge over three seeds, installed until the gate passes as the paper counts
    it; each control trains until it has its competence, with the optimiser its exploratory twin found; the twin
    read development rows only, and version 7's evaluation rows are new to every earlier version and twin."""
    from ledger.rows.builder import build_manifest, build_manifests

    tiny, twin = load_protocol(TINY), load_protocol(PAPER_TUNING)
    assert tiny.version == 7 and twin.purpose == "exploratory" and not twin.claims
    assert not [m for m in twin.manifests if m.role == "eval"]
    arms = {arm.id: arm for arm in tiny.arms}
    assert {arm.replicate.seed for arm in tiny.replicates_of("A")} == {1, 2, 3}
    tuned = {arm.id: arm for arm in twin.arms}
    # each arm trains exactly as the variant it froze: stages, caps, optimisers and stopping rules (A's stopping gate
    # is the twin's installation_rows, renamed installation)
    for frozen, chosen in (("A.s1", "A_paper_rows_ext150"), ("B", "B_lr3e-4"), ("C", "C")):
        stages = [stage.model_dump() for stage in tuned[chosen].stages]
        for stage in stages:
            stage["gates"] = ["installation" if g == "installation_rows" else g for g in stage["gates"]]
            if stage.get("until"):
                stage["until"]["gate"] = stage["gates"][0]
        assert [stage.model_dump() for stage in arms[frozen].stages] == stages, frozen
    assert arms["A.s1"].bridge == tuned["A_paper_rows_ext150"].bridge and arms["A.s1"].bridge.reentry == "all"
    gates, twin_gates = {g.id: g for g in tiny.gates}, {g.id: g for g in twin.gates}
    assert gates["installation"].model_dump() | {"id": "x", "description": ""} == twin_gates[
        "installation_rows"
    ].model_dump() | {"id": "x", "description": ""}
    assert gates["installation"].per_depth_measure == "rows" and gates["installation"].per_depth_threshold == 0.9
    assert (gates["answers_depth_1"].floor, gates["inside_support"].floor) == (0.95, 0.95)
    assert arms["A_persist"].init_from == "A.s1" and arms["A_persist"].evaluation.loops == [1, 2, 3, 4]
    built = build_manifests(tiny)
    fresh = {row.sha256 for name in ("phaseA_eval", "persistence") for row in built[name].rows}
    earlier = [TINY_V6, TINY_V3, TINY_V2, BUDGET_TUNING, TUNING, LONG, LONG_TUNING, PAPER_TUNING]
    earlier += [ROOT / "tests" / "pins" / "versions" / f"phaseA-tiny.v{n}.yaml" for n in (4, 5)]
    # every row an earlier version or twin evaluated or gated on, by content; their training rows come from other
    # splits (a row is a function of its split, seed, depth and index)
    protocols = [load_protocol(path) for path in earlier]
    seen = {row.sha256 for p in protocols for m in p.manifests if m.role != "train" for row in build_manifest(m).rows}
    assert not fresh & seen
    frozen_splits = {m.split for m in tiny.manifests if m.id in ("phaseA_eval", "persistence")}
    assert not frozen_splits & {m.split for p in protocols for m in p.manifests}


def test_version_3_can_support_its_noninferiority_claim_at_all():
    """The paper's 3-point margin on 484 Tier-1 rows: supported at zero discordant pairs (on 64 rows it never was)."""
    from ledger.judge import stats

    assert stats.tango_noninferiority(0, 0, 484, 0.03).p_value < 0.05
    assert stats.tango_noninferiority(0, 0, 64, 0.03).p_value > 0.05


@pytest.mark.long  # half a minute and more: the long call
def test_params_says_what_answer_only_reentry_costs_with_a_cache():
    result = ledger_cli("params", "protocols/phaseA-tiny-long.yaml", "--loops", "1,8")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "1,225,856" in text and "2,409,600" in text  # tiny-base-large-v2 and tiny-base-xl
    assert "A, E: answer-only re-entry" in text and "the prompt costs 1.00x" in text
    default = " ".join(ledger_cli("params", "protocols/phaseA-tiny.yaml", "--loops", "1,8").stdout.split())
    assert "answer-only re-entry" not in default  # version 7: the paper's bridge
