"""`ledger init`: a protocol and its claim file written for a user's own model, from the model's own files.

A template (``templates/``: the split-bridge Phase A, or design M's concat retrofit) is filled with what the
model's files say, read without torch: where it lives (a local Hugging Face folder, a GGUF file, a
``package:`` file, or a hub id in the local cache), its architecture and layer count (``config.json`` or the
GGUF metadata), its dtype, the SHA-256 of its one weights file, whether its tokenizer has a chat template, and
the cut at the papers' proportions. The choices no file can tell (steps, learning rates, the cut where the
model's skills sit elsewhere) are the template's, marked ``TUNE`` in the written file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from ledger.canonical import sha256_file
from ledger.inputs import InputFileError, read_text
from ledger.model_files import ModelFileError, check_model_folder
from ledger.protocol.bases import cached_snapshot, gguf_header, is_hub_id, package_file
from ledger.protocol.families import SUPPORTED_FAMILIES

TEMPLATES = {
    "phaseA": "the split-bridge retrofit (Phase A): arms A, B and C, 7 claims",
    "designM": "design M's concat retrofit: arms M, M_flat and C, 3 claims",
}
# the decoder families the surgery cuts (``arms.model.surgery``): a Llama-style ``model.layers`` stack
SUPPORTED = tuple(SUPPORTED_FAMILIES)
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
_FOLDER = Path(__file__).with_name("templates")


class StarterError(ValueError):
    """The model cannot be read or is not supported, or an output file exists: one line for the user."""


@dataclass(frozen=True)
class ModelFacts:
    """What a template needs of the model, as its files state it."""

    source: str  # the base's source as the protocol names it (relative to the protocol's folder where local)
    label: str  # a readable name: the folder's or the file's
    architecture: str
    layers: int
    dtype: str
    sha256: str | None  # of its one weights file; None where the weights are sharded
    gguf_file: str | None
    chat_template: bool


def read_model(model: str, protocol_dir: Path) -> ModelFacts:
    """The facts of ``model`` (a folder, a GGUF file, ``package:MODULE/FILE`` or a cached hub id)."""
    if model.startswith("package:"):
        path = package_file(model)
        if not path.exists():
            raise StarterError(f"{model}: no such file in an installed package (pip install the package first)")
        return _gguf_facts(path, model, None)
    path = Path(model)
    named = model
    if not path.exists():
        snapshot = cached_snapshot(model) if is_hub_id(model) else None
        if snapshot is None:
            raise StarterError(
                f"{model}: no such folder or file, and no hub model of that id in the local Hugging Face cache "
                "(download it where the hub is reachable, `huggingface-cli download ID --local-dir DIR`, and "
                "give DIR)"
            )
        path = snapshot
    else:
        named = _relative(path, protocol_dir)
    if path.is_file():
        if path.suffix != ".gguf":
            raise StarterError(f"{model}: a model is a Hugging Face folder (config.json) or a .gguf file")
        return _gguf_facts(path, named, None)
    config = path / "config.json"
    ggufs = sorted(path.glob("*.gguf"))
    if not config.is_file():
        if len(ggufs) == 1:
            return _gguf_facts(ggufs[0], named, ggufs[0].name)
        raise StarterError(f"{model}: no config.json in the folder (a Hugging Face model folder has one)")
    return _folder_facts(path, named, config)


def _relative(path: Path, protocol_dir: Path) -> str:
    """A local path as a protocol names it: relative to the protocol's folder (``./`` or ``../``) where the two
    share a folder below the root, so that the pair moves together; else absolute."""
    model, folder = path.resolve(), protocol_dir.resolve()
    if os.path.commonpath([model, folder]) == model.anchor:
        return str(model)
    relative = os.path.relpath(model, folder)
    return relative if relative.startswith("..") else f"./{relative}"


def _folder_facts(path: Path, source: str, config_path: Path) -> ModelFacts:
    try:
        check_model_folder(path)  # every file the loader will read: regular, within budget, sizes that fit
    except ModelFileError as exc:
        raise StarterError(str(exc)) from None
    try:
        config = json.loads(read_text(config_path, "model config"))
    except (InputFileError, ValueError, RecursionError) as exc:
        raise StarterError(f"{config_path}: not a readable JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise StarterError(f"{config_path}: not a model config (a JSON object expected)")
    architecture = str(config.get("model_type", ""))
    _supported(architecture, config_path)
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int):
        raise StarterError(f"{config_path}: no num_hidden_layers")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise StarterError(f"{path}: no .safetensors weights in the folder")
    tokenizer_config = path / "tokenizer_config.json"
    template = (path / "chat_template.jinja").is_file()
    if tokenizer_config.is_file():
        try:
            template = template or bool(
                json.loads(read_text(tokenizer_config, "tokenizer config")).get("chat_template")
            )
        except (InputFileError, ValueError, RecursionError, AttributeError):
            pass
    dtype = _DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "float32"), "float32")
    return ModelFacts(
        source=source,
        label=path.name,
        architecture=architecture,
        layers=layers,
        dtype=dtype,
        sha256=sha256_file(weights[0]) if len(weights) == 1 else None,
        gguf_file=None,
        chat_template=template,
    )


def _gguf_facts(path: Path, source: str, gguf_file: str | None) -> ModelFacts:
    try:
        architecture, layers, template = gguf_header(path)
    except ModelFileError as exc:
        raise StarterError(str(exc)) from None
    except ImportError:
        raise StarterError("reading a .gguf file needs the gguf package (pip install gguf)") from None
    _supported(architecture or "", path)
    if layers is None:
        raise StarterError(f"{path}: no {architecture}.block_count in its metadata")
    return ModelFacts(
        source=source,
        label=path.stem.split(".")[0],  # SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct
        architecture=str(architecture),
        layers=layers,
        dtype="float32",  # transformers dequantises a GGUF checkpoint to float32
        sha256=sha256_file(path),
        gguf_file=gguf_file,
        chat_template=template,
    )


def _supported(architecture: str, where: Path) -> None:
    if architecture not in SUPPORTED:
        raise StarterError(
            f"{where}: architecture {architecture or '(none stated)'!r} is not one the surgery cuts "
            f"(supported: {', '.join(SUPPORTED)})"
        )


def split_cut(layers: int) -> tuple[int, int]:
    """Design S's (a, b) at the paper's proportions: Qwen2.5-0.5B's [6, 18) of 24 layers."""
    a, b = layers // 4, (3 * layers) // 4
    if not 0 < a < b < layers:
        raise StarterError(f"{layers} layers are too few to cut into a prelude, a block and a coda")
    return a, b


