"""Learning-rate schedules of training stages (``optimizer.schedule`` in a protocol)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from ledger.protocol.arms import LrSchedule, Stage
from ledger.protocol.loader import ProtocolError, load_protocol, parse_protocol

ROOT = Path(__file__).resolve().parents[2]


def test_cosine_and_linear_scales_run_from_warmup_to_the_floor():
    cosine = LrSchedule(kind="cosine", warmup_steps=4, min_lr_ratio=0.1)
    assert [cosine.scale(step, 20) for step in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert cosine.scale(4, 20) == pytest.approx(1.0)
    assert cosine.scale(12, 20) == pytest.approx(0.55)  # half-way: the mid-point of 1 and 0.1
    assert cosine.scale(20, 20) == pytest.approx(0.1) and cosine.scale(99, 20) == pytest.approx(0.1)
    linear = LrSchedule(kind="linear", min_lr_ratio=0.0)
    assert [linear.scale(step, 4) for step in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert LrSchedule(kind="constant").scale(7, 10) == 1.0
    values = [cosine.scale(step, 20) for step in range(4, 21)]
    assert values == sorted(values, reverse=True)


def test_a_protocol_without_a_schedule_keeps_its_canonical_form_and_one_with_it_changes():
    path = ROOT / "protocols" / "phaseA-tiny-tuning.yaml"  # registered before schedules existed, and has none
    plain = load_protocol(path)
    assert '"schedule"' not in plain.canonical()  # hashes registered before the field existed still hold
    data = yaml.safe_load(path.read_text())
    data["arms"][0]["stages"][0]["optimizer"]["schedule"] = {"kind": "cosine", "warmup_steps": 10}
    data["bases"] = {k: {**v, "source": str((path.parent / v["source"]).resolve())} for k, v in data["bases"].items()}
    data["claims"] = []
    scheduled = parse_protocol(yaml.safe_dump(data))
    assert scheduled.arms[0].stages[0].optimizer.schedule == LrSchedule(kind="cosine", warmup_steps=10)
    assert '"schedule":{"kind":"cosine","min_lr_ratio":0.1,"warmup_steps":10}' in scheduled.canonical()
    assert scheduled.sha256 != plain.sha256


def test_a_warmup_as_long_as_the_stage_is_refused_where_it_is_written():
    stage = {
        "id": "s",
        "objective": "intermediate",
        "manifest": "m",
        "steps": 10,
        "batch_size": 2,
        "optimizer": {"lr": 1e-3, "schedule": {"kind": "cosine", "warmup_steps": 10}},
    }
    with pytest.raises(Exception, match=r"warmup_steps \(10\) must be fewer than the stage's steps \(10\)"):
        Stage.model_validate(stage)
    path = ROOT / "protocols" / "smoke.yaml"
    data = yaml.safe_load(path.read_text())
    data["arms"][0]["stages"][0]["optimizer"]["schedule"] = {"kind": "linear", "warmup_steps": 10**6}
    with pytest.raises(ProtocolError) as info:
        parse_protocol(yaml.safe_dump(data), file="smoke-edited.yaml")
    assert "warmup_steps" in str(info.value) and "smoke-edited.yaml" in str(info.value)


def test_train_stage_moves_the_weights_by_the_scheduled_learning_rate():
    """AdamW on a constant gradient steps by about lr per step: the step sizes trace the schedule."""
    torch = pytest.importorskip("torch")
    from arms.runtime import ArmRuntime

    class Linear(ArmRuntime):
        def __init__(self):
            super().__init__(torch.nn.Linear(1, 1, bias=False), None, None)

        def named_groups(self):
            return {"w": [self.model.weight]}

        def loss(self, rows, stage, step):
            trace.append(float(self.model.weight.detach()))  # the weight before this step
            return self.model.weight.sum()  # gradient 1 at every step

    stage = Stage.model_validate(
        {
            "id": "s",
            "objective": "intermediate",
            "manifest": "m",
            "steps": 12,
            "batch_size": 1,
            "optimizer": {"lr": 0.01, "schedule": {"kind": "cosine", "warmup_steps": 3, "min_lr_ratio": 0.2}},
        }
    )
    trace: list[float] = []
    runtime = Linear()
    runtime.train_stage(stage, [0, 1], ("test",))
    trace.append(float(runtime.model.weight.detach()))
    moves = [before - after for before, after in zip(trace, trace[1:])]
    expected = [0.01 * stage.optimizer.schedule.scale(step, 12) for step in range(12)]
    assert moves == pytest.approx(expected, rel=1e-3)
    assert not math.isclose(moves[-1], moves[4], rel_tol=0.1)  # it did decay


def test_bridge_options_are_absent_from_the_canonical_form_unless_asked_for():
    from ledger.protocol.arms import SplitBridge

    assert SplitBridge(kind="split").model_dump() == {"kind": "split"}
    assert SplitBridge(kind="split", state_norm=True).model_dump() == {"kind": "split", "state_norm": True}
    assert SplitBridge(kind="split", reentry="answer").model_dump() == {"kind": "split", "reentry": "answer"}
    tuning = load_protocol(ROOT / "protocols" / "phaseA-tiny-long-tuning.yaml")
    options = {a.id: (a.bridge.state_norm, a.bridge.reentry) for a in tuning.arms}
    assert options == {
        "A": (False, "all"),
        "A_cosine": (False, "all"),
        "A_cosine_norm": (True, "all"),
        "A_cosine_answer": (False, "answer"),
        "A_cosine_answer_norm": (True, "answer"),
        "A_large_cosine": (False, "all"),
        "A_large_cosine_answer": (False, "answer"),
        "E_large_cosine_answer": (False, "answer"),
    }


@pytest.mark.parametrize("clip", [None, 0.5])
def test_a_stage_clips_the_gradient_norm_it_names(clip):
    """`optimizer.grad_clip` (the split-bridge paper's 0.5) bounds each step's gradient; unnamed, the clip is 1.0
    and the protocol's canonical form is the one it had before the option."""
    torch = pytest.importorskip("torch")
    from arms.runtime import ArmRuntime

    class Linear(ArmRuntime):
        def __init__(self):
            super().__init__(torch.nn.Linear(4, 1, bias=False), None, None)

        def named_groups(self):
            return {"w": [self.model.weight]}

        def loss(self, rows, stage, step):
            return 10 * self.model.weight.sum()  # a gradient of norm 20

    optimizer = {"lr": 0.01} | ({"grad_clip": clip} if clip else {})
    stage = Stage.model_validate(
        {"id": "s", "objective": "intermediate", "manifest": "m", "steps": 2, "batch_size": 1, "optimizer": optimizer}
    )
    assert ("grad_clip" in stage.optimizer.model_dump()) == (clip is not None)
    runtime = Linear()
    runtime.train_stage(stage, [0, 1], ("test",))
    assert float(runtime.model.weight.grad.norm()) == pytest.approx(clip or 1.0, rel=1e-5)


@pytest.mark.parametrize(
    "steps,warmup,decay_fraction,floor",
    [(1000, 5, 0.9, 0.001), (25000, 125, 0.9, 0.001), (50000, 125, 0.6, 0.001), (40, 0, 0.25, 0.1), (7, 2, 0.5, 0.0)],
)
def test_the_wsd_schedule_is_transformers_warmup_stable_decay(steps, warmup, decay_fraction, floor):
    """`kind: wsd` multiplies the rate exactly as the design-M seed's scheduler does: transformers'
    `get_scheduler("warmup_stable_decay", ...)` with the decay's steps rounded up from its fraction."""
    torch = pytest.importorskip("torch")
    from transformers import get_scheduler

    schedule = LrSchedule(kind="wsd", warmup_steps=warmup, decay_fraction=decay_fraction, min_lr_ratio=floor)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    reference = get_scheduler(
        name="warmup_stable_decay",
        optimizer=optimizer,
        num_warmup_steps=warmup,
        num_training_steps=steps,
        scheduler_specific_kwargs={"num_decay_steps": math.ceil(decay_fraction * steps), "min_lr_ratio": floor},
    )
    every = (
        range(steps)
        if steps <= 1000
        else [*range(200), *range(steps // 2, steps // 2 + 50), *range(steps - 300, steps)]
    )
    expected = {step: reference.lr_lambdas[0](step) for step in every}
    assert {step: schedule.scale(step, steps) for step in every} == pytest.approx(expected, abs=1e-12)
    assert min(expected.values()) < 1.0 == max(expected.values())  # it warms up or decays, and holds between


def test_a_wsd_schedule_needs_its_decay_and_room_for_it():
    with pytest.raises(ValueError, match="decay_fraction is the wsd schedule's"):
        LrSchedule(kind="wsd")
    with pytest.raises(ValueError, match="decay_fraction is the wsd schedule's"):
        LrSchedule(kind="cosine", decay_fraction=0.5)
    assert "decay_fraction" not in LrSchedule(kind="cosine").model_dump()  # the canonical forms before it
    stage = {"id": "s", "objective": "intermediate", "manifest": "m", "steps": 10, "batch_size": 1}
    schedule = {"kind": "wsd", "warmup_steps": 3, "decay_fraction": 0.8}
    with pytest.raises(ValueError, match=r"the warm-up \(3 steps\) and the decay \(8 of 10 steps\) overlap"):
        Stage.model_validate({**stage, "optimizer": {"lr": 1e-3, "schedule": schedule}})


def test_muon_leaves_the_rest_to_adamw_at_its_own_rate_and_betas():
    """The design-M seed: Muon at 1e-3 on the hidden matrices, AdamW at 5e-5 with betas (0.9, 0.95) on the rest;
    `adamw_lr` and `betas` reach the optimisers the stage builds."""
    torch = pytest.importorskip("torch")
    from arms.runtime import ArmRuntime

    class Block(ArmRuntime):
        def __init__(self):
            super().__init__(torch.nn.Linear(4, 4), None, None)

        def named_groups(self):
            return {"block": [self.model.weight, self.model.bias]}

        def loss(self, rows, stage, step):
            return self.model(torch.ones(1, 4)).square().sum()

    optimizer = {"kind": "muon", "lr": 1e-3, "adamw_lr": 5e-5, "betas": [0.9, 0.95]}
    stage = Stage.model_validate(
        {"id": "s", "objective": "intermediate", "manifest": "m", "steps": 1, "batch_size": 1, "optimizer": optimizer}
    )
    runtime = Block()
    runtime.train_stage(stage, [0], ("test",))
    built = runtime.first_update.optimizer.optimizers
    (muon,), (adamw,) = built["muon"].param_groups, built["adamw"].param_groups
    assert muon["params"][0] is runtime.model.weight and muon["lr"] == 1e-3
    assert adamw["params"][0] is runtime.model.bias and adamw["lr"] == 5e-5 and adamw["betas"] == (0.9, 0.95)
    with pytest.raises(ValueError, match="adamw_lr is the rate of what Muon leaves to AdamW"):
        Stage.model_validate(
            {"id": "s", "objective": "intermediate", "manifest": "m", "steps": 1, "batch_size": 1,
             "optimizer": {"kind": "adamw", "lr": 1e-3, "adamw_lr": 5e-5}}
        )  # fmt: skip
