"""Training in bf16 learns: every arm kind's trainable tensors are stepped through fp32 master weights
(`arms/train/optim.py::MasterWeights`), so that an update below bf16's rounding step is kept, not lost.

At a learning rate of 1e-5 (the paper's Phase A) one AdamW step moves a weight by about 1e-5, below half
of bf16's spacing for |w| above about 0.004. The test takes the protocol's learning rate on a bf16 base
and counts, per trainable tensor, the share of elements the optimiser moved.
"""

from __future__ import annotations

import pytest
import torch
from test_runtime_mapping import protocol_with

from arms.bases.builtin import tiny_random_base
from arms.runtime import build_runtime
from arms.train.optim import build_optimizer
from arms.train.step import take_step
from ledger.reader.shared import Reader
from ledger.rows.tasks import generate_rule_chasing
from ledger.rows.tasks.alphabets import resolve_alphabet

pytestmark = pytest.mark.models

BASE = "builtin:tiny-qwen2?hidden=32&layers=4&heads=2&kv_heads=1&intermediate=64"
LR = 1e-5  # protocols/phaseA.yaml's extend-stage rate
STAGE = {"id": "s", "manifest": "train", "steps": 2, "batch_size": 4, "optimizer": {"lr": LR}}
ARMS = {
    "full_block": {
        "kind": "recurrent",
        "surgery": {"split": [1, 3]},
        "bridge": {"kind": "split"},
        "budget": {"kind": "full_block"},
        "stages": [{**STAGE, "objective": "intermediate"}],
    },
    "adapter": {
        "kind": "recurrent",
        "surgery": {"split": [1, 3]},
        "bridge": {"kind": "split"},
        "budget": {"kind": "adapter", "rank": 2, "alpha": 4},
        "stages": [{**STAGE, "objective": "intermediate"}],
    },
    "dense": {"kind": "dense", "stages": [{**STAGE, "objective": "sft_direct"}]},
}


def _runtime(arm: dict):
    protocol = protocol_with(arm, base=BASE, dtype="bfloat16", depths=(2, 3), whole_arm=True)
    model, tokenizer = tiny_random_base(BASE)
    model = model.to(torch.bfloat16)
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    return protocol, build_runtime(protocol.arms[0], model, tokenizer, reader)


def _moved_shares(kind: str, master_weights: bool) -> dict[str, float]:
    """Per trainable tensor, the share of its elements two steps at LR moved (in the tensor the optimiser
    steps: the fp32 master of a bf16 tensor, else the tensor itself)."""
    protocol, runtime = _runtime(ARMS[kind])
    stage = protocol.arms[0].stages[0]
    rows = generate_rule_chasing(surface="symbolic", depth_range=(2, 3), rows_per_depth=4, seed=2, split="train")
    groups = runtime.named_groups()
    optimizer = build_optimizer(groups, kind="adamw", lr=LR, master_weights=master_weights)
    named = {f"{group}/{i}": p for group, params in groups.items() for i, p in enumerate(params)}
    masters = {id(p): master for p, master in (optimizer.masters.pairs if optimizer.masters else [])}
    stepped = {name: masters.get(id(p), p) for name, p in named.items()}
    before = {name: tensor.detach().clone() for name, tensor in stepped.items()}
    trainable = [p for params in groups.values() for p in params]
    runtime.model.train()
    for step in range(2):
        batch = rows[step * 4 : step * 4 + 4]
        take_step(optimizer, lambda batch=batch, step=step: runtime.loss(batch, stage, step), trainable)
    return {
        name: (stepped[name].detach() != before[name]).float().mean().item()
        for name in named
        if named[name].dtype == torch.bfloat16
    }


@pytest.mark.parametrize("kind", sorted(ARMS))
def test_two_steps_at_the_protocols_rate_move_most_of_every_bf16_trainable_tensor(kind):
    shares = _moved_shares(kind, master_weights=True)
    if kind == "adapter":
        assert shares, "the bridge of an adapter arm is bf16 and trains through masters"
    assert shares and min(shares.values()) >= 0.5, {name: round(share, 3) for name, share in shares.items()}


