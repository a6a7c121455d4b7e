"""A gate kind defined here joins the protocol's gates as the built-in ones do: the loader validates it (its
own fields, its own errors) and the schema publishes it; removed again, it is refused by name."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import ValidationError

from ledger.protocol.gates import GATE_KINDS, GateKind, GateSpec
from ledger.protocol.protocol import Protocol, protocol_json_schema
from tests.run_helpers import SMOKE


class CalibrationGate(GateSpec):
    """Expected calibration error at or below a bound."""

    kind: Literal["calibration"]
    manifest: str
    bound: float

    def rule(self) -> str:
        return f"ECE <= {self.bound}"


@pytest.fixture
def calibration():
    GATE_KINDS.add(GateKind("calibration", CalibrationGate, f"{__name__}:judge", "calibration bound"))
    yield
    GATE_KINDS.remove("calibration")


def _protocol(gate: dict) -> dict:
    import yaml

    data = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    data["gates"] = [*data.get("gates", []), gate]
    return data


def test_a_gate_kind_defined_here_is_loaded_and_published(calibration):
    gate = {"id": "calibrated", "kind": "calibration", "manifest": "dev", "bound": 0.1, "action": "flag"}
    protocol = Protocol.model_validate(_protocol(gate))
    (found,) = [g for g in protocol.gates if g.id == "calibrated"]
    assert isinstance(found, CalibrationGate) and found.rule() == "ECE <= 0.1"
    assert "CalibrationGate" in protocol_json_schema()["$defs"]
    with pytest.raises(ValidationError, match="bound"):  # its own fields, validated
        Protocol.model_validate(_protocol({**gate, "bound": "high"}))


def test_without_it_the_kind_is_refused(calibration):
    GATE_KINDS.remove("calibration")
    try:
        with pytest.raises(ValidationError, match="calibration"):
            Protocol.model_validate(_protocol({"id": "c", "kind": "calibration", "manifest": "dev", "action": "flag"}))
    finally:
        GATE_KINDS.add(GateKind("calibration", CalibrationGate, f"{__name__}:judge", "calibration bound"))
