"""A pretrained decoder retrofitted with depth recurrence: the model file `ledger export --format hf` ships.

It needs torch and transformers only, so that ``AutoModelForCausalLM.from_pretrained(FOLDER,
trust_remote_code=True)`` loads a retrofitted checkpoint where the ledger is not installed. The base's own
classes do everything model-specific (embedding, decoder layers, rotary embedding, masks, final norm,
lm_head); this file decides the order they run in:

    prelude layers -> the block's layers, ``num_loops`` times -> coda layers -> norm -> lm_head

- Design S (``bridge: split`` or none): loop 1 runs the block on the prelude output (the base's own route);
  loop t >= 2 re-enters it through the bridge, u = h + g (P_p LN(p) + P_h h + b - h). With ``reentry:
  answer`` only each row's last position carries the state; every other position enters with the prelude
  output, as at loop 1.
- Design M (``bridge: concat``): every loop, the first included, runs s_t = Block(W [s_{t-1}; e]) from an
  initial state s_0 (seeded random, zeros, or the prelude output e).
- ``loop_block``: the adapter arm runs loop 1 on the base's block and loops >= 2 on the block with its LoRA
  merged in; the folder holds that second copy of the block's layers.

The logits are the coda's readout after loop ``num_loops`` at every position, as a causal LM's are.
``from_pretrained(FOLDER, num_loops=T)`` or ``model(..., num_loops=T)`` picks the loop count (like Huginn's
``num_steps``). ``generate()`` recomputes the whole sequence at each new token: there is no key-value cache
across tokens, since every loop's keys and values would have to be kept.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

INITIAL_STATES = ("random", "zeros", "prelude")
REENTRY = ("all", "answer")
BRIDGES = (None, "split", "concat")
# fields of the base's config that tools read from the top-level config (lm-eval's length, generate's ids)
MIRRORED = ("vocab_size", "hidden_size", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")


class LedgerRecurrentConfig(PretrainedConfig):
    """The base's config (``base``, a dict with its ``model_type``), the cut, the bridge and the loop count."""

    model_type = "ledger_recurrent"

    def __init__(
        self,
        base: dict[str, Any] | None = None,
        prelude_layers: list[int] | None = None,
        block_layers: list[int] | None = None,
        coda_layers: list[int] | None = None,
        bridge: str | None = "split",
        state_norm: bool = False,
        reentry: str = "all",
        block_norms: bool = False,
        initial_state: str = "random",
        initial_state_sigma: float = 1.0,
        initial_state_seed: int = 0,
        loop_block: bool = False,
        num_loops: int = 1,
        **kwargs: Any,
    ):
        if bridge not in BRIDGES:
            raise ValueError(f"bridge must be one of {BRIDGES}, got {bridge!r}")
        if reentry not in REENTRY or initial_state not in INITIAL_STATES:
            raise ValueError(f"reentry {reentry!r} or initial_state {initial_state!r} is not known")
        if not isinstance(num_loops, int) or num_loops < 1:
            raise ValueError(f"num_loops must be an integer >= 1, got {num_loops!r}")
        self.base = dict(base or {})
        self.prelude_layers = list(prelude_layers or [])
        self.block_layers = list(block_layers or [])
        self.coda_layers = list(coda_layers or [])
        self.bridge = bridge
        self.state_norm = state_norm
        self.reentry = reentry
        self.block_norms = block_norms
        self.initial_state = initial_state
        self.initial_state_sigma = initial_state_sigma
        self.initial_state_seed = initial_state_seed
        self.loop_block = loop_block
        self.num_loops = num_loops
        for key in MIRRORED:
            if key in self.base:
                kwargs.setdefault(key, self.base[key])
        kwargs.setdefault("tie_word_embeddings", bool(self.base.get("tie_word_embeddings", False)))
        kwargs.setdefault("use_cache", False)
        super().__init__(**kwargs)

    def base_config(self) -> PretrainedConfig:
        options = {key: value for key, value in self.base.items() if key != "model_type"}
        return AutoConfig.for_model(self.base["model_type"], **options)


