"""Every file a model's loader reads, checked before it reads any: regular files within their budgets, each
safetensors header and GGUF walk within the file.

transformers reads a Hugging Face folder's ``config.json``, tokenizer files and weights by itself; a FIFO
named ``model.safetensors`` would hang it, a 2 GB ``config.json`` fill memory. The budgets are far above any
real model's (SmolLM2's ``tokenizer.json`` is 2 MB, Llama 3's 9 MB).
"""

from __future__ import annotations

from pathlib import Path

from ledger.model_files.errors import ModelFileError
from ledger.model_files.gguf import read_gguf_metadata
from ledger.model_files.regular import regular_size
from ledger.model_files.safetensors import check_safetensors

_MB = 1 << 20
# file name pattern -> (what it is, its byte budget); None: a weights file, checked by its own format
BUDGETS: dict[str, tuple[str, int | None]] = {
    "tokenizer.json": ("tokenizer file", 256 * _MB),
    "*.safetensors.index.json": ("weights index", 64 * _MB),
    "*.json": ("model config file", 16 * _MB),
    "*.jinja": ("chat template", 4 * _MB),
    "*.txt": ("tokenizer vocabulary", 256 * _MB),
    "*.model": ("tokenizer model", 256 * _MB),
    "*.tiktoken": ("tokenizer vocabulary", 256 * _MB),
    "*.safetensors": ("safetensors file", None),
    "*.gguf": ("GGUF file", None),
}


def check_model_folder(folder: Path) -> None:
    """Refuse a model folder any of whose files a loader reads is not regular, past its budget, or lies about
    its sizes (``ModelFileError``)."""
    for path in sorted(folder.iterdir()):
        for pattern, (what, budget) in BUDGETS.items():
            if path.match(pattern):
                _check(path, what, budget)
                break


def check_model_source(source: Path, gguf_file: str | None = None) -> None:
    """A base as a loader is given it: a folder (its files; its GGUF file if one is named) or one GGUF file."""
    if source.is_dir():
        check_model_folder(source)
        if gguf_file is not None:
            _check(source / gguf_file, "GGUF file", None)
    elif source.exists() or source.is_symlink():
        _check(source, "GGUF file" if source.suffix == ".gguf" else "model file", None)


def _check(path: Path, what: str, budget: int | None) -> None:
    if path.is_dir():
        return  # a sub-folder (an HF cache's blobs) is the loader's own business
    regular_size(path, what, budget)
    if path.suffix == ".safetensors":
        check_safetensors(path)
    elif path.suffix == ".gguf":
        read_gguf_metadata(path)
    elif budget is None:
        raise ModelFileError(f"{path}: not a model file (a .gguf file or a folder holding config.json)")
