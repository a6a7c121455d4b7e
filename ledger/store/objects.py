"""The local artifact store: content-addressed files next to the ledger, ``<root>/objects/sha256/ab/abcdef...``.

A checkpoint's file is named by its own SHA-256 and recorded by its path *relative to
the artifact root*, so a run folder that moves, or is cloned to another machine, stays
verifiable: the path is resolved against wherever the root is now.

* the root is ``--artifacts DIR`` (or ``$LEDGER_ARTIFACTS``) when given, else the folder
  of a SQLite ledger file, else ``./runs`` (a server database has no folder of its own);
* ``LocalObjects.put(tmp)`` hashes a finished temporary file and moves it into place
  (atomic rename; a file already there with that name is by construction the same bytes);
* ``LocalObjects.adopt(file)`` links (or copies) a file from elsewhere in -- a base's weights;
* ``LocalObjects.locate(recorded, sha)`` finds a recorded file: the recorded path (relative to each root
  searched, or absolute), then by content name in each root's ``objects/``. A path that leads outside every root
  once resolved (``..``, an absolute path elsewhere, a symlink) is ``ArtifactOutsideRoot``: nothing there is opened.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from sqlalchemy.engine import make_url

from ledger.canonical import sha256_file
from ledger.store.artifacts import ArtifactOutsideRoot, ArtifactStore

OBJECTS = "objects/sha256"
ENV_VAR = "LEDGER_ARTIFACTS"


def default_artifact_root(url: str) -> Path:
    """Where a ledger at ``url`` keeps its artifacts unless told otherwise."""
    configured = os.environ.get(ENV_VAR, "").strip()
    if configured:
        return Path(configured)
    parsed = make_url(url)
    database = parsed.database or ""
    if (
        parsed.get_backend_name() == "sqlite"
        and database
        and database != ":memory:"
        and not database.startswith("file:")
    ):
        return Path(database).parent
    return Path("runs")


def object_path(sha256: str) -> str:
    """The content name of a file, relative to an artifact root (POSIX separators)."""
    return f"{OBJECTS}/{sha256[:2]}/{sha256}"


class LocalObjects(ArtifactStore):
    """The artifact roots of one ledger: the first is written; all of them, then the ledger's own default root
    (its files may have moved with it), are searched."""

    def __init__(self, locations: Sequence[str | Path], ledger_url: str):
        default = default_artifact_root(ledger_url)
        self.root = Path(locations[0]) if locations else default
        self.search = list(dict.fromkeys([self.root, *(Path(p) for p in locations[1:]), default]))

    def searched(self) -> str:
        return ", ".join(str(root) for root in self.search)

    def put(self, finished: Path) -> tuple[str, str]:
        """Move a finished file into the object folder: ``(sha256, recorded path)``."""
        sha = sha256_file(finished)
        relative = object_path(sha)
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_file():
            finished.unlink()  # the same name is the same bytes
        else:
            finished.chmod(0o444)  # an object is never edited in place
            finished.replace(target)
        return sha, relative

    def temporary(self, name: str) -> Path:
        """A path inside the root for a file being written (renamed by ``put``)."""
        folder = self.root / "objects" / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{os.getpid()}-{name}"

    def adopt(self, file: Path) -> tuple[str, str]:
        """Bring a file that lives elsewhere (a base's own weights) into the object folder:
        a hard link where the filesystem allows (no copy of a multi-GB base), else a copy.
        The run folder then carries every file its ledger names."""
        sha = sha256_file(file)
        relative = object_path(sha)
        target = self.root / relative
        if not target.is_file():
            tmp = self.temporary(Path(file).name)
            tmp.unlink(missing_ok=True)
            try:
                os.link(file, tmp)
            except OSError:  # another filesystem, or links not allowed
                shutil.copyfile(file, tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.replace(target)
        return sha, relative

    def locate(self, recorded: str | None, sha256: str) -> Path | None:
        return locate(recorded, sha256, self.search)


_FOLDERS = (OBJECTS, "sha256")  # the folders of content-named files under a root


def locate(recorded: str | None, sha256: str, roots: Iterable[Path]) -> Path | None:
    """The file of a recorded artifact, or None when it is in none of the places searched. A recorded path is
    taken relative to each root (or as it is, if absolute) and must stay inside a root once resolved, links
    followed (a root's ``objects/`` may itself be a link, to keep the weights on another disk; what is under it
    must stay under where it leads): one that leads elsewhere raises ``ArtifactOutsideRoot`` before anything is
    opened."""
    roots = list(roots)
    # a root, and its content-named folders where they are links of the user's (objects/ kept on another disk)
    resolved_roots = [
        place for root in roots for place in (root.resolve(), *((root / name).resolve() for name in _FOLDERS))
    ]
    candidates: list[Path] = []
    if recorded:
        path = Path(recorded)
        named = [path] if path.is_absolute() else [root / path for root in roots]
        for candidate in named:
            if not any(candidate.resolve().is_relative_to(root) for root in resolved_roots):
                raise ArtifactOutsideRoot(
                    f"the recorded path {recorded} leads to {candidate.resolve()}, outside the artifacts root "
                    f"({', '.join(str(root) for root in roots)}): not opened"
                )
        candidates += named
    for root in roots:
        for candidate in (root / object_path(sha256), root / "sha256" / sha256[:2] / sha256):
            folder = candidate.parent.parent.resolve()  # OBJECTS or sha256/, a link of the user's or not
            if candidate.is_file() and not candidate.resolve().is_relative_to(folder):
                raise ArtifactOutsideRoot(
                    f"{candidate} is a link to {candidate.resolve()}, outside the artifacts root {root}: not opened"
                )
            candidates.append(candidate)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None
