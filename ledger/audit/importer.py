"""``ledger import``: bring a release's rows and predictions into the ledger.

A release is registered like a protocol (its mapping plus the SHA-256 of every file it
reads), its rows become manifests, each predictions file becomes a run and an
``external`` checkpoint keyed by the file's SHA-256 (so every evidence row points at
the bytes that produced it, and verify can re-hash them), and per-depth summaries
become ``external_counts`` chain entries. Importing the same release twice writes
nothing the second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ledger.audit.release import LoadedRelease, load_release
from ledger.canonical import canonical_json, sha256_hex
from ledger.store import Store


@dataclass
class ImportSummary:
    release: str
    protocol_sha256: str
    manifests: dict[str, tuple[int, str]]  # id -> (rows, sha256)
    evidence: dict[str, int]  # "arm @ file" -> records
    counts: list[str]
    already: bool


def release_document(loaded: LoadedRelease) -> dict:
    """What is registered for a release: the mapping and the hashes of the files it read."""
    return {
        "kind": "release",
        "name": loaded.mapping.release,
        "mapping": loaded.mapping.model_dump(mode="json"),
        "file_sha256": dict(sorted(loaded.file_hashes.items())),
    }


def import_release(
    store: Store, mapping_path: str | Path, root: str | Path | None = None, *, loaded: LoadedRelease | None = None
) -> ImportSummary:
    loaded = loaded or load_release(mapping_path, root)
    document = release_document(loaded)
    protocol_sha = sha256_hex(canonical_json(document))
    summary = ImportSummary(
        release=loaded.mapping.release,
        protocol_sha256=protocol_sha,
        manifests={name: (len(m), m.sha256) for name, m in loaded.manifests.items()},
        evidence={f"{arm} @ {file}": len(records) for (arm, _, file), records in loaded.evidence.items()},
        counts=sorted(loaded.counts),
        already=store.protocol(protocol_sha) is not None,
    )
    if summary.already:
        return summary
    store.add_protocol(document, name=loaded.mapping.release, version="release")
    manifest_sha = {
        name: store.add_manifest(manifest, protocol_sha256=protocol_sha) for name, manifest in loaded.manifests.items()
    }
    for (arm, manifest, file), records in loaded.evidence.items():
        file_sha = loaded.file_hashes[file]
        run_id = f"import:{protocol_sha[:12]}:{arm}:{file}"
        store.add_run(
            run_id=run_id,
            kind="import",
            protocol_sha256=protocol_sha,
            arm=arm,
            config={"release": loaded.mapping.release, "file": file, "sha256": file_sha},
            note=f"imported from {loaded.mapping.source}",
        )
        if store.checkpoint(file_sha) is None:
            store.add_checkpoint(
                sha256=file_sha,
                path=str(loaded.root / file),
                arm=arm,
                status="promoted",
                run_id=run_id,
                stage="external",
                meta={"release": loaded.mapping.release, "file": file, "external": True},
            )
        store.add_evidence(
            [
                {
                    "run_id": run_id,
                    "manifest_sha256": manifest_sha[manifest],
                    "row_id": record.row_id,
                    "arm": arm,
                    "checkpoint_sha256": file_sha,
                    "loop": record.loop if record.loop is not None else 0,
                    "prediction": record.prediction,
                    "correct": record.correct,
                    "score_margin": record.margin,
                    "detail": {
                        key: value
                        for key, value in (("rule", record.rule), ("behavior", record.behavior))
                        if value is not None
                    }
                    or None,
                }
                for record in records
            ]
        )
    for spec in loaded.mapping.counts:
        store.append(
            "external_counts",
            {
                "protocol_sha256": protocol_sha,
                "id": spec.id,
                "arm": spec.arm,
                "file": spec.file,
                "file_sha256": loaded.file_hashes[spec.file],
                "counts": {str(depth): list(value) for depth, value in sorted(loaded.counts[spec.id].items())},
            },
        )
    return summary


def registered_release(store: Store, name: str) -> dict | None:
    """The latest registered document of release ``name`` (None if never imported)."""
    found = store.protocols(name=name, release=True)
    return json.loads(found[-1].canonical_json) if found else None
