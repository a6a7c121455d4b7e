"""Design M's concat adapter (McLeish et al.), in the run and in the export: torch only (``ledger_loop.Bridge``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class ConcatAdapter(nn.Module):
    """s_in = W [s_prev ; e]: Linear(2h -> h, no bias) on the concatenation, before every pass through the block,
    loop 1 included, from an initial state s_0.

    The input is ordered [s_prev ; e] (previous state first, prelude output e
    second). init="identity" sets W = [0 | I], so at init the adapter passes the
    prelude output through and ignores the state; init="default" keeps
    PyTorch's default Linear init (the published design M).

    ``block_norms`` adds the block's two norms, of the base's own class (``norm``, a factory ``hidden -> module``):
    ``entry_norm`` on the adapter's output (what enters the block) and ``exit_norm`` on the block's output (the
    state the next iteration and the coda read). Both start at weight 1; they make the loop-1 route differ from
    the base even at identity init.
    """

    kind = "concat"  # its kind in ``ledger.protocol.arms.BRIDGES``
    design = "M"

    def __init__(
        self,
        hidden: int,
        *,
        norm: Callable[[int], nn.Module] | None = None,
        init: str = "identity",
        block_norms: bool = False,
    ):
        if init not in ("identity", "default"):
            raise ValueError(f"init must be 'identity' or 'default', got {init!r}")
        if block_norms and norm is None:
            raise ValueError("block_norms needs the base's norm class (norm=)")
        super().__init__()
        self.hidden = hidden
        self.init = init
        self.proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.entry_norm = norm(hidden) if block_norms and norm is not None else None
        self.exit_norm = norm(hidden) if block_norms and norm is not None else None
        if init == "identity":
            self.identity_init()

    def forward(self, s_prev: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        entry = self.proj(torch.cat([s_prev, e], dim=-1))
        return self.entry_norm(entry) if self.entry_norm is not None else entry

    def enter(self, t: int, state: torch.Tensor, prelude: torch.Tensor) -> torch.Tensor:
        return self(state, prelude)

    def leave(self, state: torch.Tensor) -> torch.Tensor:
        return self.exit_norm(state) if self.exit_norm is not None else state

    def initial_state(self, prelude: torch.Tensor, draw: Callable[[], torch.Tensor]) -> torch.Tensor:
        return draw()

    @torch.no_grad()
    def identity_init(self) -> None:
        self.proj.weight.zero_()
        self.proj.weight[:, self.hidden :].copy_(torch.eye(self.hidden))

    def export_options(self) -> dict[str, Any]:
        return {"block_norms": self.entry_norm is not None}

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Its tensors in the one optimiser group its kind declares: W, and its block norms if any."""
        seen: dict[int, nn.Parameter] = {}
        for parameter in self.parameters():
            seen.setdefault(id(parameter), parameter)
        return {"bridge": list(seen.values())}
