"""The recurrent loop's pieces, shared by the run (``arms.model.recurrent.RecurrentLM``) and the exported model
(``modeling_ledger_recurrent.py``), and shipped in every export beside it: torch and transformers only.

- ``Context``: what every layer call of one forward shares, the masks and the rotary tables of each layer type;
- ``run_layers``: a list of the base's decoder layers over a hidden state, as the base's own forward calls them;
- ``step``: one loop, what enters the block (the bridge), the block, and what leaves it;
- ``draw_initial_state``: design M's seeded s_0;
- ``FAMILIES``: what a model family's own forward does around its layers (the rotary tables, the head).

A bridge is any ``nn.Module`` that answers the few questions ``step`` and the export ask (``Bridge``); its file
needs torch only, so that the export can ship it as it is. Where nothing else is said, the numerics are the base's:
loop 1 of a design-S retrofit is the base's forward bit for bit.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

FULL = "full_attention"


class Bridge(Protocol):
    """What a bridge module answers (``bridge_split.py`` and ``bridge_concat.py`` are the built-in ones).

    ``design`` "S": loop 1 is the base's route and the bridge enters at loop 2; "M": it runs every loop from an
    initial state. ``enter`` is what the block reads at loop ``t``, ``leave`` what the next loop and the coda read of
    the block's output. ``initial_state`` is the state before loop 1 (``draw`` gives design M's seeded s_0).
    ``identity_init`` sets the weights an untrained arm starts from; ``export_options`` are the constructor
    options the export records (``cls(hidden, norm=..., **export_options())`` rebuilds it); ``param_groups``
    are its tensors in the optimiser groups its kind declares."""

    kind: str
    design: str

    def enter(self, t: int, state: torch.Tensor, prelude: torch.Tensor) -> torch.Tensor: ...
    def leave(self, state: torch.Tensor) -> torch.Tensor: ...
    def initial_state(self, prelude: torch.Tensor, draw: Callable[[], torch.Tensor]) -> torch.Tensor: ...
    def identity_init(self) -> None: ...
    def export_options(self) -> dict[str, Any]: ...
    def param_groups(self) -> dict[str, list[nn.Parameter]]: ...


# ----------------------------------------------------------------------------- positions


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding (as ``generate`` builds them); pad slots get 1, masked out as keys."""
    position_ids = attention_mask.long().cumsum(-1) - 1
    return position_ids.masked_fill(attention_mask == 0, 1)


def last_token_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last non-pad token (left or right padding)."""
    return attention_mask.shape[-1] - 1 - attention_mask.flip(-1).to(torch.long).argmax(-1)


# ----------------------------------------------------------------------------- families


class Family:
    """The Llama-family forward: one rotary table for every layer type, and ``lm_head(norm(h))``."""

    def position_embeddings(self, model: Any, embeds: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        table = model.model.rotary_emb(embeds, position_ids)
        return dict.fromkeys(layer_types_of(model.config), table)

    def head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        return model.lm_head(model.model.norm(hidden))


class SoftCappedHead(Family):
    """Gemma 2: the final logits soft-capped at ``config.final_logit_softcapping`` (none where it is unset), as its
    ``ForCausalLM`` does: ``tanh(logits / cap) * cap``."""

    def head(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        logits = super().head(model, hidden)
        cap = getattr(model.config, "final_logit_softcapping", None)
        if cap is None:
            return logits
        return torch.tanh(logits / cap) * cap


# one entry per family (``arms.model.families`` holds it to the families ``ledger check`` supports)
FAMILIES: dict[str, Family] = {
    "llama": Family(),
    "qwen2": Family(),
    "olmo2": Family(),
    "gemma2": SoftCappedHead(),
}


def layer_types_of(config: Any) -> tuple[str, ...]:
    """The layer types a config's layers use (full attention where it names none)."""
    return tuple(dict.fromkeys(getattr(config, "layer_types", None) or (FULL,)))


# ----------------------------------------------------------------------------- one forward's context


@dataclass
class Context:
    """What every layer call shares within one forward: the mask and the rotary table of each layer type."""

    masks: dict[str, Any]
    position_ids: torch.Tensor
    position_embeddings: dict[str, Any]

    def rows(self, local: torch.Tensor) -> Context | None:
        """The context of the rows ``local``: the same masks' and tables' rows, or None where a mask is not a
        tensor (it is then rebuilt for the rows). A mask broadcast over the batch stays as it is."""
        if not all(mask is None or isinstance(mask, torch.Tensor) for mask in self.masks.values()):
            return None
        masks = {kind: m if m is None or m.shape[0] == 1 else m[local] for kind, m in self.masks.items()}
        return Context(masks, self.position_ids[local], _map_tables(self.position_embeddings, lambda t: t[local]))

    def last_column(self) -> Context:
        """The context of a one-token query at the last column: the last row of every mask, the last position."""
        masks = {kind: None if m is None else m[:, :, -1:, :] for kind, m in self.masks.items()}
        return Context(masks, self.position_ids[:, -1:], _map_tables(self.position_embeddings, lambda t: t[:, -1:]))