class SplitBridge(nn.Module):
    """u = h + g (P_p LN(p) + P_h h + b - h); with ``state_norm``, h is first normalised by its own LayerNorm."""

    def __init__(self, hidden: int, eps: float = 1e-5, state_norm: bool = False):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.P_p = nn.Linear(hidden, hidden, bias=False)
        self.P_h = nn.Linear(hidden, hidden, bias=True)
        self.g = nn.Parameter(torch.ones(()))
        self.state_norm = nn.LayerNorm(hidden, eps=eps) if state_norm else None

    def forward(self, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        if self.state_norm is not None:
            h = self.state_norm(h)
        z = self.P_p(self.norm(p)) + self.P_h(h)
        return h + self.g * (z - h)


class ConcatAdapter(nn.Module):
    """s_in = W [s_prev ; e] (Linear 2h -> h, no bias); ``norm`` (a factory hidden -> module, the base's own norm
    class) adds a norm after it and one after the block, where the arm has ``block_norms``."""

    def __init__(self, hidden: int, norm: Callable[[int], nn.Module] | None = None):
        super().__init__()
        self.proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.entry_norm = norm(hidden) if norm is not None else None
        self.exit_norm = norm(hidden) if norm is not None else None

    def forward(self, s_prev: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        entry = self.proj(torch.cat([s_prev, e], dim=-1))
        return self.entry_norm(entry) if self.entry_norm is not None else entry

    def leave_block(self, state: torch.Tensor) -> torch.Tensor:
        return self.exit_norm(state) if self.exit_norm is not None else state


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding (as ``generate`` builds them); pad slots get 1, masked out as keys."""
    position_ids = attention_mask.long().cumsum(-1) - 1
    return position_ids.masked_fill(attention_mask == 0, 1)


def last_token_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last non-pad token (left or right padding)."""
    return attention_mask.shape[-1] - 1 - attention_mask.flip(-1).to(torch.long).argmax(-1)


class LedgerRecurrentForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = LedgerRecurrentConfig
    base_model_prefix = "recurrent"
    supports_gradient_checkpointing = False
    _supports_sdpa = True
    _supports_attention_backend = True

    def __init__(self, config: LedgerRecurrentConfig):
        super().__init__(config)
        base_config = config.base_config()
        base_config._attn_implementation = config._attn_implementation
        self.base = AutoModelForCausalLM.from_config(base_config)
        hidden = base_config.hidden_size
        self.bridge: nn.Module | None = None
        if config.bridge == "split":
            self.bridge = SplitBridge(hidden, state_norm=config.state_norm)
        elif config.bridge == "concat":
            norm_class, eps = type(self.base.model.norm), float(getattr(base_config, "rms_norm_eps", 1e-6))
            self.bridge = ConcatAdapter(
                hidden, (lambda size: norm_class(size, eps=eps)) if config.block_norms else None
            )
        layers = self.base.model.layers
        self.loop_block = (
            nn.ModuleList(copy.deepcopy(layers[i]) for i in config.block_layers) if config.loop_block else None
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.base.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module:
        return self.base.get_output_embeddings()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """A bridge starts as the identity (the arm before training); everything else as the base starts."""
        if isinstance(module, SplitBridge):
            module.P_p.weight.zero_()
            module.P_h.weight.copy_(torch.eye(module.P_h.in_features))
            module.P_h.bias.zero_()
            module.g.fill_(1.0)
        elif isinstance(module, ConcatAdapter):
            hidden = module.proj.out_features
            module.proj.weight.zero_()
            module.proj.weight[:, hidden:].copy_(torch.eye(hidden))
        elif isinstance(module, nn.LayerNorm):
            module.reset_parameters()
        elif isinstance(module, (nn.Linear, nn.Embedding)) or hasattr(module, "weight"):
            self.base._init_weights(module)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # no cache across tokens: each step of generate() runs the whole sequence again

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, num_loops=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask, "num_loops": num_loops, "logits_to_keep": 1}

    # -- the pieces, each a call into the base's own modules --------------------------------------------------

    def _context(self, embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor):
        from transformers import masking_utils

        config = self.base.config
        params = inspect.signature(masking_utils.create_causal_mask).parameters
        kwargs: dict[str, Any] = dict(
            config=config, inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids
        )
        kwargs["cache" if "cache" in params else "past_key_values"] = None
        if "cache_position" in params:
            kwargs["cache_position"] = torch.arange(embeds.shape[1], device=embeds.device)
        masks = {"full_attention": masking_utils.create_causal_mask(**kwargs)}
        if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
            masks["sliding_attention"] = masking_utils.create_sliding_window_causal_mask(**kwargs)
        return masks, self.base.model.rotary_emb(embeds, position_ids)

    def _run(self, idx, hidden, masks, rotary, position_ids, layers=None) -> torch.Tensor:
        own = self.base.model.layers
        layer_types = getattr(self.base.config, "layer_types", None)
        for j, i in enumerate(idx):
            layer = own[i] if layers is None else layers[j]
            kind = layer_types[i] if layer_types else "full_attention"
            hidden = layer(hidden, attention_mask=masks[kind], position_embeddings=rotary, position_ids=position_ids)
            if isinstance(hidden, tuple):  # transformers 4.x decoder layers return a tuple
                hidden = hidden[0]
        return hidden

    def _initial_state(self, e: torch.Tensor) -> torch.Tensor:
        kind = self.config.initial_state
        if kind == "zeros":
            return torch.zeros_like(e)
        if kind == "prelude":
            return e
        # drawn afresh at every call from the same seed, in float32, cut at +-3 sigma: deterministic readings
        generator = torch.Generator(device=e.device).manual_seed(self.config.initial_state_seed)
        s0 = torch.empty(e.shape, dtype=torch.float32, device=e.device)
        sigma = self.config.initial_state_sigma
        nn.init.trunc_normal_(s0, 0.0, sigma, -3 * sigma, 3 * sigma, generator=generator)
        return s0.to(e.dtype)

    def _loop(self, t, state, prelude, masks, rotary, position_ids, last) -> torch.Tensor:
        """Loop t's state from loop t-1's."""
        block = self.config.block_layers
        layers = self.loop_block if t >= 2 else None
        if isinstance(self.bridge, ConcatAdapter):
            entry = self.bridge(state, prelude)
            return self.bridge.leave_block(self._run(block, entry, masks, rotary, position_ids, layers))
        if t == 1:
            return self._run(block, prelude, masks, rotary, position_ids)
        entry = state if self.bridge is None else self.bridge(state, prelude)
        if self.config.reentry == "answer" and entry.shape[1] > 1:
            rows = torch.arange(entry.shape[0], device=entry.device)
            entry = prelude.index_put((rows, last), entry[rows, last])
        return self._run(block, entry, masks, rotary, position_ids, layers)

    # -- forward ------------------------------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        num_loops: int | None = None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        loops = self.config.num_loops if num_loops is None else num_loops
        if not isinstance(loops, int) or loops < 1:
            raise ValueError(f"num_loops must be an integer >= 1, got {loops!r}")
        if inputs_embeds is None:
            inputs_embeds = self.base.model.embed_tokens(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        if position_ids is None:
            position_ids = positions_from_mask(attention_mask)
        masks, rotary = self._context(inputs_embeds, attention_mask, position_ids)
        prelude = self._run(self.config.prelude_layers, inputs_embeds, masks, rotary, position_ids)
        last = last_token_positions(attention_mask)
        state = self._initial_state(prelude) if isinstance(self.bridge, ConcatAdapter) else prelude
        for t in range(1, loops + 1):
            state = self._loop(t, state, prelude, masks, rotary, position_ids, last)
        hidden = self._run(self.config.coda_layers, state, masks, rotary, position_ids)
        kept = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) and logits_to_keep else slice(None)
        logits = self.base.lm_head(self.base.model.norm(hidden[:, kept]))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits)
