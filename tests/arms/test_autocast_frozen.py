"""Under a base's autocast (``bases.NAME.autocast: bfloat16``) an arm holds its frozen linear weights in bf16 once
(``arms.device.hold_frozen_in``), and the CPU runs transformers' eager attention (``attention_for``).

Holding a frozen weight in bf16 early is the arithmetic autocast already did at each use: a training step and the
readouts after it equal, bit for bit, those of the same arm whose frozen weights autocast casts every time."""

from __future__ import annotations

import pytest
import torch
from test_runtime_mapping import protocol_with

from arms.bases.builtin import tiny_random_base
from arms.device import attention_for, hold_frozen_in, place
from arms.runtime import build_runtime
from arms.train.optim import build_optimizer
from arms.train.step import take_step
from ledger.reader.shared import Reader
from ledger.rows.tasks import generate_rule_chasing
from ledger.rows.tasks.alphabets import resolve_alphabet

pytestmark = pytest.mark.models

BASE = "builtin:tiny-qwen2?hidden=32&layers=4&heads=2&kv_heads=1&intermediate=64"
STAGE = {"id": "s", "manifest": "train", "steps": 1, "batch_size": 4, "optimizer": {"lr": 1e-3}}
FULL_BLOCK = {
    "kind": "recurrent",
    "surgery": {"split": [1, 3]},
    "bridge": {"kind": "split", "reentry": "all"},
    "budget": {"kind": "full_block"},
    "stages": [{**STAGE, "objective": "intermediate"}],
}
ADAPTER = {**FULL_BLOCK, "budget": {"kind": "adapter", "rank": 2, "alpha": 4}}


def _runtime(arm: dict, autocast: str | None):
    protocol = protocol_with(arm, base=BASE, dtype="float32", depths=(2, 3), whole_arm=True)
    model, tokenizer = tiny_random_base(BASE)
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    return protocol.arms[0], build_runtime(protocol.arms[0], model, tokenizer, reader, autocast=autocast)


def _stepped_then_read(arm: dict, held: bool):
    spec, runtime = _runtime(arm, "bfloat16" if held else None)
    rows = generate_rule_chasing(surface="symbolic", depth_range=(2, 3), rows_per_depth=4, seed=3, split="train")
    groups = runtime.named_groups()
    optimizer = build_optimizer(groups, kind="adamw", lr=1e-3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(0)
        runtime.model.train()
        take_step(optimizer, lambda: runtime.loss(rows[:4], spec.stages[0], 0), [p for g in groups.values() for p in g])
        runtime.model.eval()
        with torch.no_grad():
            readouts = runtime.readouts(rows[4:], 3)
    return runtime, runtime.trainable_state(), readouts


def test_frozen_linears_held_in_bf16_train_and_read_bit_for_bit_as_autocast_casting_them_each_time():
    held, held_state, held_readouts = _stepped_then_read(FULL_BLOCK, held=True)
    _, cast_state, cast_readouts = _stepped_then_read(FULL_BLOCK, held=False)
    model = held.model
    frozen = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad]
    trained = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight.requires_grad]
    assert frozen and all(w.dtype == torch.bfloat16 for w in frozen)  # prelude, coda, and the head
    assert trained and all(w.dtype == torch.float32 for w in trained)  # the block trains in fp32
    assert model.base.get_input_embeddings().weight.dtype == torch.float32  # the (once tied) table is not cast
    assert held_state.keys() == cast_state.keys()
    assert all(torch.equal(held_state[name], cast_state[name]) for name in held_state)
    assert torch.equal(held_readouts, cast_readouts)


def test_an_adapters_base_layers_stay_full_precision_for_its_merge():
    _, runtime = _runtime(ADAPTER, "bfloat16")
    from peft.tuners.tuners_utils import BaseTunerLayer

    adapted = [m.base_layer.weight for m in runtime.model.modules() if isinstance(m, BaseTunerLayer)]
    assert adapted and all(w.dtype == torch.float32 for w in adapted)
    head = runtime.model.base.get_output_embeddings().weight
    assert head.dtype == torch.bfloat16  # outside the adapter, a frozen linear is still held in bf16


def test_without_autocast_nothing_is_cast_and_the_cpu_keeps_the_models_attention():
    _, runtime = _runtime(FULL_BLOCK, None)
    assert hold_frozen_in(runtime.model, None) == 0
    assert all(p.dtype == torch.float32 for p in runtime.model.parameters())
    cpu = torch.device("cpu")
    assert attention_for(cpu) is None and attention_for(cpu, "bfloat16") == "eager"
    model, _ = tiny_random_base(BASE)
    model.set_attn_implementation("sdpa")
    assert place(model, cpu, "bfloat16").config._attn_implementation == "eager"


def test_under_one_autocast_context_a_forward_reads_the_weights_after_each_step_and_each_load(tmp_path):
    """`ledger run` holds one autocast context over a whole arm, and autocast keeps its casts of trained weights
    until the outermost context exits: after an update or a load, a forward must still read the new weights."""
    spec, runtime = _runtime(FULL_BLOCK, "bfloat16")
    rows = generate_rule_chasing(surface="symbolic", depth_range=(2, 3), rows_per_depth=4, seed=3, split="train")
    groups = runtime.named_groups()
    trainable = [p for g in groups.values() for p in g]
    optimizer = build_optimizer(groups, kind="adamw", lr=1e-2)
    saved = runtime.save(tmp_path / "before.safetensors", {})

    def loss() -> torch.Tensor:
        torch.manual_seed(1)
        with torch.no_grad():
            return runtime.loss(rows[:4], spec.stages[0], 0)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = loss()  # autocast casts the trained weights here, and keeps the casts
        take_step(optimizer, lambda: runtime.loss(rows[:4], spec.stages[0], 0), trainable)
        after_step = loss()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fresh_after_step = loss()
        runtime.load(saved)  # back to the weights before the step
        after_load = loss()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fresh_after_load = loss()
    assert torch.equal(after_step, fresh_after_step) and not torch.equal(after_step, before)
    assert torch.equal(after_load, fresh_after_load) and torch.equal(after_load, before)
