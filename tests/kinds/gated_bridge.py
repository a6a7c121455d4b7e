"""A bridge defined outside the product: a gated-residual re-entry, h + tanh(a) W LN(p).

It needs torch only, as every bridge file does (``arms.hf.ledger_loop.Bridge``): an export ships this file as it
is beside the model file, and the folder loads it where neither the ledger nor the tests are installed. Its spec
and its registration live in ``test_bridge_kind.py``; no product file names it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class GatedResidual(nn.Module):
    """u = h + tanh(a) W LN(p): the block's own output, plus the prelude output through a learnt gate. With a = 0
    (``gate_init``) it is the identity, u = h; W keeps PyTorch's init so that a gradient reaches the gate."""

    kind = "gated_residual"
    design = "S"

    def __init__(self, hidden: int, *, norm: Callable[[int], nn.Module] | None = None, gate_init: float = 0.0):
        super().__init__()
        self.gate_init = gate_init
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Parameter(torch.full((), float(gate_init)))

    def forward(self, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(self.gate) * self.proj(self.norm(p))

    def enter(self, t: int, state: torch.Tensor, prelude: torch.Tensor) -> torch.Tensor:
        return prelude if t == 1 else self(state, prelude)

    def leave(self, state: torch.Tensor) -> torch.Tensor:
        return state

    def initial_state(self, prelude: torch.Tensor, draw: Callable[[], torch.Tensor]) -> torch.Tensor:
        return prelude

    @torch.no_grad()
    def identity_init(self) -> None:
        self.gate.fill_(float(self.gate_init))

    def export_options(self) -> dict[str, Any]:
        return {"gate_init": self.gate_init}

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"bridge_gate": [self.gate], "bridge": [self.norm.weight, self.norm.bias, self.proj.weight]}
