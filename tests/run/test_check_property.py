"""Property: a protocol that `ledger check` accepts can be executed as written.

Hypothesis draws protocols over every kind of every registry (arm kinds, bridges,
budgets, recurrence schedules, objectives, gate kinds, task generators) and their
options, valid or not, on a tiny random-init base. Whenever the complete check passes,
a dry run (every arm built from its base, one training step per stage, the gates'
readings and verdicts, the evaluation read) must succeed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from ledger.protocol.arms import ARM_KINDS, BRIDGES, BUDGETS, OBJECTIVES, RECURRENCES
from ledger.protocol.check import issues_of
from ledger.protocol.gates import GATE_KINDS
from ledger.run.dry_run import dry_run

GATES = {
    "installation": {
        "id": "installation",
        "kind": "installation",
        "manifest": "dev",
        "depths": [1, 2],
        "threshold": 0.0,
        "action": "flag",
    },
    "guardrail": {"id": "tier1", "kind": "guardrail", "manifest": "tier1", "max_drop": 1.0, "action": "flag"},
    "retention_floor": {"id": "floor", "kind": "retention_floor", "manifest": "dev", "floor": 0.0, "action": "flag"},
    "depth_gate": {
        "id": "depth",
        "kind": "depth_gate",
        "manifest": "eval",
        "arm": "X0",
        "versus": "X1",
        "test": "paired_exact",
        "action": "flag",
    },
    "within_rows": {
        "id": "within",
        "kind": "within_rows",
        "manifest": "eval",
        "arm": "X0",
        "versus": "X1",
        "rows": 8,
        "action": "flag",
    },
}
GATES_BY_ID = {gate["id"]: gate for gate in GATES.values()}
GROUP_NAMES = sorted({g for kind in (*BRIDGES, *BUDGETS, *ARM_KINDS) for g in kind.groups} | {"nonexistent"})


def test_the_strategy_covers_every_registered_kind() -> None:
    """A kind added to a registry must be drawn here too (or this property says nothing about it)."""
    assert set(GATES) == set(GATE_KINDS.names())
    assert {"split", "concat"} == set(BRIDGES.names())
    assert {"full_block", "adapter", "full_model"} == set(BUDGETS.names())
    assert {"forced", "poisson_lognormal"} == set(RECURRENCES.names())
    assert set(ARM_KINDS.names()) == {"recurrent", "dense"}


def sensible(draw: Any) -> bool:
    """Most options are drawn as a careful author would write them, some as anything at all:
    otherwise nearly every drawn protocol is refused and the property says little."""
    return draw(st.integers(0, 24)) > 0


@st.composite
def stages(draw: Any, kind: str, gate_ids: list[str], dense_objective: str) -> dict:
    model = "one_pass" if kind == "dense" else "looped"  # what each built-in kind's `trains` accepts
    own = [objective.name for objective in OBJECTIVES if model in objective.models]
    if kind == "dense" and sensible(draw):
        own = [dense_objective]  # one SFT format per dense arm
    objective = draw(st.sampled_from(own if sensible(draw) else OBJECTIVES.names()))
    stage: dict[str, Any] = {
        "id": f"s{draw(st.integers(0, 99))}",
        "objective": objective,
        "manifest": draw(st.sampled_from(["train", "text_train"])) if sensible(draw) else "train_d1",
        "steps": draw(st.integers(1, 3)),
        "batch_size": draw(st.integers(1, 4)),
        "optimizer": {"kind": draw(st.sampled_from(["adamw", "muon"])), "lr": draw(st.sampled_from([1e-3, 1e-2]))},
    }
    if draw(st.booleans()):
        warmup = draw(st.integers(0, stage["steps"] - 1)) if sensible(draw) else draw(st.integers(0, 3))
        stage["optimizer"]["schedule"] = {
            "kind": draw(st.sampled_from(["constant", "cosine", "linear"])),
            "warmup_steps": warmup,
        }
    if not sensible(draw):
        stage["optimizer"]["group_lrs"] = {draw(st.sampled_from(GROUP_NAMES)): 0.5}
    recurrence = draw(st.sampled_from([None, "forced"])) if sensible(draw) else "poisson_lognormal"
    if objective == "next_token" and sensible(draw):
        recurrence = "poisson_lognormal" if kind == "recurrent" else None
    if kind == "recurrent" or not sensible(draw):
        if recurrence == "forced":
            stage["recurrence"] = {"kind": "forced"}
        elif recurrence:
            stage["recurrence"] = {"kind": recurrence, "mean": 2.0, "backprop_depth": 2}
            if draw(st.booleans()):
                stage["recurrence"].update(offset="corrected", curriculum="linear", curriculum_fraction=0.5)
    if objective == "next_token" and draw(st.booleans()):
        stage["max_tokens"] = 16
        if stage["steps"] > 1 and sensible(draw):
            stage["checkpoint_every"] = 1
    if (objective == "anneal") == sensible(draw):
        stage["anneal_fraction"] = 0.5
    stage["gates"] = draw(st.lists(st.sampled_from(gate_ids), unique=True, max_size=2)) if gate_ids else []
    return stage


@st.composite
def arms(draw: Any, index: int, gate_ids: list[str], layers: int) -> dict:
    kind = draw(st.sampled_from(ARM_KINDS.names()))
    arm: dict[str, Any] = {"id": f"X{index}", "kind": kind, "base": "tiny"}
    dense_objective = draw(st.sampled_from(["sft_direct", "sft_scratchpad"]))
    stage_list = draw(
        st.lists(stages(kind, gate_ids, dense_objective), min_size=1, max_size=2, unique_by=lambda s: s["id"])
    )
    arm["stages"] = stage_list
    evaluation: dict[str, Any] = {
        "manifests": draw(st.sampled_from([["eval"], ["eval", "tier1"], ["eval", "text_eval"]])),
        "batch_size": 2,
        "latency_sample_per_depth": 0,
    }
    if kind == "recurrent":
        top = layers if sensible(draw) else layers + 2  # a careful author cuts inside the base
        if draw(st.booleans()) and top >= 3:
            a = draw(st.integers(1, top - 2))
            arm["surgery"] = {"split": [a, draw(st.integers(a + 1, top - 1))]}
        else:
            p, r = draw(st.integers(1, max(1, top - 2))), 1
            arm["surgery"] = {"tuple": [p, r, draw(st.integers(1, max(1, top - p - r)))]}
        bridge = draw(st.sampled_from(BRIDGES.names()))
        if bridge == "split":
            arm["bridge"] = {
                "kind": "split",
                "state_norm": draw(st.booleans()),
                "reentry": draw(st.sampled_from(["all", "answer"])),
            }
        else:
            arm["bridge"] = {
                "kind": "concat",
                "init": draw(st.sampled_from(["identity", "default"])),
                "initial_state": draw(st.sampled_from(["random", "zeros", "prelude"])),
                "sigma": draw(st.sampled_from([0.5, 1.0])),
            }
        budgets = [b.name for b in BUDGETS if BRIDGES[bridge].design in b.designs]
        budget = draw(st.sampled_from(budgets if sensible(draw) else BUDGETS.names()))
        arm["budget"] = (
            {"kind": budget}
            if budget in ("full_block", "full_model")
            else {
                "kind": "adapter",
                "rank": draw(st.integers(1, 2)),
                "alpha": 2.0,
                "targets": draw(st.lists(st.sampled_from(["q_proj", "v_proj", "down_proj"]), min_size=1, unique=True)),
            }
        )
        if draw(st.booleans()) or ("text_eval" in evaluation["manifests"] and sensible(draw)):
            evaluation["loops"] = draw(st.sampled_from([[1, 2], [1, 2, 3]]))
    if (kind == "dense") == sensible(draw) and draw(st.booleans()):
        evaluation["max_new_tokens"] = 6
    arm["evaluation"] = evaluation
    return arm


@st.composite
def protocol_documents(draw: Any) -> dict:
    layers = draw(st.integers(3, 5))
    base: dict[str, Any] = {
        "source": f"builtin:tiny-qwen2?hidden=16&layers={layers}&heads=2&kv_heads=1&intermediate=32",
        "dtype": "float32",
    }
    if draw(st.booleans()):
        base["num_layers"] = layers if sensible(draw) else layers + 1
    gate_kinds = draw(st.lists(st.sampled_from(sorted(GATES)), unique=True, max_size=3))
    gates = [GATES[kind] for kind in gate_kinds]
    stage_gates = [g["id"] for g in gates if GATE_KINDS[g["kind"]].after == "stage" or not sensible(draw)]
    arm_list = [draw(arms(i, stage_gates, layers)) for i in range(draw(st.integers(1, 2)))]
    if any(GATE_KINDS[g["kind"]].after == "arms" for g in gates) and len(arm_list) < 2:
        arm_list.append(draw(arms(1, stage_gates, layers)))
    if sensible(draw):  # a careful author attaches every stage gate somewhere and drops those for other arms
        used = {gate_id for arm in arm_list for stage in arm["stages"] for gate_id in stage["gates"]}
        gates = [g for g in gates if g["id"] in used or GATE_KINDS[g["kind"]].after != "stage"]
        for arm in arm_list:
            for stage in arm["stages"]:
                stage["gates"] = [
                    g
                    for g in stage["gates"]
                    if not GATE_KINDS[GATES_BY_ID[g]["kind"]].reads_loops or arm["kind"] == "recurrent"
                ]
        used = {gate_id for arm in arm_list for stage in arm["stages"] for gate_id in stage["gates"]}
        gates = [g for g in gates if g["id"] in used or GATE_KINDS[g["kind"]].after != "stage"]
    return {
        "name": "prop",
        "version": 1,
        "description": "drawn",
        "seed": 3,
        "bases": {"tiny": base},
        "manifests": [
            {
                "id": "train",
                "role": "train",
                "generator": "rule_chasing",
                "depths": [1, 3],
                "rows_per_depth": 4,
                "seed": 1,
                "split": "train",
            },
            {
                "id": "train_d1",
                "role": "train",
                "generator": "rule_chasing",
                "depths": [1, 1],
                "rows_per_depth": 4,
                "seed": 1,
                "split": "trainone",
            },
            {
                "id": "dev",
                "role": "dev",
                "generator": "rule_chasing",
                "depths": [1, 2],
                "rows_per_depth": 2,
                "seed": 1,
                "split": "dev",
            },
            {
                "id": "eval",
                "role": "eval",
                "generator": "rule_chasing",
                "depths": [1, 3],
                "rows_per_depth": 2,
                "seed": 1,
                "split": "test",
            },
            {"id": "tier1", "role": "guardrail", "generator": "arithmetic", "per_op": 1, "seed": 1, "split": "tier1"},
            {
                "id": "text_train",
                "role": "train",
                "generator": "text",
                "source": "generated",
                "part": "train",
                "documents": 4,
                "words": 8,
                "seed": 1,
                "split": "text",
            },
            {
                "id": "text_eval",
                "role": "eval",
                "generator": "text",
                "source": "generated",
                "part": "heldout",
                "documents": 2,
                "words": 8,
                "seed": 1,
                "split": "text",
            },
        ],
        "arms": arm_list,
        "gates": gates,
    }


def _check(document: dict, folder: Path) -> tuple[Path, list]:
    path = folder / "prop.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, issues_of(path)


# No shrinking: a drawn protocol is small enough to read as drawn, and shrinking one that builds
# models takes minutes.
@settings(
    max_examples=25,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(protocol_documents())
def test_check_passes_implies_a_dry_run_succeeds(document: dict) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path, issues = _check(document, Path(folder))
        note(yaml.safe_dump(document, sort_keys=False))
        if issues:
            note("refused: " + "; ".join(str(issue) for issue in issues))
            return
        done = dry_run(path)
        assert len(done.lines) >= len(document["arms"])


@pytest.mark.long  # a run of minutes: the long call runs it beside the real-shape dry runs
def test_the_drawn_protocols_fall_on_both_sides_of_the_check(tmp_path: Path) -> None:
    """The property means something only if the check both accepts and refuses drawn protocols."""
    from hypothesis import find

    accepted = find(
        protocol_documents(), lambda doc: not _check(doc, tmp_path)[1], settings=settings(database=None, deadline=None)
    )
    refused = find(
        protocol_documents(),
        lambda doc: bool(_check(doc, tmp_path)[1]),
        settings=settings(database=None, deadline=None),
    )
    assert accepted["arms"] and refused["arms"]
