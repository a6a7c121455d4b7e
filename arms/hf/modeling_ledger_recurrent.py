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
from typing import Any, cast

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .ledger_loop import (
    FAMILIES,
    build_context,
    draw_initial_state,
    initial_state,
    last_token_positions,
    positions_from_mask,
    run_layers,
    step,
)

INITIAL_STATES = ("random", "zeros", "prelude")
REENTRY = ("all", "answer")
# fields of the base's config that tools read from the top-level config (lm-eval's length, generate's ids)
MIRRORED = ("vocab_size", "hidden_size", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")


class LedgerRecurrentConfig(PretrainedConfig):
    """The base's config (``base``, a dict with its ``model_type``), the cut, the bridge (its kind and the options
    its constructor takes) and the loop count."""

    model_type = "ledger_recurrent"

    def __init__(
        self,
        base: dict[str, Any] | None = None,
        prelude_layers: list[int] | None = None,
        block_layers: list[int] | None = None,
        coda_layers: list[int] | None = None,
        bridge: str | None = "split",
        bridge_options: dict[str, Any] | None = None,
        reentry: str = "all",
        initial_state: str = "random",
        initial_state_sigma: float = 1.0,
        initial_state_seed: int = 0,
        loop_block: bool = False,
        num_loops: int = 1,
        **kwargs: Any,
    ):
        if reentry not in REENTRY or initial_state not in INITIAL_STATES:
            raise ValueError(f"reentry {reentry!r} or initial_state {initial_state!r} is not known")
        if not isinstance(num_loops, int) or num_loops < 1:
            raise ValueError(f"num_loops must be an integer >= 1, got {num_loops!r}")
        self.base = dict(base or {})
        self.prelude_layers = list(prelude_layers or [])
        self.block_layers = list(block_layers or [])
        self.coda_layers = list(coda_layers or [])
        self.bridge = bridge
        self.bridge_options = dict(bridge_options or {})
        self.reentry = reentry
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


def _base_class(base_config: PretrainedConfig) -> type:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return cast(type, MODEL_FOR_CAUSAL_LM_MAPPING[type(base_config)])


def shipped_bridge() -> type[nn.Module]:
    """The bridge class the export ships beside this file (``ledger_bridge.py`` names it)."""
    from .ledger_bridge import Bridge  # written by the export

    return Bridge


class LedgerRecurrentForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = LedgerRecurrentConfig
    base_model_prefix = "recurrent"
    supports_gradient_checkpointing = False
    _supports_sdpa = True
    _supports_attention_backend = True

    def __init__(self, config: LedgerRecurrentConfig, bridge_class: type[nn.Module] | None = None):
        """``bridge_class``: the bridge's class where the ledger builds the model; loaded from a folder, the class
        the export shipped beside this file."""
        super().__init__(config)
        base_config = config.base_config()
        attention = config._attn_implementation
        if attention == "sdpa" and not getattr(_base_class(base_config), "_supports_sdpa", False):
            attention = "eager"  # a family without SDPA (Gemma 2's soft-capped attention) runs as the base does
        base_config._attn_implementation = attention
        self.base = AutoModelForCausalLM.from_config(base_config)
        self.family = FAMILIES[base_config.model_type]
        self.bridge: Any = None
        if config.bridge is not None:
            bridge_class = bridge_class or shipped_bridge()
            norm_class, eps = type(self.base.model.norm), float(getattr(base_config, "rms_norm_eps", 1e-6))
            self.bridge = bridge_class(
                base_config.hidden_size, norm=lambda size: norm_class(size, eps=eps), **config.bridge_options
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
        if module is self.bridge:
            cast(Any, module).identity_init()
        elif isinstance(module, nn.LayerNorm):
            module.reset_parameters()
        elif isinstance(module, (nn.Linear, nn.Embedding)) or hasattr(module, "weight"):
            self.base._init_weights(module)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # no cache across tokens: each step of generate() runs the whole sequence again

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, num_loops=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask, "num_loops": num_loops, "logits_to_keep": 1}

    def _run_block(self, t: int, entry: torch.Tensor, ctx) -> torch.Tensor:
        """The block at loop ``t``: the adapter arm's loops >= 2 run the copy with its LoRA merged in."""
        layers = self.loop_block if t >= 2 else None
        return run_layers(self.base, self.config.block_layers, entry, ctx, layers=layers)

    def _s0(self, prelude: torch.Tensor) -> torch.Tensor:
        kind = self.config.initial_state
        if kind == "zeros":
            return torch.zeros_like(prelude)
        if kind == "prelude":
            return prelude
        return draw_initial_state(prelude, self.config.initial_state_sigma, self.config.initial_state_seed)

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
        ctx = build_context(self.base, self.family, inputs_embeds, attention_mask, position_ids)
        prelude = run_layers(self.base, self.config.prelude_layers, inputs_embeds, ctx)
        rows = torch.arange(prelude.shape[0], device=prelude.device)
        last = last_token_positions(attention_mask)
        state = initial_state(self.bridge, prelude, lambda: self._s0(prelude))
        for t in range(1, loops + 1):
            state = step(
                self.bridge,
                t,
                state,
                prelude,
                lambda t, entry: self._run_block(t, entry, ctx),
                reentry=self.config.reentry,
                rows=rows,
                answer=last,
            )
        hidden = run_layers(self.base, self.config.coda_layers, state, ctx)
        kept = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) and logits_to_keep else slice(None)
        logits = self.family.head(self.base, hidden[:, kept])
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits)