def tuple_cut(layers: int) -> tuple[int, int, int]:
    """Design M's (prelude, block, coda) at TinyLlama's proportions in the paper, (4, 8, 4) of 22 layers."""
    p = c = max(1, round(4 * layers / 22))
    r = max(1, round(8 * layers / 22))
    if p + r + c > layers:
        raise StarterError(f"{layers} layers are too few to cut into a prelude, a block and a coda")
    return p, r, c


def default_name(template: str, facts: ModelFacts) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", facts.label.lower()).strip("-") or "model"
    return f"{template}-{slug}"


def _base_lines(facts: ModelFacts) -> str:
    lines = [f"source: {facts.source}", f"dtype: {facts.dtype}"]
    if facts.gguf_file:
        lines.append(f"gguf_file: {facts.gguf_file}")
    if facts.sha256:
        lines.append(f"sha256: {facts.sha256}  # the weights file's, checked on load")
    else:
        lines.append("# no sha256: the weights are sharded (the run records each file's hash)")
    said = "the tokenizer has one" if facts.chat_template else "the tokenizer has none"
    lines.append(f"chat_template: false  # {said}; true wraps every prompt in it (the papers read raw prompts)")
    lines.append(f"num_layers: {facts.layers}  # {facts.architecture}")
    return "\n".join(f"    {line}" for line in lines)


def render(template: str, facts: ModelFacts, name: str, protocol_path: str, seed: int) -> tuple[str, str]:
    """The protocol's and the claim file's text for ``facts`` from ``template`` (one of ``TEMPLATES``)."""
    a, b = split_cut(facts.layers) if template == "phaseA" else (0, 0)
    p, r, c = tuple_cut(facts.layers) if template == "designM" else (0, 0, 0)
    values = {
        "name": name,
        "model": facts.label,
        "base": "base",
        "base_lines": _base_lines(facts),
        "layers": facts.layers,
        "a": a,
        "b": b,
        "block": b - a,
        "p": p,
        "r": r,
        "c": c,
        "seed": seed,
        "protocol_path": protocol_path,
        "claims_path": f"../claims/{name}.yaml",
    }
    protocol = Template((_FOLDER / f"{template}.yaml").read_text(encoding="utf-8")).substitute(values)
    claims = Template((_FOLDER / f"{template}.claims.yaml").read_text(encoding="utf-8")).substitute(values)
    return protocol, claims


def write_starter(model: str, template: str, out_dir: Path, name: str | None = None, seed: int = 1) -> list[Path]:
    """Write ``out_dir/protocols/NAME.yaml`` and ``out_dir/claims/NAME.yaml`` for ``model``; nothing is written
    where either exists or the model cannot be read (``StarterError``)."""
    if template not in TEMPLATES:
        raise StarterError(f"unknown template {template!r} (one of: {', '.join(TEMPLATES)})")
    protocol_dir = out_dir / "protocols"
    facts = read_model(model, protocol_dir)
    name = name or default_name(template, facts)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise StarterError(f"--name {name!r}: letters, digits, '-', '_' and '.' only")
    paths = [protocol_dir / f"{name}.yaml", out_dir / "claims" / f"{name}.yaml"]
    for path in paths:
        if path.exists():
            raise StarterError(f"{path} exists: choose another --name or --out-dir (nothing was written)")
    texts = render(template, facts, name, str(paths[0]), seed)
    written: list[Path] = []
    try:
        for path, text in zip(paths, texts, strict=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_text(text, encoding="utf-8")
            partial.replace(path)
            written.append(path)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return paths
