"""The model families the surgery supports (no torch): ``ledger check`` (reading a base's family with
``ledger.protocol.bases.actual_family``) and ``ledger init`` refuse any other in one line. ``arms.model.families`` holds each
family's seams (what the base's own forward does around its layers) and is held to this list."""

from __future__ import annotations

# model_type (config.json) -> what the family is, in words
SUPPORTED_FAMILIES: dict[str, str] = {
    "llama": "Llama (SmolLM2, TinyLlama, Llama 3.2)",
    "qwen2": "Qwen2 (Qwen2.5)",
    "olmo2": "OLMo 2",
    "gemma2": "Gemma 2 (its final logits soft-capped)",
}


class UnsupportedFamily(ValueError):
    """A base of a model family the surgery does not support: one line for the user."""


def refuse_unsupported(model_type: str | None, where: str) -> None:
    if model_type is not None and model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedFamily(
            f"{where}: model family {model_type!r} is not one the surgery supports "
            f"(supported: {', '.join(SUPPORTED_FAMILIES)})"
        )
