"""Design S's split bridge (the paper's), in the run and in the export: torch only (``ledger_loop.Bridge``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn


class SplitBridge(nn.Module):
    """u = h + g * (P_p LN(p) + P_h h + b - h), with p the prelude output, h the block output.

    Initialised to the identity (P_h = I, b = 0, P_p = 0, g = 1): u == h exactly,
    so an untrained bridge just feeds the block its own output. The gate starts
    open because a gate at 0 would get zero gradient for P_p and P_h forever.
    P_p and P_h are separate nn.Linear modules (separate tensors) so that an
    optimiser can give them different learning rates: scaling a slice of one
    tensor does nothing under Adam's per-element normalisation.
    At hidden 896: 1,792 (LN) + 802,816 (P_p) + 803,712 (P_h + b) + 1 (g) = 1,608,321.

    ``state_norm=True`` (not the paper's bridge; a protocol must ask for it) also passes
    h through its own LayerNorm before anything reads it: u = n + g * (P_p LN(p) +
    P_h n + b - n) with n = LN_h(h). Then u depends on h only through a normalised
    vector, so the state cannot grow from loop to loop. (Measured on a trained tiny
    retrofit without it: the block output's norm grew ~1.33x per loop, 10x by loop 8;
    the block's updates then vanish against the residual stream and the state stops
    moving.) It adds 2 x hidden parameters; it is not the identity at init (u = LN_h(h)).

    Loop 1 runs the block on the prelude output (the base's route); the bridge enters from loop 2.
    """

    kind = "split"  # its kind in ``ledger.protocol.arms.BRIDGES``
    design = "S"

    def __init__(
        self,
        hidden: int,
        *,
        norm: Callable[[int], nn.Module] | None = None,
        eps: float = 1e-5,
        state_norm: bool = False,
    ):
        super().__init__()  # ``norm`` (the base's own norm class) is unused: the paper's bridge uses LayerNorm
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.P_p = nn.Linear(hidden, hidden, bias=False)
        self.P_h = nn.Linear(hidden, hidden, bias=True)
        self.g = nn.Parameter(torch.ones(()))
        self.state_norm = nn.LayerNorm(hidden, eps=eps) if state_norm else None
        self.identity_init()

    def forward(self, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        if self.state_norm is not None:
            h = self.state_norm(h)
        z = self.P_p(self.norm(p)) + self.P_h(h)
        return h + self.g * (z - h)

    def enter(self, t: int, state: torch.Tensor, prelude: torch.Tensor) -> torch.Tensor:
        return prelude if t == 1 else self(state, prelude)

    def leave(self, state: torch.Tensor) -> torch.Tensor:
        return state

    def initial_state(self, prelude: torch.Tensor, draw: Callable[[], torch.Tensor]) -> torch.Tensor:
        return prelude

    @torch.no_grad()
    def identity_init(self) -> None:
        self.norm.reset_parameters()
        self.P_p.weight.zero_()
        self.P_h.weight.copy_(torch.eye(self.P_h.in_features))
        self.P_h.bias.zero_()
        self.g.fill_(1.0)
        if self.state_norm is not None:
            self.state_norm.reset_parameters()

    def export_options(self) -> dict[str, Any]:
        return {"state_norm": self.state_norm is not None}

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """P_p, P_h (+bias) and the rest (norms, g) apart, as its kind declares (``BridgeKind.groups``)."""
        return {
            "bridge_p": [cast(nn.Parameter, self.P_p.weight)],
            "bridge_h": [cast(nn.Parameter, self.P_h.weight), self.P_h.bias],
            "bridge_rest": [self.norm.weight, self.norm.bias, self.g]
            + ([self.state_norm.weight, self.state_norm.bias] if self.state_norm is not None else []),
        }
