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
