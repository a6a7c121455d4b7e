"""A model family's seams: what its base's own forward does around the decoder layers, which the loop must do
too for loop 1 to be the base bit for bit. The embedding, the layers and the masks are the base's own modules,
called as the base calls them; what differs by family is one entry of ``arms.hf.ledger_loop.FAMILIES`` (shipped
with every export, so the exported model runs it too), held here to the families ``ledger check`` supports
(``ledger.protocol.families.SUPPORTED_FAMILIES``) at import:

- ``head``: the final norm and the LM head over a loop's state (Gemma 2 then soft-caps the logits,
  ``tanh(logits / cap) * cap``, as its ``ForCausalLM`` does);
- ``position_embeddings``: the rotary table each layer type reads (one table for every type in these families;
  a family with a table per layer type, such as Gemma 3, is one more entry)."""

from __future__ import annotations

from torch import nn

from arms.hf.ledger_loop import FAMILIES, Family, SoftCappedHead
from ledger.protocol.families import SUPPORTED_FAMILIES, UnsupportedFamily, refuse_unsupported

__all__ = ["FAMILIES", "Family", "SoftCappedHead", "family_of"]

if set(FAMILIES) != set(SUPPORTED_FAMILIES):
    raise TypeError(
        f"arms.hf.ledger_loop.FAMILIES holds {sorted(FAMILIES)} but ledger.protocol.families supports "
        f"{sorted(SUPPORTED_FAMILIES)}: add the family to both"
    )


def family_of(model: nn.Module) -> Family:
    """The seams of a causal LM's family (``UnsupportedFamily`` for a family the surgery does not cut)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    refuse_unsupported(model_type, f"a {type(model).__name__}")
    if model_type is None:
        raise UnsupportedFamily(f"a {type(model).__name__} states no model_type: its family is unknown")
    return FAMILIES[model_type]