def _map_tables(tables: dict[str, Any], cut: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    """Each layer type's (cos, sin) cut alike; a table shared by several types is cut once and stays shared."""
    done: dict[int, Any] = {}
    out = {}
    for kind, table in tables.items():
        if id(table) not in done:
            done[id(table)] = tuple(cut(part) for part in table)
        out[kind] = done[id(table)]
    return out


@functools.cache
def _mask_signature() -> tuple[str, bool, bool]:
    """How ``create_causal_mask`` names its cache (``cache`` in transformers 5, ``past_key_values`` in 4.x),
    whether it wants ``cache_position`` (4.x) and takes ``allow_is_causal_skip``: read once, not every forward."""
    from transformers import masking_utils

    params = inspect.signature(masking_utils.create_causal_mask).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    return cache, "cache_position" in params, "allow_is_causal_skip" in params


def build_context(
    model: Any,
    family: Family,
    embeds: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    *,
    keep_mask: bool = False,
) -> Context:
    """The masks (``transformers.masking_utils``, as the base builds them) and the family's rotary tables.
    ``keep_mask``: never drop the mask for SDPA's is_causal (that reads the mask on the host; a training step
    keeps it instead, and a reading keeps the base's own rule, so that loop 1 reads as the base does)."""
    from transformers import masking_utils

    config = model.config
    kwargs: dict[str, Any] = dict(
        config=config, inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids
    )
    cache_name, wants_cache_position, can_keep_mask = _mask_signature()
    kwargs[cache_name] = None
    if wants_cache_position:
        kwargs["cache_position"] = torch.arange(embeds.shape[1], device=embeds.device)
    if can_keep_mask and keep_mask:
        kwargs["allow_is_causal_skip"] = False
    masks = {FULL: masking_utils.create_causal_mask(**kwargs)}
    if "sliding_attention" in layer_types_of(config):
        masks["sliding_attention"] = masking_utils.create_sliding_window_causal_mask(**kwargs)
    return Context(masks, position_ids, family.position_embeddings(model, embeds, position_ids))


# ----------------------------------------------------------------------------- layers and loops


def cache_keyword(layer: nn.Module) -> str:
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


def run_layers(model: Any, idx, hidden: torch.Tensor, ctx: Context, *, layers=None, cache=None) -> torch.Tensor:
    """The base's layers ``idx`` (or ``layers``, copies standing in for them) over ``hidden``; with a ``cache``
    each layer's attention appends its keys and values there and attends to what it holds."""
    own = model.model.layers
    layer_types = getattr(model.config, "layer_types", None)
    for j, i in enumerate(idx):
        layer = own[i] if layers is None else layers[j]
        kind = layer_types[i] if layer_types else FULL
        extra = {cache_keyword(layer): cache} if cache is not None else {}
        hidden = layer(
            hidden,
            attention_mask=ctx.masks[kind],
            position_embeddings=ctx.position_embeddings[kind],
            position_ids=ctx.position_ids,
            **extra,
        )
        if isinstance(hidden, tuple):  # transformers 4.x decoder layers return a tuple
            hidden = hidden[0]
    return hidden


def draw_initial_state(
    e: torch.Tensor, sigma: float, seed: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Design M's random s_0: truncated N(0, sigma^2), cut at +-3 sigma, drawn in float32 from a generator seeded
    with ``seed`` at every call unless one is passed (deterministic readings)."""
    if generator is None:
        generator = torch.Generator(device=e.device).manual_seed(seed)
    s0 = torch.empty(e.shape, dtype=torch.float32, device=e.device)
    nn.init.trunc_normal_(s0, 0.0, sigma, -3 * sigma, 3 * sigma, generator=generator)
    return s0.to(e.dtype)


def initial_state(bridge: Any, prelude: torch.Tensor, draw: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The state before loop 1: the prelude output without a bridge, else what the bridge starts from."""
    return prelude if bridge is None else bridge.initial_state(prelude, draw)


def enter(bridge: Any, t: int, state: torch.Tensor, prelude: torch.Tensor) -> torch.Tensor:
    """What the block reads at loop ``t``; without a bridge, the prelude output at loop 1 and the state after."""
    if bridge is None:
        return prelude if t == 1 else state
    return bridge.enter(t, state, prelude)


def answer_only(entry: torch.Tensor, prelude: torch.Tensor, rows: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """Answer-only re-entry: the answer position carries the state, every other position enters with the prelude
    output as at loop 1, so (causal attention) the prompt's keys and values are loop 1's at every loop."""
    return prelude.index_put((rows, answer), entry[rows, answer])


def step(
    bridge: Any,
    t: int,
    state: torch.Tensor,
    prelude: torch.Tensor,
    run_block: Callable[[int, torch.Tensor], torch.Tensor],
    *,
    reentry: str = "all",
    rows: torch.Tensor | None = None,
    answer: torch.Tensor | None = None,
) -> torch.Tensor:
    """Loop ``t``'s state from loop ``t - 1``'s: what enters the block, the block (``run_block(t, entry)``), what
    leaves it. ``reentry`` "answer" (design S, loops >= 2) re-enters only each row's ``answer`` position."""
    entry = enter(bridge, t, state, prelude)
    if reentry == "answer" and t >= 2 and entry.shape[1] > 1:
        if rows is None or answer is None:
            raise ValueError("reentry='answer' needs the rows and answer positions of the batch")
        entry = answer_only(entry, prelude, rows, answer)
    out = run_block(t, entry)
    return out if bridge is None else bridge.leave(out)
