"""The bases of a run: checked on this machine before anything is written, loaded and hash-checked."""

from __future__ import annotations

from pathlib import Path

from ledger.canonical import canonical_json, sha256_file, sha256_hex
from ledger.protocol.bases import base_location
from ledger.protocol.protocol import Protocol
from ledger.store.artifacts import ArtifactStore

__all__ = [
    "BaseUnavailable",
    "RunRefused",
    "check_bases_available",
    "load_protocol_base",
    "record_base",
    "weights_sha256",
]


class BaseUnavailable(Exception):
    """A base's weights are not on this machine (exit 2, nothing written)."""


class RunRefused(Exception):
    """The ledger refuses the run (exit 3): already run, failed lineage, changed protocol."""


def check_bases_available(protocol: Protocol, protocol_dir: Path, arm_ids: list[str]) -> None:
    """Refuse before writing anything if a base the selected arms need is not on this machine."""
    from arms.bases.loading import _how_to, _looks_like_path

    needed = {protocol.arm(arm_id).base for arm_id in arm_ids}
    for name in sorted(needed):
        spec = protocol.bases[name]
        source = base_location(spec, protocol_dir)
        if source.startswith("builtin:"):
            continue
        if Path(source).exists():  # a local path, or a hub id base_location found in the cache
            continue
        if _looks_like_path(source):
            raise BaseUnavailable(f"base {name!r}: local path {source} does not exist. {_how_to(spec.source)}")
        raise BaseUnavailable(f"base {name!r}: {_how_to(spec.source)}")  # a hub id the cache does not hold


def load_protocol_base(spec, protocol_dir: Path):
    """(model, tokenizer, weights files) for a base; checks the declared SHA-256."""
    from arms.bases.builtin import tiny_random_base
    from arms.bases.loading import load_base

    source = base_location(spec, protocol_dir)
    if source.startswith("builtin:"):
        import torch

        model, tokenizer = tiny_random_base(source, dtype=getattr(torch, spec.dtype))
        return model, tokenizer, []
    model, tokenizer = load_base(source, dtype=spec.dtype, gguf_file=spec.gguf_file)
    path = Path(source)
    files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.gguf")) if path.is_dir() else [path]
    if spec.sha256 is not None:
        actual = sha256_file(files[0]) if len(files) == 1 else None
        if actual != spec.sha256:
            raise RunRefused(f"base {source}: weights hash to {actual}, the protocol declares {spec.sha256}")
    return model, tokenizer, files


def weights_sha256(files: list[Path]) -> str | None:
    """The SHA-256 a base's weights are recorded under: its one file's, or over its files' hashes
    (None for a built-in base, whose seeded weights have no file until a run writes them)."""
    if not files:
        return None
    if len(files) == 1:
        return sha256_file(files[0])
    return sha256_hex(canonical_json({f.name: sha256_file(f) for f in files}))


def record_base(store, objects: ArtifactStore, name: str, spec, model, files: list[Path]) -> str:
    """The base's weights as the root checkpoint of every arm built on it (its SHA-256).

    A base read from one file is adopted as an object (hard-linked in, so the run folder
    carries it); several files are recorded by a hash over their hashes, with no single
    path. A built-in base's seeded weights are written once as an object and hashed."""
    if files:
        if len(files) == 1:
            sha, path = objects.adopt(files[0])
        else:
            sha, path = str(weights_sha256(files)), None
    else:
        from safetensors.torch import save_file

        tmp = objects.temporary(f"base-{name}.safetensors")
        state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        save_file(state, str(tmp), metadata={"ledger": canonical_json({"base": name})})
        sha, path = objects.put(tmp)
    meta = {"source": spec.source}
    if files and files[0].parent.parent.name == "snapshots":  # a hub id, read from the local cache
        meta["revision"] = files[0].parent.name
    if store.checkpoint(sha) is None:
        store.add_checkpoint(sha256=sha, path=path, arm=f"base:{name}", status="promoted", stage="base", meta=meta)
    return sha
