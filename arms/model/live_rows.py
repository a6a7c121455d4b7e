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

import inspect
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Context:
    """What every layer call shares within one forward: masks and position embeddings."""

    masks: dict
    position_ids: torch.Tensor
    position_embeddings: tuple


def cache_keyword(layer: torch.nn.Module) -> str:
    """The decoder layer's name for its cache argument (`cache` in transformers 5, `past_key_values` in 4.x);
    read once per layer class, since a signature costs more than a one-token layer call."""
    kind = type(layer)
    if kind not in _CACHE_KEYWORDS:
        params = inspect.signature(kind.forward).parameters
        names = [name for name in ("cache", "past_key_values", "past_key_value") if name in params]
        if not names:
            raise TypeError(f"{kind.__name__}.forward takes no cache argument")
        _CACHE_KEYWORDS[kind] = names[0]
    return _CACHE_KEYWORDS[kind]


_CACHE_KEYWORDS: dict[type, str] = {}


def prompt_cacheable(ctx: Context, answer_positions: torch.Tensor, seq_len: int, layer_types) -> bool:
    """True when the answer-only loops can read the prompt from a cache (see the module docstring)."""
    if layer_types and any(kind != "full_attention" for kind in layer_types):
        return False
    if not all(mask is None or isinstance(mask, torch.Tensor) for mask in ctx.masks.values()):
        return False
    return bool((answer_positions == seq_len - 1).all())


def _rows(value, keep: torch.Tensor):
    """`value` at the kept rows; a mask broadcast over the batch (first dimension 1) stays as it is."""
    if value is None or value.shape[0] == 1:
        return value
    return value[keep]


def answer_context(ctx: Context) -> Context:
    """The context of a one-token query at the last column: the last row of every mask, the last position."""
    masks = {kind: None if m is None else m[:, :, -1:, :] for kind, m in ctx.masks.items()}
    cos, sin = ctx.position_embeddings
    return Context(masks, ctx.position_ids[:, -1:], (cos[:, -1:], sin[:, -1:]))


def drop_answer_entries(cache: Any, prompt_len: int) -> None:
    """Crop every filled cache layer back to the prompt (the answer's keys and values change every loop)."""
    for layer in cache.layers:
        extra = layer.get_seq_length() - prompt_len
        if extra > 0:
            layer.crop(-extra)


class _Rows:
    """What both kinds of live rows share: the batch size, the live rows' batch indices, and `scatter`."""

    def __init__(self, batch: int, depths: torch.Tensor | None, index: torch.Tensor):
        self.batch, self.depths, self.index = batch, depths, index

    @property
    def count(self) -> int:
        return int(self.index.shape[0])

    def scatter(self, live_values: torch.Tensor) -> torch.Tensor:
        """A live-rows tensor back at full batch size, zeros for the finished rows (index_copy, so gradients
        reach the live rows only)."""
        if self.count == self.batch:
            return live_values
        full = live_values.new_zeros((self.batch, *live_values.shape[1:]))
        return full.index_copy(0, self.index, live_values)


class LiveRows(_Rows):
    """The rows of a batch still inside their depth, for `RecurrentLM.forward(depths=...)`.

    Without depths every row stays live and nothing is copied. With depths, at loop t
    the rows with depth < t are dropped from the running state (for good: depth only
    falls behind t), the masks and rotary embeddings are rebuilt for the survivors,
    and `scatter` puts a live-rows tensor back at full batch size.
    """

    def __init__(self, model, depths, rows, embeds, attention_mask, position_ids, answer_positions, ctx):
        batch = rows.shape[0]
        if depths is not None:
            depths = torch.as_tensor(depths, device=rows.device).long()
            if depths.shape != (batch,):
                raise ValueError(f"depths must have shape [{batch}], got {tuple(depths.shape)}")
            if batch and int(depths.min()) < 1:
                raise ValueError("every depth must be >= 1")
        super().__init__(batch, depths, rows)  # index: batch indices of the live rows
        self.model = model
        self.embeds, self.attention_mask, self.position_ids = embeds, attention_mask, position_ids
        self.all_answer_positions = answer_positions
        self.answer_positions = answer_positions
        self.ctx = ctx
        self.local_rows = rows
        self.prelude_live = None  # the prelude output of the live rows, once some have left

    def keep_until(self, t: int, state, prelude_out):
        """Drop the rows whose depth is below t; returns (state, prelude output) of the live rows."""
        if self.depths is None:
            return state, prelude_out
        keep = self.depths[self.index] >= t
        if not bool(keep.all()):
            self.index = self.index[keep]
            state = state[keep]
            idx = self.index
            self.answer_positions = self.all_answer_positions[idx]
            self.local_rows = torch.arange(idx.shape[0], device=idx.device)
            self.prelude_live = prelude_out[idx]  # indexed once per change of the live set, not every loop
            if idx.shape[0]:
                self.ctx = self.model._context(self.embeds[idx], self.attention_mask[idx], self.position_ids[idx])
        return state, self.prelude_live if self.count < self.batch else prelude_out


class AnswerRows(_Rows):
    """The answer position of the live rows, once the prompt sits in `cache` (states are [rows, 1, hidden])."""

    def __init__(self, live: LiveRows, prelude_live: torch.Tensor, cache: Any, prompt_len: int):
        super().__init__(live.batch, live.depths, live.index)
        self.prelude = prelude_live[:, -1:]
        self.ctx = answer_context(live.ctx)
        self.cache, self.prompt_len = cache, prompt_len
        drop_answer_entries(cache, prompt_len)

    def keep_until(self, t: int, state, prelude_out=None):
        """Drop the rows whose depth is below t from the state, the context and the cache."""
        if self.depths is None:
            return state, self.prelude
        keep = self.depths[self.index] >= t
        if not bool(keep.all()):
            self.index = self.index[keep]
            state, self.prelude = state[keep], self.prelude[keep]
            masks = {kind: _rows(m, keep) for kind, m in self.ctx.masks.items()}
            cos, sin = self.ctx.position_embeddings
            self.ctx = Context(masks, self.ctx.position_ids[keep], (cos[keep], sin[keep]))
            if self.count:
                self.cache.batch_select_indices(keep.nonzero().squeeze(1))
        return state, self.prelude

    def end_loop(self) -> None:
        drop_answer_entries(self.cache, self.prompt_len)
