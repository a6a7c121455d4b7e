"""The one protocol-to-model mapping: every option of an arm spec reaches the model.

The runner, `ledger params` and adapter load/unload all build through
``RecurrentLM.from_spec`` (the spec models' own ``model_options``).
"""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from arms.bases.builtin import tiny_random_base
from arms.model.budgets import AdapterRecurrentLM, unload_adapter
from arms.params import protocol_params
from arms.runtime import build_runtime
from ledger.protocol.loader import parse_protocol
from ledger.reader.shared import Reader
from ledger.rows.tasks import generate_rule_chasing
from ledger.rows.tasks.alphabets import resolve_alphabet

BASE = "builtin:tiny-qwen2?hidden=16&layers=4&heads=2&kv_heads=1&intermediate=32"


def protocol_with(arm: dict, *, base: str = BASE, dtype: str = "float32", depths=(1, 2), whole_arm: bool = False):
    """A one-arm protocol on a built-in tiny base: ``arm`` over a recurrent arm with one intermediate stage
    (or, ``whole_arm``, the arm itself but its id, base and evaluation)."""
    defaults = (
        {}
        if whole_arm
        else {
            "kind": "recurrent",
            "surgery": {"split": [1, 3]},
            "stages": [
                {
                    "id": "s",
                    "objective": "intermediate",
                    "manifest": "train",
                    "steps": 2,
                    "batch_size": 2,
                    "optimizer": {"lr": 0.01},
                }
            ],
        }
    )
    document = {
        "name": "mapping",
        "version": 1,
        "description": "d",
        "seed": 1,
        "bases": {"tiny": {"source": base, "dtype": dtype}},
        "manifests": [
            {
                "id": role,
                "role": role,
                "generator": "rule_chasing",
                "depths": list(depths),
                "rows_per_depth": n,
                "seed": 1,
                "split": split,
            }
            for role, n, split in (("train", 4, "train"), ("eval", 2, "test"))
        ],
        "arms": [{"id": "X", "base": "tiny", "evaluation": {"manifests": ["eval"]}, **defaults, **arm}],
    }
    return parse_protocol(yaml.safe_dump(document))


def runtime_of(arm: dict):
    protocol = protocol_with(arm)
    model, tokenizer = tiny_random_base(BASE)
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    return protocol, build_runtime(protocol.arms[0], model, tokenizer, reader)


def test_every_concat_bridge_option_reaches_the_model() -> None:
    _, runtime = runtime_of(
        {
            "bridge": {"kind": "concat", "init": "default", "initial_state": "prelude", "sigma": 0.25},
            "budget": {"kind": "full_block"},
        }
    )
    model = runtime.model
    assert (model.s0, model.s0_sigma, model.bridge.init) == ("prelude", 0.25, "default")
    _, runtime = runtime_of({"bridge": {"kind": "concat"}, "budget": {"kind": "full_block"}})
    assert (runtime.model.s0, runtime.model.s0_sigma, runtime.model.bridge.init) == ("random", 1.0, "identity")


def test_split_bridge_options_reach_the_model_and_survive_unloading_the_adapter() -> None:
    _, runtime = runtime_of(
        {
            "bridge": {"kind": "split", "reentry": "answer", "state_norm": True},
            "budget": {"kind": "adapter", "rank": 2, "alpha": 4},
        }
    )
    model = runtime.model
    assert isinstance(model, AdapterRecurrentLM) and model.reentry == "answer" and model.bridge.state_norm
    unloaded = unload_adapter(model)
    # before the fix the unloaded model fell back to the paper's every-position bridge
    assert unloaded.reentry == "answer" and unloaded.loop_options() == {**model.loop_options()}


def test_an_adapter_step_on_depth_one_rows_trains_nothing_and_does_not_fail() -> None:
    protocol, runtime = runtime_of({"bridge": {"kind": "split"}, "budget": {"kind": "adapter", "rank": 2, "alpha": 4}})
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 1), rows_per_depth=4, seed=2, split="train")
    before = {name: tensor.clone() for name, tensor in runtime.trainable_state().items()}
    loss = runtime.train_stage(protocol.arms[0].stages[0], rows, ("seed",))
    assert loss > 0
    after = runtime.trainable_state()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_ledger_params_counts_what_the_runtime_trains(tmp_path: Path) -> None:
    for arm in (
        {"bridge": {"kind": "split", "reentry": "answer"}, "budget": {"kind": "full_block"}},
        {"bridge": {"kind": "split"}, "budget": {"kind": "adapter", "rank": 2, "alpha": 4}},
        {"bridge": {"kind": "concat"}, "budget": {"kind": "full_block"}},
        {
            "bridge": {"kind": "split", "reentry": "answer"},
            "budget": {"kind": "full_block"},
            "halting_head": {"max_loops": 3},
        },
    ):
        protocol, runtime = runtime_of(arm)
        trained = sum(
            p.numel() for group in runtime.named_groups().values() for p in {id(p): p for p in group}.values()
        )
        (counted,) = protocol_params(protocol)
        assert counted.trainable == trained, arm


def test_the_adapter_arm_evaluates_on_its_merged_copy_where_it_fits(monkeypatch) -> None:
    import arms.model.budgets as budgets

    protocol, runtime = runtime_of(
        {"bridge": {"kind": "split", "reentry": "answer"}, "budget": {"kind": "adapter", "rank": 2, "alpha": 4}}
    )
    model = runtime.model
    with torch.no_grad():  # a non-zero adapter, so the merged copy really differs from the base block
        for p in model.lora_parameters():
            p.add_(0.1)
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 3), rows_per_depth=3, seed=5, split="test")
    evaluation = protocol.arms[0].evaluation
    merged_calls = []
    real_merge = model.use_merged_block
    monkeypatch.setattr(
        model, "use_merged_block", lambda enabled=True: merged_calls.append(enabled) or real_merge(enabled)
    )
    merged = runtime.evaluate(rows, evaluation)
    assert merged_calls == [True, False] and not model.merged  # merged for the evaluation, dropped after
    monkeypatch.setattr(budgets, "MERGED_COPY_MEMORY_SHARE", 0.0)  # no memory to spare: the unmerged adapter
    merged_calls.clear()
    unmerged = runtime.evaluate(rows, evaluation)
    assert merged_calls == []
    assert [(r.row_id, r.loop, r.prediction) for r in merged] == [(r.row_id, r.loop, r.prediction) for r in unmerged]
    assert all(abs(a.margin - b.margin) < 1e-5 for a, b in zip(merged, unmerged) if a.margin is not None)
    assert budgets.merged_copy_bytes(model) == sum(
        p.numel() * 4 for layer in model.surgery.block for n, p in layer.named_parameters() if "lora_" not in n
    )


def test_evaluation_reports_its_progress_batch_by_batch() -> None:
    """The runner's evaluation and gate bars move while an arm reads (they used to sit at 0 and jump to done)."""
    from ledger.run.reading import read_rows

    protocol, runtime = runtime_of({"bridge": {"kind": "split"}, "budget": {"kind": "full_block"}})
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 2), rows_per_depth=5, seed=5, split="test")
    evaluation = protocol.arms[0].evaluation.model_copy(update={"batch_size": 2})
    arm = protocol.arms[0].model_copy(update={"evaluation": evaluation})
    ticks: list[int] = []
    readings = read_rows(runtime, arm, protocol.manifest("eval"), rows, progress=ticks.append)
    assert ticks == [2, 2, 1, 2, 2, 1] and len({r.row_id for r in readings}) == len(rows)
