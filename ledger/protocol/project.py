"""The project file, ``ledger-project.yaml``: what everyone running a project's protocols shares.

Found by walking up from the protocol's folder to the filesystem root (as git finds ``.git``); the nearest one
counts. Today it lists the team's **tuning ledgers**: every ``ledger register`` and ``ledger run`` of a protocol
in the project consults them for peeking as if each were given with ``--also-db``, so that a confirmatory
protocol cannot be registered on rows someone tuned on in a ledger the command line forgot to name::

    # ledger-project.yaml
    tuning_ledgers:
      - runs/tuning.db                        # a SQLite file, relative to this file's folder
      - postgresql+psycopg://team@db/tuning   # or any database URL

A listed SQLite file that does not exist is bad input (one line naming the project file), never skipped.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ledger.protocol.common import StrictModel
from ledger.protocol.loader import ProtocolError, load_model_file

PROJECT_FILE = "ledger-project.yaml"


class ProjectFile(StrictModel):
    tuning_ledgers: list[str] = Field(
        default_factory=list,
        description="Ledgers (database URLs, or SQLite paths relative to this file) that the peeking rules of "
        "every register and run consult, as with --also-db.",
    )


class ProjectFileError(ValueError):
    """A project file that cannot be used (names the file and, where it can, the line)."""


def find_project_file(start: str | Path) -> Path | None:
    """The nearest ``ledger-project.yaml`` in ``start`` (a protocol file's folder) or any folder above it."""
    folder = Path(start).resolve()
    folder = folder if folder.is_dir() else folder.parent
    for candidate in (folder, *folder.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate / PROJECT_FILE
    return None


def project_tuning_ledgers(protocol_path: str | Path) -> list[str]:
    """The tuning ledgers of the protocol's project as database URLs (none without a project file)."""
    path = find_project_file(Path(protocol_path).parent)
    if path is None:
        return []
    try:
        project = load_model_file(path, ProjectFile, "project file")
    except ProtocolError as exc:
        raise ProjectFileError(str(exc.issues[0])) from None
    urls = []
    for entry in project.tuning_ledgers:
        url = entry if "://" in entry else f"sqlite:///{(path.parent / entry).resolve()}"
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):  # a relative SQLite URL
            url = f"sqlite:///{(path.parent / url.removeprefix('sqlite:///')).resolve()}"
        if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
            raise ProjectFileError(f"{path}: tuning ledger {entry!r}: {url.removeprefix('sqlite:///')} not found")
        urls.append(url)
    return urls


def ledgers_to_consult(protocol_path: str | Path, also_db: list[str] | None) -> list[str]:
    """``--also-db`` and the project's tuning ledgers, each once, in that order."""
    return list(dict.fromkeys([*(also_db or []), *project_tuning_ledgers(protocol_path)]))
