"""A model family's seams: what its base's own forward does around the decoder layers, which the loop must do
too for loop 1 to be the base bit for bit. The embedding, the layers, the masks and the rotary embedding are
the base's own modules, called as the base calls them; what differs by family is done here, in one entry per
family (``FAMILIES``), held to ``ledger.protocol.families.SUPPORTED_FAMILIES`` at import.

- ``head``: the final norm and the LM head over a loop's state (Gemma 2 then soft-caps the logits,
  ``tanh(logits / cap) * cap``, as its ``ForCausalLM`` does);
- ``position_embeddings``: the rotary embedding the layers read (one for every layer type in these families).

A family whose forward does more (Gemma 3's per-layer-type rotary, for example) is added as one more entry."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ledger.protocol.families import SUPPORTED_FAMILIES, UnsupportedFamily, refuse_unsupported


class Family:
    """The Llama-family forward: the layers between the embedding and ``lm_head(norm(h))``."""

    def position_embeddings(self, cut: Any, embeds: torch.Tensor, position_ids: torch.Tensor) -> Any:
        return cut.rotary_emb(embeds, position_ids)

    def head(self, cut: Any, hidden: torch.Tensor) -> torch.Tensor:
        return cut.lm_head(cut.norm(hidden))


class SoftCappedHead(Family):
    """Gemma 2: the final logits soft-capped at ``config.final_logit_softcapping`` (none where it is unset)."""

    def head(self, cut: Any, hidden: torch.Tensor) -> torch.Tensor:
        logits = super().head(cut, hidden)
        cap = getattr(cut.config, "final_logit_softcapping", None)
        if cap is None:
            return logits
        return torch.tanh(logits / cap) * cap


FAMILIES: dict[str, Family] = {
    "llama": Family(),
    "qwen2": Family(),
    "olmo2": Family(),
    "gemma2": SoftCappedHead(),
}
if set(FAMILIES) != set(SUPPORTED_FAMILIES):
    raise TypeError(
        f"arms.model.families holds {sorted(FAMILIES)} but ledger.protocol.families supports "
        f"{sorted(SUPPORTED_FAMILIES)}: add the family to both"
    )


def family_of(model: nn.Module) -> Family:
    """The seams of a causal LM's family (``UnsupportedFamily`` for a family the surgery does not cut)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    refuse_unsupported(model_type, f"a {type(model).__name__}")
    if model_type is None:
        raise UnsupportedFamily(f"a {type(model).__name__} states no model_type: its family is unknown")
    return FAMILIES[model_type]