def test_stepped_in_bf16_directly_most_elements_never_move():
    """What the masters mend: the same two steps on the full-block arm without them."""
    shares = _moved_shares("full_block", master_weights=False)
    assert shares and sorted(shares.values())[len(shares) // 2] < 0.5, shares


def test_the_model_keeps_the_rounded_master_and_an_fp32_protocol_has_no_masters():
    protocol, runtime = _runtime(ARMS["full_block"])
    groups = runtime.named_groups()
    optimizer = build_optimizer(groups, kind="adamw", lr=1e-2)
    assert optimizer.masters is not None
    rows = generate_rule_chasing(surface="symbolic", depth_range=(2, 3), rows_per_depth=4, seed=2, split="train")
    stage = protocol.arms[0].stages[0]
    trainable = [p for params in groups.values() for p in params]
    take_step(optimizer, lambda: runtime.loss(rows[:4], stage, 0), trainable)
    for p, master in optimizer.masters.pairs:
        assert p.dtype == torch.bfloat16 and master.dtype == torch.float32
        assert torch.equal(p.detach(), master.detach().to(torch.bfloat16))
    optimizer.zero_grad()  # clears the model's gradients too, not only the masters'
    assert all(p.grad is None and master.grad is None for p, master in optimizer.masters.pairs)
    fp32 = {"w": [torch.nn.Parameter(torch.ones(3))]}
    assert build_optimizer(fp32, lr=1e-3).masters is None


def test_a_stage_whose_first_update_rounds_away_fails_and_the_dry_run_reports_the_share():
    from arms.train.first_update import UpdatesVanished

    arm = {**ARMS["full_block"], "stages": [{**STAGE, "objective": "intermediate", "optimizer": {"lr": 1e-12}}]}
    protocol, runtime = _runtime(arm)
    runtime.model.float()  # fp32, no masters: 1e-12 is far below the spacing of every weight
    rows = generate_rule_chasing(surface="symbolic", depth_range=(2, 3), rows_per_depth=4, seed=2, split="train")
    with pytest.raises(UpdatesVanished, match=r"the first update at the full rate moved under 50% .* in block"):
        runtime.train_stage(protocol.arms[0].stages[0], rows, ("seed",))
    protocol, runtime = _runtime(ARMS["full_block"])  # bf16 at the protocol's rate, through masters
    runtime.train_stage(protocol.arms[0].stages[0], rows, ("seed",))
    assert runtime.first_update.summary().startswith("the first update moved 100.0%-100.0% of the elements")


def test_a_stage_told_to_step_a_part_moves_only_that_part_and_trains_all_after():
    """``ArmRuntime.step_only``: the stage steps the named tensors alone (no gradient kept for the rest), and the
    arm's trainable tensors are trainable again after it."""
    protocol, runtime = _runtime(ARMS["dense"])
    stage = protocol.arms[0].stages[0]
    rows = generate_rule_chasing(surface="symbolic", depth_range=(2, 3), rows_per_depth=4, seed=2, split="train")
    tensors = [p for group in runtime.named_groups().values() for p in group]
    part = [min(tensors, key=lambda p: p.numel())]
    before = [p.detach().clone() for p in tensors]
    runtime.step_only(part)
    runtime.train_stage(stage, rows, ("seed",))
    moved = [not torch.equal(p.detach(), b) for p, b in zip(tensors, before, strict=True)]
    assert moved == [p is part[0] for p in tensors]
    assert all(p.requires_grad for p in tensors) and all(p.grad is None for p in tensors if p is not part[0])
    runtime.step_only(None)
    runtime.train_stage(stage, rows, ("seed",))
    assert sum(not torch.equal(p.detach(), b) for p, b in zip(tensors, before, strict=True)) > len(tensors) // 2
