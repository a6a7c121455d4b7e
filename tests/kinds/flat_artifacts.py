"""A plugin: an artifact store that keeps every file flat in one folder as ``<sha256>.bin`` and records it as
``flat:<sha256>`` -- a layout nothing in the product knows, reached only through the interface."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from ledger.canonical import sha256_file
from ledger.store.artifacts import ARTIFACT_STORES, ArtifactStore, ArtifactStoreKind


class FlatFolder(ArtifactStore):
    def __init__(self, locations: Sequence[str], ledger_url: str):
        if not locations:
            raise ValueError("flat:// needs a folder")
        self.folder = Path(locations[0])

    def temporary(self, name: str) -> Path:
        (self.folder / "incoming").mkdir(parents=True, exist_ok=True)
        return self.folder / "incoming" / name

    def put(self, finished: Path) -> tuple[str, str]:
        sha = sha256_file(finished)
        finished.replace(self.folder / f"{sha}.bin")
        return sha, f"flat:{sha}"

    def adopt(self, file: Path) -> tuple[str, str]:
        sha = sha256_file(file)
        target = self.folder / f"{sha}.bin"
        if not target.is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
        return sha, f"flat:{sha}"

    def locate(self, recorded: str | None, sha256: str) -> Path | None:
        if recorded is not None and not recorded.startswith("flat:"):
            return None
        found = self.folder / f"{sha256}.bin"
        return found if found.is_file() else None

    def searched(self) -> str:
        return f"the flat folder {self.folder}"


if "flat" not in ARTIFACT_STORES:
    ARTIFACT_STORES.add(ArtifactStoreKind("flat", Path, f"{__name__}:FlatFolder", "every file flat in one folder"))
