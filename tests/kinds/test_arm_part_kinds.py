"""A bridge, a budget or a recurrence schedule defined here joins the arms' specs as the built-in ones do: the loader validates it (its
own fields, its own errors) inside a recurrent arm and the schema publishes it; removed again, it is refused by
name. (How it computes is the arms side's: ``BridgeKind``'s implementation, imported on first use.)"""

from __future__ import annotations

from typing import Literal

import pytest
import yaml
from gated_bridge_spec import KIND, GatedResidualSpec
from pydantic import Field, ValidationError

from ledger.protocol.arms import BRIDGES, BUDGETS, BudgetKind, BudgetSpec
from ledger.protocol.protocol import Protocol, protocol_json_schema
from ledger.protocol.training import RECURRENCES, RecurrenceKind, RecurrenceSpec
from tests.run_helpers import SMOKE


class BiasOnlyBudget(BudgetSpec):
    kind: Literal["bias_only"]


class FixedRecurrence(RecurrenceSpec):
    """Every step at the same number of loops."""

    kind: Literal["fixed"]
    loops: int = Field(ge=1, le=64)


RECURRENCE = RecurrenceKind("fixed", FixedRecurrence, f"{__name__}:FixedSchedule", "the same loops every step")
BRIDGE = KIND  # gated_bridge_spec.py: the gated-residual bridge another test runs, exports and loads
BUDGET = BudgetKind("bias_only", BiasOnlyBudget, f"{__name__}:apply", "the biases alone", designs=("S",))


@pytest.fixture
def kinds():
    BRIDGES.add(BRIDGE)
    BUDGETS.add(BUDGET)
    RECURRENCES.add(RECURRENCE)
    yield
    RECURRENCES.remove("fixed")
    BUDGETS.remove("bias_only")
    BRIDGES.remove(BRIDGE.name)


def _protocol(bridge: dict, budget: dict, recurrence: dict | None = None) -> dict:
    data = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    arm = next(arm for arm in data["arms"] if arm.get("kind") == "recurrent")
    arm["bridge"], arm["budget"] = bridge, budget
    if recurrence is not None:
        arm["stages"][0]["recurrence"] = recurrence
    return data


def test_a_bridge_and_a_budget_defined_here_are_loaded_and_published(kinds):
    protocol = Protocol.model_validate(_protocol({"kind": "gated_residual", "gate_init": 1.5}, {"kind": "bias_only"}))
    arm = next(arm for arm in protocol.arms if arm.kind == "recurrent")
    assert isinstance(arm.bridge, GatedResidualSpec) and isinstance(arm.budget, BiasOnlyBudget)
    assert arm.bridge.model_options() == {"bridge": "gated_residual", "gate_init": 1.5}
    assert {"GatedResidualSpec", "BiasOnlyBudget"} <= set(protocol_json_schema()["$defs"])
    with pytest.raises(ValidationError, match="gate_init"):  # its own fields, validated
        Protocol.model_validate(_protocol({"kind": "gated_residual", "gate_init": 99}, {"kind": "bias_only"}))
    scheduled = Protocol.model_validate(
        _protocol({"kind": "split"}, {"kind": "full_block"}, {"kind": "fixed", "loops": 3})
    )
    stage = next(arm for arm in scheduled.arms if arm.kind == "recurrent").stages[0]
    assert isinstance(stage.recurrence, FixedRecurrence) and stage.recurrence.loops == 3
    assert "FixedRecurrence" in protocol_json_schema()["$defs"]


def test_without_them_they_are_refused(kinds):
    RECURRENCES.remove("fixed")
    BUDGETS.remove("bias_only")
    BRIDGES.remove(BRIDGE.name)
    try:
        with pytest.raises(ValidationError, match="gated_residual"):
            Protocol.model_validate(_protocol({"kind": "gated_residual"}, {"kind": "full_block"}))
        with pytest.raises(ValidationError, match="fixed"):
            Protocol.model_validate(_protocol({"kind": "split"}, {"kind": "full_block"}, {"kind": "fixed", "loops": 3}))
    finally:
        BRIDGES.add(BRIDGE)
        BUDGETS.add(BUDGET)
        RECURRENCES.add(RECURRENCE)
