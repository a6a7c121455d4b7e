"""Build a protocol's manifests from their specs, and refuse contaminated protocols."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ledger.protocol.manifests import GENERATORS, ManifestSpec
from ledger.protocol.protocol import Protocol
from ledger.rows.contamination import check_contamination
from ledger.rows.manifest import Manifest


def build_manifest(spec: ManifestSpec, folder: Path | None = None) -> Manifest:
    """The rows a manifest spec names: deterministic in the spec alone (and, for a generator that reads a local
    file, that file, pinned by its SHA-256 in the spec; relative paths from ``folder``, the protocol's)."""
    generate = GENERATORS.implementation(spec.generator)
    params = spec.generator_params()
    if GENERATORS[spec.generator].reads_files:
        params["folder"] = folder
    return Manifest(name=spec.id, rows=tuple(generate(**params)))


def files_to_come(protocol: Protocol) -> dict[str, Path]:
    """Manifest id -> the local benchmark file it reads that is not here yet (pinned at registration)."""
    files = {spec.id: spec.file_to_come(protocol.folder) for spec in protocol.manifests}
    return {name: file for name, file in files.items() if file is not None}


def build_manifests(protocol: Protocol, *, check: bool = True, leave_out: Collection[str] = ()) -> dict[str, Manifest]:
    """Every manifest of ``protocol`` but those in ``leave_out`` (``files_to_come``: ``ledger check`` before the
    data is in place), in declaration order; refuses train/eval overlap."""
    specs = [spec for spec in protocol.manifests if spec.id not in leave_out]
    manifests = {spec.id: build_manifest(spec, protocol.folder) for spec in specs}
    if check:
        by_role: dict[str, list[Manifest]] = {}
        for spec in specs:
            by_role.setdefault(spec.role, []).append(manifests[spec.id])
        check_contamination(by_role)
    return manifests
