"""The spec and the kind of the gated-residual bridge (``gated_bridge.py`` is how it computes): what a plugin
registers (``gated_bridge_plugin.py``) and what the in-process tests register for one test at a time."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ledger.protocol.arms import BridgeKind, BridgeSpec


class GatedResidualSpec(BridgeSpec):
    """The state re-enters as h + tanh(a) W LN(p)."""

    kind: Literal["gated_residual"]
    gate_init: float = Field(default=0.0, ge=-3, le=3)

    def model_options(self) -> dict[str, Any]:
        return {"bridge": self.kind, "gate_init": self.gate_init}

    def departures(self) -> tuple[str, ...]:
        return ("gated-residual re-entry",)


KIND = BridgeKind(
    "gated_residual",
    GatedResidualSpec,
    "gated_bridge:GatedResidual",
    "h + tanh(a) W LN(p): a gated residual re-entry",
    groups=("bridge_gate", "bridge"),
)
