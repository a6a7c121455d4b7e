"""What one loop of `RecurrentLM.forward` runs: which rows, and which positions.

`LiveRows`: every position of the rows still inside their depth (``depths``), the
whole left-padded sequence. `AnswerRows`: the answer position alone, once the
prompt's keys and values no longer change from loop to loop and sit in a cache.

Why the prompt may be cached (design S, ``reentry: answer``): every position but
the answer enters the block with the prelude output at every loop, and causal
attention lets a prompt position see only earlier prompt positions, so from the
first loop whose block weights are the later loops' too (loop 1 for the full-block
and full-model budgets; loop 2 for the adapter arm, whose loop 1 runs without the
adapter) the block's and the coda's keys and values at the prompt positions are the
same every loop. That loop runs in full and fills a `transformers` `DynamicCache`
(the base's own attention writes it); every later loop runs the answer position alone,
one query per row against that cache, and the answer's own entries are cropped
after each loop (they change every loop). Gradients reach the block weights and the
prelude output through the cached loop-1 tensors, which is where the uncached forward's
recomputed copies (equal values, same function of the weights) would send them.

The answer must be the last column of the batch (the shared reader pads on the left),
every layer must use full attention, and every mask must be a tensor or None (sdpa,
eager); otherwise `prompt_cacheable` says no and the forward runs uncached.
"""

from __future__ import annotations

from typing import Any

import torch

from arms.hf.ledger_loop import Context


def prompt_cacheable(ctx: Context, answer_positions: torch.Tensor, seq_len: int, layer_types) -> bool:
    """True when the answer-only loops can read the prompt from a cache (see the module docstring)."""
    if layer_types and any(kind != "full_attention" for kind in layer_types):
        return False
    if not all(mask is None or isinstance(mask, torch.Tensor) for mask in ctx.masks.values()):
        return False
    return bool((answer_positions == seq_len - 1).all())


def host_depths(depths, batch: int) -> list[int] | None:
    """Each row's depth as host integers (a tensor on a device costs one copy here, once per forward)."""
    if depths is None:
        return None
    values = [int(d) for d in (depths.tolist() if isinstance(depths, torch.Tensor) else depths)]
    if len(values) != batch:
        raise ValueError(f"depths must have shape [{batch}], got ({len(values)},)")
    if values and min(values) < 1:
        raise ValueError("every depth must be >= 1")
    return values


def drop_answer_entries(cache: Any, prompt_len: int) -> None:
    """Crop every filled cache layer back to the prompt (the answer's keys and values change every loop)."""
    for layer in cache.layers:
        extra = layer.get_seq_length() - prompt_len
        if extra > 0:
            layer.crop(-extra)


class _Rows:
    """What both kinds of live rows share: the batch size, the rows' depths and the live rows (on the host,
    so that deciding who stays never waits for the device), their batch indices on the device, and
    `scatter`."""

    def __init__(self, batch: int, depths: list[int] | None, live: list[int], index: torch.Tensor):
        self.batch, self.depths, self.live, self.index = batch, depths, live, index

    @property
    def count(self) -> int:
        return len(self.live)

    def _kept(self, t: int) -> torch.Tensor | None:
        """The live rows of depth >= t, as positions among the live rows on the device (None: all stay)."""
        if self.depths is None:
            return None
        keep = [i for i, row in enumerate(self.live) if self.depths[row] >= t]
        if len(keep) == len(self.live):
            return None
        self.live = [self.live[i] for i in keep]
        self.index = torch.tensor(self.live, dtype=torch.long, device=self.index.device)
        return torch.tensor(keep, dtype=torch.long, device=self.index.device)

    def scatter(self, live_values: torch.Tensor) -> torch.Tensor:
        """A live-rows tensor back at full batch size, zeros for the finished rows (index_copy, so gradients
        reach the live rows only)."""
        if self.count == self.batch:
            return live_values
        full = live_values.new_zeros((self.batch, *live_values.shape[1:]))
        return full.index_copy(0, self.index, live_values)


class LiveRows(_Rows):
    """The rows of a batch still inside their depth, for `RecurrentLM.forward(depths=...)`.

    Without depths every row stays live and nothing is copied. With depths (host integers), at loop t
    the rows with depth < t are dropped from the running state (for good: depth only
    falls behind t), the masks and rotary tables are cut to the survivors' rows,
    and `scatter` puts a live-rows tensor back at full batch size.
    """

    def __init__(self, model, depths, rows, embeds, attention_mask, position_ids, answer_positions, ctx):
        batch = rows.shape[0]
        super().__init__(batch, host_depths(depths, batch), list(range(batch)), rows)
        self.model = model
        self.embeds, self.attention_mask, self.position_ids = embeds, attention_mask, position_ids
        self.answer_positions = answer_positions
        self.ctx = ctx
        self.local_rows = rows
        self.prelude_live = None  # the prelude output of the live rows, once some have left

    def keep_until(self, t: int, state, prelude_out):
        """Drop the rows whose depth is below t; returns (state, prelude output) of the live rows."""
        local = self._kept(t)
        if local is not None:
            state = state[local]
            idx = self.index
            self.answer_positions = self.answer_positions[local]
            self.local_rows = self.local_rows[: len(self.live)]
            self.prelude_live = prelude_out[idx]  # indexed once per change of the live set, not every loop
            if self.count:
                ctx = self.ctx.rows(local)
                if ctx is None:
                    ctx = self.model._context(self.embeds[idx], self.attention_mask[idx], self.position_ids[idx])
                self.ctx = ctx
        return state, self.prelude_live if self.count < self.batch else prelude_out


class AnswerRows(_Rows):
    """The answer position of the live rows, once the prompt sits in `cache` (states are [rows, 1, hidden])."""

    def __init__(self, live: LiveRows, prelude_live: torch.Tensor, cache: Any, prompt_len: int):
        super().__init__(live.batch, live.depths, live.live, live.index)
        self.prelude = prelude_live[:, -1:]
        self.ctx = live.ctx.last_column()
        self.cache, self.prompt_len = cache, prompt_len
        drop_answer_entries(cache, prompt_len)

    def keep_until(self, t: int, state, prelude_out=None):
        """Drop the rows whose depth is below t from the state, the context and the cache."""
        local = self._kept(t)
        if local is not None:
            state, self.prelude = state[local], self.prelude[local]
            ctx = self.ctx.rows(local)
            assert ctx is not None  # prompt_cacheable admits tensor masks only
            self.ctx = ctx
            if self.count:
                self.cache.batch_select_indices(local)
        return state, self.prelude

    def end_loop(self) -> None:
        drop_answer_entries(self.cache, self.prompt_len)
