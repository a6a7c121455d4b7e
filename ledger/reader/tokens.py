"""Tokenizer access for the reader: ids, vocabulary size and token strings of either tokenizer kind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _encode_ids(tokenizer: Any, text: str, add_special_tokens: bool = False) -> list[int]:
    """Token ids of ``text`` with a transformers tokenizer or a raw ``tokenizers.Tokenizer``."""
    encoded = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    ids = getattr(encoded, "ids", encoded)  # tokenizers.Encoding -> .ids
    return [int(i) for i in ids]


def _vocab_size(tokenizer: Any) -> int | None:
    try:
        return len(tokenizer)
    except TypeError:
        pass
    get = getattr(tokenizer, "get_vocab_size", None)
    if get is not None:
        return int(get(with_added_tokens=True))
    return None


def _token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    if convert is not None:
        return [str(t) for t in convert(list(ids))]
    id_to_token = getattr(tokenizer, "id_to_token", None)
    if id_to_token is not None:
        return [str(id_to_token(i)) for i in ids]
    return [str(i) for i in ids]
