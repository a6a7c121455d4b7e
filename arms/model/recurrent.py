"""A pretrained decoder run as prelude -> recurrent block (T loops) -> coda.

Everything model-specific is the base's own code: its embedding, decoder layers,
rotary embedding, mask construction (`transformers.masking_utils`), final norm
and lm_head. This module only decides the order in which those run.

Design S (the split bridge, `arms.hf.bridge_split`, or no bridge): loop 1 is the identity route, prelude
-> block once -> coda, with every recurrence part bypassed, so an untrained
retrofit at loops=1 is the base model bit for bit. Loop t >= 2 re-enters the
block through the bridge: h(t+1) = Block(bridge(h(t), p)).

Design M (the concat adapter, `arms.hf.bridge_concat`): every loop, the first included, runs
s_i = Block(Adapter([s_{i-1}; e])) from an initial state s_0, so loop 1 is NOT an
identity route: it reproduces the base only while the adapter is identity-
initialised (W = [0 | I]) and untrained, and the cut drops no layers.

One forward returns the readout of every loop 1..T: the coda, final norm and
lm_head applied to that loop's state, at the answer position of each row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import nn

import arms.hf.ledger_loop as loop
from arms.hf.ledger_loop import Context, last_token_positions, positions_from_mask
from arms.model.families import family_of
from arms.model.live_rows import AnswerRows, LiveRows, prompt_cacheable
from arms.model.surgery import CutModel, make_surgery
from ledger.protocol.arms import BRIDGES

S0_KINDS = ("random", "zeros", "prelude")
# design S: which positions carry the state into the next loop. "all" is the paper's;
# "answer" re-enters only the answer position and gives every other position the
# prelude output again (a stationary prompt: its keys and values are loop 1's).
REENTRY_KINDS = ("all", "answer")
__all__ = ["RecurrentLM", "last_token_positions", "positions_from_mask"]  # the two: the exported file's own


class RecurrentLM(nn.Module):
    """A base causal LM retrofitted with a weight-shared recurrent block.

    `bridge` picks the design: a design-S bridge such as `SplitBridge` (or None: the block output is fed
    straight back) for design S, a `ConcatAdapter` for design M. For design M,
    `s0` is the initial state: "random" (truncated N(0, s0_sigma^2), cut at
    +-3 sigma, drawn from a generator seeded with `s0_seed` at every call unless
    one is passed, so evaluation is deterministic), "zeros", or "prelude" (e).
    A random s0 depends on the padded batch shape, so only zeros/prelude give
    batch-invariant readouts. `reentry` (design S): "all" positions carry the state
    (the paper), or only the "answer" position (the prompt re-enters as at loop 1).
    """

    def __init__(
        self,
        surgery: CutModel,
        bridge: nn.Module | None = None,
        *,
        s0: str = "random",
        s0_sigma: float = 1.0,
        s0_seed: int = 0,
        reentry: str = "all",
    ):
        super().__init__()
        if reentry not in REENTRY_KINDS:
            raise ValueError(f"reentry must be one of {REENTRY_KINDS}, got {reentry!r}")
        if bridge is not None and getattr(bridge, "kind", None) not in BRIDGES:
            raise TypeError(
                f"bridge must be a module of a kind in BRIDGES ({', '.join(BRIDGES.names())}) or None, "
                f"got a {type(bridge).__name__}"
            )
        if reentry != "all" and (bridge is None or cast(Any, bridge).design != "S"):
            raise ValueError("reentry='answer' is an option of a design-S bridge")
        if s0 not in S0_KINDS:
            raise ValueError(f"s0 must be one of {S0_KINDS}, got {s0!r}")
        self.surgery = surgery  # a plain dataclass of references; not a submodule
        self.family = family_of(surgery.model)  # what the base's forward does around its layers
        self.base = surgery.model  # registered, so .to()/.eval()/state_dict reach the base
        self.bridge = bridge
        self.s0 = s0
        self.s0_sigma = s0_sigma
        self.s0_seed = s0_seed
        self.reentry = reentry

    @classmethod
    def build(
        cls,
        model: nn.Module,
        *,
        split=None,
        tuple_=None,
        layers=None,
        bridge: str | None = "split",
        reentry: str = "all",
        s0: str = "random",
        s0_sigma: float = 1.0,
        s0_seed: int = 0,
        **bridge_options: Any,
    ) -> RecurrentLM:
        """Cut `model` and attach a fresh bridge of kind `bridge` (``ledger.protocol.arms.BRIDGES``; None: the block
        output is fed straight back) on its device and dtype. ``bridge_options`` are the bridge's own (its
        constructor's keywords, e.g. the split bridge's ``state_norm``); the base's norm class is offered as ``norm``."""
        surgery = make_surgery(model, split=split, tuple_=tuple_, layers=layers)
        module = None
        if bridge is None and bridge_options:
            raise ValueError(f"{', '.join(bridge_options)}: options of a bridge, and the arm has none")
        if bridge is not None:
            if bridge not in BRIDGES:
                raise ValueError(f"bridge must be one of {', '.join(BRIDGES.names())} or None, got {bridge!r}")
            implementation = BRIDGES.implementation(bridge)
            unknown = set(bridge_options) - _keywords(implementation)
            if unknown:
                raise ValueError(f"{', '.join(sorted(unknown))}: not an option of the {bridge} bridge")
            hidden = cast(Any, model.config).hidden_size
            eps = float(getattr(model.config, "rms_norm_eps", 1e-6))
            norm_class = type(surgery.norm)  # the base's own (RMSNorm in Llama-family decoders), at its eps
            weight = cast(nn.Linear, model.lm_head).weight
            module = implementation(hidden, norm=lambda size: norm_class(size, eps=eps), **bridge_options)
            module = module.to(device=weight.device, dtype=weight.dtype)
        return cls(surgery, module, reentry=reentry, s0=s0, s0_sigma=s0_sigma, s0_seed=s0_seed)

    @classmethod
    def from_spec(cls, model: nn.Module, arm: Any) -> RecurrentLM:
        """The one protocol-to-model mapping: an arm spec's surgery and bridge options, as the spec models
        declare them (``model_options``), reach ``build`` unchanged."""
        return cls.build(model, **arm.model_options())

    def loop_options(self) -> dict[str, Any]:
        """The options that decide how loops run (everything but the surgery and the bridge module)."""
        return {"s0": self.s0, "s0_sigma": self.s0_sigma, "s0_seed": self.s0_seed, "reentry": self.reentry}

    def compile_block(self) -> None:
        """``torch.compile`` each of the block's layers, where the loop spends its time: the same computation
        in fewer, fused kernels, dynamic in the batch and the length (rows leave as their depth passes).
        The prelude and the coda run once a forward and stay as they are."""
        layers = cast(nn.ModuleList, self.surgery.decoder.layers)
        for i in self.surgery.block_idx:
            layers[i].compile(dynamic=True)

    @property
    def design(self) -> str:
        """The bridge's design ("S": loop 1 is the base's route; "M": the bridge runs every loop); none: S."""
        return "S" if self.bridge is None else cast(Any, self.bridge).design

    # -- the pieces, each a call into the base's own modules -------------------

    def _context(self, embeds, attention_mask, position_ids) -> Context:
        # a training step keeps SDPA's mask (dropping it reads the mask on the host); a reading keeps the base's rule
        return loop.build_context(
            self.base, self.family, embeds, attention_mask, position_ids, keep_mask=torch.is_grad_enabled()
        )

    def _run(self, idx: tuple[int, ...], hidden: torch.Tensor, ctx: Context, *, layers=None, cache=None):
        return loop.run_layers(self.base, idx, hidden, ctx, layers=layers, cache=cache)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and lm_head, as the family's head does them. The base normalises the whole sequence before
        slicing; RMSNorm is per position, so normalising only the answer positions gives the same bits."""
        return self.family.head(self.base, hidden.unsqueeze(1)).squeeze(1)

    def _readout(self, state, ctx, rows, answer_positions, cache=None) -> torch.Tensor:
        hidden = self._run(self.surgery.coda_idx, state, ctx, cache=cache)
        return self._head(hidden[rows, answer_positions])

    def _initial_state(self, e: torch.Tensor, generator) -> torch.Tensor:
        def s0() -> torch.Tensor:
            if self.s0 == "zeros":
                return torch.zeros_like(e)
            if self.s0 == "prelude":
                return e
            return loop.draw_initial_state(e, self.s0_sigma, self.s0_seed, generator)

        return loop.initial_state(self.bridge, e, s0)

    def _block_pass(self, t: int, entry: torch.Tensor, ctx: Context, cache=None) -> torch.Tensor:
        """The block's layers as loop ``t`` runs them (the adapter arm runs loop 1 without its adapter)."""
        return self._run(self.surgery.block_idx, entry, ctx, cache=cache)

    def _step(self, t: int, state, prelude_out, ctx, rows=None, answer_positions=None, cache=None) -> torch.Tensor:
        """One pass through the block: loop t's state from loop t-1's (``ledger_loop.step``, as the export runs it)."""
        return loop.step(
            self.bridge,
            t,
            state,
            prelude_out,
            lambda t, entry: self._block_pass(t, entry, ctx, cache),
            reentry=self.reentry,
            rows=rows,
            answer=answer_positions,
        )

    def _cache_from(self) -> int:
        """The first loop whose block weights every later loop shares: from there on the prompt's keys and
        values repeat under answer-only re-entry (``arms.model.live_rows``)."""
        return 1

    def _prompt_cache(self, ctx, answer_positions, seq_len: int, no_grad_loops: int, cache_prompt: bool | None):
        """A fresh ``DynamicCache`` when this forward may run loops after ``_cache_from`` on the answer alone."""
        from transformers import DynamicCache

        possible = (
            self.design == "S"
            and self.reentry == "answer"
            and no_grad_loops == 0  # else the cache would be filled without gradient
            and prompt_cacheable(ctx, answer_positions, seq_len, getattr(self.surgery.config, "layer_types", None))
        )
        if cache_prompt and not possible:
            raise ValueError("cache_prompt needs reentry='answer', left padding, full attention and no_grad_loops=0")
        return DynamicCache() if possible and cache_prompt is not False else None

    # -- forward --------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        loops: int = 1,
        answer_positions: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        return_states: bool = False,
        no_grad_loops: int = 0,
        depths: torch.Tensor | None = None,
        read_at: Iterable[int] | None = None,
        cache_prompt: bool | None = None,
    ):
        """Readouts [loops, batch, vocab] for every loop 1..loops, in one pass.

        `answer_positions` [batch] defaults to each row's last non-pad token.
        With `return_states=True` also returns the block state of every loop at
        the answer positions, [loops, batch, hidden] (before the coda).
        `no_grad_loops` = k runs loops 1..k (and their readouts) without
        recording gradients, for truncated backprop; the state is detached where
        gradient starts.
        `depths` [batch] lets each row stop at its own depth: loop t runs only the
        rows with depth >= t, and the readouts (and states) of a row past its depth
        are zeros. Training losses never read those cells, so a mixed-depth batch
        then costs the sum of its depths instead of batch x max(depth) block passes;
        every row's own loops get the same values as without `depths` (the rows of a
        batch never interact).
        `read_at` (default every loop) names the loops whose readouts are computed and
        returned, in loop order ([len(read_at), batch, vocab]): the coda runs only there
        (a latency that answers at loop T reads loop T alone).
        `cache_prompt` (default: wherever it applies) runs answer-only re-entry's later
        loops on the answer position against the cached prompt (``arms.model.live_rows``);
        False forces the uncached computation, True refuses a forward it cannot apply to.
        """
        if not isinstance(loops, int) or loops < 1:
            raise ValueError(f"loops must be an integer >= 1, got {loops!r}")
        if not 0 <= no_grad_loops <= loops:
            raise ValueError(f"no_grad_loops must lie in [0, loops={loops}], got {no_grad_loops}")
        wanted = set(range(1, loops + 1)) if read_at is None else set(read_at)
        if not wanted or not wanted <= set(range(1, loops + 1)):
            raise ValueError(f"read_at {sorted(wanted)} must name loops in 1..{loops}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = positions_from_mask(attention_mask)
        if answer_positions is None:
            answer_positions = last_token_positions(attention_mask)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)

        embeds = self.surgery.embed_tokens(input_ids)
        ctx = self._context(embeds, attention_mask, position_ids)
        prelude_out = self._run(self.surgery.prelude_idx, embeds, ctx)
        cache = self._prompt_cache(ctx, answer_positions, input_ids.shape[1], no_grad_loops, cache_prompt)

        readouts, states = [], []
        state = self._initial_state(prelude_out, generator)
        live: LiveRows | AnswerRows = LiveRows(
            self, depths, rows, embeds, attention_mask, position_ids, answer_positions, ctx
        )
        vocab = cast(nn.Linear, self.surgery.lm_head).out_features
        for t in range(1, loops + 1):
            read = t in wanted  # the coda runs only where a readout is returned (or the cache needs its entries)
            with torch.set_grad_enabled(torch.is_grad_enabled() and t > no_grad_loops):
                if t == no_grad_loops + 1 and no_grad_loops:
                    state = state.detach()
                state, prelude_live = live.keep_until(t, state, prelude_out)
                readout = None
                if live.count == 0:  # every row is past its depth
                    readout = prelude_out.new_zeros(0, vocab)
                    at_answer = prelude_out.new_zeros(0, prelude_out.shape[-1])
                elif isinstance(live, AnswerRows):  # the prompt is cached: the answer position alone
                    state = self._step(t, state, prelude_live, live.ctx, cache=cache)  # one position: no re-entry mask
                    if read:
                        readout = self._head(self._run(self.surgery.coda_idx, state, live.ctx, cache=cache)[:, 0])
                    at_answer = state[:, 0]
                    live.end_loop()
                else:
                    filling = cache if cache is not None and t == self._cache_from() else None
                    state = self._step(
                        t, state, prelude_live, live.ctx, live.local_rows, live.answer_positions, filling
                    )
                    if read or filling is not None:  # filling: the coda's prompt entries are needed later
                        readout = self._readout(state, live.ctx, live.local_rows, live.answer_positions, filling)
                    at_answer = state[live.local_rows, live.answer_positions]
                    if filling is not None:
                        live = AnswerRows(live, prelude_live, filling, prompt_len=input_ids.shape[1] - 1)
                        state = at_answer.unsqueeze(1)
                if read:
                    readouts.append(live.scatter(cast(torch.Tensor, readout)))
                states.append(live.scatter(at_answer))

        stacked = torch.stack(readouts)
        if return_states:
            return stacked, torch.stack(states)
        return stacked

    def sequence_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        loops: int,
        *,
        read_at: tuple[int, ...] | None = None,
        no_grad_loops: int = 0,
        generator: torch.Generator | None = None,
    ) -> dict[int, torch.Tensor]:
        """Next-token logits at EVERY position [batch, seq, vocab] after each loop in ``read_at`` (default: the
        last): what a language-model loss reads. Loops 1..``no_grad_loops`` run without gradient and the state
        is detached where gradient starts (truncated backprop); the prelude output is re-injected every loop."""
        if not isinstance(loops, int) or loops < 1 or not 0 <= no_grad_loops <= loops:
            raise ValueError(f"need loops >= 1 and 0 <= no_grad_loops <= loops, got {loops}, {no_grad_loops}")
        wanted = set(read_at or (loops,))
        if not wanted <= set(range(1, loops + 1)):
            raise ValueError(f"read_at {sorted(wanted)} must lie in 1..{loops}")
        embeds = self.surgery.embed_tokens(input_ids)
        ctx = self._context(embeds, attention_mask, positions_from_mask(attention_mask))
        prelude_out = self._run(self.surgery.prelude_idx, embeds, ctx)
        state = self._initial_state(prelude_out, generator)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        answer = last_token_positions(attention_mask)
        out: dict[int, torch.Tensor] = {}
        for t in range(1, loops + 1):
            with torch.set_grad_enabled(torch.is_grad_enabled() and t > no_grad_loops):
                if t == no_grad_loops + 1 and no_grad_loops:
                    state = state.detach()
                state = self._step(t, state, prelude_out, ctx, rows, answer)
                if t in wanted:
                    hidden = self._run(self.surgery.coda_idx, state, ctx)
                    out[t] = self.family.head(self.base, hidden)
        return out


def _keywords(implementation: Any) -> set[str]:
    """The keyword options a bridge's constructor takes (beyond ``hidden`` and the offered ``norm``)."""
    import inspect

    params = inspect.signature(implementation).parameters
    return {name for name, p in params.items() if p.kind is p.KEYWORD_ONLY and name != "norm"}
