"""Manifests: determinism across processes, hash sensitivity, line-end independence,
and train/eval contamination checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.rows.contamination import ContaminationError, check_contamination, find_contamination
from ledger.rows.manifest import Manifest, Row
from ledger.rows.tasks import generate, generate_manifest

ROOT = Path(__file__).resolve().parents[2]

PHASE_A = {
    "surface": "symbolic",
    "symbols": "N16",
    "depth_range": (1, 14),
    "rows_per_depth": 128,
    "seed": 20260707,
    "split": "test",
}

_CHILD = """
from ledger.rows.tasks import generate_manifest
print(generate_manifest("a", "rule_chasing", surface="symbolic", symbols="N16", depth_range=(1, 14), rows_per_depth=128, seed=20260707, split="test").sha256)
print(generate_manifest("b", "rule_chasing", surface="relay", depth_range=(1, 23), rows_per_depth=8, seed=3, split="train").sha256)
print(generate_manifest("c", "arithmetic", seed=5).sha256)
"""


def _child_hashes(hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.split()


def test_same_parameters_give_the_same_manifest_hash_in_separate_processes():
    expected = [
        generate_manifest("a", "rule_chasing", **PHASE_A).sha256,
        generate_manifest(
            "b", "rule_chasing", surface="relay", depth_range=(1, 23), rows_per_depth=8, seed=3, split="train"
        ).sha256,
        generate_manifest("c", "arithmetic", seed=5).sha256,
    ]
    # different string-hash salts: nothing may depend on hash() or set order
    assert _child_hashes("1") == expected
    assert _child_hashes("4242") == expected
    assert len(set(expected)) == 3


def _mutate(value, field: str = ""):
    """A different, still valid value for the field."""
    if field == "task":
        return "arithmetic" if value == "rule_chasing" else "rule_chasing"
    if field == "surface":
        return "pointer" if value != "pointer" else "relay"
    if value is None:
        return {"table": {"A": "B"}, "choices": {"A": "1"}}.get(field, "x")
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "zz_extra": "x"}
    raise TypeError(type(value))


def _mutations(row: Row):
    """Every field of the row changed, one at a time, plus changes deep inside the
    table, the choices, the meta and the path. Each changed row is still a valid Row."""
    for field in Row.model_fields:
        yield field, row.model_copy(update={field: _mutate(getattr(row, field), field)})
    if row.table:
        key = next(iter(row.table))
        yield "table[value]", row.model_copy(update={"table": {**row.table, key: row.table[key] + "x"}})
    if row.choices:
        yield "choices[value]", row.model_copy(update={"choices": {**row.choices, "A": row.choices["A"] + "0"}})
    for key, value in row.meta.items():
        yield f"meta[{key}]", row.model_copy(update={"meta": {**row.meta, key: _mutate(value)}})
    if row.path:
        yield "path[0]", row.model_copy(update={"path": [row.path[0] + "x", *row.path[1:]]})


def test_manifest_hash_changes_when_any_field_of_any_row_changes():
    rows = (
        generate("rule_chasing", surface="symbolic", depth_range=(1, 3), rows_per_depth=2, seed=1, split="test")
        + generate("rule_chasing", surface="relay", depth_range=(2, 2), rows_per_depth=2, seed=1, split="test")
        + generate("arithmetic", seed=1, per_op=1)
    )
    manifest = Manifest(name="m", rows=tuple(rows))
    base = manifest.sha256
    seen = {base}
    checked = 0
    for position, row in enumerate(rows):
        for field, changed in _mutations(row):
            assert changed != row, (row.row_id, field)
            assert Row.model_validate(changed.model_dump()) == changed  # a legal row, not a broken one
            mutated = Manifest(name="m", rows=tuple(rows[:position]) + (changed,) + tuple(rows[position + 1 :]))
            digest = mutated.sha256
            assert digest != base, f"hash unchanged after changing {field} of {row.row_id}"
            seen.add(digest)
            checked += 1
    assert len(seen) == checked + 1  # every mutation gives its own hash
    assert checked >= len(rows) * len(Row.model_fields)
    # order matters, the manifest's name does not
    assert Manifest(name="m", rows=tuple(reversed(rows))).sha256 != base
    assert Manifest(name="other", rows=tuple(rows)).sha256 == base


def test_manifest_hash_ignores_crlf_in_an_exported_file(tmp_path):
    manifest = generate_manifest("phase_a", "rule_chasing", **PHASE_A)
    lf = manifest.write_jsonl(tmp_path / "rows.jsonl")
    data = lf.read_bytes()
    assert b"\r" not in data
    crlf = tmp_path / "rows_crlf.jsonl"
    crlf.write_bytes(data.replace(b"\n", b"\r\n"))
    assert crlf.read_bytes() != data
    back = Manifest.read_jsonl(crlf)
    assert back.sha256 == manifest.sha256
    assert back.rows == manifest.rows
    assert Manifest.read_jsonl(lf).sha256 == manifest.sha256


# --------------------------------------------------------------------------- contamination


def _rows(seed, split="test", **extra):
    params = {
        "surface": "symbolic",
        "depth_range": (1, 14),
        "rows_per_depth": 16,
        "seed": seed,
        "split": split,
        **extra,
    }
    return generate("rule_chasing", **params)


def test_shared_problem_between_train_and_eval_is_found():
    eval_rows = _rows(1)
    train_rows = _rows(2, split="train")
    leaked = eval_rows[37]
    # the same problem under another id, surface and depth still counts
    copy = leaked.model_copy(update={"row_id": "train_leak", "surface": "relay", "depth": 1, "prompt": "p"})
    train_rows = train_rows[:5] + [copy] + train_rows[5:]
    assert find_contamination(train_rows, eval_rows) == [("train_leak", leaked.row_id)]
    with pytest.raises(ContaminationError) as info:
        check_contamination({"train": Manifest(name="train", rows=tuple(train_rows)), "eval": eval_rows})
    assert info.value.count == 1
    assert "train:train_leak == eval:" + leaked.row_id in str(info.value)


def test_disjoint_seeds_are_clean():
    assert find_contamination(_rows(1, split="train"), _rows(2)) == []
    assert find_contamination(_rows(1), _rows(2)) == []
    check_contamination({"train": _rows(1, split="train"), "eval": _rows(1), "tail": _rows(9, depth_range=(11, 14))})


def test_arithmetic_seeds_share_the_questions_their_small_operand_ranges_repeat():
    """A question is its operation and operands, whatever its options: seeds 0 and 1 draw some of the same
    products and quotients (2-12 each way), so a Tier-1 guardrail on one is contaminated by training on the other."""
    tier1, train = generate("arithmetic", seed=0), generate("arithmetic", seed=1)
    expected = [
        (t.row_id, e.row_id)
        for e in tier1
        for t in train
        if (t.meta["op"], t.meta["operands"]) == (e.meta["op"], e.meta["operands"])
    ]
    assert expected and all(tier1_id.split("_")[1] in ("mul", "div", "sub", "add") for tier1_id, _ in expected)
    with pytest.raises(ContaminationError) as info:
        check_contamination({"tier1": tier1, "train": train})
    assert sorted((pair[1], pair[3]) for pair in info.value.pairs) == sorted(expected)


def test_contamination_error_lists_at_most_ten_pairs_and_the_count():
    rows = _rows(3)
    with pytest.raises(ContaminationError) as info:
        check_contamination({"train_stage1": rows, "test": rows, "gate": rows[:2]})
    error = info.value
    assert error.count == len(rows) + 2
    message = str(error)
    assert message.startswith(f"{error.count} training/evaluation row pair(s)")
    assert message.count(" == ") == 10
    assert f"... and {error.count - 10} more" in message
    # roles named explicitly
    with pytest.raises(ContaminationError):
        check_contamination({"warmup": rows, "test": rows[:1]}, train_roles=["warmup"])
    check_contamination({"warmup": rows, "test": rows[:1]})  # no train role: nothing to compare
    with pytest.raises(KeyError):
        check_contamination({"test": rows}, train_roles=["train"])


def test_roles_may_hold_several_manifests():
    """As a protocol builds them: role -> [Manifest, ...]; pairs name the manifest."""
    train = Manifest(name="train", rows=tuple(_rows(1, split="train")))
    dev = Manifest(name="dev", rows=tuple(_rows(2, split="dev")))
    eval_a = Manifest(name="phaseA_eval", rows=tuple(_rows(3)))
    leak = Manifest(name="persistence", rows=(train.rows[7].model_copy(update={"row_id": "persist_d01_00000"}),))
    check_contamination({"train": [train], "dev": [dev], "eval": [eval_a]})
    with pytest.raises(ContaminationError) as info:
        check_contamination(
            {
                "train": [train],
                "dev": [dev],
                "eval": [eval_a, leak],
                "guardrail": [Manifest(name="tier1", rows=tuple(generate("arithmetic", seed=0)))],
            }
        )
    assert info.value.pairs == [("train", train.rows[7].row_id, "eval[persistence]", "persist_d01_00000")]
    # generators are consumed once, yet every train role still sees every eval role
    with pytest.raises(ContaminationError) as info:
        check_contamination(
            {"train_a": iter(train.rows), "train_b": iter(train.rows[:1]), "eval": (r for r in train.rows[:2])}
        )
    assert info.value.count == 3
    with pytest.raises(TypeError, match="expected Rows or Manifests"):
        check_contamination({"train": [1], "eval": []})


def test_table_less_rows_are_compared_by_prompt():
    tier1 = generate("arithmetic", seed=0)
    assert find_contamination(tier1[:3], tier1) == [(r.row_id, r.row_id) for r in tier1[:3]]


# Golden hashes of this code's own output (not the paper's). A preregistered manifest
# hash must never move under the same parameters: if one of these fails, the generator
# changed, so restore it or add a new ``version`` and leave version 1 as it was.
PINNED = [
    (
        {
            "surface": "symbolic",
            "symbols": "N16",
            "depth_range": (1, 14),
            "rows_per_depth": 4,
            "seed": 0,
            "split": "test",
        },
        "rule_chasing",
        "90dbdc4daf3e1adc5ca865dcf52dc86d14e524beca89d356f2db883daeafe0aa",
    ),
    (
        {"surface": "relay", "depth_range": (1, 23), "rows_per_depth": 2, "seed": 0, "split": "train"},
        "rule_chasing",
        "6709ae8c06b597a8e71a69cfd866d88a8f547be298d900e025c7519b7bae2d3d",
    ),
    (
        {
            "surface": "pointer",
            "symbols": "N24",
            "depth_range": (1, 5),
            "rows_per_depth": 2,
            "seed": 0,
            "split": "val",
            "distractors": False,
        },
        "rule_chasing",
        "7509f78d29612cb5517021cb8ea19e1c445f0061ed1d7f2aa1282c2bcf16713b",
    ),
    ({"seed": 0}, "arithmetic", "5ebb6a9172653e5af002f66e759bd79efdf5f89498a3ed49989315480554e43f"),
]


@pytest.mark.parametrize("params, generator, sha256", PINNED)
def test_version_1_generators_are_pinned(params, generator, sha256):
    assert generate_manifest("pinned", generator, **params).sha256 == sha256
