"""The re-entry paths between loops of a retrofitted recurrent block.

SplitBridge (design S) sits before every loop t >= 2 and is the only path from
one loop to the next. ConcatAdapter (design M) mixes the previous state with the
prelude output before *every* pass through the block, loop 1 included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn

from arms.hf.modeling_ledger_recurrent import ConcatAdapter as ConcatComputation
from arms.hf.modeling_ledger_recurrent import SplitBridge
from arms.model.accounting import unique_parameters


class SplitBridgeModule(SplitBridge):
    """u = h + g * (P_p LN(p) + P_h h + b - h), with p the prelude output, h the block output (the computation is
    the exported model file's ``SplitBridge``: one implementation, in the run and in the export).

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
    """

    kind = "split"  # its kind in ``ledger.protocol.arms.BRIDGES``, which says its design

    def __init__(self, hidden: int, eps: float = 1e-5, state_norm: bool = False):
        super().__init__(hidden, eps=eps, state_norm=state_norm)
        self.reset_parameters()

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Its tensors in the optimiser groups its kind declares (``BridgeKind.groups``): P_p, P_h (+bias) and
        the rest (norm, g) apart."""
        return {
            "bridge_p": [cast(nn.Parameter, self.P_p.weight)],
            "bridge_h": [cast(nn.Parameter, self.P_h.weight), self.P_h.bias],
            "bridge_rest": [self.norm.weight, self.norm.bias, self.g]
            + ([self.state_norm.weight, self.state_norm.bias] if self.state_norm is not None else []),
        }

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.norm.reset_parameters()
        self.P_p.weight.zero_()
        self.P_h.weight.copy_(torch.eye(self.P_h.in_features))
        self.P_h.bias.zero_()
        self.g.fill_(1.0)
        if self.state_norm is not None:
            self.state_norm.reset_parameters()


class ConcatAdapter(ConcatComputation):
    """s_in = W [s_prev ; e]: Linear(2h -> h, no bias) on the concatenation (the exported model file's
    ``ConcatAdapter``, with its initialisation).

    The input is ordered [s_prev ; e] (previous state first, prelude output e
    second). init="identity" sets W = [0 | I], so at init the adapter passes the
    prelude output through and ignores the state; init="default" keeps
    PyTorch's default Linear init (the published design M).

    ``norm`` (a factory ``hidden -> nn.Module``, the base's own RMSNorm class) adds the block's two
    norms: ``entry_norm`` on the adapter's output (what enters the block) and ``exit_norm`` on the
    block's output (the state the next iteration and the coda read; ``RecurrentLM`` applies it).
    Both start at weight 1; they make the loop-1 route differ from the base even at identity init.
    """

    kind = "concat"  # its kind in ``ledger.protocol.arms.BRIDGES``, which says its design

    def __init__(self, hidden: int, init: str = "identity", norm: Callable[[int], nn.Module] | None = None):
        if init not in ("identity", "default"):
            raise ValueError(f"init must be 'identity' or 'default', got {init!r}")
        super().__init__(hidden, norm)
        self.hidden = hidden
        self.init = init
        if init == "identity":
            with torch.no_grad():
                self.proj.weight.zero_()
                self.proj.weight[:, hidden:].copy_(torch.eye(hidden))

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Its tensors in the one optimiser group its kind declares: W, and its block norms if any."""
        return {"bridge": list(unique_parameters(self))}
