"""A base built from its architecture alone: random weights of the exact shape, for dry runs without weights.

A protocol that names its base by hub id (``Qwen/Qwen2.5-0.5B-Instruct``) can be exercised on a machine that
holds no weights: the model's published ``config.json`` ships here, under ``shapes/<owner>--<name>/``, and
transformers builds the model from it (``from_config``: the same classes, layers and caches as the real one,
seeded random weights). A local model folder supplies its own ``config.json``. The tokenizer is the folder's
where it has one; otherwise the built-in word tokenizer stands in, and the dry run says so: prompts tokenize
differently, the model's shapes and code paths do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHAPES = Path(__file__).parent / "shapes"


class NoShape(LookupError):
    """Neither a shipped config.json nor a local one describes the base."""


@dataclass(frozen=True)
class ShapedBase:
    model: Any
    tokenizer: Any
    config_file: Path
    tokenizer_stand_in: bool  # the built-in word tokenizer stands in for the model's own


def shipped_shapes() -> list[str]:
    """The hub ids whose config.json ships with ledger."""
    return sorted(
        folder.name.replace("--", "/", 1) for folder in SHAPES.iterdir() if (folder / "config.json").is_file()
    )


def config_folder(source: str) -> Path:
    """The folder whose config.json describes ``source`` (a local model folder, or a shipped hub id)."""
    local = Path(source).expanduser()
    if local.is_dir() and (local / "config.json").is_file():
        return local
    shipped = SHAPES / source.replace("/", "--", 1)
    if (shipped / "config.json").is_file():
        return shipped
    raise NoShape(
        f"no config.json describes base {source!r}: ledger ships the architectures of {', '.join(shipped_shapes())}; "
        "for another model point `source` at a local folder holding its config.json (no weights needed)"
    )


def shaped_base(source: str, dtype: Any, seed: int = 0) -> ShapedBase:
    """The base of ``source`` at its exact shape with seeded random weights, in eval mode, and a tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from arms.bases.builtin import word_tokenizer
    from arms.bases.loading import _load_tokenizer, _torch_dtype

    folder = config_folder(source)
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=_torch_dtype(dtype)).eval()
    has_tokenizer = (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
    tokenizer = _load_tokenizer(str(folder), None, {"local_files_only": True}) if has_tokenizer else word_tokenizer()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if len(tokenizer) > config.vocab_size:
        raise NoShape(f"base {source!r}: its tokenizer has {len(tokenizer)} tokens, its config {config.vocab_size}")
    return ShapedBase(model, tokenizer, folder / "config.json", tokenizer_stand_in=not has_tokenizer)
