"""Where checkpoint files live: the artifact-store interface every checkpoint read and write goes through.

A checkpoint is recorded by its SHA-256 and a location the artifact store chose (``put``); a run writes
its files to a local path the store hands out (``temporary``), and a reader asks the store for a local
file it can open (``locate``), so a store that keeps its objects elsewhere (sharded, remote) fetches or
caches them behind the same calls. The ledger's own kind is the content-addressed local folder
(``ledger.store.objects.LocalObjects``).

``--artifacts LOCATION`` chooses the store: ``KIND://REST`` names a registered kind (``ARTIFACT_STORES``;
a plugin may add one), anything else is a local folder.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger.registry import Kind, Registry, UnknownKind
from ledger.store.engine import StoreError


class ArtifactsRefused(StoreError):
    """An ``--artifacts`` location no registered kind can open."""


class ArtifactOutsideRoot(StoreError):
    """A recorded artifact location that is absolute or leads outside the store's roots (a symlink included): a
    ledger's row may not make verify open a file elsewhere on the machine."""


class ArtifactStore(ABC):
    """The checkpoint files of one ledger: written to one place, searched in every place it was given."""

    @abstractmethod
    def temporary(self, name: str) -> Path:
        """A local path for a file being written; ``put`` takes it in when finished."""

    @abstractmethod
    def put(self, finished: Path) -> tuple[str, str]:
        """Take in a finished file (it may be moved): ``(sha256, recorded location)``."""

    @abstractmethod
    def adopt(self, file: Path) -> tuple[str, str]:
        """Take in a copy of a file that lives elsewhere and stays there (a base's own weights)."""

    @abstractmethod
    def locate(self, recorded: str | None, sha256: str) -> Path | None:
        """A local file holding the recorded artifact, or None when the store does not have it. Raises
        ``ArtifactOutsideRoot``, having opened nothing, for a location that leads outside the store."""

    @abstractmethod
    def searched(self) -> str:
        """Where ``locate`` looks, in words (for a message that a file was not found)."""


@dataclass(frozen=True)
class ArtifactStoreKind(Kind):
    """``implementation``: a class ``(locations, ledger_url) -> ArtifactStore``; ``locations`` as given, each
    without its ``KIND://``, empty when none was given (the store then picks its default for the ledger)."""


ARTIFACT_STORES: Registry[ArtifactStoreKind] = Registry("artifact store")
ARTIFACT_STORES.add(
    ArtifactStoreKind(
        "local",
        Path,
        "ledger.store.objects:LocalObjects",
        "a folder holding objects/sha256/ab/<sha> (default: the SQLite ledger's folder, else ./runs)",
    )
)


def kind_of(location: str | Path) -> tuple[str, str]:
    """(kind, the rest) of an ``--artifacts`` location: ``KIND://REST``, or a local folder."""
    text = str(location)
    kind, separator, rest = text.partition("://")
    if separator and kind.isidentifier():
        return kind, rest
    return "local", text


def open_artifacts(locations: Sequence[str | Path] | None, ledger_url: str) -> ArtifactStore:
    """The artifact store of ``--artifacts`` (the first location is written), for the ledger at ``ledger_url``.
    Raises ``ArtifactsRefused`` for a kind no one registered, or locations of two kinds."""
    parsed = [kind_of(location) for location in locations or []]
    kinds = {kind for kind, _ in parsed} or {"local"}
    if len(kinds) > 1:
        raise ArtifactsRefused(f"--artifacts locations of different kinds ({', '.join(sorted(kinds))}): give one kind")
    (kind,) = kinds
    try:
        implementation = ARTIFACT_STORES.implementation(kind)
    except UnknownKind as exc:
        raise ArtifactsRefused(f"--artifacts {locations[0] if locations else ''}: {exc}") from None
    return implementation([rest for _, rest in parsed], ledger_url)
